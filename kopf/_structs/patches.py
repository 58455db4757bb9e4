"""
A JSON merge-patch (RFC 7386) being accumulated during one handling cycle.

Handlers and storages write into the same patch; the framework sends it once.
``None`` as a value means "delete this key" on the server.

Changes that a merge-patch cannot express (a list item added or removed
where others may have changed the list meanwhile) are given as
*transformation functions* in ``patch.fns``, as in Kopf: each mutates a
deep copy of the freshest known body in place; the framework sends the
difference as a JSON patch, with a check of the object's version, and calls
the functions again on the newer body if the object has changed meanwhile.
"""
from __future__ import annotations

import copy
from collections.abc import Iterator, MutableMapping
from typing import Any

from kopf._structs.typedefs import PatchFn


class SubPatch(MutableMapping[str, Any]):
    """
    A write-through view of one nested dict of a patch.

    The nested dicts are created only on the first write, so that merely
    looking at ``patch.status`` does not leave an empty ``status: {}`` behind.
    """

    def __init__(self, root: dict[str, Any], path: tuple[str, ...]) -> None:
        self._root = root
        self._path = path

    def _get(self) -> dict[str, Any]:
        current: Any = self._root
        for key in self._path:
            current = current.get(key) if isinstance(current, dict) else None
        return current if isinstance(current, dict) else {}

    def _ensure(self) -> dict[str, Any]:
        current = self._root
        for key in self._path:
            child = current.get(key)
            if not isinstance(child, dict):
                child = current[key] = {}
            current = child
        return current

    def __getitem__(self, key: str) -> Any:
        return self._get()[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._ensure()[key] = value

    def __delitem__(self, key: str) -> None:
        del self._get()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())

    def __repr__(self) -> str:
        return repr(self._get())


class MetaPatch(SubPatch):
    """The ``metadata`` part of a patch, with ``annotations`` and ``labels`` views."""

    @property
    def annotations(self) -> SubPatch:
        return SubPatch(self._root, self._path + ('annotations',))

    @property
    def labels(self) -> SubPatch:
        return SubPatch(self._root, self._path + ('labels',))


class Patch(dict[str, Any]):
    """
    A merge-patch as a plain dict, with conveniences for the usual sections.

    ``fns`` are its transformation functions (see the module's docstring);
    a patch with functions only is not empty (``bool(patch)`` is true), but
    has no keys.
    """

    __slots__ = ('__weakref__', '_fns')

    @property
    def fns(self) -> list[PatchFn]:
        """The transformation functions of the freshest body: append (or insert) ``fn(body) -> None``."""
        try:
            return self._fns
        except AttributeError:
            self._fns: list[PatchFn] = []
            return self._fns

    def __bool__(self) -> bool:
        return len(self) > 0 or bool(getattr(self, '_fns', None))

    def __copy__(self) -> Patch:
        return self._with(dict(self))

    def __deepcopy__(self, memo: dict[int, Any]) -> Patch:
        """The changes are copied; the functions are the same ones (they may hold what cannot be copied)."""
        return self._with(copy.deepcopy(dict(self), memo))

    def _with(self, changes: dict[str, Any]) -> Patch:
        result = Patch(changes)
        result.fns.extend(getattr(self, '_fns', ()))
        return result

    @property
    def metadata(self) -> MetaPatch:
        return MetaPatch(self, ('metadata',))

    @property
    def meta(self) -> MetaPatch:
        return self.metadata

    @property
    def spec(self) -> SubPatch:
        return SubPatch(self, ('spec',))

    @property
    def status(self) -> SubPatch:
        return SubPatch(self, ('status',))


def apply(target: Any, patch: Any) -> Any:
    """
    Apply a merge-patch to a raw object the way the API server does (RFC 7386).

    Returns a new value; the target is not modified. Used to foresee the
    object's state after our own patch, e.g. to compare it with the server's
    answer or to continue handling in memory.
    """
    if not isinstance(patch, dict):
        return patch
    result: dict[str, Any] = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply(result.get(key), value)
    return result
