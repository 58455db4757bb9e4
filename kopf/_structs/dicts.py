"""
Field paths over nested dicts: ``'status.kopf.progress'`` and its tuple form.

Storages and diffs address nested fields by paths; keeping the parsing and the
walking in one place avoids subtle differences between them.
"""
from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any, TypeAlias

FieldPath: TypeAlias = tuple[str, ...]
FieldSpec: TypeAlias = str | Iterable[str]

_MISSING: Any = object()


def parse_field(field: FieldSpec | None) -> FieldPath:
    """Turn ``'a.b.c'`` (or a sequence of keys) into ``('a', 'b', 'c')``."""
    if type(field) is tuple:
        return field  # already parsed (the most frequent case, in loops over every object)
    if field is None:
        return ()
    if isinstance(field, str):
        return tuple(part for part in field.split('.') if part)
    return tuple(field)


def format_field(path: FieldSpec) -> str:
    """Turn ``('a', 'b', 'c')`` into ``'a.b.c'`` for messages and logs."""
    return '.'.join(parse_field(path))


def resolve(d: Mapping[str, Any] | None, field: FieldSpec, default: Any = _MISSING) -> Any:
    """
    Get a nested value by its path.

    A missing key or a non-mapping on the way yields the default; without a
    default, it raises ``KeyError`` naming the full path.
    """
    current: Any = d
    for key in parse_field(field):
        if (type(current) is dict or isinstance(current, Mapping)) and key in current:  # dicts: no slow ABC check
            current = current[key]
        elif default is _MISSING:
            raise KeyError(format_field(field))
        else:
            return default
    return current


def ensure(d: MutableMapping[str, Any], field: FieldSpec, value: Any) -> None:
    """Set a nested value, creating the intermediate dicts as needed."""
    path = parse_field(field)
    if not path:
        raise ValueError("Cannot set a value at an empty field path.")
    current = d
    for key in path[:-1]:
        child = current.get(key)
        if not isinstance(child, MutableMapping):
            child = current[key] = {}
        current = child
    current[path[-1]] = value


def remove(d: MutableMapping[str, Any], field: FieldSpec) -> None:
    """
    Remove a nested key if it exists, then prune the parents it left empty.

    Empty parents are pruned so that an essence without our traces compares
    equal to an essence that never had them.
    """
    path = parse_field(field)
    if not path:
        return
    parents: list[MutableMapping[str, Any]] = []
    current: Any = d
    for key in path[:-1]:
        if not (type(current) is dict or isinstance(current, MutableMapping)) or key not in current:
            return
        parents.append(current)
        current = current[key]
    if not (type(current) is dict or isinstance(current, MutableMapping)) or path[-1] not in current:
        return
    del current[path[-1]]
    for parent, key in zip(reversed(parents), reversed(path[:-1])):
        child = parent[key]
        if (type(child) is dict or isinstance(child, Mapping)) and not child:
            del parent[key]
        else:
            break


def cherrypick(src: Mapping[str, Any], dst: MutableMapping[str, Any], fields: Iterable[FieldSpec]) -> None:
    """Copy the given fields (where present) from one dict into another, deeply."""
    absent = object()
    for field in fields:
        value = resolve(src, field, absent)
        if value is not absent:
            ensure(dst, field, copy_json(value))


def copy_json(value: Any) -> Any:
    """
    A deep copy of JSON-like data (dicts, lists, strings, numbers, booleans, ``None``), made cheaply.

    Objects' bodies are such data, and parts of them (the spec, the status,
    labels and annotations) are copied on every handling cycle, where ``copy.deepcopy`` with its
    bookkeeping for shared and recursive structures costs several times
    more. Anything else within is copied by ``copy.deepcopy``.
    """
    kind = type(value)
    if kind is dict:
        return {key: item if type(item) in _ATOMS else copy_json(item) for key, item in value.items()}
    if kind is list:
        return [item if type(item) in _ATOMS else copy_json(item) for item in value]
    if kind in _ATOMS:
        return value
    return copy.deepcopy(value)


_ATOMS = frozenset({str, int, float, bool, type(None)})  # immutable: shared by a copy and its original

