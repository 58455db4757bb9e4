"""
The clocks of the client's tests, and waiting for what the network brings about.

The client waits only between attempts (back-offs, throttling) and decides by
time (token files, expiring credentials), all on the clock of its API
context. The ``context`` fixture runs on a time-lapse clock (``lapse``):
every sleep ends at once and moves the clock as far, and is recorded in
``slept``. Tests that need to see the client waiting take the manual clock
(``clock``): ``await clock.until_sleeping()``, look, then ``clock.advance()``.

The network's own limits (an attempt's timeout, a silent stream, idle pooled
connections) are aiohttp's timers on the event loop, not on the clock: tests
of those use short real limits and wait for the outcome (:func:`until`),
never for a fixed time.
"""
import asyncio

import pytest

from tests.unit.conftest import FakeClock

GUARD = 10.0  # seconds: only for a test that would otherwise hang; never reached when the code works


class Clock(FakeClock):
    """A fake clock that records every sleep, and either lapses or lets the test watch the sleepers."""

    def __init__(self, *, lapse: bool = False):
        super().__init__()
        self.lapse = lapse
        self.slept = []  # every sleep asked for, in seconds, in order
        self._sleeping = None  # set when someone starts sleeping, for until_sleeping()

    async def sleep(self, seconds):
        self.slept.append(seconds)
        if self.lapse:
            self.advance(seconds)
            await asyncio.sleep(0)
            return
        if self._sleeping is not None:
            self._sleeping.set()  # the sleeper is registered below, before anyone else runs
        await super().sleep(seconds)

    @property
    def pending(self):
        """How long each of the current sleepers has yet to sleep, in seconds."""
        return [deadline - self.mono for deadline, _, future in self.sleepers if not future.done()]

    async def until_sleeping(self, count=1):
        """Wait until ``count`` sleeps are pending: the code under test waits for the clock, nothing else."""
        async with asyncio.timeout(GUARD):
            while len(self.pending) < count:
                self._sleeping = asyncio.Event()
                await self._sleeping.wait()


@pytest.fixture()
def clock():
    return Clock()


@pytest.fixture()
def lapse():
    return Clock(lapse=True)


@pytest.fixture()
def api_clock(lapse):
    return lapse


async def until(condition, *, guard=GUARD):
    """Wait until the condition holds, checking it at every turn of the event loop (for network outcomes)."""
    async with asyncio.timeout(guard):
        while not condition():  # noqa: ASYNC110 -- no event tells of a closed socket or a request arrived
            await asyncio.sleep(0)
