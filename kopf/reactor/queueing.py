"""
Per-object queueing: one worker per object, so that each object's events are
handled in order and never concurrently, while different objects are handled
in parallel.

Events that arrive while an object is being handled are batched: only the
latest state of the object matters, the intermediate ones are skipped. After
our own patch, the worker waits until the watch stream shows that patch (by
its ``resourceVersion``), so that a stale pre-patch state is never handled
again (which would re-run handlers that just succeeded).
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Protocol

from kopf.reactor import failures

logger = logging.getLogger('kopf.reactor.queueing')

RawEvent = Mapping[str, Any]

# How long to wait for the watch stream to show our own patch before handling anyway.
CONSISTENCY_TIMEOUT = 5.0


@dataclasses.dataclass(frozen=True)
class ProcessingOutcome:
    """What a processor tells its worker after handling one event."""

    delay: float | None = None  # when to wake up for the next cycle if no event comes first
    resource_version: str | None = None  # of our own patch, to wait for before the next cycle
    body: Mapping[str, Any] | None = None  # the object as our own patch has left it, if patched


Processor = Callable[[RawEvent, bool], Awaitable[ProcessingOutcome]]  # (event, woken_up_after_delay)


class BatchingSettings(Protocol):
    batch_window: float
    idle_timeout: float
    exit_timeout: float
    worker_limit: int | None


def object_key(raw_event: RawEvent) -> str:
    """Identify an object across events: by uid, or by namespace and name where no uid is given."""
    meta = raw_event.get('object', {}).get('metadata', {})
    return str(meta.get('uid') or f"{meta.get('namespace')}/{meta.get('name')}")


def describe(raw_event: RawEvent) -> str:
    """The object of an event for messages: ``Kind namespace/name (uid)``, as much of it as is known."""
    obj = raw_event.get('object', {})
    meta = obj.get('metadata', {})
    where = f"{meta.get('namespace')}/{meta.get('name')}" if meta.get('namespace') else f"{meta.get('name')}"
    kind = f"{obj.get('kind')} " if obj.get('kind') else ''
    uid = f" (uid {meta.get('uid')})" if meta.get('uid') else ''
    return f"{kind}{where}{uid}"


def _resource_version(raw_event: RawEvent) -> str | None:
    rv = raw_event.get('object', {}).get('metadata', {}).get('resourceVersion')
    return str(rv) if rv is not None else None


def _is_consistent(raw_event: RawEvent, expected_rv: str) -> bool:
    """Whether the event shows our own patch -- or the object is gone, which outdates any patch."""
    return raw_event.get('type') == 'DELETED' or _resource_version(raw_event) == expected_rv


async def watch_objects(
        *,
        stream: AsyncIterator[RawEvent],
        processor: Processor,
        settings: BatchingSettings,
) -> None:
    """Route every event of a stream to its object's worker until the stream ends."""
    queues: dict[str, asyncio.Queue[RawEvent]] = {}
    workers: dict[str, asyncio.Task[None]] = {}
    limiter = asyncio.Semaphore(settings.worker_limit) if settings.worker_limit else None
    repeats = failures.RepeatLimiter()
    try:
        async for raw_event in stream:
            key = object_key(raw_event)
            if key not in workers or workers[key].done():
                queues[key] = asyncio.Queue()
                workers[key] = asyncio.create_task(
                    _worker(queue=queues[key], processor=processor, settings=settings, limiter=limiter),
                    name=f"kopf worker {key}")
                workers[key].add_done_callback(_make_cleanup(key, queues, workers, describe(raw_event), repeats))
            await queues[key].put(raw_event)
    finally:
        await _stop_workers(workers, timeout=settings.exit_timeout)


def _make_cleanup(
        key: str,
        queues: dict[str, asyncio.Queue[RawEvent]],
        workers: dict[str, asyncio.Task[None]],
        what: str,
        repeats: failures.RepeatLimiter,
) -> Callable[[asyncio.Task[None]], None]:
    def cleanup(task: asyncio.Task[None]) -> None:
        if workers.get(key) is task:
            del workers[key]
            del queues[key]
        error = None if task.cancelled() else task.exception()
        if error is not None:
            suppressed = repeats.admit((key, *failures.signature(error)))
            if suppressed is not None:
                logger.error("The worker for %s has failed: %s: %s. Its next event starts a new one.%s",
                             what, type(error).__name__, error, failures.repeated(suppressed), exc_info=error)
    return cleanup


async def _stop_workers(workers: Mapping[str, asyncio.Task[None]], *, timeout: float) -> None:
    """Let workers finish their current handling, then cancel the rest."""
    tasks = list(workers.values())
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=timeout)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


async def _worker(
        *,
        queue: asyncio.Queue[RawEvent],
        processor: Processor,
        settings: BatchingSettings,
        limiter: asyncio.Semaphore | None,
) -> None:
    """Handle one object's events until it is gone or has been idle for a while."""
    delay: float | None = None
    expected_rv: str | None = None
    last_event: RawEvent | None = None
    while True:
        timeout = delay if delay is not None else settings.idle_timeout
        if expected_rv is not None and delay is not None:
            # Our patch's own event is the natural next step: give it time to arrive.
            timeout = max(delay, CONSISTENCY_TIMEOUT)
        try:
            raw_event = await asyncio.wait_for(queue.get(), timeout=timeout)
        except asyncio.TimeoutError:
            if delay is None or last_event is None:
                return  # idle: the object will get a new worker with its next event
            woken_up = True
            raw_event = last_event
        else:
            woken_up = False
            raw_event, expected_rv = await _collect_batch(queue, raw_event, expected_rv, settings.batch_window)
            if expected_rv is not None:
                raw_event, expected_rv = await _collect_batch(queue, raw_event, expected_rv, CONSISTENCY_TIMEOUT,
                                                              until_consistent=True)

        async with limiter if limiter is not None else contextlib.nullcontext():
            outcome = await processor(raw_event, woken_up)
        # After our own patch, the patched object is the freshest known state: a wake-up without
        # new events must continue from it, never from the stale pre-patch event.
        last_event = raw_event if outcome.body is None else {'type': 'MODIFIED', 'object': outcome.body}
        delay = outcome.delay
        expected_rv = outcome.resource_version
        if raw_event.get('type') == 'DELETED':
            return


async def _collect_batch(
        queue: asyncio.Queue[RawEvent],
        latest: RawEvent,
        expected_rv: str | None,
        window: float,
        *,
        until_consistent: bool = False,
) -> tuple[RawEvent, str | None]:
    """
    Take all events arriving within the window; only the latest one counts.

    With ``until_consistent``, stop as soon as our own patch has been seen.
    Returns the latest event and the still awaited resource version, if any.
    """
    if expected_rv is not None and _is_consistent(latest, expected_rv):
        expected_rv = None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + window
    while not (until_consistent and expected_rv is None):
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        try:
            latest = await asyncio.wait_for(queue.get(), timeout=remaining)
        except asyncio.TimeoutError:
            break
        if expected_rv is not None and _is_consistent(latest, expected_rv):
            expected_rv = None
    if until_consistent and expected_rv is not None:
        logger.debug("Our own patch (resourceVersion %s) was not seen in time; handling the latest state.",
                      expected_rv)
        expected_rv = None
    return latest, expected_rv
