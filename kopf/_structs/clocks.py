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
from typing import Protocol


class Clock(Protocol):
    """The time as the handling cycle sees it."""

    def now(self) -> datetime.datetime:
        """The current time, timezone-aware (UTC): for what is stored and compared with stored times."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back: for measuring durations within one process."""

    async def sleep(self, seconds: float) -> None:
        """Wait for this many seconds of this clock (a test's clock waits until it is moved that far)."""


class SystemClock:
    """The real clock."""

    def now(self) -> datetime.datetime:
        return datetime.datetime.now(datetime.timezone.utc)

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


SYSTEM_CLOCK: Clock = SystemClock()
