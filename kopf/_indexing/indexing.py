"""
Indexing: in-memory indexes of objects, kept current from the watch streams and given to every handler.

Each ``@kopf.index`` function makes one :class:`~kopf._indexing.indexes.Index`,
named by the function's id; :class:`OperatorIndexes` holds all of them for
one run of the operator and is what handlers get as keyword arguments (one
per index, by name).

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

Index functions are not retried in place: they run on every event, and a
failure only decides what happens to the object's values. With the default
``errors=IGNORED``, an arbitrary exception keeps the object's previous values
(stale, but probably close). :class:`kopf.TemporaryError` (or any exception
with ``errors=TEMPORARY``) removes them, and the object is not indexed again
until the error's ``delay`` (or ``backoff=``) has passed and a new event
comes; after ``retries=`` failures or ``timeout=`` seconds since the first,
the exclusion is for good. :class:`kopf.PermanentError` (or ``errors=PERMANENT``)
removes them and excludes the object for good (until it is deleted).

Each object's failure is logged once, with its consequence (and once more
if the object becomes excluded for good); repeated failures of the same
object are logged at DEBUG only, until it is indexed successfully again.
"""
from __future__ import annotations

import asyncio
import dataclasses
import datetime
from collections.abc import AsyncIterator, Hashable, Iterator, Mapping
from typing import Any

from kopf import errors
from kopf._cycle import selection
from kopf._cycle.queueing import event_key
from kopf._handlers import invocation
from kopf._handlers.arguments import Arguments, ObjectArguments, OperatorArguments
from kopf._handlers.loggers import ObjectLogger
from kopf._handlers.registries import DEFAULT_BACKOFF, IndexingHandler, OperatorRegistry, ResourceKey
from kopf._indexing import indexes
from kopf._indexing.indexes import Index, Indexer, ObjectKey
from kopf._structs.bodies import Body
from kopf._structs.clocks import SYSTEM_CLOCK, Clock
from kopf._structs.ephemera import ObjectMemos
from kopf._structs.ids import HandlerId
from kopf._structs.patches import Patch
from kopf._structs.resources import Resource
from kopf._structs.typedefs import Logger, RawEvent
from kopf.config import OperatorConfig
from kopf.errors import ErrorsMode, PermanentError, TemporaryError


@dataclasses.dataclass(frozen=True)
class Failure:
    """An object that an index function has failed for, since when, and until when it is not indexed."""

    started: datetime.datetime
    since: float  # monotonic
    retries: int = 1
    until: float | None = None  # monotonic; None: for good; -inf: not excluded (errors ignored)

    def excludes(self, now: float) -> bool:
        return self.until is None or now < self.until


@dataclasses.dataclass
class _Stream:
    """
    What one stream has indexed: to forget the objects that a new listing no longer has.

    A stream that is re-opened (by replicas, after a hand-over) lists anew
    without telling which objects have gone meanwhile.
    """

    handlers: list[IndexingHandler]
    members: set[ObjectKey] = dataclasses.field(default_factory=set)  # objects seen and not deleted
    listed: set[ObjectKey] = dataclasses.field(default_factory=set)  # objects of the current listing
    listing: bool = False  # whether the last event was a listed one


@dataclasses.dataclass(frozen=True)
class _Attempts:
    """What an index function is told about its failures for the object so far (``retry``, ``started``, ...)."""

    retries: int
    started: datetime.datetime
    runtime: datetime.timedelta


class OperatorIndexes(Mapping[str, Index[Any, Any]]):
    """
    All indexes of one run of the operator, by name; and whether the initial listings have filled them.

    It is a read-only mapping of index names to indexes: exactly what
    handlers get as keyword arguments.
    """

    def __init__(self, registry: OperatorRegistry, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._indexers: dict[HandlerId, Indexer[Any, Any]] = {
            handler.id: Indexer() for _, handler in registry.iter_indexing_handlers()
        }
        self._failures: dict[tuple[HandlerId, ObjectKey], Failure] = {}
        self._streams: dict[Hashable, _Stream] = {}
        self._pending: set[Hashable] = set()
        self._ready = asyncio.Event()
        self._ready.set()  # nothing to wait for until a listing is expected
        self._clock = clock

    # The mapping of names to indexes, for the handlers.

    def __getitem__(self, name: str) -> Index[Any, Any]:
        return self._indexers[HandlerId(name)].index

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._indexers))

    def __len__(self) -> int:
        return len(self._indexers)

    def __repr__(self) -> str:
        return f"<OperatorIndexes {list(self._indexers)}>"

    # Readiness: every expected listing has been indexed.

    def expect(self, listing: Hashable) -> None:
        """A stream with index functions will list: handlers wait until it has (call before it starts)."""
        self._pending.add(listing)
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
            for obj in stream.members - stream.listed:
                for handler in stream.handlers:
                    self._forget(handler.id, obj)
            stream.members = stream.listed
            stream.listed, stream.listing = set(), False
        self._pending.discard(listing)
        if not self._pending:
            self._ready.set()

    def forget(self, listing: Hashable) -> None:
        """
        The stream has stopped for good (its namespace or its resource is gone): drop what it has indexed.

        Handlers do not wait for its listing any more, if they still did.
        """
        stream = self._streams.pop(listing, None)
        if stream is not None:
            for obj in stream.members | stream.listed:
                for handler in stream.handlers:
                    self._forget(handler.id, obj)
        self._pending.discard(listing)
        if not self._pending:
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
        async for raw_event in stream:
            obj = event_key(raw_event)
            if raw_event.get('type') is None:  # a listed object
                if not state.listing:  # a new listing begins
                    state.listed, state.listing = set(), True
                state.listed.add(obj)
            else:
                state.listing = False
            if raw_event.get('type') == 'DELETED':
                state.members.discard(obj)
            else:
                state.members.add(obj)
            if state.handlers:
                await self.index_event(raw_event, handlers=state.handlers, resource=resource, config=config,
                                       memo=memos.get(obj) if memos is not None else memo)
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
        obj = event_key(raw_event)
        if raw_event.get('type') == 'DELETED':
            for handler in handlers:
                self._forget(handler.id, obj)
            return
        body = Body(raw_event['object'])
        logger = ObjectLogger(body=body)
        arguments = Arguments(operator=OperatorArguments(logger=logger, memo=memo, config=config, indexes=self),
                              object=ObjectArguments(body=body, patch=Patch(), resource=resource))
        for handler in handlers:
            await self._index_one(handler, obj, arguments=arguments, config=config, logger=logger)

    def _forget(self, handler_id: HandlerId, obj: ObjectKey) -> None:
        self._indexers[handler_id].discard(obj)
        self._failures.pop((handler_id, obj), None)

    async def _index_one(
            self,
            handler: IndexingHandler,
            obj: ObjectKey,
            *,
            arguments: Arguments,
            config: OperatorConfig,
            logger: Logger,
    ) -> None:
        indexer = self._indexers[handler.id]
        if not selection.matches(handler, arguments=arguments, logger=logger):
            indexer.discard(obj)
            return
        failure = self._failures.get((handler.id, obj))
        if failure is not None and failure.excludes(self._clock.monotonic()):
            return
        past = _Attempts(retries=0, started=self._clock.now(), runtime=datetime.timedelta(0))
        if failure is not None:
            past = _Attempts(retries=failure.retries, started=failure.started,
                             runtime=self._clock.now() - failure.started)
        kwargs = arguments.for_handler(handler).with_attempt(past).render()
        try:
            result = await invocation.invoke(handler.fn, kwargs=kwargs, executor=config.execution.executor)
        except Exception as e:
            self._failed(handler, obj, e, failure=failure, default_backoff=config.execution.default_backoff,
                         logger=logger)
            return
        items = indexes.items_of(result)
        if items is not None:
            indexer.replace(obj, items)
        if failure is not None:
            del self._failures[(handler.id, obj)]
            logger.info("Index %r has indexed the object again.", handler.id)

    def _failed(
            self,
            handler: IndexingHandler,
            obj: ObjectKey,
            error: Exception,
            *,
            failure: Failure | None,
            default_backoff: float = DEFAULT_BACKOFF,
            logger: Logger,
    ) -> None:
        """Decide what the failure does to the object's values, remember it, and log it once."""
        now = self._clock.monotonic()
        started = failure.started if failure is not None else self._clock.now()
        since = failure.since if failure is not None else now
        retries = failure.retries + 1 if failure is not None else 1
        mode = handler.errors or ErrorsMode.IGNORED
        delay: float | None
        if isinstance(error, TemporaryError):
            delay = error.delay or 0.0
        elif isinstance(error, PermanentError) or mode == ErrorsMode.PERMANENT:
            delay = None
        elif mode == ErrorsMode.TEMPORARY:
            delay = handler.backoff if handler.backoff is not None else default_backoff
        else:
            self._failures[(handler.id, obj)] = Failure(started=started, since=since, retries=retries,
                                                         until=float('-inf'))
            self._log(logger, failure, handler, error, "its values in the index stay as they were")
            return

        exhausted = ''
        if delay is not None and handler.retries is not None and retries >= handler.retries:
            exhausted = f" (its {handler.retries} attempt(s) are used up)"
        elif delay is not None and handler.timeout is not None and now + delay - since > handler.timeout:
            exhausted = f" (its {handler.timeout} seconds are over)"
        if exhausted:
            delay = None
        self._indexers[handler.id].discard(obj)
        self._failures[(handler.id, obj)] = Failure(started=started, since=since, retries=retries,
                                                     until=None if delay is None else now + delay)
        if delay is None:
            consequence = f"its values are removed from the index, and it is not indexed again{exhausted}"
        else:
            consequence = (f"its values are removed from the index until it is indexed again "
                           f"(on its first event after {delay:g}s)")
        self._log(logger, failure, handler, error, consequence,
                  news=delay is None and failure is not None and failure.until is not None)

    @staticmethod
    def _log(logger: Logger, failure: Failure | None, handler: IndexingHandler, error: Exception,
             consequence: str, *, news: bool = False) -> None:
        """The first failure of an object is logged as an error, and so is its exclusion for good; the rest at DEBUG."""
        expected = isinstance(error, (TemporaryError, PermanentError))
        if failure is None or news:
            logger.error("Index %r has failed for the object: %s; %s. Its further failures are logged only "
                         "at DEBUG until it is indexed again.", handler.id, errors.message(error), consequence,
                         exc_info=None if expected else error)
        else:
            logger.debug("Index %r has failed for the object again: %s; %s.",
                         handler.id, errors.message(error), consequence)

