"""
Objects at rest: an event that certainly needs no cycle is known before any of the cycle is made.

The promise is checked against the full cycle: whenever ``at_rest`` says
yes, the full cycle on the same object (made to run by a stage of its own,
which turns the shortcut off) finds nothing to do -- a ``NOOP``, no patch,
no delay, no handler called. And where the full cycle would act, or could
act depending on the object, ``at_rest`` says no.
"""
import copy

import pytest

import kopf
import kopf.on
from kopf._cycle import causation
from kopf._cycle.cycle import STAGES, at_rest, handle_object
from kopf._structs.bodies import Body
from kopf.errors import TemporaryError
from tests.unit.conftest import FINALIZER, RESOURCE, SELECTOR, logger, make_handler


async def rests(server, *, event_type='MODIFIED'):
    return await at_rest(registry=server.registry, config=server.config, resource=SELECTOR,
                         event_type=event_type, body=server.body)


async def full_cycle(server, *, first_seen=True, event_type=None):
    """The cycle as it is without the shortcut: an extra stage (that does nothing) turns it off."""
    async def looking(*_):
        return None
    return await handle_object(
        registry=server.registry, config=server.config, resource=SELECTOR, event_type=event_type,
        body=Body(copy.deepcopy(server.raw)), first_seen=first_seen, memo=None, logger=logger,
        clock=server.clock, stages=(*STAGES, looking))


async def assert_full_cycle_does_nothing(server, calls):
    handled = len(calls)
    result = await full_cycle(server)
    assert result.cause == 'noop' and not result.patch and result.delay is None
    assert len(calls) == handled


async def test_a_handled_object_is_at_rest_and_the_full_cycle_agrees(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, registry=registry)(make_handler(calls, 'create'))
    await server.run()
    assert await rests(server)
    assert await rests(server, event_type=None)  # as listed
    await assert_full_cycle_does_nothing(server, calls)


async def test_the_cycle_itself_takes_the_shortcut_for_an_object_at_rest(server, registry, monkeypatch):
    calls = []
    kopf.on.create(*RESOURCE, registry=registry)(make_handler(calls, 'create'))
    await server.run()

    async def no_cause(**_):
        raise AssertionError("The cause of an object at rest is not even looked for.")
    monkeypatch.setattr(causation, 'detect', no_cause)
    result = await server.cycle(first_seen=True, event_type=None)
    assert result.cause == 'noop' and not result.patch and result.delay is None and result.done
    assert len(calls) == 1


async def test_with_an_unfiltered_delete_handler_the_finalizer_must_be_there(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, registry=registry)(make_handler(calls, 'create'))
    kopf.on.delete(*RESOURCE, registry=registry)(make_handler(calls, 'delete'))
    await server.run()
    await server.run()  # the finalizer first, then the creation
    assert FINALIZER in server.raw['metadata']['finalizers']
    assert await rests(server)
    await assert_full_cycle_does_nothing(server, calls)

    server.change({'metadata': {'finalizers': []}})  # someone has removed it
    assert not await rests(server)
    assert (await full_cycle(server)).cause == 'finalizer'


async def test_a_finalizer_that_no_handler_needs_is_not_at_rest(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, registry=registry)(make_handler(calls, 'create'))
    await server.run()
    server.change({'metadata': {'finalizers': [FINALIZER]}})
    assert not await rests(server)
    assert (await full_cycle(server)).patch['metadata']['finalizers'] == []


async def test_a_changed_object_is_not_at_rest(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, registry=registry)(make_handler(calls, 'create'))
    kopf.on.update(*RESOURCE, registry=registry)(make_handler(calls, 'update'))
    await server.run()
    server.change({'spec': {'field': 'y'}})
    assert not await rests(server)
    assert (await full_cycle(server)).cause == 'update'


async def test_a_change_that_the_essence_leaves_out_is_at_rest(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, registry=registry)(make_handler(calls, 'create'))
    await server.run()
    server.change({'status': {'phase': 'Running'}, 'metadata': {'generation': 7}})  # another controller's
    assert await rests(server)
    await assert_full_cycle_does_nothing(server, calls)


async def test_a_never_handled_object_is_not_at_rest(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, registry=registry)(make_handler(calls, 'create'))
    assert not await rests(server)
    assert (await full_cycle(server)).cause == 'create'


async def test_an_object_with_progress_is_not_at_rest(server, registry, clock):
    calls = []
    kopf.on.create(*RESOURCE, registry=registry)(make_handler(calls, 'create'))
    kopf.on.update(*RESOURCE, registry=registry)(
        make_handler(calls, 'update', failures=[TemporaryError('later', delay=60)]))
    await server.run()
    server.change({'spec': {'field': 'y'}})
    first = await server.cycle()
    assert not first.done  # the update handler's retry is stored
    server.change({'spec': {'field': 'x'}})  # reverted: the essence is as last handled, the progress is left
    assert not await rests(server)
    result = await full_cycle(server)
    assert result.cause == 'noop' and result.patch  # the left-over progress is purged


async def test_progress_in_the_legacy_status_is_not_at_rest(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, registry=registry)(make_handler(calls, 'create'))
    await server.run()
    server.change({'status': {'kopf': {'progress': {'create': {'started': '2020-01-01T00:00:00+00:00',
                                                                 'retries': 1}}}}})
    assert not await rests(server)
    result = await full_cycle(server)
    assert result.cause == 'noop' and result.patch['status']['kopf']['progress']['create'] is None


async def test_a_finalizer_that_a_filtered_delete_handler_does_not_need_is_not_at_rest(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, registry=registry)(make_handler(calls, 'create'))
    kopf.on.delete(*RESOURCE, registry=registry, labels={'a': 'b'})(make_handler(calls, 'delete'))
    await server.run()
    server.change({'metadata': {'finalizers': [FINALIZER]}})  # e.g. the label was there once
    assert not await rests(server)
    assert (await full_cycle(server)).patch['metadata']['finalizers'] == []


async def test_an_object_being_deleted_is_not_at_rest(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, registry=registry)(make_handler(calls, 'create'))
    await server.run()
    server.change({'metadata': {'deletionTimestamp': '2020-01-01T00:00:00Z', 'finalizers': ['other']}})
    assert not await rests(server)


async def test_a_deletion_event_is_never_at_rest(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, registry=registry)(make_handler(calls, 'create'))
    await server.run()
    assert not await rests(server, event_type='DELETED')


@pytest.mark.parametrize('declare', [
    pytest.param(lambda registry, calls: kopf.on.resume(*RESOURCE, registry=registry)(
        make_handler(calls, 'resume')), id='resume-handler'),
    pytest.param(lambda registry, calls: kopf.on.event(*RESOURCE, registry=registry)(
        make_handler(calls, 'event')), id='event-handler'),
    pytest.param(lambda registry, calls: kopf.on.daemon(*RESOURCE, registry=registry)(
        make_handler(calls, 'daemon')), id='daemon'),
    pytest.param(lambda registry, calls: kopf.on.timer(*RESOURCE, registry=registry, interval=60)(
        make_handler(calls, 'timer')), id='timer'),
    pytest.param(lambda registry, calls: kopf.on.delete(*RESOURCE, registry=registry, labels={'a': 'b'})(
        make_handler(calls, 'delete')), id='filtered-delete-handler'),
])
async def test_resources_with_handlers_that_may_act_on_any_event_are_never_at_rest(server, registry, declare):
    calls = []
    kopf.on.create(*RESOURCE, registry=registry)(make_handler(calls, 'create'))
    await server.run()
    assert await rests(server)
    declare(registry, calls)
    assert not await rests(server)


@pytest.mark.parametrize('filters', [
    pytest.param({'labels': {'a': 'b'}}, id='labels'),
    pytest.param({'annotations': {'a': kopf.PRESENT}}, id='annotations'),
    pytest.param({'when': lambda **_: True}, id='when'),
    pytest.param({'field': 'spec.field', 'value': 'x'}, id='field-value'),
])
async def test_handlers_that_all_have_filters_leave_nothing_at_rest(server, registry, filters):
    calls = []
    kopf.on.create(*RESOURCE, registry=registry, **filters)(make_handler(calls, 'create'))
    server.change({'metadata': {'labels': {'a': 'b'}, 'annotations': {'a': 'here'}}})
    await server.run()
    assert len(calls) == 1
    assert not await rests(server)


async def test_an_update_handler_of_a_field_change_selects_every_object(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, registry=registry)(make_handler(calls, 'create'))
    kopf.on.update(*RESOURCE, registry=registry, field='spec.field')(make_handler(calls, 'update'))
    await server.run()
    assert await rests(server)
    await assert_full_cycle_does_nothing(server, calls)


async def test_a_resource_without_handlers_of_changes_is_not_judged(server, registry):
    assert not await rests(server)
