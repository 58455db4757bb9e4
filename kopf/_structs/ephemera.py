"""
Operator-scoped memory that handlers share, and which does not survive restarts.

The operator has one memo (:class:`Memo`, or any object of the user's); as in
Kopf, every object gets a memo of its own, a shallow copy of the operator's
as it was when the object was first seen, shared by all the handlers,
daemons and timers of that object for as long as it exists
(:class:`ObjectMemos`). Mutable values in the operator's memo are therefore
shared by all objects; the keys set in an object's memo are its own.
"""
from __future__ import annotations

import copy
import weakref
from collections.abc import Iterable, Mapping
from typing import Any


class Memo(dict[str, Any]):
    """A dict with attribute access: ``memo.counter = 1`` is ``memo['counter'] = 1``."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def __delattr__(self, name: str) -> None:
        try:
            del self[name]
        except KeyError:
            raise AttributeError(name) from None


class ObjectMemos:
    """
    The memos of the objects of one resource: each a shallow copy of the operator's memo.

    Memory is the reason for the shape. Most operators never touch the memo,
    and a long-lived small object per Kubernetes object pins memory long
    after the bursts that made it (see :mod:`~kopf._structs.dormancy`). So,
    when the operator's memo is a :class:`Memo`, an object's memo is made
    only when a handler gets it, from the operator's memo as it was at the
    object's first sight, and it is kept only from its first change on; until
    then, it lives only while something (a handler, a daemon) holds it, and
    the next handler gets the same one if it is still held, or a new equal
    one. Whether the operator's memo has changed since the first object was
    seen costs one entry per object first seen after such a change, and
    nothing otherwise.

    Other memo classes are copied at the first sight and kept (Kopf's
    custom memos, for embedded operators); a class whose copy is itself is
    shared by all objects, as it asks to be.
    """

    __slots__ = ('_base', '_generations', '_kept', '_latest', '_lazy', '_lent', '_operator', '_shared')

    def __init__(self, operator: Any) -> None:
        self._operator = operator
        self._shared = copy.copy(operator) is operator  # a custom class that asks for one memo for all
        self._lazy = type(operator) is Memo
        self._kept: dict[str, Any] = {}  # the memos that have changed (or custom copies)
        self._lent: weakref.WeakValueDictionary[str, _ObjectMemo] = weakref.WeakValueDictionary()
        self._base: dict[str, Any] | None = None  # the operator's memo when the first object was seen
        self._latest: dict[str, Any] | None = None  # ... when the latest object was seen
        self._generations: dict[str, dict[str, Any]] = {}  # the objects seen when it differed from the base

    def seen(self, key: str) -> None:
        """An object is seen for the first time: its memo is to be the operator's memo as it is now."""
        if self._shared:
            return
        if not self._lazy:
            self._kept.setdefault(key, copy.copy(self._operator))
            return
        if self._latest is None or not _same(self._latest, self._operator):
            self._latest = dict(self._operator)
            self._base = self._base if self._base is not None else self._latest
        if self._latest is not self._base:
            self._generations[key] = self._latest

    def get(self, key: str) -> Any:
        """The object's memo (made now if no one holds it; kept once it changes)."""
        if self._shared:
            return self._operator
        kept = self._kept.get(key)
        if kept is not None:
            return kept
        if not self._lazy:
            return self._kept.setdefault(key, copy.copy(self._operator))
        lent = self._lent.get(key)
        if lent is None:
            lent = _ObjectMemo(self._generations.get(key, self._base if self._base is not None else self._operator))
            lent._lend(self, key)
            self._lent[key] = lent
        return lent

    def forget(self, key: str) -> None:
        """The object is gone: its memo too (one still held elsewhere is not kept if it changes later)."""
        self._kept.pop(key, None)
        self._generations.pop(key, None)
        lent = self._lent.pop(key, None)
        if lent is not None:
            lent._lend(None, key)

    def __len__(self) -> int:
        """How many objects' memos are kept (for tests of the memory)."""
        return len(self._kept) + len(self._generations)

    def _keep(self, key: str, memo: _ObjectMemo) -> None:
        self._kept.setdefault(key, memo)
        self._generations.pop(key, None)  # the memo itself remembers its contents now


class _ObjectMemo(Memo):
    """An object's memo, lent to its handlers; the first change makes its owner keep it."""

    __slots__ = ('_key', '_owner')

    def _lend(self, owner: ObjectMemos | None, key: str) -> None:
        object.__setattr__(self, '_owner', owner)
        object.__setattr__(self, '_key', key)

    def _changed(self) -> None:
        owner: ObjectMemos | None = getattr(self, '_owner', None)
        if owner is not None:
            object.__setattr__(self, '_owner', None)
            owner._keep(self._key, self)

    def __reduce__(self) -> tuple[Any, ...]:
        """Copies (also pickles) are plain memos: only the lent one is the object's."""
        return Memo, (dict(self),)

    def __setitem__(self, key: str, value: Any) -> None:
        self._changed()
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        self._changed()
        super().__delitem__(key)

    def __ior__(self, other: Any) -> _ObjectMemo:  # type: ignore[override,misc]
        self._changed()
        super().__ior__(other)
        return self

    def update(self, *args: Any, **kwargs: Any) -> None:
        self._changed()
        super().update(*args, **kwargs)

    def setdefault(self, key: str, default: Any = None) -> Any:
        self._changed()
        return super().setdefault(key, default)

    def pop(self, key: str, *default: Any) -> Any:
        self._changed()
        return super().pop(key, *default)

    def popitem(self) -> tuple[str, Any]:
        self._changed()
        return super().popitem()

    def clear(self) -> None:
        self._changed()
        super().clear()


def _same(snapshot: Mapping[str, Any], memo: Iterable[Any]) -> bool:
    """Whether the operator's memo still holds what it held (the same keys, the very same values)."""
    current = memo if isinstance(memo, Mapping) else {}
    return len(snapshot) == len(current) and all(key in current and current[key] is value
                                                 for key, value in snapshot.items())
