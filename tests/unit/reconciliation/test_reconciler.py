"""
The reconciler of one resource, on a fake clock: when it calls, with what, and what it writes.

The objects reach it as the handling cycle gives them (its stage), their
children as pokes; its patches go to a fake server that merges them into the
object. Time moves only when a test moves the clock.
"""
import asyncio
import contextlib
import datetime
import json
import logging

import pytest

import kopf
from kopf._cycle.causation import Cause
from kopf._handlers.arguments import Arguments, ObjectArguments, OperatorArguments
from kopf._handlers.reasons import Reason
from kopf._handlers.registries import OperatorRegistry
from kopf._kube import applying
from kopf._reconciliation.links import Children
from kopf._reconciliation.reconciler import Reconciler, effective
from kopf._structs.bodies import Body
from kopf._structs.patches import Patch, apply
from kopf._structs.resources import Resource
from kopf.config import OperatorConfig
from tests.unit.conftest import T0

RESOURCE = Resource('kopf.dev', 'v1', 'kopfexamples', 'KopfExample', namespaced=True)
CONFIGMAPS = Resource('', 'v1', 'configmaps', 'ConfigMap')
RECORD = 'kopf.zalando.org/reconcile-fn'
logger = logging.getLogger('test')


def make_body(name='kex1', uid='uid1', **spec):
    return {'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
            'metadata': {'name': name, 'namespace': 'ns', 'uid': uid, 'generation': 1, 'resourceVersion': '1'},
            'spec': spec or {'field': 'value'}}


class World:
    """A reconciler with a fake server for its patches, and the calls of its handler."""

    def __init__(self, clock, registry, *, gate=None):
        self.clock = clock
        self.registry = registry
        self.config = OperatorConfig()
        self.objects = {}
        self.patches = []
        self.children = {}
        self.reconciler = Reconciler(registry=registry, resource=RESOURCE, config=self.config, patcher=self.patch,
                                     children=lambda key, body, handler: Children(self.children), gate=gate,
                                     clock=clock)

    async def patch(self, body, patch, logger):
        self.patches.append(json.loads(json.dumps(patch)))
        uid = body.metadata.uid
        self.objects[uid] = apply(self.objects.get(uid, body.raw), patch)
        return self.objects[uid]

    async def see(self, raw, *, reason=Reason.NOOP, deleting=False):
        """An event of the object, as the handling cycle passes it to its stages."""
        self.objects[raw['metadata']['uid']] = raw
        body = Body(raw)
        arguments = Arguments(operator=OperatorArguments(logger=logger, memo=kopf.Memo(), config=self.config),
                              object=ObjectArguments(body=body, patch=Patch(), resource=RESOURCE))
        await self.reconciler.stage(self.registry, RESOURCE, Cause(reason, deleting=deleting), arguments)

    async def advance(self, seconds):
        await settle()
        self.clock.advance(seconds)
        await settle()


async def settle():
    """Let every task that can run, run (the handlers are async: no threads to wait for)."""
    for _ in range(30):
        await asyncio.sleep(0)


@pytest.fixture()
def registry():
    return OperatorRegistry()


@pytest.fixture()
async def world(clock, registry):
    worlds = []

    def make(**kwargs):
        world = World(clock, registry, **kwargs)
        world.reconciler.start()
        worlds.append(world)
        return world

    yield make
    for world in worlds:
        await world.reconciler.close()


def recording(registry, *, results=(), **options):
    """A reconcile handler that records its calls, and returns (or raises) what it is given in turn."""
    calls = []
    outcomes = list(results)

    @kopf.on.reconcile('kopfexamples', id='fn', registry=registry, owns=['configmaps'], **options)
    async def fn(**kwargs):
        calls.append(kwargs)
        outcome = outcomes.pop(0) if outcomes else None
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    return calls


# When it is called.

async def test_an_object_is_called_at_once_when_it_is_first_seen(world, registry):
    calls = recording(registry)
    w = world()
    await w.see(make_body())
    await w.advance(0)
    assert len(calls) == 1
    assert calls[0]['triggers'] == {'object', 'children'}  # the first sight: its children are news too
    assert calls[0]['name'] == 'kex1' and calls[0]['retry'] == 0
    assert isinstance(calls[0]['children'], Children)


async def test_a_hundred_child_events_within_a_second_are_a_call_at_once_and_one_after_them(world, registry):
    calls = recording(registry)
    w = world()
    await w.see(make_body())
    await w.advance(1)
    assert len(calls) == 1
    for i in range(100):
        w.reconciler.poke('uid1', ['fn'], (CONFIGMAPS, 'c1'), str(i))
        await w.advance(0.01)
    assert len(calls) == 2  # the first change after a quiet time: at once
    await w.advance(0.2)  # 0.01 after the last poke, and 0.2 more
    assert len(calls) == 2
    await w.advance(0.05)
    assert len(calls) == 3  # the rest of the burst: once it has been quiet for 0.25
    assert calls[1]['triggers'] == calls[2]['triggers'] == {'children'}


async def test_our_own_writes_of_the_status_call_nothing_but_a_change_of_the_spec_does(world, registry):
    calls = recording(registry, results=[{'ok': True}])
    w = world()
    await w.see(make_body())
    await w.advance(1)
    assert w.patches == [{'status': {'fn': {'ok': True}}}]
    await w.see({**w.objects['uid1'], 'metadata': {**w.objects['uid1']['metadata'], 'resourceVersion': '2'}})
    await w.advance(10)
    assert len(calls) == 1
    await w.see(make_body(field='changed'))
    await w.advance(0.25)
    assert len(calls) == 2 and calls[1]['triggers'] == {'object'}
    assert calls[1]['spec'] == {'field': 'changed'}


async def test_calls_of_one_object_never_overlap_and_what_came_meanwhile_is_called_after(world, registry):
    running, most, release = 0, 0, asyncio.Event()
    seen = []

    @kopf.on.reconcile('kopfexamples', id='fn', registry=registry, owns=['configmaps'])
    async def fn(triggers, **kwargs):
        nonlocal running, most
        running += 1
        most = max(most, running)
        seen.append(triggers)
        await release.wait()
        running -= 1

    w = world()
    await w.see(make_body())
    await w.advance(0.25)
    assert running == 1
    for i in range(5):
        w.reconciler.poke('uid1', ['fn'], (CONFIGMAPS, 'c1'), str(i))
        await w.see(make_body(field=f'v{i}'))
        await w.advance(1)
    assert most == 1 and len(seen) == 1
    release.set()
    await w.advance(0)
    await w.advance(0.25)
    assert most == 1 and seen == [{'object', 'children'}, {'object', 'children'}]


async def test_different_objects_are_called_in_parallel_and_a_failing_one_holds_up_none(world, registry):
    calls = recording(registry, results=[ValueError('boom')])
    w = world()
    await w.see(make_body('a', 'uid-a'))
    await w.advance(0.25)
    await w.see(make_body('b', 'uid-b'))
    await w.advance(0.25)
    assert [call['name'] for call in calls] == ['a', 'b']


# Failures and their back-off.

async def test_a_failing_call_backs_off_exponentially_and_keeps_its_back_off_in_the_storage(world, registry, caplog):
    calls = recording(registry, results=[ValueError('boom'), kopf.TemporaryError('later', delay=None), None])
    w = world()
    await w.see(make_body())
    await w.advance(0)
    record = json.loads(w.patches[-1]['metadata']['annotations'][RECORD])
    assert record['retries'] == 1 and record['message'] == 'boom'
    assert datetime.datetime.fromisoformat(record['delayed']) == T0 + datetime.timedelta(seconds=1)
    await w.advance(0.99)
    assert len(calls) == 1
    await w.advance(0.01)
    assert len(calls) == 2 and calls[1]['retry'] == 1 and calls[1]['triggers'] == {'retry'}
    record = json.loads(w.patches[-1]['metadata']['annotations'][RECORD])
    assert record['retries'] == 2 and record['message'] == 'later'
    assert datetime.datetime.fromisoformat(record['started']) == T0
    await w.advance(1.99)
    assert len(calls) == 2
    await w.advance(0.01)
    assert len(calls) == 3 and calls[2]['retry'] == 2
    assert w.patches[-1] == {'metadata': {'annotations': {RECORD: None}}}  # forgotten after the success
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert messages == ["Reconciler 'fn' failed: boom; it is called again in 1s.",
                        "Reconciler 'fn' failed temporarily: later; it is called again in 2s."]
    assert caplog.records[[r.levelno for r in caplog.records].index(logging.ERROR)].exc_info is not None


async def test_the_back_off_is_capped(world, registry):
    calls = recording(registry, results=[ValueError('boom')] * 10, backoff=1, max_backoff=3)
    w = world()
    await w.see(make_body())
    await w.advance(0)
    for delay in [1, 2, 3, 3]:
        count = len(calls)
        await w.advance(delay - 0.01)
        assert len(calls) == count
        await w.advance(0.01)
        assert len(calls) == count + 1


async def test_a_restarted_operator_waits_for_the_back_off_it_finds(world, registry, caplog):
    caplog.set_level(logging.INFO)
    calls = recording(registry)
    body = make_body()
    body['metadata']['annotations'] = {RECORD: json.dumps({
        'started': (T0 - datetime.timedelta(seconds=60)).isoformat(), 'retries': 3, 'success': False,
        'failure': False, 'delayed': (T0 + datetime.timedelta(seconds=10)).isoformat(), 'message': 'boom'})}
    w = world()
    await w.see(body)
    await w.advance(9.9)
    assert calls == []
    await w.advance(0.1)
    assert len(calls) == 1
    assert calls[0]['retry'] == 3 and calls[0]['runtime'] == datetime.timedelta(seconds=70)
    assert calls[0]['triggers'] == {'object', 'children', 'retry'}
    assert w.patches[-1] == {'metadata': {'annotations': {RECORD: None}}}
    assert "has failed 3 time(s) in a row before the restart; it is called again in 10s" in caplog.text


async def test_a_permanent_failure_waits_for_the_next_change(world, registry):
    calls = recording(registry, results=[kopf.PermanentError('no way')])
    w = world()
    await w.see(make_body())
    await w.advance(0.25)
    await w.advance(3600)
    assert len(calls) == 1
    assert RECORD not in str(w.patches)  # nothing to wait for after a restart
    w.reconciler.poke('uid1', ['fn'], (CONFIGMAPS, 'c1'), '9')
    await w.advance(0.25)
    assert len(calls) == 2


async def test_a_result_that_cannot_be_stored_is_reported_as_in_other_handlers_and_retried(world, registry, caplog):
    calls = recording(registry, results=[{'when': datetime.datetime.now()}, {'ok': 1}])
    w = world()
    await w.see(make_body())
    await w.advance(0.25)
    assert "Reconciler 'fn' has returned a value that cannot be stored in status.fn: a value of type " \
           "datetime.datetime at ['when']" in caplog.text
    assert "It is called again in 1s." in caplog.text
    assert 'status' not in w.patches[-1]
    await w.advance(1)
    assert len(calls) == 2 and w.patches[-1]['status'] == {'fn': {'ok': 1}}


# Requeue and resync.

async def test_a_requeue_calls_again_after_its_delay(world, registry):
    calls = recording(registry, results=[kopf.Requeue(after=5)])
    w = world()
    await w.see(make_body())
    await w.advance(0)
    await w.advance(4.99)
    assert len(calls) == 1
    await w.advance(0.01)
    assert len(calls) == 2 and calls[1]['triggers'] == {'requeue'}
    assert w.patches == []  # a requeue is neither a result nor a failure: nothing to write


async def test_resync_calls_again_a_period_after_each_call(world, registry):
    calls = recording(registry, resync=60)
    w = world()
    await w.see(make_body())
    await w.advance(0)
    await w.advance(59.99)
    assert len(calls) == 1
    await w.advance(0.01)
    await w.advance(60)
    assert [call['triggers'] for call in calls[1:]] == [{'resync'}, {'resync'}]


# Children.

async def test_the_events_of_our_own_applies_call_nothing(world, registry):
    calls = []

    @kopf.on.reconcile('kopfexamples', id='fn', registry=registry, owns=['configmaps'])
    async def fn(**kwargs):
        calls.append(kwargs)
        applying.listener_var.get()(CONFIGMAPS, {'metadata': {'uid': 'c1', 'resourceVersion': '7'}})

    w = world()
    await w.see(make_body())
    await w.advance(0.25)
    w.reconciler.poke('uid1', ['fn'], (CONFIGMAPS, 'c1'), '7')
    await w.advance(1)
    assert len(calls) == 1
    w.reconciler.poke('uid1', ['fn'], (CONFIGMAPS, 'c1'), '8')  # changed by someone else since
    await w.advance(0.25)
    assert len(calls) == 2


async def test_the_event_of_our_own_apply_that_comes_during_the_call_calls_nothing(world, registry):
    calls = []
    w = None

    @kopf.on.reconcile('kopfexamples', id='fn', registry=registry, owns=['configmaps'])
    async def fn(**kwargs):
        calls.append(kwargs)
        w.reconciler.poke('uid1', ['fn'], (CONFIGMAPS, 'c1'), '7')  # the watch is faster than the response
        applying.listener_var.get()(CONFIGMAPS, {'metadata': {'uid': 'c1', 'resourceVersion': '7'}})

    w = world()
    await w.see(make_body())
    await w.advance(0.25)
    await w.advance(1)
    assert len(calls) == 1


async def test_pokes_of_unknown_objects_and_handlers_are_ignored(world, registry):
    calls = recording(registry)
    w = world()
    w.reconciler.poke('unknown', ['fn'], (CONFIGMAPS, 'c1'), '1')
    await w.see(make_body())
    await w.advance(0.25)
    w.reconciler.poke('uid1', ['other'], (CONFIGMAPS, 'c1'), '1')
    await w.advance(1)
    assert len(calls) == 1


async def test_objects_are_known_by_name_while_they_exist(world, registry):
    recording(registry)
    w = world()
    await w.see(make_body())
    assert w.reconciler.key_of('ns', 'kex1') == 'uid1'
    await w.see(make_body(), reason=Reason.GONE)
    assert w.reconciler.key_of('ns', 'kex1') is None


# The end of reconciling.

async def test_an_object_being_deleted_or_gone_is_not_reconciled_any_more(world, registry):
    calls = recording(registry, resync=1)
    w = world()
    await w.see(make_body('a', 'uid-a'))
    await w.see(make_body('b', 'uid-b'))
    await w.advance(0.25)
    assert len(calls) == 2
    deleting = make_body('a', 'uid-a')
    deleting['metadata']['deletionTimestamp'] = '2020-01-01T00:00:00Z'
    await w.see(deleting, deleting=True)
    await w.see(make_body('b', 'uid-b'), reason=Reason.GONE)
    await w.advance(10)
    assert len(calls) == 2


async def test_an_object_that_the_gate_does_not_admit_any_more_is_forgotten(world, registry):
    class Gate:
        admitted = True

        def admits(self, key):
            return self.admitted

        @contextlib.asynccontextmanager
        async def handling(self, key):
            yield self.admitted

    gate = Gate()
    calls = recording(registry, resync=1)
    w = world(gate=gate)
    await w.see(make_body())
    await w.advance(0.25)
    gate.admitted = False
    await w.advance(1)
    await w.advance(10)
    assert len(calls) == 1
    assert w.reconciler.key_of('ns', 'kex1') is None


async def test_a_filter_that_does_not_match_skips_the_call(world, registry):
    calls = recording(registry, labels={'app': 'yes'})
    w = world()
    await w.see(make_body())
    await w.advance(1)
    assert calls == []


async def test_closing_waits_for_a_running_call(world, registry):
    done = []

    @kopf.on.reconcile('kopfexamples', id='fn', registry=registry, owns=['configmaps'])
    async def fn(**_):
        await asyncio.sleep(0)
        done.append(True)

    w = world()
    await w.see(make_body())
    w.clock.advance(0.25)
    await asyncio.sleep(0)
    await w.reconciler.close()
    assert done == [True]


# What is sent.

def test_only_the_changes_of_a_patch_are_sent():
    body = {'metadata': {'labels': {'a': '1'}}, 'status': {'fn': {'x': [1, 2]}, 'conditions': [{'type': 'R'}]}}
    patch = {'metadata': {'labels': {'a': '1', 'b': None, 'c': '3'}}, 'status': {'fn': {'x': [1, 2]},
                                                                                'conditions': [{'type': 'R'}]}}
    assert effective(patch, body) == {'metadata': {'labels': {'c': '3'}}}
    assert effective({'status': {'fn': {'x': [2, 1]}}}, body) == {'status': {'fn': {'x': [2, 1]}}}
    assert effective({'spec': None}, body) == {}


async def test_a_failure_of_our_own_is_reported_and_backed_off_without_stopping_the_object(world, registry, caplog):
    calls = recording(registry, results=[{'x': 1}, {'x': 2}])
    w = world()

    async def broken(body, patch, logger):
        raise RuntimeError('a bug')

    w.reconciler._patcher = broken
    await w.see(make_body())
    await w.advance(0)
    assert "Reconciling with Reconciler 'fn' has failed unexpectedly: a bug. It is tried again in 1s." in caplog.text
    await w.advance(1)
    assert len(calls) == 2 and calls[1]['triggers'] == {'retry'}


async def test_a_cancelled_call_is_answered_by_the_next_one(world, registry):
    release = asyncio.Event()
    calls = []

    @kopf.on.reconcile('kopfexamples', id='fn', registry=registry, owns=['configmaps'])
    async def fn(triggers, **_):
        calls.append(triggers)
        if len(calls) == 1:
            await release.wait()

    w = world()
    await w.see(make_body())
    await w.advance(0)
    task, = w.reconciler._tasks
    task.cancel()
    await w.advance(0)
    await w.advance(0.25)
    assert calls == [{'object', 'children'}, {'object', 'children'}]


async def test_objects_of_another_replica_are_forgotten_by_the_patrol(world, registry):
    class Gate:
        def __init__(self):
            self.ours = {'uid-a', 'uid-b'}

        def admits(self, key):
            return key in self.ours

        @contextlib.asynccontextmanager
        async def handling(self, key):
            yield key in self.ours

    gate = Gate()
    calls = recording(registry)
    w = world(gate=gate)
    await w.see(make_body('a', 'uid-a'))
    await w.see(make_body('b', 'uid-b'))
    await w.advance(0)
    gate.ours = {'uid-a'}
    await w.advance(5)
    assert w.reconciler.key_of('ns', 'a') == 'uid-a' and w.reconciler.key_of('ns', 'b') is None
    gate.ours = {'uid-a', 'uid-b'}
    await w.see(make_body('b', 'uid-b'))  # it is back: new here again
    await w.advance(0)
    assert [call['name'] for call in calls] == ['a', 'b', 'b']
    assert calls[2]['triggers'] == {'object', 'children'}


async def test_a_call_that_finds_everything_in_place_writes_nothing(world, registry):
    calls = []

    @kopf.on.reconcile('kopfexamples', id='fn', registry=registry, owns=['configmaps'])
    async def fn(body, patch, triggers, **_):
        calls.append(triggers)
        if kopf.is_observed(body, 'Ready') and 'children' not in triggers:
            return  # this generation is done, and no child has changed
        kopf.set_condition(body, patch, type='Ready', status=True, reason='Done', now=T0)

    w = world()
    await w.see(make_body())
    await w.advance(0)
    assert w.patches == [{'status': {'conditions': [{
        'type': 'Ready', 'status': 'True', 'reason': 'Done', 'message': '',
        'lastTransitionTime': '2020-01-01T00:00:00Z', 'observedGeneration': 1}]}}]
    await w.see(w.objects['uid1'])  # the event of our own patch: not a change of the essence
    w.reconciler.poke('uid1', ['fn'], (CONFIGMAPS, 'c1'), '5')  # a child has changed: the call runs in full
    await w.advance(1)
    assert calls == [{'object', 'children'}, {'children'}]
    assert len(w.patches) == 1  # the same condition again: nothing to send


async def test_a_gone_child_is_news_even_if_its_last_version_was_ours(world, registry):
    calls = []

    @kopf.on.reconcile('kopfexamples', id='fn', registry=registry, owns=['configmaps'])
    async def fn(**kwargs):
        calls.append(kwargs)
        applying.listener_var.get()(CONFIGMAPS, {'metadata': {'uid': 'c1', 'resourceVersion': '7'}})

    w = world()
    await w.see(make_body())
    await w.advance(0)
    w.reconciler.poke('uid1', ['fn'], (CONFIGMAPS, 'c1'), None)  # deleted
    await w.advance(1)
    assert len(calls) == 2


async def test_kopfs_own_annotations_and_the_status_are_not_changes(world, registry):
    calls = recording(registry)
    w = world()
    await w.see(make_body())
    await w.advance(0)
    body = make_body()
    body['metadata']['annotations'] = {
        'kopf.zalando.org/last-handled-configuration': '{"spec": {"field": "value"}}',
        'kopf.zalando.org/create_fn': '{"started": "2020-01-01T00:00:00+00:00", "retries": 1}',
        'kopf.zalando.org/touch-dummy': '2020-01-01T00:00:00+00:00'}
    body['status'] = {'create_fn': 'done'}
    body['metadata']['resourceVersion'] = '5'
    await w.see(body)
    await w.advance(1)
    assert len(calls) == 1
    body['metadata']['annotations']['someone/else'] = 'changed'  # a user's annotation is a change
    await w.see(body)
    await w.advance(0)
    assert len(calls) == 2
