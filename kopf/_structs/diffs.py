"""
Field-level differences between two essences of an object.

Update handlers receive these as ``diff``; field handlers receive them reduced
to their field. Lists and scalars are compared as whole values; dicts are
walked key by key, so that a change deep inside the spec is reported at its
own field path.
"""
from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from kopf._structs import dicts


class DiffOperation(str, enum.Enum):
    ADD = 'add'
    CHANGE = 'change'
    REMOVE = 'remove'

    def __str__(self) -> str:
        return self.value


class DiffItem(NamedTuple):
    operation: DiffOperation
    field: dicts.FieldPath
    old: Any
    new: Any


class Diff(Sequence[DiffItem]):
    """An immutable sequence of diff items, comparable to plain lists of tuples."""

    def __init__(self, items: Sequence[DiffItem] = ()) -> None:
        self._items = tuple(items)

    def __getitem__(self, index: int) -> DiffItem:  # type: ignore[override]
        return self._items[index]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[DiffItem]:
        return iter(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Diff):
            return self._items == other._items
        if isinstance(other, (list, tuple)):
            return list(self._items) == [tuple(item) for item in other]
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._items)

    def __repr__(self) -> str:
        return repr(list(self._items))


def diff(old: Any, new: Any, *, path: dicts.FieldPath = ()) -> Diff:
    """Compute the field-level diff of two values (usually two essences)."""
    return Diff(list(_walk(old, new, path)))


def _walk(old: Any, new: Any, path: dicts.FieldPath) -> Iterator[DiffItem]:
    if old == new:
        return
    if old is None:
        yield DiffItem(DiffOperation.ADD, path, old, new)
    elif new is None:
        yield DiffItem(DiffOperation.REMOVE, path, old, new)
    elif isinstance(old, Mapping) and isinstance(new, Mapping):
        for key in sorted(set(old) | set(new)):
            yield from _walk(old.get(key), new.get(key), path + (key,))
    else:
        yield DiffItem(DiffOperation.CHANGE, path, old, new)


def reduce(d: Diff, field: dicts.FieldSpec) -> Diff:
    """
    Narrow a diff to one field, with paths relative to that field.

    Items above the field (e.g. the whole spec added) are cut down to the part
    that concerns the field, so that field handlers see only their own change.
    """
    target = dicts.parse_field(field)
    result: list[DiffItem] = []
    for op, path, old, new in d:
        if path[:len(target)] == target:
            result.append(DiffItem(op, path[len(target):], old, new))
        elif target[:len(path)] == path:
            tail = target[len(path):]
            sub_old = dicts.resolve(old, tail, None)
            sub_new = dicts.resolve(new, tail, None)
            result.extend(_walk(sub_old, sub_new, ()))
    return Diff(result)
