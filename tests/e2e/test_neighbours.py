"""
Two different operators on the same objects at the same time, configured apart as the documentation says.

Each has its own finalizer, progress prefix (and status field) and diff-base:
neither may take the other's bookkeeping for a change of the object (no
update handler runs but for the user's own change), neither's finalizer or
progress may be removed by the other, and a deletion waits for both. The
other operator is this framework with another prefix, or the released Kopf
1.45.2 with all its defaults (and ours configured apart from them).
"""
from __future__ import annotations

import collections
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kopf.testing import ControlPlane, KubeAPI
from tests.e2e import peers
from tests.e2e.faultproxy import Fault, FaultProxy, Request
from tests.e2e.harness import OPERATORS, OperatorProcess, kopf_run, read_calls
from tests.e2e.test_replicas import CRD, GROUP, PLURAL, collection, create_objects

KOPF = '1.45.2'
FOREIGN = 'foreign.example.com/keep'
LAST_HANDLED = 'kopf.zalando.org/last-handled-configuration'
OURS = 'ours.example.com'


@pytest.fixture(scope='module')
def crd(kube: KubeAPI) -> None:
    kube.apply_crd(CRD)


@pytest.fixture()
def neighbours(kubeconfig: Path, namespace: str, tmp_path: Path, crd: None
               ) -> Iterator[Callable[..., OperatorProcess]]:
    started: list[OperatorProcess] = []

    def start(framework: str, prefix: str | None, store: str = '') -> OperatorProcess:
        label = prefix or 'defaults'
        env = {'E2E_RESOURCE': f'{PLURAL}.{GROUP}', 'E2E_CALLS': str(tmp_path / f'{label}.jsonl'), 'E2E_STORE': store,
               **({'E2E_PREFIX': prefix, 'E2E_NAME': prefix.split('.')[0]} if prefix else {})}
        script = OPERATORS / 'neighbour.py'
        if framework == 'ours':
            argv = kopf_run(script, namespace=namespace)
        else:
            argv = [str(peers.ensure(framework)), 'run', str(script), '--standalone', '--verbose', '-n', namespace]
            env['PYTHONPATH'] = ''
        process = OperatorProcess(argv, kubeconfig=kubeconfig, log=tmp_path / f'{label}.log', env=env,
                                  cwd=tmp_path)
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()


def handled(kube: KubeAPI, namespace: str, stores: list[str], names: list[str], **spec: Any) -> bool:
    """
    Whether every object is handled by both in its current state: each diff-base holds this spec.

    A store is an annotation prefix (``prefix/last-handled-configuration``) or
    ``status.NAME`` (``status.NAME.last-handled-configuration``).
    """
    items = {item['metadata']['name']: item for item in kube.get(collection(namespace))['items']}
    for name in names:
        item = items.get(name, {})
        for store in stores:
            if store.startswith('status.'):
                stored = (item.get('status') or {}).get(store[7:], {}).get('last-handled-configuration')
            else:
                stored = (item.get('metadata', {}).get('annotations') or {}).get(f'{store}/last-handled-configuration')
            if stored is None or any(json.loads(stored).get('spec', {}).get(k) != v for k, v in spec.items()):
                return False
    return True


@pytest.mark.parametrize('other', ['ours', KOPF])
def test_two_operators_on_one_resource_leave_each_other_alone(
        kube: KubeAPI, namespace: str, neighbours: Callable[..., OperatorProcess],
        tmp_path: Path, other: str) -> None:
    # Kopf keeps all its defaults (the prefix kopf.zalando.org); ours is configured apart from it, and keeps its
    # state in its own part of the status: Kopf takes every annotation but its own for a change of the object.
    if other == 'ours':
        other_prefix: str | None = 'other.example.com'
        stores = [OURS, 'other.example.com']
        finalizers = {f'{OURS}/finalizer', 'other.example.com/finalizer'}
        ours = neighbours('ours', OURS)
    else:
        other_prefix = None
        stores = ['status.ours', 'kopf.zalando.org']
        finalizers = {f'{OURS}/finalizer', 'kopf.zalando.org/KopfFinalizerMarker'}
        ours = neighbours('ours', OURS, store='status')
    theirs = neighbours(other, other_prefix)
    calls = {OURS: tmp_path / f'{OURS}.jsonl', 'other': tmp_path / f'{other_prefix or "defaults"}.jsonl'}
    names = [f'obj-{i}' for i in range(8)]
    create_objects(kube, namespace, names)
    ours.wait(lambda: handled(kube, namespace, stores, names), what="both operators to handle the creation",
              timeout=60)

    for name in names:
        kube.patch(f'{collection(namespace)}/{name}', {'spec': {'field': 'changed'}})
    ours.wait(lambda: handled(kube, namespace, stores, names, field='changed'),
              what="both operators to handle the update", timeout=60)
    # A last object after all that: once both have handled it, any echo of the other's bookkeeping is in.
    create_objects(kube, namespace, ['sentinel'])
    ours.wait(lambda: handled(kube, namespace, stores, ['sentinel']), what="the sentinel", timeout=60)

    for label, path in calls.items():
        counts = collections.Counter((c['handler'], c['name']) for c in read_calls(path))
        for name in names:
            assert counts[('create', name)] == 2, (label, name, counts)  # one failure, one success
            assert counts[('update', name)] == 1, (label, name, counts)  # the user's change, nothing else
        updates = [c for c in read_calls(path) if c['handler'] == 'update']
        assert all(c['diff'] == [['change', ['spec', 'field'], c['name'], 'changed']] for c in updates), updates

    for item in kube.get(collection(namespace))['items']:
        assert finalizers <= set(item['metadata'].get('finalizers', [])), item['metadata']

    for name in [*names, 'sentinel']:
        kube.delete(f'{collection(namespace)}/{name}')
    ours.wait(lambda: not kube.get(collection(namespace))['items'], what="the deletions", timeout=60)
    for label, path in calls.items():
        deleted = collections.Counter(c['name'] for c in read_calls(path) if c['handler'] == 'delete')
        # Both were waited for; and once each, also when both remove their finalizers at the same moment.
        assert deleted == {name: 1 for name in [*names, 'sentinel']}, (label, deleted)
    for process in (ours, theirs):
        assert 'Traceback' not in process.output, process.output[-5000:]


def test_a_finalizer_list_rewritten_meanwhile_keeps_both_finalizers(
        kube: KubeAPI, control_plane: ControlPlane, namespace: str, crd: None, tmp_path: Path) -> None:
    """Another controller adds its finalizer just before ours arrives: a 409, then our patch on the fresh list."""
    path = f'{collection(namespace)}/contested'

    def interfere(request: Request) -> Fault | None:
        if request.method == 'PATCH' and request.path == path and not interfered:
            interfered.append(True)
            current = kube.get(path)['metadata'].get('finalizers', [])
            kube.patch(path, {'metadata': {'finalizers': [*current, FOREIGN]}})
        return None

    interfered: list[bool] = []
    proxy = FaultProxy(control_plane, tmp_path / 'proxy', policy=interfere).start()
    env = {'E2E_RESOURCE': f'{PLURAL}.{GROUP}', 'E2E_CALLS': str(tmp_path / 'calls.jsonl')}
    process = OperatorProcess(kopf_run(OPERATORS / 'gaps.py', namespace=namespace), kubeconfig=proxy.kubeconfig,
                              log=tmp_path / 'operator.log', env=env)
    try:
        create_objects(kube, namespace, ['contested'])
        process.wait(lambda: LAST_HANDLED in (kube.get(path)['metadata'].get('annotations') or {}),
                     what="the object handled")
        finalizers = kube.get(path)['metadata']['finalizers']
        assert FOREIGN in finalizers and 'kopf.zalando.org/KopfFinalizerMarker' in finalizers, finalizers
        patches = [entry.status for entry in proxy.forwarded if entry.path == path and entry.method == 'PATCH']
        assert patches[0] == 409 and patches[-1] == 200, patches  # refused for the old list, then rebased
        assert [c['handler'] for c in read_calls(tmp_path / 'calls.jsonl')] == ['create']
    finally:
        process.kill()
        proxy.stop()
