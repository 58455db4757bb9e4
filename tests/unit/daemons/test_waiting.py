"""Waiting for something or for a time, whichever comes first: the time is the clock's, moved by the tests."""
import asyncio

from kopf._daemons.waiting import ended_within, first, stopped_within
from kopf._structs.stoppers import DaemonStopper
from tests.unit.daemons.conftest import settle


async def test_a_stop_ends_the_wait_before_the_time_and_leaves_no_sleeper(clock):
    stopper = DaemonStopper()
    waiting = asyncio.create_task(stopped_within(stopper, clock, 10))
    await clock.awaited_by(1)
    assert clock.waits == [10]
    stopper.set()
    assert await waiting
    await settle()
    assert clock.waits == []


async def test_the_time_ends_the_wait_when_the_clock_has_moved_that_far(clock):
    stopper = DaemonStopper()
    waiting = asyncio.create_task(stopped_within(stopper, clock, 10))
    await clock.awaited_by(1)
    clock.advance(9.9)
    await settle()
    assert not waiting.done()
    clock.advance(0.1)
    assert not await waiting


async def test_a_stopped_or_zero_wait_does_not_involve_the_clock(clock):
    stopper = DaemonStopper()
    assert not await stopped_within(stopper, clock, 0)
    assert not await stopped_within(stopper, clock, -1)
    stopper.set()
    assert await stopped_within(stopper, clock, 10)
    assert clock.sleepers == []


async def test_tasks_are_waited_for_until_the_time_and_never_cancelled(clock):
    release = asyncio.Event()
    task = asyncio.create_task(release.wait())
    waiting = asyncio.create_task(ended_within([task], clock, 5))
    await clock.awaited_by(1)
    clock.advance(5)
    assert not await waiting
    assert not task.cancelled() and not task.done()
    waiting = asyncio.create_task(ended_within([task], clock, None))  # without a limit
    await settle()
    assert clock.sleepers == []
    release.set()
    assert await waiting
    assert await ended_within([task], clock, 0)  # ended already: at once


async def test_the_first_of_the_waits_ends_the_others(clock):
    event = asyncio.Event()
    stopper = DaemonStopper()
    waiting = asyncio.create_task(first(clock, 3, event.wait(), stopper.wait_async()))
    await clock.awaited_by(1)
    event.set()
    await waiting
    await settle()
    assert clock.sleepers == []
    stopper.set()  # nobody waits for it any more: nothing to wake
