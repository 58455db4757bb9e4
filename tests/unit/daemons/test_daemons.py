"""
Daemons and timers, as a specification: what runs beside an object, and when it stops.

One object lives on a simulated server (as in ``conftest.py``); each event of
it goes through the real handling cycle with the keeper of daemons as a
stage, and the patches of the cycle and of the daemons are applied to it.
The daemons run for real, with short times: the tests wait for what they
expect with a deadline, never for a fixed time.
"""
import asyncio
import copy
import gc
import itertools
import json
import logging
import threading
import time
import weakref

import pytest
from kopf._daemons.keeper import Daemons

import kopf
from kopf._cycle.cycle import STAGES, handle_object
from kopf._replicas.fencing import Gate
from kopf._structs.bodies import Body
from kopf._structs.patches import apply
from kopf._structs.resources import Selector
from kopf._structs.stoppers import DaemonStoppingReason
from tests.unit.conftest import FINALIZER, LAST_HANDLED, RESOURCE, SELECTOR

object_logger = logging.getLogger('kopf.objects')


class Cluster:
    """One object on a simulated server, its events handled by the cycle with the daemons' keeper."""

    def __init__(self, raw, *, registry, config):
        self.raw = copy.deepcopy(raw)
        self.registry = registry
        self.config = config
        self.keeper = Daemons(patcher=self._patch)
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
            logger=kopf.LocalObjectLogger(body=self.raw), stages=[*STAGES, self.keeper])
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
        """Handle the object's events (waking up as asked) until it is gone; the number of cycles."""
        cycles = 0
        deadline = time.monotonic() + timeout
        while not self.gone:
            assert time.monotonic() < deadline, f"Not deleted in {timeout}s: {self.raw}"
            result = await self.event()
            cycles += 1
            if not self.gone and result.delay:
                await asyncio.sleep(min(result.delay, 0.05))
        await self.event('DELETED')
        return cycles


@pytest.fixture()
def cluster(raw, registry, config):
    config.background.instant_exit_timeout = 0.2
    return Cluster(raw, registry=registry, config=config)


async def eventually(condition, *, timeout=5.0, what='the condition'):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"Timed out waiting for {what}."
        await asyncio.sleep(0.01)


@pytest.fixture(autouse=True)
async def no_leftovers(cluster):
    yield
    await cluster.keeper.close(timeout=0.3)


# Starting and the handler's keyword arguments.

async def test_a_daemon_starts_with_the_first_event_and_gets_kopfs_keyword_arguments(cluster, registry):
    seen = {}

    @kopf.daemon(*RESOURCE, registry=registry, param='p')
    async def monitor(stopped, **kwargs):
        seen.update(kwargs, stopped=stopped)
        await stopped.wait()

    await cluster.event('ADDED')
    await eventually(lambda: seen, what="the daemon's start")

    assert isinstance(seen['stopped'], kopf.AsyncDaemonStopperChecker)
    assert not seen['stopped']
    assert {'body', 'spec', 'meta', 'status', 'name', 'namespace', 'uid', 'labels', 'annotations', 'patch',
            'logger', 'memo', 'param', 'resource', 'retry', 'started', 'runtime'} <= set(seen)
    assert seen['param'] == 'p'
    assert seen['retry'] == 0
    assert seen['name'] == 'ex1' and seen['uid'] == 'uid1'
    assert seen['spec']['field'] == 'x'


async def test_a_plain_daemon_runs_in_a_thread_of_its_own_and_gets_a_blocking_stop_flag(cluster, registry):
    seen = {}

    @kopf.daemon(*RESOURCE, registry=registry)
    def monitor(stopped, **_):
        seen['thread'] = threading.current_thread()
        seen['stopped'] = stopped
        stopped.wait(10)
        seen['reason'] = stopped.reason

    await cluster.event('ADDED')
    await eventually(lambda: 'stopped' in seen)
    assert isinstance(seen['stopped'], kopf.SyncDaemonStopperChecker)
    assert seen['thread'].daemon  # an abandoned thread never holds up the process's exit
    assert seen['thread'] is not threading.main_thread()

    await cluster.event('DELETED')
    await eventually(lambda: 'reason' in seen)
    assert seen['reason'] == DaemonStoppingReason.RESOURCE_DELETED


async def test_daemons_see_the_latest_state_of_the_object_as_it_changes(cluster, registry):
    fields = []

    @kopf.daemon(*RESOURCE, registry=registry)
    async def monitor(stopped, spec, body, labels, **_):
        while not stopped:
            fields.append((spec.get('field'), body['spec'].get('field'), labels.get('app')))
            await stopped.wait(0.01)

    await cluster.event('ADDED')
    await eventually(lambda: fields)
    assert fields[-1] == ('x', 'x', None)
    await cluster.change({'spec': {'field': 'y'}, 'metadata': {'labels': {'app': 'a'}}})
    await eventually(lambda: fields[-1] == ('y', 'y', 'a'), what="the new state in the running daemon")


async def test_initial_delay_postpones_the_start_and_a_stop_meanwhile_cancels_it(cluster, registry):
    starts = []

    @kopf.daemon(*RESOURCE, registry=registry, initial_delay=0.3)
    async def late(stopped, **_):
        starts.append(time.monotonic())
        await stopped.wait()

    @kopf.daemon(*RESOURCE, registry=registry, initial_delay=lambda spec, **_: 10 if spec['field'] == 'x' else 0)
    async def never(stopped, **_):
        starts.append('never')

    began = time.monotonic()
    await cluster.event('ADDED')
    await eventually(lambda: starts)
    assert starts[0] - began >= 0.3
    await cluster.event('DELETED')
    await asyncio.sleep(0.05)
    assert 'never' not in starts


# Filters.

async def test_a_daemon_stops_when_the_object_stops_matching_and_starts_again_when_it_matches(cluster, registry):
    log = []

    @kopf.daemon(*RESOURCE, registry=registry, labels={'watched': 'yes'})
    async def monitor(stopped, **_):
        log.append('start')
        await stopped.wait()
        log.append(stopped.reason)

    await cluster.event('ADDED')
    await asyncio.sleep(0.05)
    assert log == []  # not matching: nothing starts, nothing is remembered
    assert len(cluster.keeper) == 0

    await cluster.change({'metadata': {'labels': {'watched': 'yes'}}})
    await eventually(lambda: log == ['start'])
    await cluster.change({'metadata': {'labels': {'watched': 'no'}}})
    await eventually(lambda: log == ['start', DaemonStoppingReason.FILTERS_MISMATCH])
    await eventually(lambda: len(cluster.keeper) == 0, what="the object forgotten")

    await cluster.change({'metadata': {'labels': {'watched': 'yes'}}})
    await eventually(lambda: log[-1] == 'start' and len(log) == 3, what="the daemon started again")


async def test_when_filters_receive_the_handlers_keyword_arguments(cluster, registry):
    started = []

    @kopf.daemon(*RESOURCE, registry=registry, when=lambda spec, name, **_: spec['field'] == 'y' and name == 'ex1')
    async def monitor(stopped, **_):
        started.append(True)
        await stopped.wait()

    await cluster.event('ADDED')
    await asyncio.sleep(0.05)
    assert not started
    await cluster.change({'spec': {'field': 'y'}})
    await eventually(lambda: started)


# Deletion and the finalizer.

async def test_the_deletion_waits_for_the_daemons_to_stop_and_then_completes(cluster, registry):
    log = []

    @kopf.daemon(*RESOURCE, registry=registry)
    async def monitor(stopped, **_):
        await stopped.wait()
        await asyncio.sleep(0.5)  # tidying up, longer than the cycle waits at once
        log.append('exited')

    result = await cluster.event('ADDED')
    assert result.cause == 'finalizer'
    assert FINALIZER in cluster.raw['metadata']['finalizers']
    await asyncio.sleep(0.05)  # started

    result = await cluster.delete()
    assert result.cause == 'delete'
    assert not result.done and result.delay is not None
    assert FINALIZER in cluster.raw['metadata']['finalizers']  # held while the daemon stops
    assert log == []

    await cluster.settle_deletion()
    assert log == ['exited']
    assert len(cluster.keeper) == 0 and cluster.keeper.running == 0


async def test_a_daemon_that_exits_at_once_lets_the_deletion_complete_in_the_same_cycle(cluster, registry):
    @kopf.daemon(*RESOURCE, registry=registry)
    def monitor(stopped, **_):
        stopped.wait(10)

    await cluster.event('ADDED')
    await asyncio.sleep(0.05)
    result = await cluster.delete()
    assert result.done
    assert cluster.gone


async def test_daemons_alone_store_no_diff_base_and_change_nothing_but_the_finalizer(cluster, registry):
    @kopf.daemon(*RESOURCE, registry=registry)
    async def monitor(stopped, **_):
        await stopped.wait()

    results = [await cluster.event('ADDED'), await cluster.event(), await cluster.change({'spec': {'field': 'z'}})]
    assert [r.cause for r in results] == ['finalizer', 'noop', 'noop']
    assert LAST_HANDLED not in cluster.raw['metadata'].get('annotations', {})


async def test_an_optional_daemon_does_not_add_the_finalizer_and_stops_on_deletion(cluster, registry):
    reasons = []

    @kopf.daemon(*RESOURCE, registry=registry, optional=True)
    async def monitor(stopped, **_):
        await stopped.wait()
        reasons.append(stopped.reason)

    await cluster.event('ADDED')
    assert 'finalizers' not in cluster.raw['metadata']
    await asyncio.sleep(0.05)
    await cluster.delete()
    await eventually(lambda: reasons == [DaemonStoppingReason.RESOURCE_DELETED])


async def test_delete_handlers_run_while_daemons_stop_and_are_not_run_again(cluster, registry):
    calls = []
    release = asyncio.Event()

    @kopf.on.delete(*RESOURCE, registry=registry)
    def cleanup(**_):
        calls.append('cleanup')

    @kopf.daemon(*RESOURCE, registry=registry)
    async def monitor(stopped, **_):
        await stopped.wait()
        await release.wait()

    await cluster.event('ADDED')
    await cluster.event()
    await asyncio.sleep(0.05)  # started
    result = await cluster.delete()
    assert calls == ['cleanup']
    assert not result.done and FINALIZER in cluster.raw['metadata']['finalizers']
    result = await cluster.event()
    assert not result.done and calls == ['cleanup']  # its success is kept while the daemon stops

    release.set()
    await cluster.settle_deletion()
    assert calls == ['cleanup']


# Bad input: daemons that ignore their stop flag.

async def test_an_async_daemon_that_ignores_its_stop_flag_is_cancelled_then_abandoned_with_one_warning(
        cluster, registry, caplog):
    log = []

    @kopf.daemon(*RESOURCE, registry=registry, id='stubborn', cancellation_timeout=0.3)
    async def stubborn(stopped, **_):
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            log.append('cancelled')
            log.append(stopped.reason)
            await asyncio.sleep(60)  # ignores the cancellation too

    await cluster.event('ADDED')
    await asyncio.sleep(0.05)
    with caplog.at_level(logging.DEBUG, logger='kopf.objects'):
        await cluster.delete()
        await cluster.settle_deletion()

    assert log == ['cancelled', kopf.DaemonStoppingReason.RESOURCE_DELETED | kopf.DaemonStoppingReason.DAEMON_CANCELLED]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    message = warnings[0].getMessage()
    assert "Daemon 'stubborn'" in message and 'cancellation_timeout of 0.3s' in message
    assert "deletion proceeds" in message
    assert warnings[0].k8s_ref['name'] == 'ex1'


async def test_a_plain_daemon_that_ignores_its_stop_flag_is_abandoned_and_its_thread_runs_on(
        cluster, registry, caplog):
    finish = threading.Event()
    threads = []

    @kopf.daemon(*RESOURCE, registry=registry, id='stubborn', cancellation_timeout=0.2)
    def stubborn(**_):
        threads.append(threading.current_thread())
        finish.wait(30)

    await cluster.event('ADDED')
    await eventually(lambda: threads)
    with caplog.at_level(logging.WARNING, logger='kopf.objects'):
        began = time.monotonic()
        await cluster.delete()
        await cluster.settle_deletion()
        assert time.monotonic() - began < 3

    assert cluster.gone
    assert threads[0].is_alive()  # nothing can stop it; it is left to itself
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "Daemon 'stubborn'" in warnings[0]
    assert 'keeps running in the background until the function returns' in warnings[0]
    finish.set()
    threads[0].join(5)


async def test_without_a_cancellation_timeout_the_deletion_waits_and_the_daemon_is_reported(
        cluster, registry, config, caplog):
    config.background.cancellation_polling = 0.2
    leave = threading.Event()

    @kopf.daemon(*RESOURCE, registry=registry, id='slow')
    def slow(**_):
        leave.wait(30)

    await cluster.event('ADDED')
    await asyncio.sleep(0.05)
    with caplog.at_level(logging.WARNING, logger='kopf.objects'):
        result = await cluster.delete()
        assert not result.done
        assert result.delay == pytest.approx(0.2, abs=0.05)  # the polling period at most
        await asyncio.sleep(0.5)
        result = await cluster.event()
        assert not result.done and FINALIZER in cluster.raw['metadata']['finalizers']

    reports = [r.getMessage() for r in caplog.records if 'is still running' in r.getMessage()]
    assert reports and all("Daemon 'slow'" in report for report in reports)
    leave.set()
    await cluster.settle_deletion()


async def test_the_cancellation_backoff_gives_the_daemon_time_before_it_is_cancelled(cluster, registry):
    log = []

    @kopf.daemon(*RESOURCE, registry=registry, cancellation_backoff=0.3, cancellation_timeout=2)
    async def polite(stopped, **_):
        await stopped.wait()
        try:
            await asyncio.sleep(0.1)  # finishes its work within the back-off
            log.append('finished')
        except asyncio.CancelledError:
            log.append('cancelled')
            raise

    @kopf.daemon(*RESOURCE, registry=registry, cancellation_backoff=0.1, cancellation_timeout=2)
    async def lazy(stopped, **_):
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            log.append('lazy cancelled')
            raise

    await cluster.event('ADDED')
    await asyncio.sleep(0.05)
    await cluster.delete()
    await cluster.settle_deletion()
    assert sorted(log) == ['finished', 'lazy cancelled']


# Retries and results.

async def test_a_daemon_that_raises_is_retried_with_its_backoff_and_logged_once_per_attempt(
        cluster, registry, caplog):
    attempts = []

    @kopf.daemon(*RESOURCE, registry=registry, id='failing', backoff=0.1, retries=3)
    def failing(retry, **_):
        attempts.append((retry, time.monotonic()))
        raise ValueError(f"boom {retry}")

    with caplog.at_level(logging.INFO, logger='kopf.objects'):
        await cluster.event('ADDED')
        await eventually(lambda: len(attempts) == 3)
        await asyncio.sleep(0.3)

    assert [retry for retry, _ in attempts] == [0, 1, 2]
    assert all(b - a >= 0.09 for (_, a), (_, b) in itertools.pairwise(attempts))
    failures = [r for r in caplog.records if 'failed with an exception' in r.getMessage()]
    assert len(failures) == 3
    assert all("Daemon 'failing'" in r.getMessage() and r.k8s_ref['name'] == 'ex1' for r in failures)
    assert failures[0].exc_info is not None
    assert any('used up its 3 attempt(s)' in r.getMessage() for r in caplog.records)
    await cluster.event()
    await asyncio.sleep(0.2)
    assert len(attempts) == 3  # failed for good: not started again for this object


async def test_a_daemon_without_a_backoff_is_retried_after_the_default_backoff(cluster, registry, config):
    attempts = []
    config.execution.default_backoff = 0.1

    @kopf.daemon(*RESOURCE, registry=registry, id='failing', retries=2)
    def failing(retry, **_):
        attempts.append(time.monotonic())
        raise ValueError(f"boom {retry}")

    await cluster.event('ADDED')
    await eventually(lambda: len(attempts) == 2)  # not in 60 s: the setting decides

    assert attempts[1] - attempts[0] >= 0.09


async def test_a_temporary_error_restarts_the_daemon_after_its_delay(cluster, registry):
    attempts = []

    @kopf.daemon(*RESOURCE, registry=registry)
    async def restarting(retry, stopped, **_):
        attempts.append(retry)
        if retry < 2:
            raise kopf.TemporaryError("again", delay=0.05)
        await stopped.wait()

    await cluster.event('ADDED')
    await eventually(lambda: attempts == [0, 1, 2])


async def test_a_daemon_that_returns_is_not_restarted_and_its_result_and_patch_are_applied(cluster, registry):
    calls = []

    @kopf.daemon(*RESOURCE, registry=registry, id='once')
    async def once(patch, **_):
        calls.append(True)
        patch.metadata.annotations['from-daemon'] = 'yes'
        return {'finished': True}

    await cluster.event('ADDED')
    await eventually(lambda: cluster.daemon_patches)
    for _ in range(3):
        await cluster.event()
    await asyncio.sleep(0.05)

    assert calls == [True]
    assert cluster.daemon_patches == [{'metadata': {'annotations': {'from-daemon': 'yes'}},
                                       'status': {'once': {'finished': True}}}]
    assert cluster.raw['status']['once'] == {'finished': True}


async def test_results_are_stored_as_plain_json_also_when_they_are_live_views(cluster, registry):
    @kopf.daemon(*RESOURCE, registry=registry, id='echo')
    async def echo(spec, **_):
        return {'spec': spec, 'pair': (1, 2)}  # a live view of the object, and a tuple

    await cluster.event('ADDED')
    await eventually(lambda: cluster.daemon_patches)
    assert cluster.raw['status']['echo'] == {'spec': dict(cluster.raw['spec']), 'pair': [1, 2]}


async def test_a_result_that_cannot_be_stored_fails_the_call_but_keeps_its_patch(cluster, registry, caplog):
    calls = []

    @kopf.timer(*RESOURCE, registry=registry, id='tick', interval=0.01, backoff=0.05, retries=2)
    def tick(patch, retry, **_):
        calls.append(retry)
        patch.metadata.annotations['ticked'] = str(len(calls))
        return {'seen': {'a', 'b'}}

    await cluster.event('ADDED')
    await eventually(lambda: len(calls) == 2)
    await eventually(lambda: cluster.raw['metadata']['annotations'].get('ticked') == '2')
    assert calls == [0, 1]  # retried as a failure, not called again at its interval
    assert 'tick' not in cluster.raw.get('status', {})
    messages = [r.getMessage() for r in caplog.records]
    assert any("Timer 'tick' has returned a value that cannot be stored in status.tick: a value of type set "
               "at ['seen']" in m for m in messages)
    assert not any('could not be applied' in m for m in messages)


# Timers.

async def test_a_timer_is_called_every_interval_and_its_patches_are_applied(cluster, registry):
    ticks = []

    @kopf.timer(*RESOURCE, registry=registry, id='ping', interval=0.05)
    def ping(patch, retry, stopped, **_):
        ticks.append(retry)
        patch.metadata.annotations['ticks'] = str(len(ticks))
        return len(ticks)

    await cluster.event('ADDED')
    await eventually(lambda: len(ticks) >= 3)
    await eventually(lambda: int(cluster.raw['metadata']['annotations']['ticks']) >= 3)
    assert set(ticks) == {0}
    assert cluster.raw['status']['ping'] >= 3


async def test_a_timer_slower_than_its_interval_never_runs_twice_at_once(cluster, registry):
    active = []
    overlaps = []
    calls = []

    @kopf.timer(*RESOURCE, registry=registry, interval=0.01, sharp=True)
    def slow_sync(**_):
        active.append(1)
        overlaps.append(len(active))
        time.sleep(0.05)
        calls.append('sync')
        active.pop()

    @kopf.timer(*RESOURCE, registry=registry, interval=0.01)
    async def slow_async(**_):
        calls.append('async start')
        await asyncio.sleep(0.05)
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

    @kopf.timer(*RESOURCE, registry=registry, interval=0.01, labels={'on': 'yes'})
    def slow(**_):
        active.append(1)
        overlaps.append(len(active))
        time.sleep(0.3)
        active.pop()

    await cluster.change({'metadata': {'labels': {'on': 'yes'}}})
    await eventually(lambda: active)
    await cluster.change({'metadata': {'labels': {'on': 'no'}}})
    await cluster.change({'metadata': {'labels': {'on': 'yes'}}})  # while the call still runs
    await eventually(lambda: not active)
    await cluster.event()  # the next event after the call has ended starts it again
    await eventually(lambda: len(overlaps) >= 2)
    assert max(overlaps) == 1


async def test_a_sharp_timer_counts_its_interval_from_the_start_of_the_previous_call(cluster, registry):
    starts = {'sharp': [], 'plain': []}

    @kopf.timer(*RESOURCE, registry=registry, interval=0.2, sharp=True)
    async def sharp(**_):
        starts['sharp'].append(time.monotonic())
        await asyncio.sleep(0.1)

    @kopf.timer(*RESOURCE, registry=registry, interval=0.2)
    async def plain(**_):
        starts['plain'].append(time.monotonic())
        await asyncio.sleep(0.1)

    await cluster.event('ADDED')
    await eventually(lambda: len(starts['sharp']) >= 4 and len(starts['plain']) >= 4)
    sharp_gap = (starts['sharp'][3] - starts['sharp'][0]) / 3
    plain_gap = (starts['plain'][3] - starts['plain'][0]) / 3
    assert sharp_gap >= 0.19 and plain_gap >= 0.29
    assert plain_gap - sharp_gap >= 0.05  # the call's own 0.1s is not added to a sharp interval


async def test_an_idle_timer_waits_until_the_object_has_not_changed_for_a_while(cluster, registry):
    ticks = []

    @kopf.timer(*RESOURCE, registry=registry, idle=0.3)
    async def quiet(**_):
        ticks.append(time.monotonic())

    await cluster.event('ADDED')
    for index in range(8):  # changes every 0.05s keep it waiting
        await asyncio.sleep(0.05)
        await cluster.change({'spec': {'other': index}})
    last_change = time.monotonic()
    assert ticks == []
    await eventually(lambda: ticks)
    assert ticks[0] - last_change >= 0.29
    await asyncio.sleep(0.4)
    assert len(ticks) == 1  # no interval: once per change
    await cluster.change({'spec': {'other': 'again'}})
    await eventually(lambda: len(ticks) == 2)


async def test_a_timer_without_an_interval_is_called_once_per_object(cluster, registry):
    ticks = []

    @kopf.timer(*RESOURCE, registry=registry)
    async def once(**_):
        ticks.append(True)

    await cluster.event('ADDED')
    await eventually(lambda: ticks)
    await cluster.change({'spec': {'field': 'changed'}})
    await asyncio.sleep(0.1)
    assert ticks == [True]


async def test_a_failing_timer_is_retried_after_its_backoff_and_its_retries_start_anew_after_a_success(
        cluster, registry):
    retries = []

    @kopf.timer(*RESOURCE, registry=registry, interval=0.2, backoff=0.02)
    def flaky(retry, **_):
        retries.append(retry)
        if len(retries) in (1, 2, 4):
            raise RuntimeError("flaky")

    await cluster.event('ADDED')
    await eventually(lambda: len(retries) >= 5)
    assert retries[:5] == [0, 1, 2, 0, 1]


async def test_a_timer_stops_for_good_after_a_permanent_error(cluster, registry):
    calls = []

    @kopf.timer(*RESOURCE, registry=registry, interval=0.02)
    def broken(**_):
        calls.append(True)
        raise kopf.PermanentError("never again")

    await cluster.event('ADDED')
    await eventually(lambda: calls)
    await asyncio.sleep(0.1)
    await cluster.event()
    await asyncio.sleep(0.1)
    assert calls == [True]


async def test_a_timer_stops_when_the_object_is_deleted(cluster, registry):
    ticks = []

    @kopf.timer(*RESOURCE, registry=registry, interval=0.02)
    async def ping(stopped, **_):
        ticks.append(True)

    await cluster.event('ADDED')
    await eventually(lambda: len(ticks) >= 2)
    await cluster.delete()
    await cluster.settle_deletion()
    count = len(ticks)
    await asyncio.sleep(0.1)
    assert len(ticks) == count
    assert cluster.keeper.running == 0


# The operator's exit and memory.

async def test_the_operators_exit_stops_every_daemon_within_the_exit_timeout(cluster, registry):
    reasons = []
    release = threading.Event()

    @kopf.daemon(*RESOURCE, registry=registry)
    async def polite(stopped, **_):
        await stopped.wait()
        reasons.append(stopped.reason)

    @kopf.daemon(*RESOURCE, registry=registry)
    def stubborn(**_):
        release.wait(30)

    @kopf.timer(*RESOURCE, registry=registry, interval=0.01)
    async def ping(**_):
        pass

    await cluster.event('ADDED')
    await asyncio.sleep(0.05)
    assert cluster.keeper.running == 3
    began = time.monotonic()
    await cluster.keeper.close(timeout=0.3)
    assert time.monotonic() - began < 1.5
    assert reasons == [DaemonStoppingReason.OPERATOR_EXITING]
    assert cluster.keeper.running == 0
    await cluster.event()
    await asyncio.sleep(0.05)
    assert cluster.keeper.running == 0  # nothing starts once closed
    release.set()


class FakeClock:
    """A monotonic clock that moves only when told to."""

    def __init__(self):
        self.time = 1000.0

    def monotonic(self):
        return self.time

    def now(self):
        raise NotImplementedError


def replica_gate(clock, keys):
    """A replica's gate that permits the given keys (a mutable set), with the deadlines far ahead."""
    gate = Gate(clock=clock)
    gate.permit(lambda key: key in keys, resync=True)
    gate.extend(admit_until=clock.time + 100, write_until=clock.time + 100)
    return gate


async def test_with_replicas_the_daemons_stop_as_soon_as_the_object_is_not_this_replicas_any_more(
        cluster, registry, monkeypatch):
    monkeypatch.setattr('kopf._daemons.keeper.PATROL_INTERVAL', 1000)  # no patrol: the gate's change is enough
    ours = {'uid1'}
    gate = replica_gate(FakeClock(), ours)
    cluster.keeper = Daemons(patcher=cluster._patch, fence=gate)
    log = []

    @kopf.daemon(*RESOURCE, registry=registry)
    async def monitor(stopped, **_):
        log.append('start')
        await stopped.wait()
        log.append(stopped.reason)

    await cluster.event('ADDED')
    await eventually(lambda: log == ['start'])
    assert gate.residents == 1 and gate.busy(lambda key: False)
    ours.clear()
    gate.permit(lambda key: key in ours, resync=False)  # handed over: its events do not come here any more
    await eventually(lambda: log == ['start', DaemonStoppingReason.OPERATOR_PAUSING])
    assert await gate.drain(lambda key: False, timeout=1.0)  # the hand-over can be acknowledged now
    assert gate.residents == 0 and len(cluster.keeper) == 0
    ours.add('uid1')  # back again: its events (a fresh listing) start it anew
    gate.permit(lambda key: key in ours, resync=True)
    await cluster.event()
    await eventually(lambda: log[-1] == 'start' and len(log) == 3)
    await cluster.keeper.close(timeout=0.3)
    assert gate.residents == 0


async def test_with_replicas_a_hand_over_waits_for_the_daemons_cleanup(cluster, registry):
    ours = {'uid1'}
    gate = replica_gate(FakeClock(), ours)
    cluster.keeper = Daemons(patcher=cluster._patch, fence=gate)
    cleaning = asyncio.Event()
    cleaned = asyncio.Event()

    @kopf.daemon(*RESOURCE, registry=registry, cancellation_backoff=10, cancellation_timeout=10)
    async def monitor(stopped, **_):
        await stopped.wait()
        cleaning.set()
        await cleaned.wait()  # a slow cleanup after the stop was asked

    await cluster.event('ADDED')
    await eventually(lambda: cluster.keeper.running == 1)
    ours.clear()
    gate.permit(lambda key: key in ours, resync=False)
    await asyncio.wait_for(cleaning.wait(), timeout=1)
    draining = asyncio.create_task(gate.drain(lambda key: False, timeout=1))  # by the gate's clock, which stands
    await asyncio.sleep(0.1)
    assert not draining.done()  # not acknowledged while it cleans up
    cleaned.set()
    assert await asyncio.wait_for(draining, timeout=1)


async def test_with_replicas_the_daemons_are_cancelled_at_once_when_the_lease_is_lost(cluster, registry):
    clock = FakeClock()
    gate = replica_gate(clock, {'uid1'})
    cluster.keeper = Daemons(patcher=cluster._patch, fence=gate)
    log = []

    @kopf.daemon(*RESOURCE, registry=registry, cancellation_backoff=100)  # would wait long to cancel
    async def monitor(stopped, **_):
        try:
            await stopped.wait()
            await asyncio.sleep(100)  # a cleanup longer than the lease
        except asyncio.CancelledError:
            log.append('cancelled')
            raise

    await cluster.event('ADDED')
    await eventually(lambda: cluster.keeper.running == 1)
    clock.time += 101  # past the deadlines, as if the loop had been stuck; the hard fence strikes
    gate.harden()
    await eventually(lambda: log == ['cancelled'], timeout=1)
    assert gate.residents == 0


async def test_nothing_of_an_object_is_kept_once_it_is_gone(cluster, registry):
    bodies = []

    @kopf.daemon(*RESOURCE, registry=registry)
    async def monitor(stopped, body, **_):
        bodies.append(weakref.ref(body))
        await stopped.wait()

    @kopf.timer(*RESOURCE, registry=registry, interval=0.01)
    async def ping(**_):
        pass

    await cluster.event('ADDED')
    await eventually(lambda: bodies)
    assert len(cluster.keeper) == 1
    await cluster.event('DELETED')
    await eventually(lambda: cluster.keeper.running == 0)
    assert len(cluster.keeper) == 0
    gc.collect()
    assert bodies[0]() is None


# Declaring them.

def test_kopf_on_daemon_and_timer_are_the_same_decorators():
    assert kopf.on.daemon is kopf.daemon
    assert kopf.on.timer is kopf.timer


@pytest.mark.parametrize('decorator, options, message', [
    (kopf.daemon, {'cancellation_timeout': -1}, 'cancellation_timeout= must be a number of seconds'),
    (kopf.daemon, {'cancellation_polling': 0}, 'cancellation_polling= must be a positive number'),
    (kopf.daemon, {'initial_delay': 'soon'}, 'initial_delay= must be a number of seconds'),
    (kopf.timer, {'interval': 0}, 'interval= must be a positive number of seconds'),
    (kopf.timer, {'idle': -5}, 'idle= must be a number of seconds'),
    (kopf.timer, {'retries': 0}, 'retries= is the number of attempts'),
])
def test_bad_options_fail_at_declaration_with_the_option_named(decorator, options, message, registry):
    with pytest.raises(ValueError, match=message):
        decorator(*RESOURCE, registry=registry, **options)


def test_two_daemons_or_timers_with_one_id_are_refused(registry):
    kopf.daemon(*RESOURCE, registry=registry, id='same')(lambda **_: None)
    with pytest.raises(kopf.DuplicateHandlerError, match="share the id 'same'"):
        kopf.timer(*RESOURCE, registry=registry, id='same', interval=1)(lambda **_: None)


def test_a_resource_with_only_daemons_or_timers_is_watched(registry):
    kopf.timer('pods', registry=registry, interval=1)(lambda **_: None)
    kopf.daemon(*RESOURCE, registry=registry)(lambda **_: None)
    assert registry.selectors == (Selector.from_args('pods'), SELECTOR)
