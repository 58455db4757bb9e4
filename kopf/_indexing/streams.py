"""
Indexing the streams: every event goes through the index functions before the stream passes it on.

This is the executor around the decisions of the other modules: it calls
the index functions (with the keyword arguments of handlers, including the
other indexes), puts their results into the indexes, applies what
:mod:`.failures` decides about a failing function, logs it, and keeps each
stream's :class:`~.readiness.Membership` current. Since each event is indexed
before the next one is read, every listed object is in the indexes when the
stream reports its listing as over.
"""
from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from kopf import errors
from kopf._cycle import selection
from kopf._cycle.queueing import event_key
from kopf._handlers import invocation
from kopf._handlers.arguments import Arguments, ObjectArguments, OperatorArguments
from kopf._handlers.loggers import ObjectLogger
from kopf._handlers.registries import IndexingHandler
from kopf._indexing import failures, indexes
from kopf._indexing.catalog import Catalog
from kopf._indexing.indexes import ObjectKey
from kopf._indexing.readiness import Membership
from kopf._structs.bodies import Body
from kopf._structs.clocks import Clock
from kopf._structs.patches import Patch
from kopf._structs.resources import Resource
from kopf._structs.typedefs import Logger, RawEvent
from kopf.config import OperatorConfig
from kopf.errors import PermanentError, TemporaryError

# Indexes one event of one object (known by its key).
IndexFn = Callable[[RawEvent, ObjectKey], Awaitable[None]]


async def indexed(
        stream: AsyncIterator[RawEvent],
        *,
        membership: Membership,
        index: IndexFn | None,
) -> AsyncIterator[RawEvent]:
    """Index every event of the stream (if there is anything to index it for) before passing it on."""
    async for raw_event in stream:
        obj = event_key(raw_event)
        membership.see(obj, raw_event.get('type'))
        if index is not None:
            await index(raw_event, obj)
        yield raw_event


async def index_event(
        catalog: Catalog,
        raw_event: RawEvent,
        *,
        handlers: list[IndexingHandler],
        resource: Resource | None,
        config: OperatorConfig,
        memo: Any,
        clock: Clock,
) -> None:
    """Update the indexes of these functions with one event of one object."""
    obj = event_key(raw_event)
    if raw_event.get('type') == 'DELETED':
        for handler in handlers:
            catalog.drop(handler.id, obj)
        return
    body = Body(raw_event['object'])
    logger = ObjectLogger(body=body)
    arguments = Arguments(operator=OperatorArguments(logger=logger, memo=memo, config=config, indexes=catalog),
                          object=ObjectArguments(body=body, patch=Patch(), resource=resource))
    for handler in handlers:
        await _index_one(catalog, handler, obj, arguments=arguments, config=config, logger=logger, clock=clock)


async def _index_one(
        catalog: Catalog,
        handler: IndexingHandler,
        obj: ObjectKey,
        *,
        arguments: Arguments,
        config: OperatorConfig,
        logger: Logger,
        clock: Clock,
) -> None:
    if not selection.matches(handler, arguments=arguments, logger=logger):
        catalog.indexer(handler.id).discard(obj)
        return
    failure = catalog.failure(handler.id, obj)
    if failure is not None and failure.excludes(clock.monotonic()):
        return
    past = failures.attempts(failure, now=clock.now())
    kwargs = arguments.for_handler(handler).with_attempt(past).render()
    try:
        result = await invocation.invoke(handler.fn, kwargs=kwargs, executor=config.execution.executor)
    except Exception as e:
        verdict = failures.judge(handler, e, failure=failure, now=clock.now(), monotonic=clock.monotonic(),
                                 default_backoff=config.execution.default_backoff)
        if verdict.drop:
            catalog.indexer(handler.id).discard(obj)
        catalog.failed(handler.id, obj, verdict.failure)
        _log(logger, handler, e, verdict)
        return
    items = indexes.items_of(result)
    if items is not None:
        catalog.indexer(handler.id).replace(obj, items)
    if failure is not None:
        catalog.recovered(handler.id, obj)
        logger.info("Index %r has indexed the object again.", handler.id)


def _log(logger: Logger, handler: IndexingHandler, error: Exception, verdict: failures.Verdict) -> None:
    """The first failure of an object is logged as an error, and so is its exclusion for good; the rest at DEBUG."""
    expected = isinstance(error, (TemporaryError, PermanentError))
    if verdict.news:
        logger.error("Index %r has failed for the object: %s; %s. Its further failures are logged only "
                     "at DEBUG until it is indexed again.", handler.id, errors.message(error), verdict.consequence,
                     exc_info=None if expected else error)
    else:
        logger.debug("Index %r has failed for the object again: %s; %s.",
                     handler.id, errors.message(error), verdict.consequence)
