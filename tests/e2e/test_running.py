"""Running operators for real: in-process with KopfRunner, and ``kopf run`` failing clearly."""
from __future__ import annotations

import json

import pytest

import kopf
from kopf.testing import KopfRunner, wait_for
from tests.e2e.harness import OPERATORS, handlers_called


@pytest.fixture()
def fresh_registry():
    """In-process operators register into the default registry: give each test a clean one."""
    original = kopf.get_default_registry()
    kopf.set_default_registry(kopf.OperatorRegistry())
    try:
        yield
    finally:
        kopf.set_default_registry(original)


def test_kopf_runner_handles_configmaps_in_process(kube, kubeconfig, namespace, tmp_path, fresh_registry):
    calls = tmp_path / 'calls.jsonl'
    env = {'KUBECONFIG': str(kubeconfig), 'E2E_RESOURCE': 'configmaps', 'E2E_CALLS': str(calls),
           'E2E_SECOND_FAILS': '0'}
    path = f'/api/v1/namespaces/{namespace}/configmaps/cm'
    with KopfRunner(['run', str(OPERATORS / 'tracing.py'), '-n', namespace, '--verbose'],
                    env=env, timeout=30, ready_timeout=30) as runner:
        assert runner.ready
        kube.create(f'/api/v1/namespaces/{namespace}/configmaps',
                    {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': 'cm'}, 'data': {'k': 'v'}})
        wait_for(lambda: {'first', 'second', 'third'} <= set(handlers_called(calls)), timeout=30,
                 what="the handlers")
        wait_for(lambda: 'kopf.zalando.org/last-handled-configuration' in
                 kube.get(path)['metadata'].get('annotations', {}), timeout=10, what="the diff-base")
    assert runner.exit_code == 0
    assert runner.exception is None
    assert "Handler 'first' succeeded" in runner.output
    essence = kube.get(path)['metadata']['annotations']['kopf.zalando.org/last-handled-configuration']
    assert json.loads(essence) == {'data': {'k': 'v'}}


def test_a_resource_missing_on_the_server_is_warned_about_naming_it_and_the_operator_goes_on(operators, tmp_path):
    operator = operators(E2E_RESOURCE='nonexistents.e2e.kopf.dev', E2E_CALLS=str(tmp_path / 'calls.jsonl'))
    operator.wait_for_output('Unresolved resources cannot be served yet: nonexistents.e2e.kopf.dev.')
    assert 'they are served as soon as their CRDs appear' in operator.output
    assert operator.process.poll() is None  # served once its CRD appears (see test_scopes.py)
    assert operator.stop() == 0
