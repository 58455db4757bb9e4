"""
Stop flags of long-running handlers: what a daemon receives as ``stopped``.

The framework holds a :class:`DaemonStopper` per daemon and sets it, with a
reason, when the daemon must end (its object is deleted, stops matching the
filters, the operator exits, ...). The daemon sees only a checker: truthy once
stopped, with ``is_set()``, ``reason`` and ``wait(timeout)`` -- blocking in
:class:`SyncDaemonStopperChecker` (for daemons in threads), awaitable in
:class:`AsyncDaemonStopperChecker` (for daemons in the event loop). A
daemon that sleeps with ``stopped.wait(60)`` instead of ``time.sleep(60)``
wakes up as soon as it must stop.

The stopper may be set from any thread, and async waiters may live in any
event loop: a daemon must never miss its stop because it waits elsewhere.
When it was stopped and how long an async waiter waits are measured by an
injected clock (the system's by default); a thread's wait is real time.
"""
from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import threading

from kopf._structs.clocks import SYSTEM_CLOCK, Clock


class DaemonStoppingReason(enum.Flag):
    """Why a daemon is asked to stop; several reasons may accumulate."""

    DONE = enum.auto()
    FILTERS_MISMATCH = enum.auto()
    RESOURCE_DELETED = enum.auto()
    OPERATOR_PAUSING = enum.auto()
    OPERATOR_EXITING = enum.auto()
    DAEMON_SIGNALLED = enum.auto()
    DAEMON_CANCELLED = enum.auto()
    DAEMON_ABANDONED = enum.auto()


class DaemonStopper:
    """The framework's side of a stop flag: set it with a reason; daemons get a checker."""

    def __init__(self, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._reason: DaemonStoppingReason | None = None
        self._when: float | None = None
        self._event = threading.Event()
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = set()

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {self._describe()}>"

    def _describe(self) -> str:
        return f"stopped ({self._reason})" if self._reason is not None else "not stopped"

    @property
    def reason(self) -> DaemonStoppingReason | None:
        """Why it was stopped (all reasons so far), or ``None`` while it is not."""
        return self._reason

    @property
    def when(self) -> float | None:
        """When it was first stopped (by the clock's ``monotonic()``), or ``None`` while it is not."""
        return self._when

    def is_set(self, reason: DaemonStoppingReason | None = None) -> bool:
        """Whether it is stopped (for this reason, if one is given)."""
        current = self._reason
        if current is None:
            return False
        return reason is None or bool(current & reason)

    def set(self, reason: DaemonStoppingReason = DaemonStoppingReason.DONE) -> None:
        """Stop, or add a reason to an earlier stop; wakes every waiter in every thread and loop."""
        with self._lock:
            self._reason = reason if self._reason is None else self._reason | reason
            if self._when is None:
                self._when = self._clock.monotonic()
            waiters, self._waiters = self._waiters, set()
        self._event.set()
        for loop, future in waiters:
            with contextlib.suppress(RuntimeError):  # the waiter's loop is closed: nobody waits there
                loop.call_soon_threadsafe(_resolve, future)

    def wait_sync(self, timeout: float | None = None) -> bool:
        """Block until stopped or the timeout is over; whether it is stopped."""
        self._event.wait(timeout)
        return self.is_set()

    async def wait_async(self, timeout: float | None = None) -> bool:
        """Wait in the running loop until stopped or the timeout is over; whether it is stopped."""
        if self.is_set():
            return True
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if self._reason is not None:
                return True
            self._waiters.add((loop, future))
        timer = self._clock.call_later(timeout, functools.partial(_resolve, future)) if timeout is not None else None
        try:
            await asyncio.wait([future])
        finally:
            if timer is not None:
                timer.cancel()
            with self._lock:
                self._waiters.discard((loop, future))
            if not future.done():
                future.cancel()
        return self.is_set()

    @property
    def sync_checker(self) -> SyncDaemonStopperChecker:
        """What a daemon running in a thread receives as ``stopped``."""
        return SyncDaemonStopperChecker(self)

    @property
    def async_checker(self) -> AsyncDaemonStopperChecker:
        """What a daemon running in the event loop receives as ``stopped``."""
        return AsyncDaemonStopperChecker(self)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class DaemonStopped:
    """
    A daemon's view of its stop flag (``kopf.DaemonStopped``): read-only.

    ``while not stopped: ...`` loops until the daemon must stop;
    ``stopped.reason`` says why. The sync and async checkers add ``wait()``.
    """

    def __init__(self, stopper: DaemonStopper) -> None:
        self._stopper = stopper

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {self._stopper._describe()}>"

    def __bool__(self) -> bool:
        return self._stopper.is_set()

    def is_set(self, reason: DaemonStoppingReason | None = None) -> bool:
        """Whether the daemon must stop (for this reason, if one is given)."""
        return self._stopper.is_set(reason)

    @property
    def reason(self) -> DaemonStoppingReason | None:
        """Why the daemon must stop, or ``None`` while it need not."""
        return self._stopper.reason


class SyncDaemonStopperChecker(DaemonStopped):
    """The stop flag of a daemon in a thread: ``stopped.wait(10)`` sleeps, but wakes up on stop."""

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the daemon must stop or the timeout is over; whether it must stop."""
        return self._stopper.wait_sync(timeout)


class AsyncDaemonStopperChecker(DaemonStopped):
    """The stop flag of a daemon in the event loop: ``await stopped.wait(10)`` sleeps, but wakes up on stop."""

    async def wait(self, timeout: float | None = None) -> bool:
        """Wait until the daemon must stop or the timeout is over; whether it must stop."""
        return await self._stopper.wait_async(timeout)
