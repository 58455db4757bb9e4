import asyncio
import threading
import time

import pytest

import kopf
from kopf._structs.stoppers import (
    AsyncDaemonStopperChecker,
    DaemonStopped,
    DaemonStopper,
    DaemonStoppingReason,
    SyncDaemonStopperChecker,
)
from tests.unit.conftest import idle, until


def test_a_new_stopper_is_not_stopped():
    stopper = DaemonStopper()
    checker = stopper.sync_checker
    assert not checker
    assert not checker.is_set()
    assert checker.reason is None
    assert stopper.when is None


def test_stopping_is_seen_by_every_checker_with_its_reason():
    stopper = DaemonStopper()
    sync, async_ = stopper.sync_checker, stopper.async_checker
    stopper.set(DaemonStoppingReason.RESOURCE_DELETED)
    for checker in (sync, async_):
        assert checker
        assert checker.is_set()
        assert checker.is_set(DaemonStoppingReason.RESOURCE_DELETED)
        assert not checker.is_set(DaemonStoppingReason.OPERATOR_EXITING)
        assert checker.reason == DaemonStoppingReason.RESOURCE_DELETED
    assert stopper.when is not None


def test_reasons_accumulate_and_the_first_stop_time_stays(clock):
    stopper = DaemonStopper(clock=clock)
    stopper.set(DaemonStoppingReason.FILTERS_MISMATCH)
    first = stopper.when
    clock.advance(5)
    stopper.set(DaemonStoppingReason.OPERATOR_EXITING)
    assert stopper.reason == DaemonStoppingReason.FILTERS_MISMATCH | DaemonStoppingReason.OPERATOR_EXITING
    assert stopper.when == first == clock.monotonic() - 5


def test_checkers_are_the_public_types():
    stopper = DaemonStopper()
    assert isinstance(stopper.sync_checker, kopf.SyncDaemonStopperChecker)
    assert isinstance(stopper.async_checker, kopf.AsyncDaemonStopperChecker)
    assert isinstance(stopper.sync_checker, kopf.DaemonStopped)
    assert isinstance(stopper.async_checker, kopf.DaemonStopped)
    assert kopf.DaemonStoppingReason is DaemonStoppingReason


def test_reasons_are_those_of_kopf():
    assert [reason.name for reason in DaemonStoppingReason] == [
        'DONE', 'FILTERS_MISMATCH', 'RESOURCE_DELETED', 'OPERATOR_PAUSING', 'OPERATOR_EXITING',
        'DAEMON_SIGNALLED', 'DAEMON_CANCELLED', 'DAEMON_ABANDONED']


def test_sync_wait_times_out_when_not_stopped():
    checker = DaemonStopper().sync_checker
    started = time.monotonic()
    assert checker.wait(0.05) is False
    assert time.monotonic() - started >= 0.05


def waiting_in_threads(stopper):
    """Whether a thread is blocked in the stopper's wait (its event has a waiter)."""
    return bool(stopper._event._cond._waiters)


def in_another_thread(fn):
    results = []
    thread = threading.Thread(target=lambda: results.append(fn()))
    thread.start()
    return thread, results


def until_in_threads(condition, *, timeout=10.0):
    """Let other threads run until the condition holds; the timeout only turns a hang into a failure."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "The condition never came true."
        time.sleep(0)


def test_sync_wait_wakes_up_when_stopped_from_another_thread():
    stopper = DaemonStopper()
    thread, results = in_another_thread(lambda: stopper.sync_checker.wait(10))
    until_in_threads(lambda: waiting_in_threads(stopper))
    started = time.monotonic()
    stopper.set()
    thread.join(timeout=5)
    assert results == [True]
    assert time.monotonic() - started < 5


async def until_waiting(stopper):
    """Until an async waiter has registered itself with the stopper."""
    await until(lambda: stopper._waiters)


async def test_async_wait_times_out_when_not_stopped(clock):
    checker = DaemonStopper(clock=clock).async_checker
    waiting = asyncio.create_task(checker.wait(0.5))
    await until(lambda: clock.next_deadline is not None)
    clock.advance(0.25)
    await idle()
    assert not waiting.done()
    clock.advance(0.25)
    assert await asyncio.wait_for(waiting, timeout=5) is False


async def test_async_wait_returns_at_once_when_already_stopped():
    stopper = DaemonStopper()
    stopper.set()
    assert await stopper.async_checker.wait() is True


async def test_async_wait_wakes_up_when_stopped_in_the_loop():
    stopper = DaemonStopper()
    waiting = asyncio.create_task(stopper.async_checker.wait())
    await until_waiting(stopper)
    stopper.set()
    assert await asyncio.wait_for(waiting, timeout=5) is True


async def test_async_wait_wakes_up_when_stopped_from_a_thread():
    stopper = DaemonStopper()
    waiting = asyncio.create_task(stopper.async_checker.wait(10))
    await until_waiting(stopper)
    thread, _ = in_another_thread(lambda: stopper.set(DaemonStoppingReason.OPERATOR_EXITING))
    assert await asyncio.wait_for(waiting, timeout=5) is True
    thread.join(timeout=5)
    assert stopper.reason == DaemonStoppingReason.OPERATOR_EXITING


async def test_a_cancelled_async_wait_leaves_no_waiter_behind():
    stopper = DaemonStopper()
    task = asyncio.create_task(stopper.async_checker.wait())
    await until_waiting(stopper)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not stopper._waiters
    stopper.set()  # nothing to wake, nothing breaks


def test_a_waiter_in_another_loop_is_woken_too():
    stopper = DaemonStopper()
    results = []

    def other_loop():
        results.append(asyncio.run(stopper.async_checker.wait(10)))

    thread = threading.Thread(target=other_loop)
    thread.start()
    until_in_threads(lambda: stopper._waiters)
    stopper.set()
    thread.join(timeout=5)
    assert results == [True]


def test_the_checkers_are_read_only_views():
    checker = DaemonStopper().sync_checker
    assert not hasattr(checker, 'set')
    assert type(checker).__mro__[1] is DaemonStopped
    assert issubclass(AsyncDaemonStopperChecker, DaemonStopped)
    assert issubclass(SyncDaemonStopperChecker, DaemonStopped)


def test_repr_says_whether_and_why_stopped():
    stopper = DaemonStopper()
    assert 'not stopped' in repr(stopper.sync_checker)
    stopper.set(DaemonStoppingReason.DONE)
    assert 'DONE' in repr(stopper.async_checker)
