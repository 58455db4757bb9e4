"""
Per-object queueing: one worker per object, so that each object's events are
handled in order and never concurrently, while different objects are handled
in parallel.

Events that arrive while an object is being handled are batched: only the
latest state of the object matters, the intermediate ones are skipped. After
our own patch, the worker waits until the watch stream shows that patch (by
its ``resourceVersion``), so that a stale pre-patch state is never handled
again (which would re-run handlers that just succeeded). A watch stream
delivers an object's events in order, so every other event that arrives
before the patch's own is older than the patch: however long the stream lags
behind (a busy operator or API server), such events are skipped. A wake-up
that is due meanwhile continues from the patched object instead. When the
patch concluded the handling and the processor says so (``settled``), the
event of exactly the patched state is skipped too: its cycle would find
nothing to do. Such a worker does not even wait for that event when the
server's versions are numbers: it leaves the patch's version behind (a few
dozen bytes instead of a worker and the patched object) and ends; the events
of the object up to that version are dropped on arrival. This matters for a
first listing, whose objects are all patched before the watch that brings
those events is open.

When a worker wakes up is decided apart from the waiting (:func:`_plan`), by
the injected clock, so that tests move the clock instead of waiting.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from kopf._cycle import failures
from kopf._observability.recording import NULL_QUEUE, QueueProbe
from kopf._structs.bodies import object_key
from kopf._structs.clocks import SYSTEM_CLOCK, Clock
from kopf._structs.typedefs import RawEvent

logger = logging.getLogger('kopf._cycle.queueing')


# How long a wake-up after our own patch waits for the patch's event before continuing from the patched object.
CONSISTENCY_TIMEOUT = 5.0
# How long at most events older than our own patch are held back while its event is awaited. It comes
# unless the watch has lost it; a later state (e.g. of a relisting after an expired version) counts as it,
# if the server's versions are numbers (see _not_older); this limit is for servers whose are not.
CONSISTENCY_LIMIT = 120.0
# How many objects of a listing at most wait for their workers before the listing is read on: a listing
# of 100,000 objects is then never in memory all at once (a watch is read on regardless, see below).
LISTING_BACKLOG = 500


@dataclasses.dataclass(frozen=True)
class ProcessingOutcome:
    """What a processor tells its worker after handling one event."""

    delay: float | None = None  # when to wake up for the next cycle if no event comes first
    resource_version: str | None = None  # of our own patch, to wait for before the next cycle
    body: Mapping[str, Any] | None = None  # the object as our own patch has left it, if patched
    gone: bool = False  # our patch found the object gone (404): only its deletion is news, not older events
    settled: bool = False  # the patch concludes the handling: the object exactly as it leaves it needs no cycle


Processor = Callable[[RawEvent, bool], Awaitable[ProcessingOutcome]]  # (event, woken_up_after_delay)


class BatchingSettings(Protocol):
    batch_window: float
    idle_timeout: float
    exit_timeout: float
    worker_limit: int | None


class Admission(Protocol):
    """Lets each cycle start in turn when too many are already heading for the API (:mod:`kopf._kube.slots`)."""

    def admitted(self, clock: Clock) -> AbstractAsyncContextManager[None]: ...


class Gate(Protocol):
    """
    Which objects this replica may handle now (see :mod:`kopf._replicas.fencing`); without a gate, all.

    Events of objects not admitted are dropped; every processing runs inside
    ``handling(key)``, which yields whether it may run at all.
    """

    def admits(self, key: str) -> bool: ...

    def handling(self, key: str) -> AbstractAsyncContextManager[bool]: ...


def event_key(raw_event: RawEvent) -> str:
    """The key of an event's object (see :func:`~kopf._structs.bodies.object_key`)."""
    return object_key(raw_event.get('object') or {})


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
    """Whether the event shows our own patch or a later state -- or the object is gone, which outdates any patch."""
    return raw_event.get('type') == 'DELETED' or _not_older(_resource_version(raw_event), expected_rv)


def _not_older(version: str | None, expected: str) -> bool:
    """
    Whether an object's version is the expected one, or one known to be later.

    Versions are opaque to clients in general, but those of etcd-backed API
    servers are the decimal numbers of etcd's revisions, which only grow
    (a later write has a greater number). It matters when the
    event of our own patch is lost (a watch that expired and was listed
    anew): the listing's later state is then no reason to wait, nor to be
    dropped. Versions that are not such numbers must match exactly.
    """
    if version is None:
        return False
    if version == expected:
        return True
    return version.isdigit() and expected.isdigit() and int(version) > int(expected)


async def watch_objects(
        *,
        stream: AsyncIterator[RawEvent],
        processor: Processor,
        settings: BatchingSettings,
        gate: Gate | None = None,
        admission: Admission | None = None,
        probe: QueueProbe = NULL_QUEUE,
        clock: Clock = SYSTEM_CLOCK,
        at_rest: Callable[[RawEvent], Awaitable[bool]] | None = None,
) -> None:
    """
    Route every event of a stream to its object's worker until the stream ends.

    ``probe`` observes the queue; every cycle runs inside ``admission`` if given.
    A listed object without a worker gets none if ``at_rest`` says that it
    needs no cycle: asked as it comes, before the next one is read (for the
    objects of a restart, it is cheaper than a worker).
    """
    mailboxes: dict[str, _Mailbox] = {}
    settled: dict[str, str] = {}  # by object: the version of our concluding patch, whose worker has ended
    limiter = asyncio.Semaphore(settings.worker_limit) if settings.worker_limit else None
    repeats = failures.RepeatLimiter()
    backlog = _Backlog()
    try:
        async for raw_event in stream:
            key = event_key(raw_event)
            if key in settled and _settled_by(raw_event, settled, key):
                del raw_event  # our concluding patch, or older: nothing to do (also if another replica's now)
                continue
            if gate is not None and not gate.admits(key):
                del raw_event  # another replica's object
                continue
            if raw_event.get('type') is None and backlog.count >= LISTING_BACKLOG:
                # A listed object, and many listed before it not handled yet: the listing waits (its
                # next page is not requested meanwhile), so that it is never in memory all at once.
                # Watch events are never held up: the server would drop a watch that is not read on.
                await backlog.below(LISTING_BACKLOG // 2)
            mailbox = mailboxes.get(key)
            if mailbox is None or mailbox.task is None or mailbox.task.done():
                if at_rest is not None and raw_event.get('type') is None and await at_rest(raw_event):
                    del raw_event, mailbox
                    continue  # a listed object that needs no cycle: it needs no worker either
                mailbox = mailboxes[key] = _Mailbox(backlog)
                mailbox.task = asyncio.create_task(
                    _worker(key, mailbox=mailbox, processor=processor, settings=settings, limiter=limiter,
                            gate=gate, admission=admission, settled=settled, probe=probe, clock=clock),
                    name=f"kopf worker {key}")
                mailbox.task.add_done_callback(
                    functools.partial(_forget, key, mailbox, mailboxes, describe(raw_event), repeats, probe))
            mailbox.put(raw_event)
            probe.arrived(key, deleted=raw_event.get('type') == 'DELETED')
            del raw_event, mailbox  # while awaiting the next event, only the workers hold objects
    finally:
        await _stop_workers([m.task for m in mailboxes.values() if m.task is not None],
                            timeout=settings.exit_timeout, clock=clock)


class _Mailbox:
    """
    What one object's worker has yet to handle: only the latest event, since
    intermediate states are skipped anyway; and whether the event of our own
    last patch has arrived.

    One per object being handled, so it is kept small: a plain future to wait
    on instead of a queue with its own locks and buffers.
    """

    __slots__ = ('_waiter', 'backlog', 'counted', 'expected_rv', 'handled_rv', 'latest', 'task', 'versions')

    def __init__(self, backlog: _Backlog | None = None) -> None:
        self.backlog = backlog
        self.counted = False  # in the backlog: an event has come that is not handled yet
        self.latest: RawEvent | None = None
        self.expected_rv: str | None = None  # of our own patch, until its event arrives
        self.handled_rv: str | None = None  # of the state handled last
        self.versions: list[str | None] = []  # of the events since the last take, while nothing is expected
        self.task: asyncio.Task[None] | None = None
        self._waiter: asyncio.Future[bool] | None = None

    def put(self, raw_event: RawEvent) -> None:
        if not self.counted and self.backlog is not None:
            self.counted = True
            self.backlog.add(1)
        self.latest = raw_event
        if self.expected_rv is None:
            self.versions.append(_GONE if raw_event.get('type') == 'DELETED' else _resource_version(raw_event))
        elif _is_consistent(raw_event, self.expected_rv):
            self.expected_rv = None
        if self._waiter is not None:
            _resolve(self._waiter, True)

    def take(self) -> RawEvent | None:
        latest = self.latest
        self.discard()
        if latest is not None:
            self.handling(latest)
        return latest

    def settle(self, *, ended: bool = False) -> None:
        """The worker has handled what came (or has ended): out of the backlog unless more has come."""
        if self.counted and (ended or self.latest is None) and self.backlog is not None:
            self.counted = False
            self.backlog.add(-1)

    def discard(self) -> None:
        self.latest = None
        self.versions.clear()

    def handling(self, raw_event: RawEvent) -> None:
        self.handled_rv = _resource_version(raw_event)

    def expect(self, resource_version: str | None) -> None:
        """
        Our patch has left the object at this version: await its event, unless it has already arrived.

        A patch that changed nothing keeps the version of the handled state and
        causes no event. Without a patch, an earlier one may still be awaited.
        A patch that found the object gone awaits its deletion (``_GONE``):
        the events that arrive meanwhile show it before it was gone, e.g.
        with our finalizer still on it, and would run its handlers again.
        """
        if resource_version is not None:
            arrived = (_GONE in self.versions or resource_version == self.handled_rv or
                       any(v is not None and _not_older(v, resource_version) for v in self.versions))
            self.expected_rv = None if arrived else resource_version
        self.versions.clear()

    async def wait(self, timeout: float, clock: Clock) -> None:
        """Sleep until the next event arrives, or the timeout of the clock; the caller looks what has come."""
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiter = waiter
        timer = clock.call_later(timeout, functools.partial(_resolve, waiter, False))
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None


class _Backlog:
    """How many objects have an event that their worker has not handled yet; and a wait until they are few."""

    __slots__ = ('_limit', '_waiter', 'count')

    def __init__(self) -> None:
        self.count = 0
        self._limit = 0
        self._waiter: asyncio.Future[bool] | None = None

    def add(self, delta: int) -> None:
        self.count += delta
        if self._waiter is not None and self.count < self._limit:
            _resolve(self._waiter, True)

    async def below(self, limit: int) -> None:
        """Wait until fewer than ``limit`` objects wait for their workers."""
        if self.count < limit:
            return
        self._limit = limit
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None


def _settled_by(raw_event: RawEvent, settled: dict[str, str], key: str) -> bool:
    """
    Whether the event shows the object as our concluding patch has left it, or older; if not, forget the patch.

    Only numeric versions are left behind (see :func:`_leaves_version`), so
    they compare as numbers; a deletion is always news.
    """
    version = _resource_version(raw_event)
    expected = settled[key]
    if raw_event.get('type') != 'DELETED' and version is not None and version.isdigit():
        if version == expected:
            del settled[key]
            return True
        if int(version) < int(expected):
            return True  # older than our patch: its event is still to come
    del settled[key]
    return False


def _resolve(waiter: asyncio.Future[bool], value: bool) -> None:
    if not waiter.done():
        waiter.set_result(value)


_GONE = '<deleted>'  # in the versions seen: the object is gone, which outdates any patch of ours


def _forget(
        key: str,
        mailbox: _Mailbox,
        mailboxes: dict[str, _Mailbox],
        what: str,
        repeats: failures.RepeatLimiter,
        probe: QueueProbe,
        task: asyncio.Task[None],
) -> None:
    """
    A worker has ended: free its mailbox (unless a new worker has already taken the object over).

    A worker that has failed (which the processor should never let happen) is
    reported naming its object, and the same failure of the same object only
    now and then: the object's next event starts a new worker, which may fail
    the same way.
    """
    if mailboxes.get(key) is mailbox:
        del mailboxes[key]
        probe.forget(key)
    mailbox.settle(ended=True)  # an event left unhandled (e.g. the worker was cancelled) waits no more
    error = None if task.cancelled() else task.exception()
    if error is not None:
        suppressed = repeats.admit((key, *failures.signature(error)))
        if suppressed is not None:
            logger.error("The worker for %s has failed: %s: %s. Its next event starts a new one.%s",
                         what, type(error).__name__, error, failures.repeated(suppressed), exc_info=error)


async def _stop_workers(tasks: list[asyncio.Task[None]], *, timeout: float, clock: Clock) -> None:
    """Let workers finish their current handling, then cancel the rest."""
    if not tasks:
        return
    everything = asyncio.ensure_future(asyncio.wait(tasks))
    timer = clock.call_later(timeout, everything.cancel)
    try:
        await asyncio.wait([everything])
    finally:
        timer.cancel()
        everything.cancel()
    pending = [task for task in tasks if not task.done()]
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


async def _worker(
        key: str,
        *,
        mailbox: _Mailbox,
        processor: Processor,
        settings: BatchingSettings,
        limiter: asyncio.Semaphore | None,
        gate: Gate | None = None,
        settled: dict[str, str],
        admission: Admission | None = None,
        probe: QueueProbe = NULL_QUEUE,
        clock: Clock = SYSTEM_CLOCK,
) -> None:
    """
    Handle one object's events until it is gone, idle for a while, or not ours any more.

    A worker whose patch concludes the handling may end before that patch's
    event arrives, leaving the patch's version in ``settled``.
    """
    delay: float | None = None
    fallback: RawEvent | None = None  # the freshest state known besides the mailbox: our patched object
    concluded: str | None = None  # the version that our concluding patch left: its own event needs no cycle
    while True:
        step = await _next_event(key, mailbox, settings, delay=delay, fallback=fallback, clock=clock)
        if step is None:
            return  # idle: the object will get a new worker with its next event
        raw_event, woken_up = step
        del step
        probe.taken(key, woken_up=woken_up)
        if concluded is not None and not woken_up and _resource_version(raw_event) == concluded and \
                raw_event.get('type') != 'DELETED':
            mailbox.settle()  # exactly the state our patch left, which the processor has found nothing to do in
            return  # nothing is pending: the object's next change gets a new worker
        async with limiter if limiter is not None else contextlib.nullcontext():
            async with gate.handling(key) if gate is not None else contextlib.nullcontext(True) as admitted:
                if not admitted:
                    return  # not ours (any more): its owner handles it
                async with admission.admitted(clock) if admission is not None else contextlib.nullcontext():
                    outcome = await processor(raw_event, woken_up)
        mailbox.settle()
        mailbox.expect(_GONE if outcome.gone else outcome.resource_version)
        if raw_event.get('type') == 'DELETED':
            return
        if _finished(raw_event, outcome, mailbox):
            return  # a listed object with nothing to do (e.g. on a restart): no worker waits for its changes
        if _leaves_version(outcome, mailbox):
            assert outcome.resource_version is not None
            settled[key] = outcome.resource_version
            return  # its events up to our patch are dropped on arrival, later ones get a new worker
        delay = outcome.delay
        concluded = outcome.resource_version if outcome.settled and delay is None else None
        fallback = raw_event if outcome.body is None else {'type': 'MODIFIED', 'object': outcome.body}
        if delay is None and mailbox.expected_rv is None:
            fallback = None  # nothing due: a waiting worker holds nothing of the object
        del raw_event, outcome


def _leaves_version(outcome: ProcessingOutcome, mailbox: _Mailbox) -> bool:
    """
    Whether a worker may end right after its concluding patch, before the patch's event arrives.

    Only if nothing else is due or waiting, and the patch's version is a
    number, so that the events older than it can be told on arrival.
    """
    version = outcome.resource_version
    return (outcome.settled and outcome.delay is None and version is not None and version.isdigit()
            and mailbox.expected_rv == version and mailbox.latest is None)


def _finished(raw_event: RawEvent, outcome: ProcessingOutcome, mailbox: _Mailbox) -> bool:
    """
    Whether a worker may end right after handling a listed object: nothing is due, awaited or waiting.

    A worker otherwise waits for more events of its object for a while
    (``idle_timeout``), which pays off for objects that are changing; a
    listing brings every object, most of which will not change soon.
    """
    return (raw_event.get('type') is None and outcome.delay is None and mailbox.expected_rv is None
            and mailbox.latest is None)


@dataclasses.dataclass(frozen=True)
class _Plan:
    """Until when a worker waits for an event, and what it does if none comes by then."""

    deadline: float  # by the clock's monotonic time
    wakes_up: bool  # whether it is a wake-up after a delay (otherwise: it stops waiting)


def _plan(*, started: float, delay: float | None, awaiting_patch: bool, idle_timeout: float) -> _Plan:
    """
    When a worker that has waited since ``started`` stops waiting for events.

    While our own patch's event is awaited, a due wake-up waits at least for
    the consistency timeout, and the worker gives up on the patch's event
    only after the consistency limit; otherwise, a delay wakes it up, or it
    goes idle after the idle timeout.
    """
    if awaiting_patch:
        give_up = started + CONSISTENCY_LIMIT
        if delay is not None and started + max(delay, CONSISTENCY_TIMEOUT) <= give_up:
            return _Plan(deadline=started + max(delay, CONSISTENCY_TIMEOUT), wakes_up=True)
        return _Plan(deadline=give_up, wakes_up=False)
    if delay is not None:
        return _Plan(deadline=started + delay, wakes_up=True)
    return _Plan(deadline=started + idle_timeout, wakes_up=False)


async def _next_event(
        key: str,
        mailbox: _Mailbox,
        settings: BatchingSettings,
        *,
        delay: float | None,
        fallback: RawEvent | None,
        clock: Clock = SYSTEM_CLOCK,
) -> tuple[RawEvent, bool] | None:
    """
    The next state to handle and whether it is a wake-up after a delay; ``None`` when idle for long.

    While our own patch's event is awaited, the worker does not go idle, and
    the events that arrive meanwhile are older than the patch: they are kept
    back. A wake-up due meanwhile continues from the patched object.
    """
    started = clock.monotonic()
    while mailbox.latest is None or mailbox.expected_rv is not None:
        plan = _plan(started=started, delay=delay, awaiting_patch=mailbox.expected_rv is not None,
                     idle_timeout=settings.idle_timeout)
        remaining = plan.deadline - clock.monotonic()
        if remaining > 0:
            # Look again after any wake-up, also a timeout: an event may have come after the timer fired
            # and before this worker resumed; ending now would leave it in the mailbox, never handled.
            await mailbox.wait(remaining, clock)
            continue
        if not plan.wakes_up and mailbox.expected_rv is None:
            return None  # idle for long
        if not plan.wakes_up:
            logger.warning("The event of our own patch of %s (resourceVersion %s) has not arrived in %ss; "
                           "continuing from the patched object.", key, mailbox.expected_rv, CONSISTENCY_LIMIT)
            mailbox.expected_rv = None
            mailbox.discard()  # the events held back are older than the patch
        if fallback is None:
            return None
        mailbox.handling(fallback)
        return fallback, True
    if mailbox.latest is not None and mailbox.latest.get('type') is not None:
        await clock.sleep(settings.batch_window)  # the events meanwhile replace each other
    # A listed object is taken at once: a listing has one state per object, and while many listed
    # objects wait for their batch window, the listing itself waits (LISTING_BACKLOG).
    raw_event = mailbox.take()
    assert raw_event is not None  # only this worker takes, and it has seen an event
    return raw_event, False
