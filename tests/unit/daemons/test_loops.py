"""
The loops of daemons and timers, as a specification: initial delays, retries, intervals, idling -- by the clock.
"""
import itertools
import logging
import threading

import pytest

import kopf
from tests.unit.conftest import RESOURCE
from tests.unit.daemons.conftest import eventually, settle

# The start.

async def test_initial_delay_postpones_the_start_and_a_stop_meanwhile_cancels_it(cluster, registry, clock):
    starts = []

    @kopf.daemon(*RESOURCE, registry=registry, initial_delay=0.3)
    async def late(stopped, **_):
        starts.append(clock.monotonic())
        await stopped.wait()

    @kopf.daemon(*RESOURCE, registry=registry, initial_delay=lambda spec, **_: 10 if spec['field'] == 'x' else 0)
    async def never(stopped, **_):
        starts.append('never')

    began = clock.monotonic()
    await cluster.event('ADDED')
    await clock.awaited_by(2)
    assert clock.waits == [pytest.approx(0.3), pytest.approx(10)]  # the callable's delay is of the object's spec
    assert starts == []
    await clock.run(0.3)
    assert starts and starts[0] - began == pytest.approx(0.3)  # not earlier, and not later either
    await cluster.event('DELETED')
    await eventually(lambda: cluster.keeper.running == 0)
    await clock.run(10)
    assert 'never' not in starts


# Daemons.

async def test_a_daemon_that_raises_is_retried_with_its_backoff_and_logged_once_per_attempt(
        cluster, registry, clock, caplog):
    attempts = []

    @kopf.daemon(*RESOURCE, registry=registry, id='failing', backoff=0.1, retries=3)
    def failing(retry, **_):
        attempts.append((retry, clock.monotonic()))
        raise ValueError(f"boom {retry}")

    with caplog.at_level(logging.INFO, logger='kopf.objects'):
        await cluster.event('ADDED')
        await clock.jump()  # after the back-off of the first attempt (in a thread): the second
        await clock.jump()
        await eventually(lambda: cluster.keeper.running == 0, what="the third attempt, the last")

    assert [retry for retry, _ in attempts] == [0, 1, 2]
    assert all(b - a >= 0.09 for (_, a), (_, b) in itertools.pairwise(attempts))
    assert [b - a for (_, a), (_, b) in itertools.pairwise(attempts)] == [pytest.approx(0.1)] * 2
    failures = [r for r in caplog.records if 'failed with an exception' in r.getMessage()]
    assert len(failures) == 3
    assert all("Daemon 'failing'" in r.getMessage() and r.k8s_ref['name'] == 'ex1' for r in failures)
    assert failures[0].exc_info is not None
    assert any('used up its 3 attempt(s)' in r.getMessage() for r in caplog.records)
    await cluster.event()
    assert cluster.keeper.running == 0
    await clock.run(0.2)
    assert len(attempts) == 3  # failed for good: not started again for this object


async def test_a_daemon_without_a_backoff_is_retried_after_the_default_backoff(cluster, registry, config, clock):
    attempts = []
    config.execution.default_backoff = 0.1

    @kopf.daemon(*RESOURCE, registry=registry, id='failing', retries=2)
    def failing(retry, **_):
        attempts.append(clock.monotonic())
        raise ValueError(f"boom {retry}")

    await cluster.event('ADDED')
    await clock.awaited_by()
    assert clock.waits == [pytest.approx(0.1)]  # not 60 s: the setting decides
    await clock.jump()
    await eventually(lambda: len(attempts) == 2)

    assert attempts[1] - attempts[0] >= 0.09


async def test_a_temporary_error_restarts_the_daemon_after_its_delay(cluster, registry, clock):
    attempts = []

    @kopf.daemon(*RESOURCE, registry=registry)
    async def restarting(retry, stopped, **_):
        attempts.append((retry, clock.monotonic()))
        if retry < 2:
            raise kopf.TemporaryError("again", delay=0.05)
        await stopped.wait()

    began = clock.monotonic()
    await cluster.event('ADDED')
    await clock.run(0.1)
    assert [retry for retry, _ in attempts] == [0, 1, 2]
    assert [when - began for _, when in attempts] == [0, pytest.approx(0.05), pytest.approx(0.1)]


# Timers.

async def test_a_timer_is_called_every_interval_and_its_patches_are_applied(cluster, registry, clock):
    ticks = []

    @kopf.timer(*RESOURCE, registry=registry, id='ping', interval=0.05)
    def ping(patch, retry, stopped, **_):
        ticks.append(retry)
        patch.metadata.annotations['ticks'] = str(len(ticks))
        return len(ticks)

    await cluster.event('ADDED')
    for _ in range(2):  # the calls run in threads: the interval waits only once each has ended
        await clock.awaited_by()
        assert clock.waits == [pytest.approx(0.05)]
        await clock.jump()
    await eventually(lambda: len(ticks) >= 3)
    await eventually(lambda: int(cluster.raw['metadata']['annotations']['ticks']) >= 3)
    assert set(ticks) == {0}
    assert cluster.raw['status']['ping'] >= 3


async def test_a_timer_slower_than_its_interval_never_runs_twice_at_once(cluster, registry, clock):
    active = []
    overlaps = []
    calls = []

    @kopf.timer(*RESOURCE, registry=registry, interval=0.01, sharp=True)
    def slow_sync(**_):
        active.append(1)
        overlaps.append(len(active))
        clock.advance(0.05)  # it takes this long, in its thread; the interval is over meanwhile
        calls.append('sync')
        active.pop()

    @kopf.timer(*RESOURCE, registry=registry, interval=0.01)
    async def slow_async(**_):
        calls.append('async start')
        await clock.sleep(0.05)
        calls.append('async end')

    await cluster.event('ADDED')
    await eventually(lambda: calls.count('sync') >= 4 and calls.count('async end') >= 4)
    await cluster.event('DELETED')
    await eventually(lambda: cluster.keeper.running == 0)
    assert max(overlaps) == 1
    sequence = [c for c in calls if c.startswith('async')]
    assert all(a != b for a, b in itertools.pairwise(sequence))  # start, end, start, end, ...


async def test_a_timer_that_stops_matching_mid_call_is_not_started_again_until_that_call_ends(cluster, registry):
    active = []
    overlaps = []
    finish = threading.Event()

    @kopf.timer(*RESOURCE, registry=registry, interval=0.01, labels={'on': 'yes'})
    def slow(**_):
        active.append(1)
        overlaps.append(len(active))
        finish.wait(30)  # a long call
        active.pop()

    await cluster.change({'metadata': {'labels': {'on': 'yes'}}})
    await eventually(lambda: active)
    await cluster.change({'metadata': {'labels': {'on': 'no'}}})
    await cluster.change({'metadata': {'labels': {'on': 'yes'}}})  # while the call still runs
    assert cluster.keeper.running == 1
    finish.set()
    await eventually(lambda: not active)
    await eventually(lambda: cluster.keeper.running == 0, what="the stopped timer's end")
    await cluster.event()  # the next event after the call has ended starts it again
    await eventually(lambda: len(overlaps) >= 2)
    assert max(overlaps) == 1


async def test_a_sharp_timer_counts_its_interval_from_the_start_of_the_previous_call(cluster, registry, clock):
    starts = {'sharp': [], 'plain': []}

    @kopf.timer(*RESOURCE, registry=registry, interval=0.2, sharp=True)
    async def sharp(**_):
        starts['sharp'].append(clock.monotonic())
        await clock.sleep(0.1)

    @kopf.timer(*RESOURCE, registry=registry, interval=0.2)
    async def plain(**_):
        starts['plain'].append(clock.monotonic())
        await clock.sleep(0.1)

    await cluster.event('ADDED')
    await clock.run(1.0)
    assert len(starts['sharp']) >= 4 and len(starts['plain']) >= 4
    sharp_gap = (starts['sharp'][3] - starts['sharp'][0]) / 3
    plain_gap = (starts['plain'][3] - starts['plain'][0]) / 3
    assert sharp_gap >= 0.19 and plain_gap >= 0.29
    assert plain_gap - sharp_gap >= 0.05  # the call's own 0.1s is not added to a sharp interval
    assert sharp_gap == pytest.approx(0.2) and plain_gap == pytest.approx(0.3)


async def test_an_idle_timer_waits_until_the_object_has_not_changed_for_a_while(cluster, registry, clock):
    ticks = []

    @kopf.timer(*RESOURCE, registry=registry, idle=0.3)
    async def quiet(**_):
        ticks.append(clock.monotonic())

    await cluster.event('ADDED')
    for index in range(8):  # changes every 0.05s keep it waiting
        await clock.run(0.05)
        await cluster.change({'spec': {'other': index}})
    last_change = clock.monotonic()
    assert ticks == []
    await clock.run(0.3)
    assert ticks
    assert ticks[0] - last_change >= 0.29
    assert ticks[0] - last_change == pytest.approx(0.3)
    await clock.run(0.4)
    assert len(ticks) == 1  # no interval: once per change
    await cluster.change({'spec': {'other': 'again'}})
    await clock.run(0.3)
    assert len(ticks) == 2


async def test_a_timer_without_an_interval_is_called_once_per_object(cluster, registry, clock):
    ticks = []

    @kopf.timer(*RESOURCE, registry=registry)
    async def once(**_):
        ticks.append(True)

    await cluster.event('ADDED')
    await eventually(lambda: ticks)
    await cluster.change({'spec': {'field': 'changed'}})
    await clock.run(0.1)
    assert ticks == [True]
    assert cluster.keeper.running == 1  # it waits for its stop


async def test_a_failing_timer_is_retried_after_its_backoff_and_its_retries_start_anew_after_a_success(
        cluster, registry, clock):
    retries = []

    @kopf.timer(*RESOURCE, registry=registry, interval=0.2, backoff=0.02)
    def flaky(retry, **_):
        retries.append((retry, clock.monotonic()))
        if len(retries) in (1, 2, 4):
            raise RuntimeError("flaky")

    began = clock.monotonic()
    await cluster.event('ADDED')
    for _ in range(4):  # the calls run in threads: the next wait begins only once each has ended
        await clock.jump()
    await eventually(lambda: len(retries) >= 5)
    assert [retry for retry, _ in retries[:5]] == [0, 1, 2, 0, 1]
    times = [pytest.approx(when) for when in [0, 0.02, 0.04, 0.24, 0.26]]  # after the back-off, or the interval
    assert [when - began for _, when in retries[:5]] == times


async def test_a_timer_stops_for_good_after_a_permanent_error(cluster, registry, clock):
    calls = []

    @kopf.timer(*RESOURCE, registry=registry, interval=0.02)
    def broken(**_):
        calls.append(True)
        raise kopf.PermanentError("never again")

    await cluster.event('ADDED')
    await eventually(lambda: calls)
    await eventually(lambda: cluster.keeper.running == 0, what="the timer's end")
    await clock.run(0.1)
    await cluster.event()
    await clock.run(0.1)
    assert calls == [True]


async def test_a_timer_stops_when_the_object_is_deleted(cluster, registry, clock):
    ticks = []

    @kopf.timer(*RESOURCE, registry=registry, interval=0.02)
    async def ping(stopped, **_):
        ticks.append(True)

    await cluster.event('ADDED')
    await clock.run(0.02)
    assert len(ticks) >= 2
    await cluster.delete()
    await cluster.settle_deletion()
    count = len(ticks)
    await clock.run(0.1)
    await settle()
    assert len(ticks) == count
    assert cluster.keeper.running == 0


async def test_a_timer_waits_for_no_time_when_its_sharp_interval_is_over_during_the_call(cluster, registry, clock):
    starts = []

    @kopf.timer(*RESOURCE, registry=registry, interval=0.1, sharp=True)
    async def slow(**_):
        starts.append(clock.monotonic())
        await clock.sleep(0.15)  # longer than the interval

    began = clock.monotonic()
    await cluster.event('ADDED')
    await clock.run(0.3)
    assert [when - began for when in starts] == [0, pytest.approx(0.15), pytest.approx(0.3)]


# What is recorded.

async def test_daemons_running_their_calls_and_their_restarts_are_recorded(cluster, registry, clock):
    from kopf._observability import metrics, recording

    @kopf.daemon(*RESOURCE, registry=registry, id='failing', backoff=0.1, retries=2)
    def failing(retry, **_):
        raise ValueError(f"boom {retry}")

    recorder = metrics.MetricsRecorder(process=False, clock=clock)
    token = recording.install(recorder)
    try:
        await cluster.event('ADDED')
        labels = {'resource': 'kopfexamples.v1.kopf.dev', 'kind': 'daemon'}
        await eventually(lambda: recorder.registry.get_sample_value('kopf_daemons_running', labels) == 1)
        await clock.jump()
        await eventually(lambda: cluster.keeper.running == 0, what="the second attempt, the last")
    finally:
        recording.uninstall(token)
    value = recorder.registry.get_sample_value
    assert value('kopf_daemons_running', labels) == 0
    assert value('kopf_daemon_restarts_total', {**labels, 'handler': 'failing'}) == 1
    calls = {'resource': 'kopfexamples.v1.kopf.dev', 'handler': 'failing', 'cause': 'daemon'}
    assert value('kopf_handler_calls_total', {**calls, 'outcome': 'temporary_error'}) == 1
    assert value('kopf_handler_calls_total', {**calls, 'outcome': 'exhausted'}) == 1
