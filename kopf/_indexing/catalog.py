"""
The catalog: the operator's indexes by name, as handlers get them, and what indexing remembers per object.

Each ``@kopf.index`` function makes one index, named by the function's id.
The catalog is the read-only mapping of those names to the indexes -- exactly
what handlers get as keyword arguments -- and, behind it, the writer of each
index and the last failure of each function for each object (which decides
whether the object is indexed again, see :mod:`.failures`). An object that is
dropped from an index leaves both.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from kopf._indexing.failures import Failure
from kopf._indexing.indexes import Index, Indexer, ObjectKey
from kopf._structs.ids import HandlerId


class Catalog(Mapping[str, Index[Any, Any]]):
    """The indexes by name (read-only for the handlers), their writers, and the failures of their functions."""

    def __init__(self, names: Iterable[HandlerId]) -> None:
        self._indexers: dict[HandlerId, Indexer[Any, Any]] = {name: Indexer() for name in names}
        self._failures: dict[tuple[HandlerId, ObjectKey], Failure] = {}

    def __getitem__(self, name: str) -> Index[Any, Any]:
        return self._indexers[HandlerId(name)].index

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._indexers))

    def __len__(self) -> int:
        return len(self._indexers)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {list(self._indexers)}>"

    def indexer(self, name: HandlerId) -> Indexer[Any, Any]:
        return self._indexers[name]

    def failure(self, name: HandlerId, obj: ObjectKey) -> Failure | None:
        """The function's last failure for the object, unless it has indexed it successfully since."""
        return self._failures.get((name, obj))

    def failed(self, name: HandlerId, obj: ObjectKey, failure: Failure) -> None:
        self._failures[(name, obj)] = failure

    def recovered(self, name: HandlerId, obj: ObjectKey) -> None:
        self._failures.pop((name, obj), None)

    def drop(self, name: HandlerId, obj: ObjectKey) -> None:
        """The object leaves the index, and its failures are forgotten: it is a new object if it comes back."""
        self._indexers[name].discard(obj)
        self._failures.pop((name, obj), None)
