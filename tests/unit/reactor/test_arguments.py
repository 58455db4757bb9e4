"""
Handler keyword arguments: typed parts, rendered per call; what each kind of handler receives.
"""
import dataclasses
import datetime

import pytest

import kopf.on
from kopf.config import OperatorConfig
from kopf.reactor.arguments import (
    Arguments,
    CauseArguments,
    EventArguments,
    ObjectArguments,
    OperatorArguments,
)
from kopf.reactor.causation import Reason
from kopf.reactor.progression import HandlerState
from kopf.reactor.registries import Activity, ChangingHandler
from kopf.structs import diffs
from kopf.structs.bodies import Body
from kopf.structs.ids import HandlerId
from kopf.structs.patches import Patch

from .conftest import RESOURCE, SELECTOR, T0, logger, make_handler

BODY = Body({'metadata': {'name': 'n', 'namespace': 'ns', 'uid': 'u', 'labels': {'l': '1'}}, 'spec': {'a': 1}})
OLD = {'spec': {'a': 0, 'b': 'same'}}
NEW = {'spec': {'a': 1, 'b': 'same'}}


@pytest.fixture()
def arguments():
    config = OperatorConfig()
    return Arguments(operator=OperatorArguments(logger=logger, memo='memo', config=config),
                     object=ObjectArguments(body=BODY, patch=Patch(), resource=SELECTOR))


def test_every_handler_gets_the_operator_parts():
    config = OperatorConfig()
    kwargs = Arguments(operator=OperatorArguments(logger=logger, memo='m', config=config)).render()
    assert kwargs == {'logger': logger, 'memo': 'm', 'config': config, 'settings': config, 'param': None}


def test_handlers_of_objects_get_the_object_and_the_patch(arguments):
    kwargs = arguments.render()
    assert kwargs['body'] is BODY
    assert kwargs['spec'] == {'a': 1}
    assert kwargs['meta']['name'] == 'n'
    assert (kwargs['name'], kwargs['namespace'], kwargs['uid']) == ('n', 'ns', 'u')
    assert kwargs['labels'] == {'l': '1'} and kwargs['annotations'] == {}
    assert kwargs['status'] == {}
    assert kwargs['patch'] is arguments.object.patch
    assert kwargs['resource'] == SELECTOR


def test_parts_are_added_without_changing_the_original(arguments):
    cause = CauseArguments(reason=Reason.UPDATE, old=OLD, new=NEW, diff=diffs.diff(OLD, NEW))
    with_cause = arguments.with_cause(cause)
    assert 'reason' not in arguments.render()
    assert with_cause.render()['reason'] == 'update'
    with pytest.raises(dataclasses.FrozenInstanceError):
        arguments.cause = cause  # type: ignore[misc]


def test_each_render_is_a_new_dict(arguments):
    first = arguments.render()
    first['extra'] = 1
    assert 'extra' not in arguments.render()


def test_event_handlers_get_the_event(arguments):
    kwargs = arguments.with_event(EventArguments(type='ADDED', raw=BODY.raw)).render()
    assert kwargs['type'] == 'ADDED'
    assert kwargs['event'] == {'type': 'ADDED', 'object': BODY.raw}


def test_retried_handlers_get_where_they_stand(arguments, clock):
    past = HandlerState.from_scratch(clock=clock)
    clock.advance(5)
    past = dataclasses.replace(past, retries=2)
    kwargs = arguments.with_attempt(past).render()
    assert kwargs['retry'] == 2
    assert kwargs['started'] == T0
    assert kwargs['runtime'] == datetime.timedelta(seconds=5)


def test_field_handlers_see_only_their_field(arguments):
    cause = CauseArguments(reason=Reason.UPDATE, old=OLD, new=NEW, diff=diffs.diff(OLD, NEW))
    handler = ChangingHandler(fn=lambda **_: None, id=HandlerId('f/spec.a'), field=('spec', 'a'), param=42)
    kwargs = arguments.with_cause(cause).for_handler(handler).render()
    assert (kwargs['old'], kwargs['new']) == (0, 1)
    assert kwargs['diff'] == [('change', (), 0, 1)]
    assert kwargs['param'] == 42
    assert kwargs['reason'] == 'update'


def test_activity_handlers_get_the_activity():
    config = OperatorConfig()
    kwargs = Arguments(operator=OperatorArguments(logger=logger, memo=None, config=config),
                       activity=Activity.STARTUP).render()
    assert kwargs['activity'] == 'startup'
    assert 'body' not in kwargs


async def test_handlers_of_a_cause_receive_the_standard_kwargs(server, registry, config, raw):
    calls = []
    kopf.on.create(*RESOURCE, id='h', param={'p': 1}, registry=registry)(make_handler(calls, 'h'))

    await server.cycle()

    (_, kwargs), = calls
    assert isinstance(kwargs['body'], Body)
    assert kwargs['body'].raw == raw
    assert kwargs['spec'] == {'field': 'x', 'other': 1}
    assert kwargs['meta']['name'] == 'ex1'
    assert kwargs['name'] == 'ex1'
    assert kwargs['namespace'] == 'ns1'
    assert kwargs['uid'] == 'uid1'
    assert kwargs['labels'] == {}
    assert kwargs['annotations'] == {}
    assert kwargs['status'] == {}
    assert isinstance(kwargs['patch'], Patch)
    assert kwargs['logger'] is logger
    assert kwargs['reason'] == 'create'
    assert kwargs['old'] is None
    assert kwargs['new'] == {'spec': {'field': 'x', 'other': 1}}
    assert kwargs['diff'] == [('add', (), None, {'spec': {'field': 'x', 'other': 1}})]
    assert kwargs['retry'] == 0
    assert kwargs['started'] == T0
    assert kwargs['runtime'] == datetime.timedelta(0)
    assert kwargs['memo'] is server.memo
    assert kwargs['config'] is config
    assert kwargs['settings'] is config
    assert kwargs['param'] == {'p': 1}
    assert kwargs['resource'] == SELECTOR


async def test_handlers_of_one_cycle_share_the_patch_but_not_the_kwargs(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, id='a', param='pa', registry=registry)(make_handler(calls, 'a'))
    kopf.on.create(*RESOURCE, id='b', param='pb', registry=registry)(make_handler(calls, 'b'))

    await server.cycle()

    (_, a), (_, b) = calls
    assert a['patch'] is b['patch']
    assert a is not b
    assert (a['param'], b['param']) == ('pa', 'pb')
