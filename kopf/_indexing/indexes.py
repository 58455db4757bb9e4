"""
In-memory indexes: what index functions have made of the objects, kept current object by object.

An :class:`Index` maps keys to :class:`Store` collections; a store holds the
values that objects have put under its key, at most one per object. Handlers
only read them (both are read-only views). An :class:`Indexer` is the only
writer: it remembers which keys each object has contributed to, so that an
object's contribution is replaced or dropped in O(its own keys), whatever the
size of the index, and it removes stores that become empty: a key is in the
index only while some object has a value under it.

Reads are safe from handlers running in threads while the operator updates
the index: iterations go over a snapshot of the keys or values.
"""
from __future__ import annotations

from collections.abc import Collection, Hashable, Iterator, Mapping
from typing import Any, Generic, TypeVar

K = TypeVar('K', bound=Hashable)
V = TypeVar('V')

# Which object a value came from: its uid (or namespace/name where there is none).
ObjectKey = str


class Store(Collection[V], Generic[V]):
    """The values under one key of an index, one per object that has put one there; read-only."""

    __slots__ = ('_values',)

    def __init__(self) -> None:
        self._values: dict[ObjectKey, V] = {}

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[V]:
        return iter(list(self._values.values()))

    def __contains__(self, value: object) -> bool:
        return any(value == existing for existing in list(self._values.values()))

    def __repr__(self) -> str:
        return repr(list(self))


class Index(Mapping[K, Store[V]], Generic[K, V]):
    """An index: keys to the stores of values that objects have put under them; read-only."""

    __slots__ = ('_stores',)

    def __init__(self) -> None:
        self._stores: dict[K, Store[V]] = {}

    def __getitem__(self, key: K) -> Store[V]:
        return self._stores[key]

    def __len__(self) -> int:
        return len(self._stores)

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._stores))

    def __contains__(self, key: object) -> bool:
        return key in self._stores

    def __repr__(self) -> str:
        return repr({key: list(store) for key, store in list(self._stores.items())})


class Indexer(Generic[K, V]):
    """The writer of one index: puts, replaces and drops the contributions of objects."""

    def __init__(self) -> None:
        self.index: Index[K, V] = Index()
        self._keys: dict[ObjectKey, tuple[K, ...]] = {}

    def __contains__(self, obj: object) -> bool:
        """Whether the object has values in the index."""
        return obj in self._keys

    def replace(self, obj: ObjectKey, items: Mapping[K, V]) -> None:
        """Make the object's values exactly these (under their keys); its other values go."""
        stores = self.index._stores
        for key in self._keys.get(obj, ()):
            if key not in items:
                self._remove(obj, key)
        for key, value in items.items():
            store = stores.get(key)
            if store is None:
                store = stores[key] = Store()
            store._values[obj] = value
        if items:
            self._keys[obj] = tuple(items)
        else:
            self._keys.pop(obj, None)

    def discard(self, obj: ObjectKey) -> None:
        """Remove all values of the object (if any)."""
        for key in self._keys.pop(obj, ()):
            self._remove(obj, key)

    def _remove(self, obj: ObjectKey, key: K) -> None:
        stores = self.index._stores
        store = stores.get(key)
        if store is not None:
            store._values.pop(obj, None)
            if not store._values:
                del stores[key]


def items_of(result: Any) -> dict[Any, Any] | None:
    """
    What an index function's result puts into the index: ``{key: value}``, or ``None`` to change nothing.

    Only a plain ``dict`` (not a subclass, not another mapping) is taken as
    keys and values; anything else is one value under the key ``None``.
    """
    if result is None:
        return None
    if type(result) is dict:
        return result
    return {None: result}
