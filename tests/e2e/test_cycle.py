"""
The handling cycle on a real API server: quick handlers share one write, and a rejected result costs no progress.

The writes are counted by the API server itself (``apiserver_request_total``
in its ``/metrics``), so nothing the operator says about itself is trusted.
"""
from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from kopf.testing import KubeAPI
from tests.e2e.harness import read_calls

GROUP, VERSION = 'e2e.kopf.dev', 'v1'
LAST_HANDLED = 'kopf.zalando.org/last-handled-configuration'
OBJECTS = 10


def crd(plural: str, kind: str, *, status: dict[str, Any]) -> dict[str, Any]:
    """A CRD without the status subresource: the status is patched with the rest, in one request."""
    return {
        'apiVersion': 'apiextensions.k8s.io/v1',
        'kind': 'CustomResourceDefinition',
        'metadata': {'name': f'{plural}.{GROUP}'},
        'spec': {
            'group': GROUP,
            'scope': 'Namespaced',
            'names': {'plural': plural, 'singular': kind.lower(), 'kind': kind},
            'versions': [{
                'name': VERSION, 'served': True, 'storage': True,
                'schema': {'openAPIV3Schema': {'type': 'object', 'properties': {
                    'spec': {'type': 'object', 'x-kubernetes-preserve-unknown-fields': True},
                    'status': status,
                }}},
            }],
        },
    }


@pytest.fixture(scope='module', autouse=True)
def crds(kube: KubeAPI) -> None:
    kube.apply_crd(crd('quicks', 'Quick', status={'type': 'object', 'x-kubernetes-preserve-unknown-fields': True}))
    # Handlers' results must be integers here: anything else is rejected by the server (422).
    kube.apply_crd(crd('numerics', 'Numeric', status={'type': 'object', 'properties': {
        'h0': {'type': 'integer'}}}))


def patches(kube: KubeAPI, plural: str) -> int:
    """How many PATCH requests the API server has served for a resource so far (all namespaces)."""
    request = urllib.request.Request(f"{kube.server}/metrics")
    with urllib.request.urlopen(request, context=kube.ssl, timeout=30) as response:
        text = response.read().decode()
    return sum(
        int(float(line.rsplit(' ', 1)[1])) for line in text.splitlines()
        if line.startswith('apiserver_request_total{') and 'verb="PATCH"' in line
        and f'group="{GROUP}"' in line and f'resource="{plural}"' in line
    )


def create(kube: KubeAPI, plural: str, kind: str, namespace: str, name: str) -> str:
    collection = f'/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{plural}'
    kube.create(collection, {'apiVersion': f'{GROUP}/{VERSION}', 'kind': kind, 'metadata': {'name': name},
                             'spec': {'field': name}})
    return f'{collection}/{name}'


def handled(kube: KubeAPI, path: str) -> dict[str, Any] | None:
    """The object once its creation is concluded: the diff-base is stored, the progress is gone."""
    obj = kube.get(path)
    annotations = obj['metadata'].get('annotations', {})
    progress = [key for key in annotations if key.startswith('kopf.zalando.org/h')]
    return obj if LAST_HANDLED in annotations and not progress else None


@pytest.mark.parametrize('handlers, limit', [(3, 1.2), (10, 1.5)])
def test_quick_handlers_share_one_patch_per_object(kube, namespace, operators, tmp_path, handlers, limit):
    calls = tmp_path / 'calls.jsonl'
    operator = operators('quick.py', E2E_RESOURCE=f'quicks.{GROUP}', E2E_HANDLERS=str(handlers),
                         E2E_CALLS=str(calls))
    operator.wait_for_output('Serving')
    before = patches(kube, 'quicks')

    paths = [create(kube, 'quicks', 'Quick', namespace, f'obj{index}') for index in range(OBJECTS)]
    for path in paths:
        operator.wait(lambda path=path: handled(kube, path), what=f"{path} to be handled", timeout=30)
    after = patches(kube, 'quicks')

    assert len(read_calls(calls)) == OBJECTS * handlers  # every handler ran once per object
    per_object = (after - before) / OBJECTS
    print(f"{handlers} quick create handlers: {per_object:.2f} PATCH requests per object")  # shown with -s
    assert per_object <= limit, f"{per_object} PATCH requests per object with {handlers} handlers"


def test_a_rejected_result_costs_no_progress_and_is_reported_once(kube, namespace, operators, tmp_path):
    calls = tmp_path / 'calls.jsonl'
    operator = operators('quick.py', E2E_RESOURCE=f'numerics.{GROUP}', E2E_HANDLERS='2',
                         E2E_RESULT=json.dumps('not a number'), E2E_CALLS=str(calls))
    operator.wait_for_output('Serving')
    path = create(kube, 'numerics', 'Numeric', namespace, 'obj')

    obj = operator.wait(lambda: handled(kube, path), what="the creation to be concluded", timeout=20)

    assert sorted(call['handler'] for call in read_calls(calls)) == ['h0', 'h1']  # not re-run
    assert 'status' not in obj or 'h0' not in obj['status']
    assert operator.stop() == 0  # the whole log, also what was written after the progress landed
    rejections = [line for line in operator.output.splitlines() if 'rejected the patch' in line]
    assert len(rejections) == 1, operator.output
    assert 'status.h0' in rejections[0] and 'integer' in rejections[0]  # what, and the server's own words
