"""
What the specifications of daemons and timers share: one object on a simulated server, and a fake clock.

Each event of the object goes through the real handling cycle with the
keeper of daemons as a stage, and the patches of the cycle and of the
daemons are applied to it. Every delay, interval and timeout of the daemons
follows the fake clock, which moves only when a test (or a handler that
"takes time") moves it: the tests never sleep. What runs in the event loop
is waited for by yielding to the loop; what runs in threads (plain
daemons), by waiting for a condition, with a deadline only as a safeguard.
"""
import asyncio
import copy
import datetime
import json
import threading
import time

import pytest

import kopf
from kopf._cycle.cycle import STAGES, handle_object
from kopf._daemons.keeper import Daemons
from kopf._structs.bodies import Body
from kopf._structs.patches import apply
from tests.unit.conftest import SELECTOR, FakeClock

# Turns of the event loop that let everything woken run (for the event loop alone, that is deterministic).
TURNS = 30


async def settle():
    """Let the event loop run what is ready, and what that makes ready, a few times over."""
    for _ in range(TURNS):
        await asyncio.sleep(0)


async def eventually(condition, *, timeout=5.0, what='the condition'):
    """Yield to the loop until the condition holds (threads included); the timeout is only a safeguard."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"Timed out waiting for {what}."
        await asyncio.sleep(0)


class Clock(FakeClock):
    """
    The fake clock of the cycle's tests, safe to move from threads, and telling who waits for it.

    A sleep's deadline counts from the call (a task's first turn may come
    later), and a sleep that ends or is cancelled stops being a sleeper.
    """

    def __init__(self):
        super().__init__()
        self._lock = threading.RLock()

    def sleep(self, seconds):
        return self._sleep_until(self.mono + seconds)

    async def _sleep_until(self, deadline):
        loop = asyncio.get_running_loop()
        entry = (deadline, loop, loop.create_future())
        with self._lock:
            self.sleepers.append(entry)
        self._wake()
        try:
            await entry[2]
        finally:
            with self._lock:
                if entry in self.sleepers:
                    self.sleepers.remove(entry)

    def advance(self, seconds):
        self.advance_to(self.mono + seconds)

    def advance_to(self, moment):
        """Move the clock to this moment exactly (so that a sleeper due then is woken, whatever the rounding)."""
        with self._lock:
            moment = max(moment, self.mono)  # never back, also when a handler's thread has moved it meanwhile
            self.wall += datetime.timedelta(seconds=moment - self.mono)
            self.mono = moment
            self._wake()

    def _wake(self):
        with self._lock:
            super()._wake()

    @property
    def deadlines(self):
        with self._lock:
            return sorted(deadline for deadline, _, _ in self.sleepers)

    @property
    def waits(self):
        """For how long each sleeper still sleeps, shortest first."""
        return [deadline - self.mono for deadline in self.deadlines]

    async def awaited_by(self, count=1):
        """Wait until at least so many tasks wait for the clock."""
        await eventually(lambda: len(self.sleepers) >= count, what=f"{count} sleeper(s) of the clock")

    async def jump(self, count=1):
        """Once so many tasks wait for the clock, move it to the earliest of their deadlines, and let them run."""
        await self.awaited_by(count)
        self.advance_to(self.deadlines[0])
        await settle()

    async def run(self, seconds):
        """Let so many seconds pass as they would: from one sleeper's deadline to the next, the woken run between."""
        end = self.mono + seconds
        for _ in range(10_000):  # a safeguard against sleeps of no time, again and again
            await settle()
            due = [deadline for deadline in self.deadlines if deadline <= end]
            if not due:
                break
            self.advance_to(due[0])
        else:
            raise AssertionError(f"The clock's sleepers sleep again and again without moving it: {self.waits}")
        self.advance_to(end)
        await settle()


async def nap(clock, stopped, seconds):
    """What a test's daemon does to pause: ``seconds`` of the test's clock, or until it is stopped."""
    waits = [asyncio.ensure_future(clock.sleep(seconds)), asyncio.ensure_future(stopped.wait())]
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for wait in waits:
        wait.cancel()


class Cluster:
    """One object on a simulated server, its events handled by the cycle with the daemons' keeper."""

    def __init__(self, raw, *, registry, config, clock):
        self.raw = copy.deepcopy(raw)
        self.registry = registry
        self.config = config
        self.clock = clock
        self.keeper = Daemons(patcher=self._patch, clock=clock)
        self.daemon_patches = []
        self.gone = False

    async def _patch(self, body, patch, logger):
        assert body.metadata.uid == self.raw['metadata']['uid']
        self.daemon_patches.append(json.loads(json.dumps(patch)))
        self._apply(patch)

    def _apply(self, patch):
        self.raw = apply(self.raw, json.loads(json.dumps(patch)))
        self.raw['metadata']['resourceVersion'] = str(int(self.raw['metadata']['resourceVersion']) + 1)
        if self.raw['metadata'].get('deletionTimestamp') and not self.raw['metadata'].get('finalizers'):
            self.gone = True

    async def event(self, event_type='MODIFIED', *, first_seen=False):
        """One watch event of the object as it is now; the cycle's patch is applied."""
        result = await handle_object(
            registry=self.registry, config=self.config, resource=SELECTOR, event_type=event_type,
            body=Body(copy.deepcopy(self.raw)), first_seen=first_seen, memo=kopf.Memo(),
            logger=kopf.LocalObjectLogger(body=self.raw), clock=self.clock, stages=[*STAGES, self.keeper])
        if result.patch:
            self._apply(result.patch)
        return result

    async def change(self, patch):
        """A user's change, and its event."""
        self._apply(patch)
        return await self.event()

    async def delete(self):
        """The user deletes the object: marked for deletion, and its event."""
        self._apply({'metadata': {'deletionTimestamp': '2020-01-01T00:00:00Z'}})
        return await self.event()

    async def settle_deletion(self, *, timeout=5.0):
        """Handle the object's events (the clock moving as the cycle asks) until it is gone; the number of cycles."""
        cycles = 0
        deadline = time.monotonic() + timeout
        while not self.gone:
            assert time.monotonic() < deadline, f"Not deleted in {timeout}s: {self.raw}"
            result = await self.event()
            cycles += 1
            if not self.gone and result.delay:
                await self.clock.run(result.delay)
        await self.event('DELETED')
        return cycles

    async def close(self, *, timeout):
        """The operator's exit: the keeper closes, the clock moving as it waits; how long that took on the clock."""
        began = self.clock.monotonic()

        async def close():
            await self.keeper.close(timeout=timeout)
            return self.clock.monotonic() - began

        closing = asyncio.create_task(close())
        deadline = time.monotonic() + 5.0
        while not closing.done():
            assert time.monotonic() < deadline, "The keeper has not closed."
            await self.clock.run(0.05)
        return await closing


@pytest.fixture()
def clock():
    return Clock()


@pytest.fixture()
def cluster(raw, registry, config, clock):
    # The cycle waits for daemons to exit at once only for turns of the loop: by a clock that stands, its wait
    # would last until they exit (test_keeper.py shows the wait by the clock).
    config.background.instant_exit_timeout = None
    return Cluster(raw, registry=registry, config=config, clock=clock)


@pytest.fixture(autouse=True)
async def no_leftovers(cluster):
    yield
    await cluster.close(timeout=0.3)
