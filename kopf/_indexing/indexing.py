"""
Indexing: in-memory indexes of objects, kept current from the watch streams and given to every handler.

Each ``@kopf.index`` function makes one :class:`~kopf._indexing.indexes.Index`,
named by the function's id; :class:`OperatorIndexes` holds all of them for
one run of the operator and is what handlers get as keyword arguments (one
per index, by name); the runtime feeds it the watch streams and tells it
which listings to wait for.

Where indexing happens
======================

Indexes are kept in the watch streams themselves (:meth:`OperatorIndexes.indexed`),
before the events are queued to the per-object workers, not as a stage of
the handling cycle:

* Handlers of *other* resources need the index complete, so indexing must
  not wait for per-object workers (they may be limited in number, or wait
  for the indexes themselves).
* The stream says when its initial listing is over (``on_listed`` of
  :func:`kopf._kube.watching.infinite_watch`); since each event is indexed
  before the next one is read, at that moment every listed object is in the
  indexes. When every stream with index functions has listed once, the
  indexes are :meth:`~OperatorIndexes.ready`, and the handling cycle
  (:func:`kopf._cycle.cycle.handle_object`) waits for that before it calls
  any handler of any object.
* Every event is indexed, in order, also for objects that this replica does
  not handle (with shards): indexes are an overview of the whole cluster.
* A stream that lists again without reporting what was deleted meanwhile
  (replicas re-open their streams after a hand-over) has the objects that
  its new listing lacks removed from the indexes once the listing is over.
* Streams start and stop while the operator runs (namespaces and CRDs come
  and go, :mod:`~kopf._runtime.orchestration`). Only the streams of the start
  hold the handlers back: one that starts later indexes its objects as they
  come, and one that stops (:meth:`~OperatorIndexes.forget`) takes its
  objects out of the indexes, and is not waited for any more if it has not
  listed yet.

What an object contributes
==========================

An index function's result replaces the object's previous values: a
``dict`` gives keys and values, any other value goes under the key ``None``,
and ``None`` keeps the previous values as they are. An object that is gone
(a ``DELETED`` event), or that its index's filters no longer accept, has its
values removed. Stores and keys without values do not stay in the index.

Errors
======

Index functions are not retried in place: a failure decides what happens
to the object's values, and when it is indexed again (see :mod:`.failures`).

The modules
===========

:mod:`.indexes` is one index as handlers see it, with its writer;
:mod:`.catalog` is all of them by name; :mod:`.readiness` is what the
streams have listed; :mod:`.failures` is the error policy; :mod:`.streams`
calls the index functions for every event. This module puts them together
for one run of the operator.
"""
from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Hashable
from typing import Any

from kopf._handlers.registries import IndexingHandler, OperatorRegistry, ResourceKey
from kopf._indexing import streams
from kopf._indexing.catalog import Catalog
from kopf._indexing.indexes import ObjectKey
from kopf._indexing.readiness import Membership, Readiness
from kopf._structs.clocks import SYSTEM_CLOCK, Clock
from kopf._structs.ephemera import ObjectMemos
from kopf._structs.resources import Resource
from kopf._structs.typedefs import RawEvent
from kopf.config import OperatorConfig


@dataclasses.dataclass(frozen=True)
class _Stream:
    """One stream's index functions, and what it has indexed (to forget what a new listing no longer has)."""

    handlers: list[IndexingHandler]
    membership: Membership = dataclasses.field(default_factory=Membership)

    def forget(self, catalog: Catalog, objs: set[ObjectKey]) -> None:
        for obj in objs:
            for handler in self.handlers:
                catalog.drop(handler.id, obj)


class OperatorIndexes(Catalog):
    """
    All indexes of one run of the operator, by name; and whether the initial listings have filled them.

    It is a read-only mapping of index names to indexes: exactly what
    handlers get as keyword arguments.
    """

    def __init__(self, registry: OperatorRegistry, *, clock: Clock = SYSTEM_CLOCK) -> None:
        super().__init__(handler.id for _, handler in registry.iter_indexing_handlers())
        self._clock = clock
        self._streams: dict[Hashable, _Stream] = {}
        self._readiness = Readiness()
        self._ready = asyncio.Event()
        self._ready.set()  # nothing to wait for until a listing is expected

    # Readiness: every expected listing has been indexed.

    def expect(self, listing: Hashable) -> None:
        """A stream with index functions will list: handlers wait until it has (call before it starts)."""
        self._readiness.expect(listing)
        self._ready.clear()

    def listed(self, listing: Hashable) -> None:
        """
        The stream's listing has been indexed: what it did not list is gone.

        The first time, the stream stops holding the handlers back; after a
        relisting, objects that it had indexed but did not list any more
        (deleted while the stream was closed) leave the indexes.
        """
        stream = self._streams.get(listing)
        if stream is not None:
            stream.forget(self, stream.membership.relisted())
        self._done(listing)

    def forget(self, listing: Hashable) -> None:
        """
        The stream has stopped for good (its namespace or its resource is gone): drop what it has indexed.

        Handlers do not wait for its listing any more, if they still did.
        """
        stream = self._streams.pop(listing, None)
        if stream is not None:
            stream.forget(self, stream.membership.everything())
        self._done(listing)

    def _done(self, listing: Hashable) -> None:
        self._readiness.done(listing)
        if self._readiness.ready:
            self._ready.set()

    @property
    def is_ready(self) -> bool:
        return self._ready.is_set()

    async def ready(self) -> None:
        """Wait until every expected listing has been indexed."""
        await self._ready.wait()

    # Keeping the indexes from the events.

    async def indexed(
            self,
            stream: AsyncIterator[RawEvent],
            *,
            listing: Hashable,
            registry: OperatorRegistry,
            selector: ResourceKey,
            resource: Resource | None,
            config: OperatorConfig,
            memo: Any,
            memos: ObjectMemos | None = None,
    ) -> AsyncIterator[RawEvent]:
        """
        Index every event of the stream before passing it on; ``listing`` is what the stream reports as listed.

        The index functions get the objects' own memos from ``memos``, if given (else the ``memo``).
        """
        state = self._streams.get(listing)  # a re-opened stream reconciles its new listing with what it had
        if state is None:
            state = self._streams[listing] = _Stream(handlers=registry.get_indexing_handlers(selector))

        async def index(raw_event: RawEvent, obj: ObjectKey) -> None:
            await self.index_event(raw_event, handlers=state.handlers, resource=resource, config=config,
                                   memo=memos.get(obj) if memos is not None else memo)

        async for raw_event in streams.indexed(stream, membership=state.membership,
                                               index=index if state.handlers else None):
            yield raw_event

    async def index_event(
            self,
            raw_event: RawEvent,
            *,
            handlers: list[IndexingHandler],
            resource: Resource | None,
            config: OperatorConfig,
            memo: Any,
    ) -> None:
        """Update the indexes of these functions with one event of one object."""
        await streams.index_event(self, raw_event, handlers=handlers, resource=resource, config=config, memo=memo,
                                  clock=self._clock)
