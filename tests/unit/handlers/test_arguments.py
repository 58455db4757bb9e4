"""
Handler keyword arguments: typed parts, rendered per call; what each kind of handler receives.
"""
import dataclasses
import datetime

import pytest

import kopf.on
from kopf._handlers.arguments import Arguments, CauseArguments, EventArguments, ObjectArguments, OperatorArguments
from kopf._handlers.progression import HandlerState
from kopf._handlers.reasons import Reason
from kopf._handlers.registries import Activity, ChangingHandler
from kopf._structs import diffs
from kopf._structs.bodies import Body
from kopf._structs.ids import HandlerId
from kopf._structs.patches import Patch
from kopf.config import OperatorConfig
from tests.unit.conftest import RESOURCE, SELECTOR, T0, logger, make_handler

BODY = Body({'metadata': {'name': 'n', 'namespace': 'ns', 'uid': 'u', 'labels': {'l': '1'}}, 'spec': {'a': 1}})
OLD = {'spec': {'a': 0, 'b': 'same'}}
NEW = {'spec': {'a': 1, 'b': 'same'}}


@pytest.fixture()
def arguments():
    config = OperatorConfig()
    return Arguments(operator=OperatorArguments(logger=logger, memo='memo', config=config),
                     object=ObjectArguments(body=BODY, patch=Patch(), resource=SELECTOR))


# The keyword arguments of each handler kind, as the released Kopf passes them (observed, not guessed).
KOPF_OBJECT_KWARGS = {'annotations', 'body', 'labels', 'logger', 'memo', 'meta', 'name', 'namespace', 'param',
                      'patch', 'resource', 'retry', 'runtime', 'spec', 'started', 'status', 'uid'}
KOPF_CHANGING_KWARGS = KOPF_OBJECT_KWARGS | {'diff', 'new', 'old', 'reason'}
KOPF_WATCHING_KWARGS = KOPF_OBJECT_KWARGS | {'event', 'type'}
KOPF_ACTIVITY_KWARGS = {'activity', 'logger', 'memo', 'param', 'retry', 'runtime', 'settings', 'started'}
OURS_ACTIVITY_KWARGS = KOPF_ACTIVITY_KWARGS | {'config'}  # the settings by the name of their class, too


def test_every_handler_gets_the_operator_parts_but_not_the_settings():
    config = OperatorConfig()
    kwargs = Arguments(operator=OperatorArguments(logger=logger, memo='m', config=config)).render()
    assert kwargs == {'logger': logger, 'memo': 'm', 'param': None}


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


def test_activity_handlers_get_the_activity_and_the_settings():
    config = OperatorConfig()
    kwargs = Arguments(operator=OperatorArguments(logger=logger, memo=None, config=config),
                       activity=Activity.STARTUP).render()
    assert kwargs['activity'] == 'startup'
    assert kwargs['settings'] is config
    assert kwargs['config'] is config
    assert 'body' not in kwargs


async def test_activity_handlers_get_exactly_kopfs_kwargs_and_config(registry, config):
    from kopf._runtime import activities
    calls = []
    kopf.on.startup(registry=registry)(make_handler(calls, 'startup'))
    await activities.run_activity(registry=registry, activity=Activity.STARTUP, config=config, memo=None,
                                  logger=logger)
    (_, kwargs), = calls
    assert set(kwargs) == OURS_ACTIVITY_KWARGS


async def test_changing_handlers_get_exactly_kopfs_kwargs(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, registry=registry)(make_handler(calls, 'created'))
    kopf.on.field(*RESOURCE, field='spec.field', registry=registry)(make_handler(calls, 'field'))
    await server.run()
    assert [(name, set(kwargs)) for name, kwargs in calls] == [
        ('created', KOPF_CHANGING_KWARGS), ('field', KOPF_CHANGING_KWARGS)]


async def test_event_handlers_get_exactly_kopfs_kwargs_as_a_first_attempt(server, registry, clock):
    calls = []
    kopf.on.event(*RESOURCE, registry=registry)(make_handler(calls, 'event'))
    await server.cycle(event_type='ADDED')
    (_, kwargs), = calls
    assert set(kwargs) == KOPF_WATCHING_KWARGS
    assert (kwargs['retry'], kwargs['started'], kwargs['runtime']) == (0, T0, datetime.timedelta(0))


async def test_a_helper_with_a_config_parameter_gets_the_handlers_kwargs_without_a_collision(server, registry):
    # Operators pass **kwargs on to their own helpers; a keyword that Kopf never passes would collide.
    def helper(config, **kwargs):
        return config

    results = []
    kopf.on.create(*RESOURCE, registry=registry)(lambda **kwargs: results.append(helper(config='mine', **kwargs)))
    await server.run()
    assert results == ['mine']


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
    assert 'config' not in kwargs and 'settings' not in kwargs  # only activity handlers get them, as in Kopf
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
