"""What the keeper holds of an object and of its daemons: live views of the latest state, and the times of events."""
import asyncio

import kopf
from kopf._daemons.objects import KeptObject, Runner
from kopf._handlers.arguments import OperatorArguments
from kopf._handlers.registries import DaemonHandler
from kopf._structs.bodies import Body
from kopf._structs.stoppers import DaemonStoppingReason


def kept(raw, config, *, now=100.0):
    operator = OperatorArguments(logger=kopf.LocalObjectLogger(body=raw), memo=kopf.Memo(), config=config)
    return KeptObject(key='ns1/ex1', body=Body(raw), operator=operator, resource=None, now=now)


async def test_the_live_views_show_the_latest_state_whenever_they_are_read(raw, config):
    obj = kept(raw, config)
    kwargs = obj.live_kwargs()
    spec, labels = kwargs['spec'], kwargs['labels']
    assert dict(spec) == {'field': 'x', 'other': 1} and dict(labels) == {}
    obj.update(Body({**raw, 'spec': {'field': 'y'}, 'metadata': {**raw['metadata'], 'labels': {'a': 'b'}}}), now=105)
    assert dict(spec) == {'field': 'y'} and dict(labels) == {'a': 'b'}
    assert kwargs['body']['spec']['field'] == 'y'
    assert kwargs['name'] == 'ex1'


async def test_an_event_is_counted_timed_and_woken_for(raw, config):
    obj = kept(raw, config, now=100)
    assert (obj.first_seen, obj.changed_at, obj.generation) == (100, 100, 0)
    waiting = asyncio.create_task(obj.changed())
    await asyncio.sleep(0)
    obj.update(Body(raw), now=107)
    await asyncio.wait_for(waiting, timeout=1)
    assert (obj.first_seen, obj.changed_at, obj.generation) == (100, 107, 1)


async def test_a_runner_remembers_when_it_was_first_asked_to_stop_and_why(raw, config):
    runner = Runner(handler=DaemonHandler(fn=lambda **_: None, id='d'), obj=kept(raw, config))
    assert runner.asked_at is None and runner.reasons() == 'not asked'
    runner.stop(DaemonStoppingReason.RESOURCE_DELETED, now=5)
    runner.stop(DaemonStoppingReason.DAEMON_CANCELLED, now=8)
    assert runner.asked_at == 5
    assert runner.reasons() == 'resource_deleted, daemon_cancelled'
    assert runner.threaded and not runner.running
