"""
Reconciliation on a real API server: ``kopf.on.reconcile`` with owned ConfigMaps, run by real ``kopf run``.

The operator (``operators/reconciling.py``) keeps one ConfigMap per
``Shelf`` as the shelf's spec says, with server-side apply, and records
every call with its process, time, retry, triggers and the children it
was shown. The tests break the children by hand, and check from the outside
how soon they are repaired, how many calls a burst of changes costs, and
what survives a restart and holds under two ``--shards`` replicas.
"""
from __future__ import annotations

import concurrent.futures
import datetime
import itertools
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kopf._replicas import ownership
from kopf.testing import KubeAPI
from tests.e2e.harness import OPERATORS, OperatorProcess, kopf_run, read_calls

GROUP, VERSION, PLURAL, KIND = 'reconcile.e2e.kopf.dev', 'v1', 'shelves', 'Shelf'
CRD: dict[str, Any] = {
    'apiVersion': 'apiextensions.k8s.io/v1',
    'kind': 'CustomResourceDefinition',
    'metadata': {'name': f'{PLURAL}.{GROUP}'},
    'spec': {
        'group': GROUP,
        'scope': 'Namespaced',
        'names': {'plural': PLURAL, 'singular': 'shelf', 'kind': KIND},
        'versions': [{
            'name': VERSION, 'served': True, 'storage': True,
            'subresources': {'status': {}},
            'schema': {'openAPIV3Schema': {'type': 'object', 'properties': {
                'spec': {'type': 'object', 'x-kubernetes-preserve-unknown-fields': True},
                'status': {'type': 'object', 'x-kubernetes-preserve-unknown-fields': True},
            }}},
        }],
    },
}
RECORD = 'kopf.zalando.org/reconcile-shelf'  # where the back-off of the handler `shelf` is kept
LEASE, RENEW, RETRY = 4, 3.0, 0.5


@pytest.fixture(scope='module', autouse=True)
def crd(kube: KubeAPI) -> None:
    kube.apply_crd(CRD)


@pytest.fixture()
def calls(tmp_path: Path) -> Path:
    return tmp_path / 'calls.jsonl'


@pytest.fixture()
def start(kubeconfig: Path, namespace: str, tmp_path: Path, calls: Path) -> Iterator[Callable[..., OperatorProcess]]:
    """Start the operator (more than once, or as replicas); all are killed at the end."""
    started: list[OperatorProcess] = []

    def start(*args: str, kubeconfig: Path = kubeconfig, **env: str) -> OperatorProcess:
        argv = kopf_run(OPERATORS / 'reconciling.py', namespace=namespace) + list(args)
        process = OperatorProcess(argv, kubeconfig=kubeconfig, log=tmp_path / f'operator-{len(started)}.log',
                                  env={'E2E_CALLS': str(calls), 'E2E_LEASE': str(LEASE), 'E2E_RENEW': str(RENEW),
                                       'E2E_RETRY': str(RETRY), **env})
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()


def shelves(namespace: str) -> str:
    return f'/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}'


def configmaps(namespace: str) -> str:
    return f'/api/v1/namespaces/{namespace}/configmaps'


def create_shelf(kube: KubeAPI, namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    return kube.create(shelves(namespace), {'apiVersion': f'{GROUP}/{VERSION}', 'kind': KIND,
                                            'metadata': {'name': name}, 'spec': {'books': ['a', 'b'], **spec}})


def calls_of(path: Path, name: str, handler: str = 'shelf') -> list[dict[str, Any]]:
    return [call for call in read_calls(path) if call['name'] == name and call['handler'] == handler]


def books(kube: KubeAPI, namespace: str, shelf: str) -> str | None:
    child = kube.find(f'{configmaps(namespace)}/{shelf}-books')
    return None if child is None else (child.get('data') or {}).get('books')


def test_a_deleted_or_edited_child_is_restored_within_two_seconds(
        kube: KubeAPI, namespace: str, start: Callable[..., OperatorProcess], calls: Path) -> None:
    operator = start()
    operator.wait_for_output('Serving')
    owner = create_shelf(kube, namespace, 'one')
    operator.wait(lambda: books(kube, namespace, 'one') == 'a,b', what="the child ConfigMap")
    child = kube.get(f'{configmaps(namespace)}/one-books')
    assert child['metadata']['ownerReferences'] == [{
        'apiVersion': f'{GROUP}/{VERSION}', 'kind': KIND, 'name': 'one', 'uid': owner['metadata']['uid'],
        'controller': True, 'blockOwnerDeletion': True}]
    ready = operator.wait(lambda: [c for c in (kube.get(f'{shelves(namespace)}/one').get('status') or {})
                                   .get('conditions', []) if c['type'] == 'Ready'], what="the Ready condition")
    assert ready[0]['status'] == 'True' and ready[0]['observedGeneration'] == owner['metadata']['generation']

    # Beside a create handler: neither its writes (status, kopf's annotations) nor ours call the reconciliation.
    operator.wait(lambda: (kube.get(f'{shelves(namespace)}/one').get('status') or {}).get('created') == 'welcome',
                  what="the create handler's result")
    assert len(calls_of(calls, 'one', 'created')) == 1
    assert [c['triggers'] for c in calls_of(calls, 'one')] == [['children', 'object']]

    # Deleted by hand: re-created.
    began = time.monotonic()
    kube.delete(f'{configmaps(namespace)}/one-books')
    operator.wait(lambda: books(kube, namespace, 'one') == 'a,b', what="the deleted child to be restored")
    assert time.monotonic() - began < 2.0

    # Edited by hand: the field that we manage is put back; a field that we do not manage stays.
    began = time.monotonic()
    kube.patch(f'{configmaps(namespace)}/one-books', {'data': {'books': 'vandalised', 'note': 'mine'}})
    operator.wait(lambda: books(kube, namespace, 'one') == 'a,b', what="the edited child to be restored")
    assert time.monotonic() - began < 2.0
    assert kube.get(f'{configmaps(namespace)}/one-books')['data']['note'] == 'mine'

    # A change of the owner's spec: the child follows.
    kube.patch(f'{shelves(namespace)}/one', {'spec': {'books': ['c']}})
    operator.wait(lambda: books(kube, namespace, 'one') == 'c', what="the child to follow the spec")
    assert 'Traceback' not in operator.output


def test_a_burst_of_a_hundred_child_changes_causes_at_most_three_calls(
        kube: KubeAPI, namespace: str, start: Callable[..., OperatorProcess], calls: Path) -> None:
    operator = start()
    operator.wait_for_output('Serving')
    create_shelf(kube, namespace, 'busy')
    operator.wait(lambda: calls_of(calls, 'busy') and books(kube, namespace, 'busy') == 'a,b', what="the first call")
    path = f'{configmaps(namespace)}/busy-books'

    # 100 changes by hand, 10 at a time: labels that the reconciliation does not manage (it keeps them).
    def touch(i: int) -> None:
        kube.patch(path, {'metadata': {'labels': {f'touch-{i % 10}': str(i)}}})

    before = len(calls_of(calls, 'busy'))
    began = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=10) as pool:
        list(pool.map(touch, range(100)))
    burst = time.monotonic() - began
    final = {label: value for label, value in kube.get(path)['metadata']['labels'].items() if label.startswith('touch')}
    assert len(final) == 10

    # The call that has seen the last change answers every trigger of the burst: count up to it.
    def seen_all() -> int | None:
        for index, call in enumerate(calls_of(calls, 'busy')[before:]):
            labels = call['children'].get('busy-books', {})
            if all(labels.get(label) == value for label, value in final.items()):
                return index + 1
        return None

    count = operator.wait(seen_all, what="a call that has seen the whole burst")
    assert count <= 3, (count, burst, calls_of(calls, 'busy')[before:])
    print(f"100 child changes in {burst:.2f}s: {count} reconcile call(s)")
    assert books(kube, namespace, 'busy') == 'a,b'


def test_resync_calls_again_without_any_change(
        kube: KubeAPI, namespace: str, start: Callable[..., OperatorProcess], calls: Path) -> None:
    operator = start(E2E_RESYNC='1')
    operator.wait_for_output('Serving')
    create_shelf(kube, namespace, 'idle')
    operator.wait(lambda: len([c for c in calls_of(calls, 'idle') if c['triggers'] == ['resync']]) >= 2,
                  what="two resyncs")
    resyncs = [c['t'] for c in calls_of(calls, 'idle') if c['triggers'] == ['resync']]
    assert resyncs[1] - resyncs[0] >= 0.9  # a resync is due a whole period after the previous call


def test_a_failing_reconcile_backs_off_recovers_and_never_holds_up_others(
        kube: KubeAPI, namespace: str, start: Callable[..., OperatorProcess], calls: Path) -> None:
    operator = start(E2E_BACKOFF='0.5')
    operator.wait_for_output('Serving')
    create_shelf(kube, namespace, 'flaky', failUntil=3)
    operator.wait(lambda: RECORD in kube.get(f'{shelves(namespace)}/flaky')['metadata'].get('annotations', {}),
                  what="the back-off record of the failing call")
    create_shelf(kube, namespace, 'fine')
    operator.wait(lambda: books(kube, namespace, 'fine') == 'a,b', what="another shelf reconciled meanwhile")
    operator.wait(lambda: books(kube, namespace, 'flaky') == 'a,b', what="the recovery")
    attempts = calls_of(calls, 'flaky')
    assert [c['retry'] for c in attempts] == [0, 1, 2, 3]
    pauses = [later['t'] - earlier['t'] for earlier, later in itertools.pairwise(attempts)]
    assert pauses[0] >= 0.45 and pauses[1] >= 0.95 and pauses[2] >= 1.95, pauses  # 0.5, 1, 2: doubling
    assert attempts[1]['triggers'] == ['retry']
    operator.wait(lambda: RECORD not in kube.get(f'{shelves(namespace)}/flaky')['metadata'].get('annotations', {}),
                  what="the back-off record to be forgotten after the success")
    assert operator.output.count("Reconciler 'shelf' failed temporarily: failing on purpose") == 3


def test_a_restart_keeps_the_back_off(
        kube: KubeAPI, namespace: str, start: Callable[..., OperatorProcess], calls: Path) -> None:
    first = start(E2E_BACKOFF='2')
    first.wait_for_output('Serving')
    create_shelf(kube, namespace, 'stubborn', failUntil=100)

    def recorded() -> dict[str, Any] | None:
        annotations = kube.get(f'{shelves(namespace)}/stubborn')['metadata'].get('annotations', {})
        return json.loads(annotations[RECORD]) if RECORD in annotations else None

    record = first.wait(lambda: (r := recorded()) and r['retries'] == 2 and r, what="two failed calls", timeout=20)
    first.kill()
    killed = len(calls_of(calls, 'stubborn'))
    due = datetime.datetime.fromisoformat(record['delayed']).timestamp()  # 4 seconds after the second failure

    second = start(E2E_BACKOFF='2')
    second.wait(lambda: len(calls_of(calls, 'stubborn')) > killed, what="the call after the restart", timeout=20)
    resumed = calls_of(calls, 'stubborn')[killed]
    assert resumed['pid'] == second.process.pid
    assert resumed['retry'] == 2  # the failures in a row go on counting
    assert resumed['t'] >= due - 0.2, (resumed['t'], due)  # not at once: the back-off is waited for
    assert 'as its back-off says' in second.output


def test_with_two_shards_each_owner_is_reconciled_by_its_own_replica_only(
        kube: KubeAPI, namespace: str, start: Callable[..., OperatorProcess], calls: Path) -> None:
    replicas = {identity: start('--shards', '--identity', identity) for identity in ('shard-a', 'shard-b')}
    for replica in replicas.values():
        replica.wait_for_output('Shard members (2)')
    names = [f'shard-{i}' for i in range(10)]
    uids = {name: create_shelf(kube, namespace, name)['metadata']['uid'] for name in names}
    for name in names:
        replicas['shard-a'].wait(lambda name=name: books(kube, namespace, name) == 'a,b', what=f"the child of {name}")
    for name in names:  # the children's events must reach their owners' replicas, whatever their own uids
        kube.delete(f'{configmaps(namespace)}/{name}-books')
    for name in names:
        replicas['shard-a'].wait(lambda name=name: books(kube, namespace, name) == 'a,b', what=f"{name} restored")

    ring = ownership.make_ring(replicas)
    for name in names:
        owner = replicas[ownership.owner(uids[name], ring) or '']
        pids = {call['pid'] for call in calls_of(calls, name)}
        assert pids == {owner.process.pid}, (name, pids)
        assert any(call['triggers'] == ['children'] for call in calls_of(calls, name))  # the restoring call


def test_owning_a_resource_that_the_cluster_does_not_serve_stops_the_start_with_one_line(
        start: Callable[..., OperatorProcess]) -> None:
    operator = start(E2E_OWNS='bookcases')
    operator.wait(lambda: operator.process.poll() is not None, what="the operator to exit")
    assert operator.process.returncode != 0
    lines = [line for line in operator.output.splitlines() if 'bookcases' in line and 'DEBUG' not in line]
    assert len(lines) == 1, operator.output
    assert "Reconciler 'shelf' of shelves.reconcile.e2e.kopf.dev owns 'bookcases', which the cluster does not " \
           "serve" in lines[0]
    assert 'Traceback' not in operator.output


def test_owning_a_resource_that_the_operator_may_not_watch_stops_the_start_naming_the_rule(
        start: Callable[..., OperatorProcess], user_kubeconfig: Callable[..., Path], namespace: str) -> None:
    operator = start(kubeconfig=user_kubeconfig(f'nobody-{namespace[-6:]}'))  # no roles at all
    operator.wait(lambda: operator.process.poll() is not None, what="the operator to exit")
    assert operator.process.returncode != 0
    lines = [line for line in operator.output.splitlines() if 'configmaps' in line and 'DEBUG' not in line]
    assert len(lines) == 1, operator.output
    assert f"may not list and watch configmaps in the namespace {namespace!r}" in lines[0]
    assert 'resources: ["configmaps"], verbs: ["list", "watch"]' in lines[0]
    assert 'Traceback' not in operator.output


def test_applying_over_another_managers_field_fails_naming_the_fields_and_the_manager(
        kube: KubeAPI, namespace: str, start: Callable[..., OperatorProcess], calls: Path) -> None:
    operator = start(E2E_FORCE='0', E2E_BACKOFF='30')
    operator.wait_for_output('Serving')
    create_shelf(kube, namespace, 'contested')
    operator.wait(lambda: books(kube, namespace, 'contested') == 'a,b', what="the child")
    kube.patch(f'{configmaps(namespace)}/contested-books', {'data': {'books': 'mine'}})  # another field manager
    operator.wait_for_output("conflicts with")
    line, = [line for line in operator.output.splitlines() if 'conflicts with' in line]
    assert "ConfigMap " in line and "contested-books as the field manager 'kopf' conflicts with 'Python-urllib' " \
           "on .data.books" in line
    assert 'pass force=True to take them over' in line
    assert books(kube, namespace, 'contested') == 'mine'  # not forced: the other manager's value stays
    assert 'Traceback' not in operator.output  # the message says it all
