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
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Protocol

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
    mailboxes: dict[str, _Mailbox] = {}
    limiter = asyncio.Semaphore(settings.worker_limit) if settings.worker_limit else None
    try:
        async for raw_event in stream:
            key = object_key(raw_event)
            mailbox = mailboxes.get(key)
            if mailbox is None or mailbox.task is None or mailbox.task.done():
                mailbox = mailboxes[key] = _Mailbox()
                mailbox.task = asyncio.create_task(
                    _worker(mailbox=mailbox, processor=processor, settings=settings, limiter=limiter),
                    name=f"kopf worker {key}")
                mailbox.task.add_done_callback(functools.partial(_forget, key, mailbox, mailboxes))
            mailbox.put(raw_event)
            del raw_event, mailbox  # while awaiting the next event, only the workers hold objects
    finally:
        await _stop_workers([m.task for m in mailboxes.values() if m.task is not None],
                            timeout=settings.exit_timeout)


class _Mailbox:
    """
    What one object's worker has yet to handle: only the latest event, since
    intermediate states are skipped anyway; and whether the event of our own
    last patch has arrived.

    One per object being handled, so it is kept small: a plain future to wait
    on instead of a queue with its own locks and buffers.
    """

    __slots__ = ('_waiter', 'expected_rv', 'latest', 'task', 'versions')

    def __init__(self) -> None:
        self.latest: RawEvent | None = None
        self.expected_rv: str | None = None  # of our own patch, until its event arrives
        self.versions: list[str | None] = []  # of the events since the last take, while nothing is expected
        self.task: asyncio.Task[None] | None = None
        self._waiter: asyncio.Future[None] | None = None

    def put(self, raw_event: RawEvent) -> None:
        self.latest = raw_event
        if self.expected_rv is None:
            self.versions.append(_GONE if raw_event.get('type') == 'DELETED' else _resource_version(raw_event))
        elif _is_consistent(raw_event, self.expected_rv):
            self.expected_rv = None
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def take(self) -> RawEvent | None:
        latest, self.latest = self.latest, None
        self.versions.clear()
        return latest

    def expect(self, resource_version: str | None) -> None:
        """Our patch has this version: its event is awaited, unless it has already arrived."""
        arrived = resource_version in self.versions or _GONE in self.versions
        self.versions.clear()
        self.expected_rv = None if resource_version is None or arrived else resource_version

    async def wait(self, timeout: float) -> None:
        """Sleep until the next event arrives, or the timeout."""
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = loop.call_later(max(timeout, 0), _wake, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None


_GONE = '<deleted>'  # in the versions seen: the object is gone, which outdates any patch of ours


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _forget(key: str, mailbox: _Mailbox, mailboxes: dict[str, _Mailbox], task: asyncio.Task[None]) -> None:
    """A worker has ended: free its mailbox (unless a new worker has already taken the object over)."""
    if mailboxes.get(key) is mailbox:
        del mailboxes[key]
    if not task.cancelled() and task.exception() is not None:
        logger.error("The worker for %s has failed.", key, exc_info=task.exception())


async def _stop_workers(tasks: list[asyncio.Task[None]], *, timeout: float) -> None:
    """Let workers finish their current handling, then cancel the rest."""
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=timeout)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


async def _worker(
        *,
        mailbox: _Mailbox,
        processor: Processor,
        settings: BatchingSettings,
        limiter: asyncio.Semaphore | None,
) -> None:
    """Handle one object's events until it is gone or has been idle for a while."""
    delay: float | None = None
    last_event: RawEvent | None = None  # kept only while a wake-up without new events is due
    while True:
        step = await _next_event(mailbox, settings, delay=delay, last_event=last_event)
        if step is None:
            return  # idle: the object will get a new worker with its next event
        raw_event, woken_up = step
        del step
        async with limiter if limiter is not None else contextlib.nullcontext():
            outcome = await processor(raw_event, woken_up)
        mailbox.expect(outcome.resource_version)
        if raw_event.get('type') == 'DELETED':
            return
        delay = outcome.delay
        # After our own patch, the patched object is the freshest known state: a wake-up without
        # new events must continue from it, never from the stale pre-patch event.
        if delay is None:
            last_event = None
        elif outcome.body is not None:
            last_event = {'type': 'MODIFIED', 'object': outcome.body}
        else:
            last_event = raw_event
        del raw_event, outcome  # a waiting worker keeps nothing of the handled object but ``last_event``


async def _next_event(
        mailbox: _Mailbox,
        settings: BatchingSettings,
        *,
        delay: float | None,
        last_event: RawEvent | None,
) -> tuple[RawEvent, bool] | None:
    """The next event to handle and whether it is a wake-up after a delay; ``None`` when idle for long."""
    if mailbox.latest is None:
        timeout = delay if delay is not None else settings.idle_timeout
        if mailbox.expected_rv is not None and delay is not None:
            # Our patch's own event is the natural next step: give it time to arrive.
            timeout = max(delay, CONSISTENCY_TIMEOUT)
        await mailbox.wait(timeout)
    if mailbox.latest is None:
        if delay is None or last_event is None:
            return None
        mailbox.expected_rv = None  # given up on: this cycle's own patch is the one to await next
        return last_event, True
    await asyncio.sleep(settings.batch_window)  # the events meanwhile replace each other
    if mailbox.expected_rv is not None:
        await _await_consistency(mailbox, CONSISTENCY_TIMEOUT)
    raw_event = mailbox.take()
    assert raw_event is not None  # only this worker takes, and it has seen an event
    return raw_event, False


async def _await_consistency(mailbox: _Mailbox, timeout: float) -> None:
    """Hold the handling until the event of our own patch arrives, but not longer than the timeout."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while mailbox.expected_rv is not None and loop.time() < deadline:
        await mailbox.wait(deadline - loop.time())
    if mailbox.expected_rv is not None:
        logger.debug("Our own patch (resourceVersion %s) was not seen in time; handling the latest state.",
                     mailbox.expected_rv)
        mailbox.expected_rv = None
