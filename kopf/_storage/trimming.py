"""
Trimmed essences: a last-handled configuration that fits into a size limit, with digests for its biggest parts.

Annotations are limited to 256 KiB per object in total, and the essence of a
big object (with ``kubectl``'s own copy of it next to ours) does not fit. A
trimmed essence replaces its biggest fields with markers,
``{"$kopf-trimmed": "sha256:<hex>", "bytes": <size>}``: the digest of the
field's value as it was handled. When the essence is read back, every
marker whose digest matches the object's current value is replaced with that
value again (:func:`restore`), so an unchanged field is no change, and a
changed field is a change with the marker as its old value.

Only fields that the essence holds exactly as the object does are trimmed:
neither the status (only there for field handlers) nor the containers of
labels and annotations themselves, whose bookkeeping the essence omits.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from typing import Any

from kopf._structs import dicts
from kopf._structs.bodies import Essence

Path = tuple[str, ...]

MARKER = '$kopf-trimmed'

_UNTRIMMABLE: frozenset[Path] = frozenset({('metadata',), ('metadata', 'labels'), ('metadata', 'annotations')})


def encoded_size(value: Any) -> int:
    """The size in bytes of a value as the storages encode it (compact JSON, UTF-8)."""
    return len(_encode(value).encode('utf-8'))


def digest(value: Any) -> str:
    return 'sha256:' + hashlib.sha256(_encode(value).encode('utf-8')).hexdigest()


def marker(value: Any) -> dict[str, Any]:
    """What stands for a trimmed value in the essence."""
    return {MARKER: digest(value), 'bytes': encoded_size(value)}


def is_marker(value: Any) -> bool:
    return isinstance(value, Mapping) and MARKER in value


def trim(essence: Essence, limit: int) -> tuple[Essence, list[Path]] | None:
    """
    The essence within ``limit`` bytes (encoded), and the paths of the fields replaced by markers.

    As little as possible is hidden, so that diffs stay precise: the fields
    without smaller fields worth trimming inside are trimmed first -- the
    smallest one that is enough, else the biggest one, and again. Only when
    such fields are too small to matter, their containers are trimmed.
    ``None`` if even the most trimmed essence is too big.
    """
    result = dicts.copy_json(essence)
    trimmed: list[Path] = []
    size = encoded_size(result)
    while size > limit:
        excess = size - limit
        candidates = [(encoded_size(value) - encoded_size(marker(value)), path, value)
                      for path, value in _trimmable(result)]
        candidates = [item for item in candidates if item[0] > 0]
        if not candidates:
            return None
        containers = {item[1][:depth] for item in candidates for depth in range(1, len(item[1]))}
        innermost = [item for item in candidates if item[1] not in containers]
        worth = [item for item in innermost if item[0] * 16 >= excess] or candidates
        enough = [item for item in worth if item[0] >= excess]
        _, path, value = min(enough, key=_saving) if enough else max(worth, key=_saving)
        _set(result, path, marker(value))
        trimmed.append(path)
        size = encoded_size(result)
    return result, trimmed


def restore(essence: Essence, *, current: Mapping[str, Any]) -> Essence:
    """
    Put back the values of trimmed fields that have not changed since they were handled.

    ``current`` is the object's essence as it is now (before the progress
    storage's clean-up, which does not touch trimmable fields).
    """
    markers = list(_markers(essence, ()))
    if not markers:
        return essence
    result: Essence = dicts.copy_json(essence)
    for path, found in markers:
        value = _get(current, path)
        if value is not _ABSENT and digest(value) == found[MARKER]:
            _set(result, path, dicts.copy_json(value))
    return result


def trimmed_paths(essence: Mapping[str, Any]) -> list[Path]:
    """Where an essence has markers instead of values."""
    return [path for path, _ in _markers(essence, ())]


def _saving(candidate: tuple[int, Path, Any]) -> int:
    return candidate[0]


class _Absent:
    pass


_ABSENT = _Absent()


def _encode(value: Any) -> str:
    return json.dumps(value, separators=(',', ':'), sort_keys=True)


def _trimmable(essence: Mapping[str, Any]) -> Iterator[tuple[Path, Any]]:
    def walk(node: Mapping[str, Any], path: Path) -> Iterator[tuple[Path, Any]]:
        for key, value in node.items():
            subpath = path + (str(key),)
            if subpath[0] == 'status' or is_marker(value):
                continue
            if subpath not in _UNTRIMMABLE:
                yield subpath, value
            if isinstance(value, Mapping):
                yield from walk(value, subpath)
    return walk(essence, ())


def _markers(node: Any, path: Path) -> Iterator[tuple[Path, Mapping[str, Any]]]:
    if is_marker(node):
        yield path, node
    elif isinstance(node, Mapping):
        for key, value in node.items():
            yield from _markers(value, path + (str(key),))


def _get(node: Any, path: Path) -> Any:
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return _ABSENT
        node = node[key]
    return node


def _set(node: dict[str, Any], path: Path, value: Any) -> None:
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
