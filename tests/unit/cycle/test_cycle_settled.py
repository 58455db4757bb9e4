"""
Which concluding patches settle an object: the event of exactly the state they leave needs no cycle.

The worker skips that event (``kopf._cycle.queueing``), so the promise is
checked here the only way that matters: whenever a cycle says ``settled``,
one more cycle on the object as the patch has left it must find nothing to
do -- no handler, no patch, no delay. And where that next cycle would act,
the cycle must not say it.
"""
import kopf.on
from kopf.errors import TemporaryError
from tests.unit.conftest import FINALIZER, RESOURCE, make_handler, names


async def assert_settles(server, calls):
    """The last cycle has settled the object: the next one, on the patched object, does nothing."""
    handled = len(calls)
    patches = len(server.patches)
    again = await server.cycle()
    assert again.cause == 'noop'
    assert not again.patch and again.delay is None
    assert len(calls) == handled and len(server.patches) == patches


async def test_a_creation_whose_handlers_change_nothing_settles(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, registry=registry)(make_handler(calls, 'create', result={'made': 1}))
    results = await server.run()
    assert [r.settled for r in results] == [True]
    assert server.raw['status']['create'] == {'made': 1}  # results in the status do not unsettle it
    await assert_settles(server, calls)


async def test_an_update_settles_after_its_last_retry_only(server, registry, clock):
    calls = []
    kopf.on.create(*RESOURCE, registry=registry)(make_handler(calls, 'create'))
    kopf.on.update(*RESOURCE, registry=registry)(
        make_handler(calls, 'update', failures=[TemporaryError('later', delay=5)]))
    await server.run()
    server.change({'spec': {'field': 'y'}})
    results = await server.run()
    assert [r.settled for r in results] == [False, True]
    assert names(calls) == ['create', 'update', 'update']
    await assert_settles(server, calls)


async def test_handlers_that_change_the_object_do_not_settle_it(server, registry):
    calls = []

    def label(patch, **kwargs):
        calls.append(('label', kwargs))
        patch.metadata.labels['seen'] = 'yes'
    kopf.on.create(*RESOURCE, registry=registry)(label)
    results = await server.run()
    assert [r.settled for r in results] == [False]
    again = await server.cycle()  # the label is a change of the essence: it is handled (and stored) next
    assert again.patch


async def test_the_finalizer_cycle_does_not_settle_but_the_creation_after_it_does(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, registry=registry)(make_handler(calls, 'create'))
    kopf.on.delete(*RESOURCE, registry=registry)(make_handler(calls, 'delete'))
    first = await server.cycle()
    assert first.cause == 'finalizer' and not first.settled
    second = await server.cycle()
    assert second.cause == 'create' and second.settled
    await assert_settles(server, calls)


async def test_a_finalizer_that_no_handler_needs_any_more_is_removed_by_the_next_cycle(server, registry):
    server.raw['metadata']['finalizers'] = [FINALIZER]  # left by an earlier version of the operator
    calls = []
    kopf.on.create(*RESOURCE, registry=registry)(make_handler(calls, 'create'))
    results = await server.run()
    assert [r.settled for r in results] == [False]
    again = await server.cycle()
    assert again.patch['metadata']['finalizers'] == []


async def test_event_handlers_see_every_event_so_nothing_settles(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, registry=registry)(make_handler(calls, 'create'))
    kopf.on.event(*RESOURCE, registry=registry)(make_handler(calls, 'event'))
    results = await server.run()
    assert [r.settled for r in results] == [False]


async def test_daemons_and_timers_see_every_state_so_nothing_settles(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, registry=registry)(make_handler(calls, 'create'))
    kopf.timer(*RESOURCE, interval=60, registry=registry)(make_handler(calls, 'timer'))
    results = await server.run()
    assert results[-1].cause == 'create' and results[-1].done
    assert not any(r.settled for r in results)


async def test_results_do_not_settle_when_a_handler_watches_a_status_field(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, registry=registry)(make_handler(calls, 'create', result='made'))
    kopf.on.field(*RESOURCE, field='status.create', registry=registry)(make_handler(calls, 'field'))
    results = await server.run()
    assert [r.settled for r in results] == [False]
    await server.cycle()
    assert names(calls) == ['create', 'field']  # the result is a change of the watched field


async def test_a_deletion_never_settles(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, registry=registry)(make_handler(calls, 'create'))
    kopf.on.delete(*RESOURCE, registry=registry)(make_handler(calls, 'delete'))
    await server.run()
    await server.run()
    server.change({'metadata': {'deletionTimestamp': '2020-01-01T00:00:00Z'}})
    results = await server.run()
    assert results[-1].cause == 'delete' and results[-1].done
    assert not any(r.settled for r in results)
