"""
The mission, proven on a real API server: handler progress persists between
handling cycles wherever the server lets it, and failures to persist are loud.

Each test runs real ``kopf run`` processes (the operator in
``operators/tracing.py``) in a namespace of its own, and checks the objects
on the server with an independent client.
"""
from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from kopf.testing import KubeAPI, wait_for
from tests.e2e.harness import handlers_called, read_calls

GROUP, VERSION = 'e2e.kopf.dev', 'v1'


def crd(plural: str, kind: str, *, preserve_status: bool) -> dict[str, Any]:
    status: dict[str, Any] = {'type': 'object', 'properties': {'phase': {'type': 'string'}}}
    if preserve_status:
        status['x-kubernetes-preserve-unknown-fields'] = True
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
                'subresources': {'status': {}},
                'schema': {'openAPIV3Schema': {'type': 'object', 'properties': {
                    'spec': {'type': 'object', 'x-kubernetes-preserve-unknown-fields': True},
                    'status': status,
                }}},
            }],
        },
    }


@pytest.fixture(scope='module', autouse=True)
def crds(kube: KubeAPI) -> None:
    # Strict: a structural schema that prunes unknown status fields, with the status subresource.
    kube.apply_crd(crd('stricts', 'Strict', preserve_status=False))
    # Lenient: the status keeps unknown fields, as operators of older versions needed.
    kube.apply_crd(crd('lenients', 'Lenient', preserve_status=True))


def collection(plural: str, namespace: str) -> str:
    return f'/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{plural}'


def make(kube: KubeAPI, plural: str, kind: str, namespace: str, name: str = 'obj', **spec: Any) -> str:
    kube.create(collection(plural, namespace), {
        'apiVersion': f'{GROUP}/{VERSION}', 'kind': kind,
        'metadata': {'name': name}, 'spec': spec or {'field': 'value'},
    })
    return f'{collection(plural, namespace)}/{name}'


def annotations(kube: KubeAPI, path: str) -> dict[str, str]:
    return kube.get(path)['metadata'].get('annotations', {})


def progress_keys(annotations: dict[str, str], prefix: str = 'kopf.zalando.org') -> set[str]:
    return {key for key in annotations
            if key.startswith(f'{prefix}/') and key.split('/', 1)[1] in {'first', 'second', 'third'}}


def second_retried(kube: KubeAPI, path: str, prefix: str = 'kopf.zalando.org') -> str | None:
    """The 2nd handler's progress annotation once it has failed once and waits for a retry."""
    value = annotations(kube, path).get(f'{prefix}/second')
    return value if value is not None and json.loads(value).get('retries') == 1 else None


def done(calls_path, *handlers: str):
    return lambda: set(handlers) <= set(handlers_called(calls_path))


MARKER = 'kubectl.kubernetes.io/last-applied-configuration'  # in no essence: changing it runs no handler


def settled(kube: KubeAPI, path: str, *events: Path, prefixes: tuple[str, ...] = ('kopf.zalando.org',),
            timeout: float = 30) -> dict[str, Any]:
    """
    The object once its cause is fully handled and the operators have handled all that came after.

    Fully handled: the diff-base is stored (by each operator, under its prefix), which happens when all
    the handlers have finished, retries included. Then a marker that the operators' event handlers record
    (see ``E2E_EVENTS``) is changed twice: an operator handles an object's events one after another, so
    once it has seen the second marker, the cycle that saw the first one is over -- and with it all that
    came before, including whatever the operator's own last patch might have made it do.
    """
    wait_for(lambda: all(f'{prefix}/last-handled-configuration' in annotations(kube, path) for prefix in prefixes),
             timeout=timeout, what="the diff-base to be stored: all handlers finished")
    for _ in range(2):
        marker = uuid.uuid4().hex
        kube.patch(path, {'metadata': {'annotations': {MARKER: marker}}})
        for file in events:
            wait_for(lambda f=file, m=marker: m in [call['marker'] for call in read_calls(f)], timeout=timeout,
                     what=f"the marker {marker} handled (in {file.name})")
    return kube.get(path)


def test_strict_schema_with_status_subresource(kube, namespace, operators, tmp_path):
    calls, events = tmp_path / 'calls.jsonl', tmp_path / 'events.jsonl'
    operator = operators(E2E_RESOURCE=f'stricts.{GROUP}', E2E_CALLS=str(calls), E2E_POST_LOGGERS='1',
                         E2E_EVENTS=str(events))
    operator.wait_for_output('Serving')
    path = make(kube, 'stricts', 'Strict', namespace)

    # While the 2nd handler waits for its retry, the progress is visible in annotations.
    record = json.loads(wait_for(lambda: second_retried(kube, path), timeout=20, what="the 2nd handler's record"))
    assert record['message'] == 'not yet' and 'delayed' in record

    wait_for(done(calls, 'first', 'second', 'third'), timeout=30, what="all handlers")
    obj = settled(kube, path, events)
    assert sorted(handlers_called(calls)) == ['first', 'second', 'second', 'third']
    assert [c['retry'] for c in read_calls(calls) if c['handler'] == 'second'] == [0, 1]

    final = obj['metadata'].get('annotations', {})
    assert not progress_keys(final), final
    assert 'kopf.zalando.org/touch-dummy' not in final
    assert json.loads(final['kopf.zalando.org/last-handled-configuration']) == {'spec': {'field': 'value'}}
    assert 'kopf.zalando.org/finalizer' in obj['metadata']['finalizers']
    assert 'progress' not in json.dumps(obj.get('status', {}))
    # The handler's result is pruned by the strict status schema -- and the operator says so.
    assert 'dropped some patched fields' in operator.output and 'status.first' in operator.output

    # Per-object log messages are posted as Kubernetes Events attached to the object (posting.loggers is on).
    def posted() -> list[str]:
        items = kube.get(f'/api/v1/namespaces/{namespace}/events')['items']
        return [e['message'] for e in items if e['involvedObject'].get('uid') == obj['metadata']['uid']]
    messages = wait_for(lambda: [m for m in posted() if "Handler 'first' succeeded" in m], timeout=10,
                        what="the events about the handlers")
    assert messages


def test_status_storage_on_a_strict_schema_is_loud(kube, namespace, operators, tmp_path):
    calls = tmp_path / 'calls.jsonl'
    operator = operators(E2E_RESOURCE=f'stricts.{GROUP}', E2E_CALLS=str(calls), E2E_STORAGE='status')
    operator.wait_for_output('Serving')
    path = make(kube, 'stricts', 'Strict', namespace)
    operator.wait_for_output('status.kopf.progress.', timeout=30)
    warning = next(line for line in operator.output.splitlines() if 'status.kopf.progress.' in line)
    assert 'WARNING' in warning and 'dropped' in warning
    assert 'x-kubernetes-preserve-unknown-fields' in warning
    assert 'progress' not in json.dumps(kube.get(path).get('status', {}))


def test_builtin_configmaps_keep_progress_in_annotations(kube, namespace, operators, tmp_path):
    calls, events = tmp_path / 'calls.jsonl', tmp_path / 'events.jsonl'
    operator = operators(E2E_RESOURCE='configmaps', E2E_CALLS=str(calls), E2E_EVENTS=str(events))
    operator.wait_for_output('Serving')
    path = f'/api/v1/namespaces/{namespace}/configmaps/cm'
    kube.create(f'/api/v1/namespaces/{namespace}/configmaps',
                {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': 'cm'}, 'data': {'k': 'v'}})

    wait_for(lambda: second_retried(kube, path), timeout=20, what="the 2nd handler's record")
    wait_for(done(calls, 'first', 'second', 'third'), timeout=30, what="all handlers")
    obj = settled(kube, path, events)
    assert sorted(handlers_called(calls)) == ['first', 'second', 'second', 'third']
    assert not progress_keys(obj['metadata'].get('annotations', {}))
    essence = json.loads(obj['metadata']['annotations']['kopf.zalando.org/last-handled-configuration'])
    assert essence == {'data': {'k': 'v'}}


def test_upgrade_from_legacy_status_progress(kube, namespace, operators, tmp_path):
    calls = tmp_path / 'calls.jsonl'
    path = make(kube, 'lenients', 'Lenient', namespace)
    # What an older operator left behind: the 1st handler succeeded, the 2nd has failed once.
    legacy = {
        'first': {'started': '2020-01-01T00:00:00.000000', 'stopped': '2020-01-01T00:00:01.000000',
                  'retries': 1, 'success': True},
        'second': {'started': '2020-01-01T00:00:00.000000', 'retries': 1, 'message': 'old failure'},
    }
    kube.request('PATCH', f'{path}/status', {'status': {'kopf': {'progress': legacy}}},
                 content_type='application/merge-patch+json')
    assert kube.get(path)['status']['kopf']['progress']['first']['success'] is True

    events = tmp_path / 'events.jsonl'
    operator = operators(E2E_RESOURCE=f'lenients.{GROUP}', E2E_CALLS=str(calls), E2E_EVENTS=str(events))
    operator.wait_for_output('Serving')
    wait_for(done(calls, 'second', 'third'), timeout=30, what="the remaining handlers")
    obj = settled(kube, path, events)
    assert 'first' not in handlers_called(calls)
    assert [c['retry'] for c in read_calls(calls) if c['handler'] == 'second'] == [1]
    assert obj['status'].get('kopf', {}).get('progress', {}) == {}
    assert not progress_keys(obj['metadata'].get('annotations', {}))
    assert 'kopf.zalando.org/last-handled-configuration' in obj['metadata']['annotations']


def test_custom_async_storage_keeps_progress_outside_the_object(kube, namespace, operators, tmp_path):
    calls, store, events = tmp_path / 'calls.jsonl', tmp_path / 'store.json', tmp_path / 'events.jsonl'
    operator = operators(E2E_RESOURCE=f'stricts.{GROUP}', E2E_CALLS=str(calls), E2E_EVENTS=str(events),
                         E2E_STORAGE='file', E2E_STORE=str(store), E2E_SECOND_FAILS='2')
    operator.wait_for_output('Serving')
    path = make(kube, 'stricts', 'Strict', namespace)

    observed: set[str] = set()

    def finished() -> bool:
        observed.update(annotations(kube, path))
        return {'first', 'second', 'third'} <= set(handlers_called(calls))

    wait_for(finished, timeout=30, what="all handlers")
    settled(kube, path, events)
    observed.update(annotations(kube, path))
    assert not progress_keys(observed), observed
    assert not any(key.endswith('/touch-dummy') for key in observed)
    assert sorted(handlers_called(calls)) == ['first', 'second', 'second', 'second', 'third']

    data = json.loads(store.read_text())
    assert data['records'] == {}  # all purged once the cause was handled
    seconds = [h['record'] for h in data['history'] if h['op'] == 'store' and h['key'] == 'second']
    assert [r.get('retries') for r in seconds] == [None, 1, 2, 3]  # started, then three attempts
    assert seconds[-1]['success'] is True


def test_restart_after_sigkill_continues_without_rerunning(kube, namespace, operators, tmp_path):
    calls, events = tmp_path / 'calls.jsonl', tmp_path / 'events.jsonl'
    env = {'E2E_RESOURCE': f'stricts.{GROUP}', 'E2E_CALLS': str(calls), 'E2E_EVENTS': str(events),
           'E2E_SECOND_FAILS': '2', 'E2E_SECOND_DELAY': '3'}
    operator = operators(**env)
    operator.wait_for_output('Serving')
    path = make(kube, 'stricts', 'Strict', namespace)

    def persisted() -> bool:
        records = {key: json.loads(value) for key, value in annotations(kube, path).items()
                   if key in {'kopf.zalando.org/first', 'kopf.zalando.org/third'}}
        return len(records) == 2 and all(r.get('success') for r in records.values())

    wait_for(lambda: second_retried(kube, path), timeout=20, what="the 2nd handler to wait for its retry")
    wait_for(persisted, timeout=20, what="the 1st and 3rd handlers' success to be stored")
    operator.kill()
    before = read_calls(calls)
    assert 'first' in [c['handler'] for c in before]

    restarted = operators(**env)
    wait_for(lambda: len([c for c in read_calls(calls) if c['handler'] == 'second']) == 3,
             timeout=40, what="the 2nd handler's last retry")
    settled(kube, path, events)
    after = [c for c in read_calls(calls) if c['pid'] == restarted.process.pid]
    assert 'first' not in [c['handler'] for c in after]
    assert [c['retry'] for c in after if c['handler'] == 'second'] == [1, 2]
    assert handlers_called(calls).count('first') == 1
    assert handlers_called(calls).count('third') == 1


def test_two_operators_with_different_prefixes_do_not_retrigger_each_other(kube, namespace, operators, tmp_path):
    calls_a, calls_b = tmp_path / 'a.jsonl', tmp_path / 'b.jsonl'
    events_a, events_b = tmp_path / 'a-events.jsonl', tmp_path / 'b-events.jsonl'
    op_a = operators(E2E_RESOURCE=f'stricts.{GROUP}', E2E_CALLS=str(calls_a), E2E_PREFIX='a.example.com',
                     E2E_EVENTS=str(events_a))
    op_b = operators(E2E_RESOURCE=f'stricts.{GROUP}', E2E_CALLS=str(calls_b), E2E_PREFIX='b.example.com',
                     E2E_EVENTS=str(events_b))
    op_a.wait_for_output('Serving')
    op_b.wait_for_output('Serving')
    path = make(kube, 'stricts', 'Strict', namespace)

    wait_for(lambda: done(calls_a, 'first', 'second', 'third')() and done(calls_b, 'first', 'second', 'third')(),
             timeout=40, what="both operators")
    obj = settled(kube, path, events_a, events_b, prefixes=('a.example.com', 'b.example.com'))
    for calls in [calls_a, calls_b]:
        assert sorted(handlers_called(calls)) == ['first', 'second', 'second', 'third']
        assert 'update' not in handlers_called(calls)
    meta = obj['metadata']
    assert {'a.example.com/finalizer', 'b.example.com/finalizer'} <= set(meta['finalizers'])
    assert {'a.example.com/last-handled-configuration', 'b.example.com/last-handled-configuration'} <= set(
        meta['annotations'])


def test_update_diff_and_deletion_via_finalizer(kube, namespace, operators, tmp_path):
    calls, events = tmp_path / 'calls.jsonl', tmp_path / 'events.jsonl'
    operator = operators(E2E_RESOURCE=f'stricts.{GROUP}', E2E_CALLS=str(calls), E2E_SECOND_FAILS='0',
                         E2E_EVENTS=str(events))
    operator.wait_for_output('Serving')
    path = make(kube, 'stricts', 'Strict', namespace, field='old', keep='same')
    wait_for(done(calls, 'first', 'second', 'third'), timeout=30, what="creation")
    settled(kube, path, events)

    kube.patch(path, {'spec': {'field': 'new', 'added': 1}})
    wait_for(done(calls, 'update'), timeout=30, what="the update handler")
    update = next(c for c in read_calls(calls) if c['handler'] == 'update')
    assert sorted(map(tuple, (tuple(map(str, item[:1])) + (tuple(item[1]),) + tuple(item[2:])
                              for item in update['diff']))) == [
        ('add', ('spec', 'added'), None, 1),
        ('change', ('spec', 'field'), 'old', 'new'),
    ]

    assert 'kopf.zalando.org/finalizer' in kube.get(path)['metadata']['finalizers']  # deletion waits for it
    kube.delete(path)
    wait_for(lambda: kube.find(path) is None, timeout=30, what="the deletion to complete")
    assert handlers_called(calls).count('delete') == 1
    assert handlers_called(calls).count('update') == 1
    assert operator.stop() == 0
