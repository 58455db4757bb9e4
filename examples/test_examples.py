"""
The examples' tests, written with the test kit (``kopf.testing``) as an operator's author would write them.

Two layers (see docs/testing.rst):

* In memory, in milliseconds: :class:`kopf.testing.Simulation` runs the real
  handling cycles of one object without a server -- the handlers called,
  their outcomes and retries, the patch, the progress.
* Against a real API server: the plugin's fixtures start a local control
  plane once per session (``kopf_cluster``), give each test a namespace
  (``kopf_namespace``) and run the example in the test (``kopf_operator``).
  Only what needs a server is tested there: children, daemons, server-side apply.
"""
import collections
import logging
from pathlib import Path

import pytest
import yaml

import kopf
from kopf.testing import Simulation, load_operator, wait_for

EXAMPLES = Path(__file__).parent
OBJ = yaml.safe_load((EXAMPLES / 'obj.yaml').read_text())
PREFIX = 'kopf.zalando.org'


def example(name: str) -> Path:
    return EXAMPLES / name / 'example.py'


@pytest.fixture()
def crd(kopf_cluster):
    """The examples' CRD on the server (it stays for the session: other tests use it too)."""
    kopf_cluster.apply_crd(EXAMPLES / 'crd.yaml')


# In memory.

def test_01_minimal_in_memory():
    registry = load_operator(example('01-minimal'))
    cycle = Simulation(OBJ, registry=registry).cycle()
    assert cycle.cause == 'create' and cycle.done
    assert cycle.patch['status'] == {'create_fn': {'message': 'hello, kopf-example-1', 'field': 'value'}}
    assert f'{PREFIX}/last-handled-configuration' in cycle.patch['metadata']['annotations']


def test_03_exceptions_decide_the_retries():
    simulation = Simulation(OBJ, registry=load_operator(example('03-exceptions')))
    first = simulation.cycle()
    assert {name: outcome.status for name, outcome in first.outcomes.items()} == {
        'eventually_succeeds': 'retry', 'fails_permanently': 'failure',
        'runs_out_of_retries': 'retry', 'errors_ignored': 'success'}
    assert first.outcome('eventually_succeeds').delay == 2
    assert first.progress['eventually_succeeds']['retries'] == 1

    last = simulation.run()[-1]  # the clock moves by the delays: no waiting
    assert last.done
    assert simulation.body.status == {'eventually_succeeds': {'attempts': 2}}
    failed = [cycle.outcomes['runs_out_of_retries'] for cycle in simulation.cycles
              if 'runs_out_of_retries' in cycle.outcomes]
    assert [outcome.status for outcome in failed] == ['retry', 'retry', 'failure']
    assert isinstance(failed[-1].exception, kopf.HandlerRetriesError)


def test_04_updates_and_deletes_across_the_life_of_an_object():
    simulation = Simulation(OBJ, registry=load_operator(example('04-updates-deletes')))
    assert [cycle.cause for cycle in simulation.run()] == ['finalizer', 'create']
    assert list(simulation.body.metadata.finalizers) == [f'{PREFIX}/KopfFinalizerMarker']

    simulation.change({'spec': {'field': 'changed'}})
    update = simulation.run()[-1]
    assert sorted(update.called) == ['field_fn/spec.field', 'update_fn']
    assert update.outcome('field_fn/spec.field').result == {'old': 'value', 'new': 'changed'}
    assert update.call('update_fn')['diff'] == (('change', ('spec', 'field'), 'value', 'changed'),)

    simulation.delete()
    deletion = simulation.run()[-1]
    assert deletion.called == ['delete_fn'] and simulation.gone


def test_05_subhandlers_retry_alone():
    simulation = Simulation(OBJ, registry=load_operator(example('05-subhandlers')))
    cycles = simulation.run()
    calls = [name for cycle in cycles for name in cycle.called]
    assert calls.count('create_fn/item-item1') == 1  # succeeded: never called again
    assert calls.count('create_fn/item-item2') == 2  # retried once
    assert simulation.body.status['execute_fn'] == 'all done'


def test_06_builtin_configmaps_filtered_by_labels():
    registry = load_operator(example('06-builtin'))
    configmap = {'apiVersion': 'v1', 'kind': 'ConfigMap', 'data': {'a': '1', 'bb': '22'},
                 'metadata': {'name': 'cm', 'labels': {'kopf-example': 'yes'}}}
    cycles = Simulation(configmap, registry=registry).run()
    assert cycles[0].called == ['seen', 'count_keys', 'measure_size']
    assert cycles[0].outcome('measure_size').status == 'retry'
    assert 'status' not in cycles[-1].body  # nothing returned: nothing for a status that ConfigMaps lack

    unlabelled = {**configmap, 'metadata': {'name': 'other'}}
    assert Simulation(unlabelled, registry=registry).cycle().called == []


def test_07_persistence_in_the_status(monkeypatch):
    registry = load_operator(example('07-persistence'))
    monkeypatch.setenv('EXAMPLE_STORAGE', 'status')
    settings = kopf.OperatorSettings()
    [startup] = registry.get_activity_handlers(kopf.Activity.STARTUP)
    startup.fn(config=settings, settings=settings, logger=logging.getLogger('test'))  # as the operator starts

    simulation = Simulation(OBJ, registry=registry, settings=settings)
    first = simulation.cycle()
    assert first.progress['create_fn']['retries'] == 1
    assert simulation.body.status['kopf-example']['progress']['create_fn']['retries'] == 1
    assert not simulation.body.metadata.annotations  # nothing of kopf's in the annotations
    simulation.run()
    assert simulation.body.status['create_fn'] == {'attempts': 2}


def test_08_embedding_counts_in_the_shared_memo():
    registry = load_operator(example('08-embedding'))
    memo = kopf.Memo(counts=collections.Counter())
    for name in ('a', 'b'):
        obj = {**OBJ, 'metadata': {**OBJ['metadata'], 'name': name}}
        Simulation(obj, registry=registry, memo=memo).run()
    assert memo.counts['created'] == 2


# Against a real API server.

def test_01_minimal_on_a_server(crd, kopf_cluster, kopf_namespace, kopf_operator):
    operator = kopf_operator(example('01-minimal'))
    created = kopf_cluster.create(OBJ, namespace=kopf_namespace)
    handled = operator.wait_until_handled(created)
    assert handled['status']['create_fn'] == {'message': 'hello, kopf-example-1', 'field': 'value'}


def test_02_children_are_created_and_owned(crd, kopf_cluster, kopf_api, kopf_namespace, kopf_operator):
    operator = kopf_operator(example('02-children'))
    owner = operator.wait_until_handled(kopf_cluster.create(OBJ, namespace=kopf_namespace))
    child = kopf_api.get(f'/api/v1/namespaces/{kopf_namespace}/configmaps/kopf-example-1-data')
    assert child['data'] == {'field': 'value', 'items': 'item1,item2'}
    assert child['metadata']['ownerReferences'][0]['uid'] == owner['metadata']['uid']


def test_09_daemons_and_timers_run_beside_the_object(crd, kopf_cluster, kopf_api, kopf_namespace, kopf_operator):
    operator = kopf_operator(example('09-daemons'))
    created = kopf_cluster.create(OBJ, namespace=kopf_namespace)
    path = kopf_api.path_of('kopf.dev/v1', 'KopfExample', namespace=kopf_namespace, name=created['metadata']['name'])
    wait_for(lambda: (kopf_api.get(path).get('status') or {}).get('beats', 0) >= 1, what="the timer's first beat")
    wait_for(lambda: "the field is 'value'" in operator.log, what="the monitor daemon's report")
    kopf_api.delete(path)
    wait_for(lambda: kopf_api.find(path) is None, what="the deletion, once the daemons have stopped")
    assert "tidied up after" in operator.log


def test_10_reconciliation_keeps_the_child_as_the_spec_says(crd, kopf_cluster, kopf_api, kopf_namespace,
                                                            kopf_operator):
    kopf_operator(example('10-reconciliation'))
    kopf_cluster.create(OBJ, namespace=kopf_namespace)
    child = f'/api/v1/namespaces/{kopf_namespace}/configmaps/kopf-example-1-data'
    wait_for(lambda: kopf_api.find(child), what="the reconciled ConfigMap")
    kopf_api.patch(child, {'data': {'field': 'edited by hand'}})
    wait_for(lambda: kopf_api.get(child)['data']['field'] == 'value', what="the ConfigMap taken back")
