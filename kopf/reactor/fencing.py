"""
The gate between event routing and handling: which objects this replica may handle now.

Peering (:mod:`kopf.reactor.peering`) decides *what* is permitted; the gate
applies it where events become handling cycles:

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
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from kopf.clients.auth import APIContext
from kopf.reactor.queueing import RawEvent

logger = logging.getLogger('kopf.reactor.fencing')

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
    """What this replica may handle now, and the handling cycles that are running."""

    def __init__(self) -> None:
        self._permit: Permit = nothing
        self._epoch = 0  # grows whenever objects may have become ours: the streams must relist
        self._writable = True
        self._cycles: dict[asyncio.Task[Any], _Cycle] = {}
        self._changed = asyncio.Event()
        self._cycle_ended = asyncio.Event()

    # What queueing asks.

    def admits(self, key: str) -> bool:
        """Whether an event of this object should be routed to a handling worker at all."""
        return self._permit(key)

    @contextlib.asynccontextmanager
    async def handling(self, key: str) -> AsyncIterator[bool]:
        """Run one handling cycle of the object, if it is permitted now; yields whether it is."""
        task = asyncio.current_task()
        if task is None or not self._permit(key):
            yield False
            return
        self._cycles[task] = _Cycle(key=key)
        try:
            yield True
        finally:
            del self._cycles[task]
            self._cycle_ended.set()

    # What the fenced API context asks.

    def check_write(self) -> None:
        """Let the current task write to an object, or raise :class:`FencedError`."""
        task = asyncio.current_task()
        cycle = self._cycles.get(task) if task is not None else None
        if not self._writable or (cycle is not None and cycle.cancelled):
            raise FencedError("This replica may not write to the object any more: it is no longer its owner.")
        if cycle is not None:
            cycle.committing = True

    # What peering tells and asks.

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def active(self) -> bool:
        """Whether anything may be permitted at all; inactive replicas do not even watch."""
        return self._permit is not nothing

    @property
    def cycles(self) -> int:
        return len(self._cycles)

    def permit(self, permit: Permit, *, resync: bool) -> None:
        """
        Permit what is given from now on (new cycles only; running ones are not touched).

        ``resync`` says that objects may have become ours whose events were
        dropped before: the streams restart with a fresh listing.
        """
        was_active = self.active
        self._permit = permit
        if permit is not nothing:
            self._writable = True
        if resync or (self.active and not was_active):
            self._epoch += 1
        self._notify()

    async def drain(self, keep: Permit, *, timeout: float) -> bool:
        """Wait until no cycle runs for an object outside ``keep``; ``False`` if some still run after the timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while any(not keep(cycle.key) for cycle in self._cycles.values()):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            self._cycle_ended.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._cycle_ended.wait(), timeout=remaining)
        return True

    def soften(self) -> int:
        """
        The soft fence: permit nothing; cancel the cycles that have not started writing.

        The committing ones may finish their patch until the hard fence.
        Returns how many cycles were cancelled.
        """
        self.permit(nothing, resync=False)
        cancelled = 0
        for task, cycle in self._cycles.items():
            if not cycle.committing and not cycle.cancelled:
                cycle.cancelled = True
                task.cancel()
                cancelled += 1
        return cancelled

    def harden(self) -> int:
        """The hard fence: permit nothing, cancel every cycle, refuse every write. Returns how many were cut."""
        self.soften()
        self._writable = False
        cut = 0
        for task, cycle in self._cycles.items():
            if not task.done() and cycle.committing and not cycle.cancelled:
                cycle.cancelled = True
                task.cancel()
                cut += 1
                logger.error("The patch of the object %s was being sent when the lease ran out; "
                             "it was cancelled and may be applied partially.", cycle.key)
        return cut

    async def changed(self, epoch: int, active: bool) -> None:
        """Wait until the epoch or the activity differs from the given ones."""
        while self._epoch == epoch and self.active == active:
            self._changed.clear()
            await self._changed.wait()

    def _notify(self) -> None:
        self._changed.set()


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
