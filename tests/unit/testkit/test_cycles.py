"""The in-memory handling cycles of the test kit: the real cycle, its patch, calls, outcomes and progress."""
import datetime
import json

import pytest

import kopf
from kopf.testing import Simulation, SimulationError, call_handler, handle

BODY = {'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
        'metadata': {'name': 'ex1', 'namespace': 'ns1'}, 'spec': {'field': 'x'}}
PREFIX = 'kopf.zalando.org'
T0 = datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc)


@pytest.fixture()
def registry():
    return kopf.OperatorRegistry()


def test_one_cycle_calls_the_handler_with_its_kwargs_and_gives_the_patch(registry):
    @kopf.on.create('kopfexamples', registry=registry, id='create_fn')
    def create_fn(spec, name, **_):
        return {'seen': spec['field'], 'name': name}

    cycle = handle(BODY, registry=registry)

    assert cycle.cause == 'create'
    assert cycle.called == ['create_fn']
    assert cycle.call('create_fn')['spec'] == {'field': 'x'}
    assert cycle.call('create_fn')['namespace'] == 'ns1'
    assert cycle.call('create_fn')['retry'] == 0
    assert cycle.outcome('create_fn').status == 'success'
    assert cycle.patch['status'] == {'create_fn': {'seen': 'x', 'name': 'ex1'}}
    stored = json.loads(cycle.patch['metadata']['annotations'][f'{PREFIX}/last-handled-configuration'])
    assert stored['spec'] == {'field': 'x'}
    assert cycle.done and cycle.progress == {}
    assert cycle.body['status']['create_fn'] == {'seen': 'x', 'name': 'ex1'}


def test_a_temporary_error_leaves_progress_and_the_run_moves_the_clock_to_the_retry(registry):
    @kopf.on.create('kopfexamples', registry=registry, id='flaky')
    def flaky(retry, **_):
        if retry < 2:
            raise kopf.TemporaryError("not yet", delay=600)
        return retry

    simulation = Simulation(BODY, registry=registry, now=T0)
    first = simulation.cycle()
    assert first.outcome('flaky').status == 'retry'
    assert first.outcome('flaky').delay == 600
    assert first.outcome('flaky').message == 'not yet'
    assert first.progress['flaky']['retries'] == 1
    assert first.progress['flaky']['delayed'].startswith('2030-01-01T00:10:00')
    assert not first.done and first.delay == 600

    rest = simulation.run()  # the cycles of the patches' own events call nothing: the handler sleeps
    assert [cycle.call('flaky')['retry'] for cycle in rest if cycle.called] == [1, 2]
    assert rest[-1].outcome('flaky').status == 'success'
    assert simulation.body.status['flaky'] == 2
    assert simulation.clock.now() == T0 + datetime.timedelta(seconds=1200)


def test_retries_run_out_into_a_failure(registry):
    @kopf.on.create('kopfexamples', registry=registry, id='broken', retries=2, backoff=5)
    def broken(**_):
        raise ValueError("boom")

    cycles = Simulation(BODY, registry=registry).run()
    assert [cycle.outcome('broken').status for cycle in cycles] == ['retry', 'failure']
    assert isinstance(cycles[-1].outcome('broken').exception, kopf.HandlerRetriesError)
    assert cycles[-1].done


def test_given_progress_is_where_the_handler_continues(registry):
    @kopf.on.create('kopfexamples', registry=registry, id='create_fn')
    def create_fn(retry, **_):
        return retry

    cycle = Simulation(BODY, registry=registry, progress={'create_fn': {'retries': 3}}).cycle()
    assert cycle.call('create_fn')['retry'] == 3


def test_an_old_state_makes_an_update_with_its_diff(registry):
    @kopf.on.update('kopfexamples', registry=registry, id='update_fn')
    def update_fn(old, new, diff, **_):
        return [list(item[1]) for item in diff]

    old = {**BODY, 'spec': {'field': 'before'}}
    cycle = call_handler(update_fn, BODY, registry=registry, old=old)
    assert cycle.cause == 'update'
    assert cycle.call('update_fn')['old']['spec'] == {'field': 'before'}
    assert cycle.patch['status'] == {'update_fn': [['spec', 'field']]}


def test_a_change_after_the_creation_is_an_update(registry):
    @kopf.on.create('kopfexamples', registry=registry, id='create_fn')
    def create_fn(**_):
        return 'c'

    @kopf.on.field('kopfexamples', field='spec.field', registry=registry, id='field_fn')
    def field_fn(old, new, **_):
        return {'old': old, 'new': new}

    simulation = Simulation(BODY, registry=registry)
    simulation.run()
    simulation.change({'spec': {'field': 'y'}})
    cycle = simulation.cycle()
    assert cycle.cause == 'update'
    assert cycle.called == ['field_fn/spec.field']
    assert cycle.outcome('field_fn/spec.field').result == {'old': 'x', 'new': 'y'}


def test_deletion_adds_the_finalizer_first_and_removes_it_after_the_delete_handler(registry):
    @kopf.on.delete('kopfexamples', registry=registry, id='delete_fn')
    def delete_fn(**_):
        pass

    simulation = Simulation(BODY, registry=registry)
    assert [cycle.cause for cycle in simulation.run()] == ['finalizer', 'create']
    assert list(simulation.body.metadata.finalizers) == [f'{PREFIX}/KopfFinalizerMarker']
    simulation.delete()
    cycles = simulation.run()
    assert cycles[-1].cause == 'delete' and cycles[-1].called == ['delete_fn']
    assert simulation.gone


def test_filters_of_the_real_registry_apply(registry):
    @kopf.on.create('kopfexamples', registry=registry, id='create_fn', labels={'role': 'main'})
    def create_fn(**_):
        pass

    assert handle(BODY, registry=registry).called == []
    labelled = {**BODY, 'metadata': {**BODY['metadata'], 'labels': {'role': 'main'}}}
    assert handle(labelled, registry=registry).called == ['create_fn']


def test_sub_handlers_are_recorded_by_their_ids(registry):
    @kopf.on.create('kopfexamples', registry=registry, id='parent')
    def parent(**_):
        kopf.register(lambda **_: 1, id='child')

    cycle = handle(BODY, registry=registry)
    assert cycle.called == ['parent', 'parent/child']
    assert cycle.outcome('parent/child').result == 1


def test_event_handlers_are_recorded_too(registry):
    @kopf.on.event('kopfexamples', registry=registry, id='watch_fn')
    def watch_fn(type, **_):
        pass

    cycle = handle(BODY, registry=registry)
    assert cycle.call('watch_fn')['type'] == 'ADDED'


def test_the_log_of_the_cycle_is_kept(registry):
    @kopf.on.create('kopfexamples', registry=registry, id='create_fn')
    def create_fn(logger, **_):
        logger.info("hello from the handler")

    cycle = handle(BODY, registry=registry)
    assert "INFO hello from the handler" in cycle.logs
    assert "INFO Handler 'create_fn' succeeded." in cycle.logs


def test_a_handler_not_called_fails_with_the_names_of_those_called(registry):
    @kopf.on.create('kopfexamples', registry=registry, id='create_fn')
    def create_fn(**_):
        pass

    cycle = handle(BODY, registry=registry)
    with pytest.raises(AssertionError, match=r"'other' was not called .* called: \['create_fn'\]"):
        cycle.call('other')


def test_an_unknown_handler_to_call_is_named_with_the_known_ones(registry):
    @kopf.on.create('kopfexamples', registry=registry, id='create_fn')
    def create_fn(**_):
        pass

    with pytest.raises(SimulationError, match=r"No handler of changes 'nope' .* \['create_fn'\]"):
        call_handler('nope', BODY, registry=registry)


def test_a_body_without_a_kind_is_refused_with_an_example():
    with pytest.raises(SimulationError, match="needs an apiVersion and a kind"):
        handle({'metadata': {'name': 'x'}})


async def test_async_tests_await_the_twins(registry):
    @kopf.on.create('kopfexamples', registry=registry, id='create_fn')
    async def create_fn(**_):
        return 1

    simulation = Simulation(BODY, registry=registry)
    with pytest.raises(SimulationError, match="await"):
        simulation.cycle()
    cycle = await simulation.acycle()
    assert cycle.outcome('create_fn').result == 1


def test_nothing_observes_a_cycle_outside_of_the_simulation(registry):
    from kopf._handlers import execution

    @kopf.on.create('kopfexamples', registry=registry, id='create_fn')
    def create_fn(**_):
        return execution.observer.get() is not None

    handle(BODY, registry=registry)
    assert execution.observer.get() is None
