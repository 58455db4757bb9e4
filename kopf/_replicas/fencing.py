"""
The gate between event routing and handling: which objects this replica may handle now.

The decisions (:mod:`.election`, :mod:`.sharding`) say *what* is permitted and
the deadlines (:mod:`.deadlines`) until when; the gate applies both where
events become handling cycles:

* Events of objects that are not permitted are dropped as they arrive, and
  a cycle starts only if its object is permitted at that very moment.
* The gate knows every running cycle, so that peering can wait for the
  cycles of objects moving away to finish (a voluntary hand-over never
  interrupts a handler) and can cancel them when the Lease is being lost.
* Object writes go through :class:`FencedAPIContext`: a cycle that has
  started sending its patch is never cancelled half-way by the soft fence,
  and after the hard fence no write is sent at all.
* :func:`gated_stream` restarts the watch streams (a fresh listing) when new
  objects may have become ours, since their events were dropped before;
  while nothing is permitted (a standby), nothing is watched.
* Daemons and timers outlive the cycles that start them, so they are known to
  the gate as *residents* of their objects (:meth:`Gate.reside`): a hand-over
  waits for them as for the cycles (:meth:`Gate.drain`), and their keepers
  (:mod:`kopf._daemons.keeper`) learn of every change of the permit or the
  deadlines at once (:meth:`Gate.revised`), to stop the daemons of the
  objects that are not permitted any more -- and to cancel them at the hard
  fence, after which the next owner may start them as soon as the Lease expires.

What cancellation costs at each await point of a cycle:

* before or between handlers (reading storages, waiting for the executor):
  nothing -- no progress of this cycle was written, the next owner repeats
  the cycle from the object's persisted state;
* inside an ``async`` handler: the handler gets ``CancelledError`` at its
  current ``await``, as on a timeout; its attempt is not recorded, so it is
  attempted again by the next owner (at-least-once, never after a persisted
  success);
* inside a synchronous handler: its thread cannot be interrupted; the cycle
  stops waiting for it and its result is discarded, but the function runs
  to its end -- the only case in which it may overlap with the next owner's
  call, if it outlives the margin between the renew deadline and the Lease
  expiry;
* while sending the patch: never by the soft fence (the cycle is
  "committing" from its first write on); at the hard fence, a patch still
  being sent is cancelled, which is logged as an error because its parts
  (object and ``/status``) may be applied partially.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import math
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from kopf._kube.auth import APIContext
from kopf._structs.clocks import SYSTEM_CLOCK, Clock
from kopf._structs.typedefs import RawEvent

logger = logging.getLogger('kopf._replicas.fencing')

Permit = Callable[[str], bool]  # by object key (the uid)

SAFE_METHODS = frozenset({'GET', 'HEAD', 'OPTIONS'})


def nothing(key: str) -> bool:
    return False


def everything(key: str) -> bool:
    return True


class FencedError(asyncio.CancelledError):
    """
    A write refused because this replica may not handle the object any more.

    It ends the cycle exactly as a cancellation does, so that no ``except
    Exception`` on the way (the framework's or a handler's) takes it for a
    failure to report or retry.
    """


@dataclasses.dataclass
class _Cycle:
    """One running handling cycle, as the gate sees it."""

    key: str
    committing: bool = False  # it has sent (part of) its patch: finish it rather than cut it
    cancelled: bool = False


class Gate:
    """
    What this replica may handle now, until when, and the handling cycles that are running.

    The Lease loop calls it from its own thread (see :mod:`kopf._replicas.peering`):
    the state changes under a lock, and the operator's event loop learns of
    them through thread-safe calls. The deadlines are checked by the clock at
    every admission and every write, so they hold even if the event loop is
    too busy to run the timers that cancel the cycles in time.
    """

    def __init__(self, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._loop = asyncio.get_running_loop()  # the handling's loop
        self._clock = clock
        self._lock = threading.Lock()
        self._permit: Permit = nothing
        self._admit_until = -math.inf  # monotonic time: no new cycles from then on
        self._write_until = -math.inf  # monotonic time: no writes from then on
        self._epoch = 0  # grows whenever objects may have become ours: the streams must relist
        self._was_active = False
        self._cycles: dict[asyncio.Task[Any], _Cycle] = {}
        self._residents: dict[int, str] = {}  # daemons and timers, by a token: the key of their object
        self._tokens = itertools.count(1)
        self._revision = 0  # grows with every change of the permit or the deadlines
        self._changed = asyncio.Event()
        self._drainers: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []  # woken at a departure

    # What queueing asks.

    def admits(self, key: str) -> bool:
        """Whether an event of this object should be routed to a handling worker at all."""
        return self._clock.monotonic() < self._admit_until and self._permit(key)

    @contextlib.asynccontextmanager
    async def handling(self, key: str) -> AsyncIterator[bool]:
        """Run one handling cycle of the object, if it is permitted now; yields whether it is."""
        task = asyncio.current_task()
        with self._lock:
            admitted = task is not None and self.admits(key)
            if task is not None and admitted:
                self._cycles[task] = _Cycle(key=key)
        if task is None or not admitted:
            yield False
            return
        try:
            yield True
        finally:
            with self._lock:
                del self._cycles[task]
                self._wake_drainers()

    # What the fenced API context asks.

    def check_write(self) -> None:
        """Let the current task write to an object, or raise :class:`FencedError`."""
        task = asyncio.current_task()
        with self._lock:
            cycle = self._cycles.get(task) if task is not None else None
            if self._clock.monotonic() >= self._write_until or (cycle is not None and cycle.cancelled):
                raise FencedError("This replica may not write to the object any more: it is no longer its owner.")
            if cycle is not None:
                cycle.committing = True

    # What peering tells and asks.

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def active(self) -> bool:
        """Whether anything may be handled at all now; inactive replicas do not even watch."""
        return self._permit is not nothing and self._clock.monotonic() < self._admit_until

    @property
    def writable(self) -> bool:
        """Whether the hard fence has not struck: daemons may go on; after it, they are cancelled."""
        return self._clock.monotonic() < self._write_until

    @property
    def cycles(self) -> int:
        with self._lock:
            return len(self._cycles)

    @property
    def residents(self) -> int:
        """How many daemons and timers (of any objects) the gate knows to be running."""
        with self._lock:
            return len(self._residents)

    # What the keepers of daemons and timers tell and ask.

    def reside(self, key: str) -> int:
        """A daemon or timer of the object has started; a hand-over of the object waits until it departs."""
        with self._lock:
            token = next(self._tokens)
            self._residents[token] = key
            return token

    def depart(self, token: int) -> None:
        """The daemon or timer has exited (or was given up on); idempotent."""
        with self._lock:
            if self._residents.pop(token, None) is not None:
                self._wake_drainers()

    @property
    def revision(self) -> int:
        return self._revision

    async def revised(self, revision: int) -> None:
        """Wait until the permit or the deadlines change after the given revision (in the handling's loop)."""
        while self._revision == revision:
            self._changed.clear()
            await self._changed.wait()

    def permit(self, permit: Permit, *, resync: bool) -> None:
        """
        Permit what is given from now on (new cycles only; running ones are not touched).

        ``resync`` says that objects may have become ours whose events were
        dropped before: the streams restart with a fresh listing.
        """
        with self._lock:
            self._permit = permit
            self._update(resync=resync)

    def extend(self, *, admit_until: float, write_until: float) -> None:
        """Allow new cycles and writes until these (monotonic) times: the Lease has been renewed."""
        with self._lock:
            lapsed = self._clock.monotonic() >= self._admit_until  # events may have been dropped meanwhile
            self._admit_until = admit_until
            self._write_until = write_until
            self._update(resync=lapsed)

    def busy(self, keep: Permit) -> bool:
        """Whether a cycle, a daemon or a timer runs for an object outside ``keep``."""
        with self._lock:
            return self._busy(keep)

    def _busy(self, keep: Permit) -> bool:
        return (any(not keep(cycle.key) for cycle in self._cycles.values()) or
                any(not keep(key) for key in self._residents.values()))

    async def drain(self, keep: Permit, *, timeout: float) -> bool:
        """
        Wait until nothing runs for an object outside ``keep``; ``False`` if something does after the timeout.

        "Nothing" means no handling cycle, and no daemon or timer: their
        keepers stop them as soon as the permit excludes their objects, and
        a hand-over (the caller) is acknowledged only once they have exited.
        It looks again at every departure, in whichever loop the caller
        waits (the Lease loop's or the handling's); the timeout is by the
        gate's clock.
        """
        loop = asyncio.get_running_loop()
        deadline = self._clock.monotonic() + timeout
        while True:
            with self._lock:
                if not self._busy(keep):
                    return True
                remaining = deadline - self._clock.monotonic()
                if remaining <= 0:
                    return False
                departed: asyncio.Future[None] = loop.create_future()
                self._drainers.append((loop, departed))
            try:
                await _first(departed, self._clock.sleep(remaining))
            finally:
                with self._lock, contextlib.suppress(ValueError):
                    self._drainers.remove((loop, departed))

    def soften(self) -> int:
        """
        The soft fence: no new cycles; cancel the running ones that have not started writing.

        The committing ones may finish their patch until the hard fence.
        Returns how many cycles are cancelled.
        """
        with self._lock:
            self._admit_until = min(self._admit_until, self._clock.monotonic())
            tasks = [task for task, _ in self._mark_cancelled(committing=False)]
            self._update(resync=False)
        self._loop.call_soon_threadsafe(_cancel, tasks)
        return len(tasks)

    def harden(self) -> int:
        """The hard fence: no new cycles, no writes, every cycle cancelled. Returns how many patches were cut."""
        with self._lock:
            now = self._clock.monotonic()
            self._admit_until = min(self._admit_until, now)
            self._write_until = min(self._write_until, now)
            tasks = [task for task, _ in self._mark_cancelled(committing=False)]
            cut = self._mark_cancelled(committing=True)
            self._update(resync=False)
        for _, key in cut:
            logger.error("The patch of the object %s was being sent when the lease ran out; "
                         "it is cancelled and may be applied partially.", key)
        self._loop.call_soon_threadsafe(_cancel, tasks + [task for task, _ in cut])
        return len(cut)

    async def changed(self, epoch: int, active: bool) -> None:
        """Wait until the epoch or the activity differs from the given ones (in the handling's loop)."""
        while self._epoch == epoch and self.active == active:
            self._changed.clear()
            await self._changed.wait()

    def _mark_cancelled(self, *, committing: bool) -> list[tuple[asyncio.Task[Any], str]]:
        marked = []
        for task, cycle in self._cycles.items():
            if cycle.committing == committing and not cycle.cancelled:
                cycle.cancelled = True
                marked.append((task, cycle.key))
        return marked

    def _wake_drainers(self) -> None:
        """Something has departed (under the lock): the drains look again."""
        drainers, self._drainers = self._drainers, []
        for loop, departed in drainers:
            if not loop.is_closed():
                loop.call_soon_threadsafe(_settle, departed)

    def _update(self, *, resync: bool) -> None:
        """After a change (under the lock): a new epoch if objects may have become ours; tell the streams."""
        active = self.active
        if resync or (active and not self._was_active):
            self._epoch += 1
        self._was_active = active
        self._revision += 1
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._changed.set)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _cancel(tasks: list[asyncio.Task[Any]]) -> None:
    for task in tasks:
        task.cancel()


class FencedAPIContext(APIContext):
    """
    The operator's API context, for handling cycles: the same session, but writes pass the gate.

    It shares everything with the given context (session, credentials,
    retries), and only checks with the gate before every request that can
    change something.
    """

    def __init__(self, context: APIContext, gate: Gate) -> None:
        # No super().__init__(): everything but writes is the inner context's, incl. its only session.
        self._fenced_inner = context
        self._fenced_gate = gate

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fenced_inner, name)

    async def request(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if method.upper() not in SAFE_METHODS:
            self._fenced_gate.check_write()
        return await self._fenced_inner.request(method, *args, **kwargs)

    def stream(self, *args: Any, **kwargs: Any) -> Any:
        return self._fenced_inner.stream(*args, **kwargs)

    async def open(self) -> None:
        """The inner context's owner opens and closes the session."""

    async def close(self) -> None:
        """The inner context's owner opens and closes the session."""


StreamFactory = Callable[[asyncio.Event], AsyncIterator[RawEvent]]  # opens a stream that ends when the event is set


async def gated_stream(gate: Gate, open_stream: StreamFactory, *, stop: asyncio.Event) -> AsyncIterator[RawEvent]:
    """
    The events of a watch while the gate is active; a new listing whenever objects may have become ours.

    The previous stream is closed before the next one lists, so no stale
    event of an older stream can follow the fresher listing.
    """
    while not stop.is_set():
        epoch, active = gate.epoch, gate.active
        if not active:
            await _first(gate.changed(epoch, active), stop.wait())
            continue
        if epoch > 1:
            logger.debug("Listing the objects anew: some may have become ours.")
        interrupt = asyncio.Event()
        watcher = asyncio.create_task(_interrupt_on_change(gate, epoch, stop, interrupt))
        try:
            async for event in open_stream(interrupt):
                yield event
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)


async def _interrupt_on_change(gate: Gate, epoch: int, stop: asyncio.Event, interrupt: asyncio.Event) -> None:
    await _first(gate.changed(epoch, True), stop.wait())
    interrupt.set()


async def _first(*coros: Any) -> None:
    """Wait until the first of the coroutines is done; cancel the others."""
    tasks = [asyncio.ensure_future(coro) for coro in coros]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
