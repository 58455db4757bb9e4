"""
Every example in ``examples/`` against a real kube-apiserver.

Each test runs one example exactly as its README says (``kopf run
example.py --verbose``, or ``python example.py`` for the embedding example)
in a namespace of its own, creates the example object, and checks the
documented effect on the server with an independent client, plus the
operator's output where that is the effect. The operator is always stopped
at the end, even when the test fails.
"""
from __future__ import annotations

import contextlib
import json
import sqlite3
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from kopf.testing import KubeAPI, KubeAPIError, wait_for
from tests.e2e.harness import REPO, TIMEOUT, kopf_run
from tests.e2e.harness import OperatorProcess as Operator

T = TypeVar('T')

EXAMPLES = REPO / 'examples'
CRD: dict[str, Any] = yaml.safe_load((EXAMPLES / 'crd.yaml').read_text())
OBJ: dict[str, Any] = yaml.safe_load((EXAMPLES / 'obj.yaml').read_text())
CRD_PATH = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD['metadata']['name']}"
NAME = OBJ['metadata']['name']
PREFIX = 'kopf.zalando.org'
LAST_HANDLED = f'{PREFIX}/last-handled-configuration'
FINALIZER = f'{PREFIX}/KopfFinalizerMarker'


# Infrastructure.

def _wait_for_lenient_schema(api: KubeAPI) -> None:
    """A replaced schema takes effect a moment later: probe until unknown fields are kept, as ours says."""
    api.ensure_namespace('kopf-examples-probe')
    probes = '/apis/kopf.dev/v1/namespaces/kopf-examples-probe/kopfexamples'

    def lenient() -> bool:
        name = f"probe-{uuid.uuid4().hex[:8]}"
        try:
            obj = api.create(probes, {'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
                                      'metadata': {'name': name}, 'spec': {'probe': {'unknown': 1}}})
        except KubeAPIError as e:
            if e.status == 429:  # "storage is (re)initializing" right after the replacement
                return False
            raise
        api.delete(f"{probes}/{name}")
        return bool(obj['spec'].get('probe'))

    wait_for(lenient, timeout=TIMEOUT, interval=0.2, what="the examples' CRD schema to be in effect")


@pytest.fixture(scope='module')
def api(kopf_api: KubeAPI) -> Iterator[KubeAPI]:
    """The examples' CRD, installed for this module; whatever CRD of that name was there before is restored."""
    api = kopf_api
    previous = api.find(CRD_PATH)
    api.apply_crd(CRD)
    _wait_for_lenient_schema(api)
    yield api
    if previous is not None:
        api.apply_crd({'apiVersion': previous['apiVersion'], 'kind': previous['kind'],
                        'metadata': {'name': previous['metadata']['name']}, 'spec': previous['spec']})
    else:
        api.delete(CRD_PATH)
        wait_for(lambda: api.find(CRD_PATH) is None, timeout=TIMEOUT, what="the examples' CRD to be deleted")


@pytest.fixture()
def namespace(api: KubeAPI, kopf_namespace: str) -> Iterator[str]:
    """The test kit's namespace of the test; objects left in it are released from finalizers and deleted."""
    name = kopf_namespace
    yield name
    # Without a controller-manager, a deleted namespace keeps its objects: release and delete them first.
    for collection in (f"/apis/kopf.dev/v1/namespaces/{name}/kopfexamples", f"/api/v1/namespaces/{name}/configmaps"):
        for item in (api.find(collection) or {}).get('items', []):
            path = f"{collection}/{item['metadata']['name']}"
            if item['metadata'].get('finalizers'):
                api.patch(path, {'metadata': {'finalizers': None}})
            api.delete(path)


@pytest.fixture()
def run_example(kopf_kubeconfig: Path, namespace: str, tmp_path: Path) -> Iterator[Callable[..., Operator]]:
    """Start examples as ``kopf run``; every started operator is stopped at the end of the test."""
    kubeconfig = kopf_kubeconfig
    started: list[Operator] = []

    def run(example: str, *, env: dict[str, str] | None = None, script: bool = False) -> Operator:
        path = EXAMPLES / example / 'example.py'
        assert path.is_file(), path
        argv = [sys.executable, str(path)] if script else kopf_run(path, namespace=namespace)
        workdir = tmp_path / f"run{len(started)}"
        workdir.mkdir()
        operator = Operator(argv, kubeconfig=kubeconfig, log=workdir / 'operator.log', env=env, cwd=workdir)
        started.append(operator)
        return operator

    yield run
    for operator in started:
        operator.stop()


def collection(namespace: str) -> str:
    return f"/apis/kopf.dev/v1/namespaces/{namespace}/kopfexamples"


def create_obj(api: KubeAPI, namespace: str, **spec: Any) -> dict[str, Any]:
    obj = json.loads(json.dumps(OBJ))
    obj['spec'].update(spec)
    return dict(api.create(collection(namespace), obj))


def kopf_annotations(obj: dict[str, Any] | None, prefix: str = PREFIX) -> dict[str, str]:
    """The annotations of a prefix, except the diff-base: i.e. the progress records and the touch marker."""
    annotations = ((obj or {}).get('metadata') or {}).get('annotations') or {}
    return {k: v for k, v in annotations.items()
            if k.startswith(f"{prefix}/") and not k.endswith('/last-handled-configuration')}


def essence_of(obj: dict[str, Any]) -> dict[str, Any]:
    """What the examples' objects look like in the last-handled configuration."""
    return {'metadata': {'labels': obj['metadata']['labels']}, 'spec': obj['spec']}


def handled(api: KubeAPI, path: str, *results: str, key: str = LAST_HANDLED) -> Callable[[], dict[str, Any] | None]:
    """
    A condition: the object, once its cause is fully handled: its diff-base and the handlers' results are stored.

    The results are checked too: with the status subresource, they arrive in a
    request of their own, right before the main part of the patch with the diff-base.
    """
    def condition() -> dict[str, Any] | None:
        obj = api.find(path)
        annotations = ((obj or {}).get('metadata') or {}).get('annotations') or {}
        status = (obj or {}).get('status') or {}
        return obj if key in annotations and all(result in status for result in results) else None
    return condition


# The examples.

def test_01_minimal(api: KubeAPI, namespace: str, run_example: Callable[..., Operator]) -> None:
    operator = run_example('01-minimal')
    created = create_obj(api, namespace)
    path = f"{collection(namespace)}/{NAME}"

    obj = operator.wait(handled(api, path, 'create_fn'), what="the create handler to finish")
    assert obj['status']['create_fn'] == {'message': f'hello, {NAME}', 'field': 'value'}
    assert json.loads(obj['metadata']['annotations'][LAST_HANDLED]) == essence_of(created)
    assert kopf_annotations(obj) == {}
    assert 'finalizers' not in obj['metadata']  # no delete handlers: no finalizer
    operator.wait_for_output("Handler 'create_fn' succeeded.")
    assert operator.stop() == 0


def test_02_children(api: KubeAPI, namespace: str, run_example: Callable[..., Operator]) -> None:
    operator = run_example('02-children')
    owner = create_obj(api, namespace)
    path = f"{collection(namespace)}/{NAME}"

    obj = operator.wait(handled(api, path, 'create_fn'), what="the create handler to finish")
    assert obj['status']['create_fn'] == {'children': [f'{NAME}-data']}
    child = api.get(f"/api/v1/namespaces/{namespace}/configmaps/{NAME}-data")
    assert child['data'] == {'field': 'value', 'items': 'item1,item2'}
    assert child['metadata']['labels'] == owner['metadata']['labels']
    assert child['metadata']['ownerReferences'] == [{
        'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample', 'name': NAME, 'uid': owner['metadata']['uid'],
        'controller': True, 'blockOwnerDeletion': True,
    }]
    assert operator.stop() == 0


def test_03_exceptions(api: KubeAPI, namespace: str, run_example: Callable[..., Operator]) -> None:
    operator = run_example('03-exceptions')
    create_obj(api, namespace)
    path = f"{collection(namespace)}/{NAME}"

    # Between the attempts, the progress is kept in annotations: the retry count and when to retry.
    def retrying() -> dict[str, Any] | None:
        value = kopf_annotations(api.find(path)).get(f'{PREFIX}/eventually_succeeds')
        return json.loads(value) if value else None

    record = operator.wait(retrying, what="the progress of 'eventually_succeeds' in the annotations")
    assert record['retries'] == 1
    assert record['message'] == "The backing service is not ready yet."
    assert 'delayed' in record

    obj = operator.wait(handled(api, path, 'eventually_succeeds'), what="all handlers to finish")
    assert obj['status'] == {'eventually_succeeds': {'attempts': 2}}  # failed handlers leave no result
    assert kopf_annotations(obj) == {}  # all progress purged, the touch marker too

    output = operator.output
    assert "Handler 'fails_permanently' failed permanently: The spec cannot work: giving up." in output
    assert output.count("fails_permanently' failed") == 1  # never retried
    assert "ValueError: Something unexpected (attempt #3)." in output
    assert "attempt #4" not in output
    assert ("Handler 'runs_out_of_retries' failed with an exception; it will not be retried: "
            "it has used up its 3 attempt(s).") in output
    assert "Handler 'errors_ignored' failed with an exception; it is ignored." in output
    assert "Succeeded on attempt #2." in output
    assert operator.stop() == 0


def test_04_updates_deletes(api: KubeAPI, namespace: str, run_example: Callable[..., Operator]) -> None:
    operator = run_example('04-updates-deletes')
    create_obj(api, namespace)
    path = f"{collection(namespace)}/{NAME}"

    obj = operator.wait(handled(api, path, 'create_fn', 'field_fn/spec.field'),
                        what="the create and field handlers to finish")
    assert obj['status'] == {'create_fn': 'created', 'field_fn/spec.field': {'new': 'value'}}
    assert obj['metadata']['finalizers'] == [FINALIZER]

    api.patch(path, {'spec': {'field': 'changed', 'extra': 1}})

    def updated() -> dict[str, Any] | None:
        obj = api.find(path)
        essence = json.loads(obj['metadata']['annotations'][LAST_HANDLED])
        field_result = obj.get('status', {}).get('field_fn/spec.field', {})
        return obj if essence['spec'].get('field') == 'changed' and field_result.get('new') == 'changed' else None

    obj = operator.wait(updated, what="the update to be handled")
    assert obj['status']['update_fn'] == {'changes': 2}
    assert obj['status']['field_fn/spec.field'] == {'old': 'value', 'new': 'changed'}
    assert kopf_annotations(obj) == {}
    assert "change spec.field: 'value' -> 'changed'" in operator.output
    assert "add spec.extra: None -> 1" in operator.output

    api.delete(path)
    operator.wait(lambda: api.find(path) is None, what="the object to be gone (finalizer released)")
    assert "Cleaning up after kopf-example-1." in operator.output
    assert "Handler 'delete_fn' succeeded." in operator.output
    assert operator.stop() == 0


def test_05_subhandlers(api: KubeAPI, namespace: str, run_example: Callable[..., Operator]) -> None:
    operator = run_example('05-subhandlers')
    create_obj(api, namespace)
    path = f"{collection(namespace)}/{NAME}"

    obj = operator.wait(handled(api, path, 'create_fn/item-item2', 'execute_fn'),
                        what="the handlers and sub-handlers to finish")
    assert obj['status'] == {
        'create_fn/item-item1': {'item': 'item1', 'attempts': 1},
        'create_fn/item-item2': {'item': 'item2', 'attempts': 2},
        'execute_fn': 'all done',
        'execute_fn/first': 1,
        'execute_fn/second': 2,
    }
    assert kopf_annotations(obj) == {}  # the sub-handlers' records are purged with their parents'
    output = operator.output
    assert "Handler 'create_fn/item-item2' failed temporarily: item2 is not ready yet." in output
    assert output.count("item1 is handled.") == 1  # a finished sub-handler is never called again
    assert "Handler 'create_fn' succeeded." in output
    assert operator.stop() == 0


def test_06_builtin(api: KubeAPI, namespace: str, run_example: Callable[..., Operator]) -> None:
    operator = run_example('06-builtin')
    configmaps = f"/api/v1/namespaces/{namespace}/configmaps"
    api.create(configmaps, yaml.safe_load((EXAMPLES / '06-builtin' / 'configmap.yaml').read_text()))
    api.create(configmaps, {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': 'unlabelled'},
                            'data': {'a': 'b'}})
    path = f"{configmaps}/example-config"

    obj = operator.wait(handled(api, path), what="both create handlers to finish")
    assert kopf_annotations(obj) == {}
    assert obj['metadata']['finalizers'] == [FINALIZER]
    assert 'status' not in obj
    output = operator.output
    assert "The ConfigMap has 2 key(s): greeting, target" in output
    assert "The data is 10 characters long (attempt #2)." in output
    assert "Event MODIFIED for example-config." in output
    assert "The server dropped" not in output
    unlabelled = api.get(f"{configmaps}/unlabelled")
    assert 'finalizers' not in unlabelled['metadata']
    # The unlabelled ConfigMap is seen (kopf logs its handling cycles), but no handler is called for it.
    unlabelled_lines = [line for line in output.splitlines() if f"[{namespace}/unlabelled]" in line]
    assert not [line for line in unlabelled_lines if "Handler" in line or "Event" in line or "ConfigMap has" in line]

    api.patch(path, {'data': {'target': 'everyone'}})
    operator.wait_for_output("Data change: change data.target: 'world' -> 'everyone'")

    api.delete(path)
    operator.wait(lambda: api.find(path) is None, what="the ConfigMap to be gone (finalizer released)")
    assert "The protected ConfigMap example-config is being deleted." in operator.output
    assert operator.stop() == 0


# Where the progress and the diff-base are expected with each storage of the persistence example.
STORAGES: dict[str, dict[str, Any]] = {
    'smart': {'progress': [('annotations', 'kopf-example.kopf.dev/create_fn')],
              'diffbase': ('annotations', 'kopf-example.kopf.dev/last-handled-configuration')},
    'annotations': {'progress': [('annotations', 'kopf-example.kopf.dev/create_fn')],
                    'diffbase': ('annotations', 'kopf-example.kopf.dev/last-handled-configuration')},
    'status': {'progress': [('status', 'create_fn')],
               'diffbase': ('status', 'last-handled-configuration')},
    'multi': {'progress': [('annotations', 'kopf-example.kopf.dev/create_fn'),
                           ('annotations', 'kopf.zalando.org/create_fn')],
              'diffbase': ('annotations', LAST_HANDLED)},
    'sqlite': {'progress': [('sqlite', 'create_fn')],
               'diffbase': ('annotations', LAST_HANDLED)},
}


def _locate(obj: dict[str, Any] | None, where: str, key: str, db: Path) -> Any:
    """The stored value in one place: an annotation, the example's status stanza, or the SQLite file."""
    if where == 'annotations':
        return ((obj or {}).get('metadata', {}).get('annotations') or {}).get(key)
    if where == 'status':
        stanza = (obj or {}).get('status', {}).get('kopf-example', {})
        return (stanza.get('progress') or {}).get(key) if key != 'last-handled-configuration' else stanza.get(key)
    if not db.exists():
        return None
    with contextlib.closing(sqlite3.connect(db)) as conn:
        try:
            rows = conn.execute('SELECT record FROM progress WHERE key=?', (key,)).fetchall()
        except sqlite3.OperationalError:  # the table is not created yet
            return None
    return json.loads(rows[0][0]) if rows else None


def _record(value: Any) -> dict[str, Any]:
    return json.loads(value) if isinstance(value, str) else dict(value)


@pytest.mark.parametrize('storage', list(STORAGES))
def test_07_persistence(api: KubeAPI, namespace: str, run_example: Callable[..., Operator],
                        tmp_path: Path, storage: str) -> None:
    db = tmp_path / 'progress.sqlite'
    operator = run_example('07-persistence', env={'EXAMPLE_STORAGE': storage, 'EXAMPLE_SQLITE': str(db)})
    create_obj(api, namespace)
    path = f"{collection(namespace)}/{NAME}"
    expected = STORAGES[storage]
    seen_annotations: set[str] = set()

    # While the handler waits for its retry, its progress is where the storage keeps it.
    def retrying() -> bool:
        obj = api.find(path)
        seen_annotations.update(kopf_annotations(obj))
        values = [_locate(obj, where, key, db) for where, key in expected['progress']]
        return all(value and _record(value).get('retries') == 1 for value in values)

    operator.wait(retrying, what=f"the progress in {expected['progress']}")

    where, key = expected['diffbase']

    def finished() -> dict[str, Any] | None:
        obj = api.find(path)
        seen_annotations.update(kopf_annotations(obj))
        return obj if _locate(obj, where, key, db) and 'create_fn' in obj.get('status', {}) else None

    obj = operator.wait(finished, what=f"the diff-base in {expected['diffbase']}")
    assert obj['status']['create_fn'] == {'attempts': 2}
    assert json.loads(_locate(obj, where, key, db)) == essence_of(obj)
    for where_, key_ in expected['progress']:
        assert not _locate(obj, where_, key_, db), f"{key_} is not purged from {where_}"
    assert kopf_annotations(obj) == {}
    assert kopf_annotations(obj, 'kopf-example.kopf.dev') == {}
    if storage == 'sqlite':
        assert not seen_annotations  # the progress never touched the object
        with contextlib.closing(sqlite3.connect(db)) as conn:
            assert conn.execute('SELECT COUNT(*) FROM progress').fetchone()[0] == 0
    assert "Created on attempt #2." in operator.output
    assert operator.stop() == 0


def test_07_crash_and_restart_continue_the_progress(api: KubeAPI, namespace: str,
                                                    run_example: Callable[..., Operator]) -> None:
    """The progress is in the object: a restarted operator continues the retries where the old one stopped."""
    first = run_example('07-persistence')
    create_obj(api, namespace)
    path = f"{collection(namespace)}/{NAME}"
    first.wait(lambda: kopf_annotations(api.find(path), 'kopf-example.kopf.dev'),
               what="the progress of the first attempt")
    first.kill()  # a crash in the middle of the handling: nothing is saved at exit
    assert "failed temporarily: Not yet" in first.output
    annotations = api.get(path)['metadata'].get('annotations') or {}
    assert 'kopf-example.kopf.dev/last-handled-configuration' not in annotations

    second = run_example('07-persistence')
    obj = second.wait(handled(api, path, 'create_fn', key='kopf-example.kopf.dev/last-handled-configuration'),
                      what="the restarted operator to finish the handling")
    assert obj['status']['create_fn'] == {'attempts': 2}
    assert "Created on attempt #2." in second.output
    assert "failed temporarily" not in second.output
    assert second.stop() == 0


def test_07_smart_storage_continues_legacy_status_progress(api: KubeAPI, namespace: str,
                                                           run_example: Callable[..., Operator]) -> None:
    """Progress left in ``status.kopf.progress`` by older versions is continued, then cleaned up."""
    create_obj(api, namespace)
    path = f"{collection(namespace)}/{NAME}"
    legacy = {'started': '2020-01-01T00:00:00', 'retries': 1, 'message': 'from an older version'}
    api.patch(f"{path}/status", {'status': {'kopf': {'progress': {'create_fn': legacy}}}})

    operator = run_example('07-persistence', env={'EXAMPLE_STORAGE': 'smart'})
    obj = operator.wait(handled(api, path, 'create_fn', key='kopf-example.kopf.dev/last-handled-configuration'),
                        what="the handling to finish")
    assert obj['status']['create_fn'] == {'attempts': 2}  # the 2nd attempt: the 1st was made before the upgrade
    assert not (obj['status'].get('kopf') or {}).get('progress')
    assert "failed temporarily" not in operator.output
    assert operator.stop() == 0


def test_08_embedding(api: KubeAPI, namespace: str, run_example: Callable[..., Operator]) -> None:
    operator = run_example('08-embedding', script=True,
                           env={'EXAMPLE_NAMESPACE': namespace, 'EXAMPLE_RUNTIME': '6'})
    operator.wait_for_output("The operator is ready")
    create_obj(api, namespace)
    path = f"{collection(namespace)}/{NAME}"

    obj = operator.wait(handled(api, path, 'create_fn'), what="the embedded operator to handle the object")
    assert obj['status']['create_fn'] == {'embedded': True}

    # The application sets the stop flag after EXAMPLE_RUNTIME seconds: the script ends by itself.
    operator.wait(lambda: operator.process.poll() is not None, what="the script to exit after the stop flag")
    assert operator.process.returncode == 0, operator.output
    output = operator.output
    assert "Stop requested; stopping gracefully." in output
    assert "The operator has exited; 1 object(s) handled. Bye." in output
    assert "objects handled: 1." in output  # the application sees the Counter that every object's memo shares


def test_09_daemons(api: KubeAPI, namespace: str, run_example: Callable[..., Operator]) -> None:
    operator = run_example('09-daemons')
    create_obj(api, namespace)
    path = f"{collection(namespace)}/{NAME}"

    operator.wait_for_output(f"{NAME}: the field is 'value'.")
    operator.wait(lambda: (api.get(path).get('status') or {}).get('beats', 0) >= 2, what="two heartbeats")
    assert api.get(path)['metadata']['finalizers'] == [FINALIZER]
    api.patch(path, {'spec': {'field': 'changed'}})
    operator.wait_for_output(f"{NAME}: the field is 'changed'.")  # the daemon's spec is live

    api.delete(path)
    operator.wait_for_output(f"{NAME}: the monitor has stopped (RESOURCE_DELETED).")
    assert api.find(path) is not None  # the threaded daemon still tidies up
    operator.wait(lambda: api.find(path) is None, what="the object to be gone")
    assert f"{NAME}: tidied up after RESOURCE_DELETED." in operator.output
    assert operator.stop() == 0


def test_10_reconciliation(api: KubeAPI, namespace: str, run_example: Callable[..., Operator]) -> None:
    operator = run_example('10-reconciliation')
    owner = create_obj(api, namespace)
    path = f"/api/v1/namespaces/{namespace}/configmaps/{NAME}-data"
    desired = {'field': 'value', 'items': 'item1,item2'}

    def child() -> dict[str, Any] | None:
        found = api.find(path)
        return found if found is not None and found.get('data') == desired else None

    created = operator.wait(child, what="the child ConfigMap")
    assert created['metadata']['ownerReferences'] == [{
        'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample', 'name': NAME, 'uid': owner['metadata']['uid'],
        'controller': True, 'blockOwnerDeletion': True,
    }]
    ready = operator.wait(lambda: (api.get(f"{collection(namespace)}/{NAME}").get('status') or {}).get('conditions'),
                          what="the Ready condition")
    assert [(c['type'], c['status'], c['reason']) for c in ready] == [('Ready', 'True', 'ChildApplied')]

    api.delete(path)  # by hand
    operator.wait(child, what="the deleted child to be re-created")
    api.patch(path, {'data': {'items': 'edited-by-hand'}})
    operator.wait(child, what="the edited child to be repaired")
    api.patch(f"{collection(namespace)}/{NAME}", {'spec': {'field': 'changed'}})
    desired['field'] = 'changed'
    operator.wait(child, what="the child to follow the spec")
    assert 'Traceback' not in operator.output
    assert operator.stop() == 0
