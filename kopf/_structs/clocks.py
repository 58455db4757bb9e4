"""
The time as the framework sees it: wall-clock time for what is stored, a monotonic clock for durations, and waiting.

Every part that decides by time or waits takes a :class:`Clock` (the real one,
:data:`SYSTEM_CLOCK`, by default), so that tests move a clock of their own
instead of sleeping.
"""
from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Callable
from typing import Protocol


class Timer(Protocol):
    """A call scheduled for later (see :meth:`Clock.call_later`)."""

    def cancel(self) -> None:
        """Do not call it (if it has not been called yet)."""


class Clock(Protocol):
    """The time as the handling cycle sees it."""

    def now(self) -> datetime.datetime:
        """The current time, timezone-aware (UTC): for what is stored and compared with stored times."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back: for measuring durations within one process."""

    async def sleep(self, seconds: float) -> None:
        """Wait for this many seconds of this clock (a test's clock waits until it is moved that far)."""

    def call_later(self, seconds: float, callback: Callable[[], object]) -> Timer:
        """
        Call back in the running event loop after this many seconds of this clock, unless cancelled.

        For what waits on something else and gives up after a while, in great
        numbers (e.g. one per object): a timer is far smaller than a task that sleeps.
        """


class SystemClock:
    """The real clock."""

    def now(self) -> datetime.datetime:
        return datetime.datetime.now(datetime.timezone.utc)

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def call_later(self, seconds: float, callback: Callable[[], object]) -> Timer:
        return asyncio.get_running_loop().call_later(seconds, callback)


SYSTEM_CLOCK: Clock = SystemClock()


async def wait_event(event: asyncio.Event, timeout: float | None, *, clock: Clock = SYSTEM_CLOCK) -> bool:
    """Wait until the event is set or the timeout (of this clock) is over; whether it is set."""
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    timer = clock.call_later(timeout, waiter.cancel) if timeout is not None else None
    try:
        await asyncio.wait([waiter])
    finally:
        if timer is not None:
            timer.cancel()
        waiter.cancel()
    return event.is_set()
