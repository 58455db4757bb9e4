"""
One call of a daemon or a timer, as a specification: its keyword arguments, its thread, its result and its patch.
"""
import threading

import pytest

import kopf
from kopf._structs.stoppers import DaemonStoppingReason
from tests.unit.conftest import RESOURCE
from tests.unit.daemons.conftest import eventually, nap


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


async def test_daemons_see_the_latest_state_of_the_object_as_it_changes(cluster, registry, clock):
    fields = []

    @kopf.daemon(*RESOURCE, registry=registry)
    async def monitor(stopped, spec, body, labels, **_):
        while not stopped:
            fields.append((spec.get('field'), body['spec'].get('field'), labels.get('app')))
            await nap(clock, stopped, 1)

    await cluster.event('ADDED')
    await eventually(lambda: fields)
    assert fields[-1] == ('x', 'x', None)
    await cluster.change({'spec': {'field': 'y'}, 'metadata': {'labels': {'app': 'a'}}})
    await clock.jump()
    await eventually(lambda: fields[-1] == ('y', 'y', 'a'), what="the new state in the running daemon")


async def test_a_daemon_that_returns_is_not_restarted_and_its_result_and_patch_are_applied(cluster, registry, clock):
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
    await clock.run(0.1)

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


async def test_a_result_that_cannot_be_stored_fails_the_call_but_keeps_its_patch(cluster, registry, clock, caplog):
    calls = []

    @kopf.timer(*RESOURCE, registry=registry, id='tick', interval=0.01, backoff=0.05, retries=2)
    def tick(patch, retry, **_):
        calls.append(retry)
        patch.metadata.annotations['ticked'] = str(len(calls))
        return {'seen': {'a', 'b'}}

    await cluster.event('ADDED')
    await clock.awaited_by()
    assert clock.waits == [pytest.approx(0.05)]  # the back-off, not the interval: a failure
    await clock.jump()
    await eventually(lambda: len(calls) == 2)
    await eventually(lambda: cluster.raw['metadata']['annotations'].get('ticked') == '2')
    await eventually(lambda: cluster.keeper.running == 0, what="the timer failed for good")
    await clock.run(0.1)
    assert calls == [0, 1]  # retried as a failure, not called again at its interval
    assert 'tick' not in cluster.raw.get('status', {})
    messages = [r.getMessage() for r in caplog.records]
    assert any("Timer 'tick' has returned a value that cannot be stored in status.tick: a value of type set "
               "at ['seen']" in m for m in messages)
    assert not any('could not be applied' in m for m in messages)
