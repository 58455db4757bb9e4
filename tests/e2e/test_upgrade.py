"""
Operators move here from the released Kopf with objects in the middle of handling, unchanged.

For each Kopf version that runs on this machine: the real Kopf (installed from
PyPI into a virtualenv of its own) handles two objects with ``kopf run`` and
is killed (SIGKILL) in the middle -- one object is being created (some
handlers done, others waiting for a retry), the other one is being updated.
Then our ``kopf run`` takes over the same operator file and objects. The
server and the handlers' call log must show: nothing that succeeded under
Kopf runs again, retry counts continue where Kopf left them, everything
finishes, and nothing Kopf wrote as progress is left behind.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kopf.testing import KubeAPI
from tests.e2e import peers
from tests.e2e.harness import OPERATORS, OperatorProcess, read_calls
from tests.e2e.test_persistence import settled

GROUP, VERSION, PLURAL = 'e2e.kopf.dev', 'v1', 'kopfupgrades'
PREFIX = 'kopf.zalando.org'
LONG_ID = 'a-very-long-handler-id-that-goes-well-beyond-sixty-three-characters-in-total'
DELAY = '3'

# Where Kopf keeps each handler's progress: as observed on the server (0.27 writes only the 2nd form of LONG_ID).
KOPF_KEYS = {
    'plain': [f'{PREFIX}/plain'],
    'parent': [f'{PREFIX}/parent'],
    'parent/child1': [f'{PREFIX}/parent.child1'],
    'parent/child2': [f'{PREFIX}/parent.child2'],
    'flaky': [f'{PREFIX}/flaky'],
    'fieldfn/spec.field': [f'{PREFIX}/fieldfn.spec.field'],
    'upd': [f'{PREFIX}/upd'],
    LONG_ID: [f'{PREFIX}/a-very-long-handler-id-that-goes-well-beyond-sixty-three-whspPA',
              f'{PREFIX}/a-very-long-handler-id-that-goes-well-b-whspPA'],
}
CREATE_HANDLERS = ['plain', LONG_ID, 'parent', 'parent/child1', 'parent/child2', 'flaky', 'fieldfn/spec.field']


def crd() -> dict[str, Any]:
    # No status subresource and a lenient schema: what older Kopf wrote into the status stays there too.
    return {
        'apiVersion': 'apiextensions.k8s.io/v1', 'kind': 'CustomResourceDefinition',
        'metadata': {'name': f'{PLURAL}.{GROUP}'},
        'spec': {
            'group': GROUP, 'scope': 'Namespaced',
            'names': {'plural': PLURAL, 'singular': 'kopfupgrade', 'kind': 'KopfUpgrade'},
            'versions': [{'name': VERSION, 'served': True, 'storage': True, 'schema': {'openAPIV3Schema': {
                'type': 'object', 'x-kubernetes-preserve-unknown-fields': True}}}],
        },
    }


@pytest.fixture(scope='module', autouse=True)
def resource(kube: KubeAPI) -> None:
    kube.apply_crd(crd())


def states(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Kopf's progress records on the object by handler id (the first key form found)."""
    annotations = obj['metadata'].get('annotations', {})
    found = {}
    for handler, keys in KOPF_KEYS.items():
        for key in keys:
            if key in annotations:
                found[handler] = json.loads(annotations[key])
                break
    return found


def succeeded(obj: dict[str, Any]) -> set[str]:
    return {handler for handler, record in states(obj).items() if record.get('success')}


def waiting(obj: dict[str, Any], handler: str) -> bool:
    record = states(obj).get(handler, {})
    return bool(record.get('retries')) and not record.get('success') and not record.get('failure')


def leftovers(obj: dict[str, Any]) -> dict[str, Any]:
    """Any progress bookkeeping still on the object, annotations or status."""
    annotations = obj['metadata'].get('annotations', {})
    left: dict[str, Any] = {k: v for k, v in annotations.items()
                            if k.startswith(f'{PREFIX}/') and k != f'{PREFIX}/last-handled-configuration'}
    progress = ((obj.get('status') or {}).get('kopf') or {})
    left.update({f'status.kopf.{k}': v for k, v in progress.items() if v})
    return left


@pytest.mark.parametrize('version', list(peers.MAX_PYTHON))
def test_upgrade_from_kopf_with_work_in_flight(version, kube, kubeconfig, namespace, operators, tmp_path):
    try:
        kopf_exe = peers.ensure(version)
    except peers.PeerUnavailable as e:
        pytest.skip(str(e))
    calls = tmp_path / 'calls.jsonl'
    base = f'/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}'
    creating, updating = f'{base}/creating', f'{base}/updating'

    peer = OperatorProcess(
        [str(kopf_exe), 'run', str(OPERATORS / 'upgrade.py'), '--standalone', '--verbose', '-n', namespace],
        kubeconfig=kubeconfig, log=tmp_path / 'kopf.log', cwd=Path(tmp_path),
        env={'E2E_CALLS': str(calls), 'E2E_DELAY': DELAY, 'PYTHONPATH': ''})
    try:
        # Kopf handles one object completely, then an update of it and the creation of another one begin.
        kube.create(base, {'apiVersion': f'{GROUP}/{VERSION}', 'kind': 'KopfUpgrade',
                           'metadata': {'name': 'updating', 'labels': {'app': 'x'}},
                           'spec': {'field': 'a', 'failures': 0}})
        peer.wait(lambda: f'{PREFIX}/last-handled-configuration' in kube.get(updating)['metadata'].get(
            'annotations', {}), what="Kopf to handle the creation of the 1st object", timeout=60)
        kube.patch(updating, {'spec': {'field': 'b'}})
        kube.create(base, {'apiVersion': f'{GROUP}/{VERSION}', 'kind': 'KopfUpgrade',
                           'metadata': {'name': 'creating'}, 'spec': {'field': 'a', 'failures': 2}})

        def in_flight() -> bool:
            c, u = kube.get(creating), kube.get(updating)
            return ({'plain', LONG_ID, 'parent/child1', 'fieldfn/spec.field'} <= succeeded(c)
                    and waiting(c, 'flaky') and waiting(c, 'parent/child2')
                    and 'fieldfn/spec.field' in succeeded(u) and waiting(u, 'upd'))

        peer.wait(in_flight, what="Kopf to be in the middle of handling both objects", timeout=30)
        peer.kill()
    finally:
        peer.kill()
    before = {'creating': kube.get(creating), 'updating': kube.get(updating)}
    kopf_pids = {c['pid'] for c in read_calls(calls)}

    events = tmp_path / 'events.jsonl'
    ours = operators('upgrade.py', E2E_CALLS=str(calls), E2E_DELAY=DELAY, E2E_EVENTS=str(events))

    def ours_done() -> bool:
        mine = [c for c in read_calls(calls) if c['pid'] == ours.process.pid and c['ok']]
        done = {(c['name'], c['handler']) for c in mine}
        return {('creating', 'flaky'), ('creating', 'parent/child2'), ('updating', 'upd')} <= done
    ours.wait(ours_done, what="our kopf to finish the handling", timeout=40)
    after = {name: settled(kube, f'{base}/{name}', events) for name in ('creating', 'updating')}

    all_calls = read_calls(calls)
    mine = [c for c in all_calls if c['pid'] == ours.process.pid]
    assert kopf_pids and ours.process.pid not in kopf_pids
    for name, obj in before.items():
        # Kopf was really in the middle: some handlers had succeeded, some were waiting for a retry.
        done_under_kopf = succeeded(obj)
        assert done_under_kopf, (name, states(obj))
        called_by_us = {c['handler'] for c in mine if c['name'] == name}
        # Nothing that succeeded under Kopf runs again.
        assert not done_under_kopf & called_by_us, (name, done_under_kopf & called_by_us)
        # Retries continue where Kopf left them.
        for handler, record in states(obj).items():
            if waiting(obj, handler):
                retries = [c['retry'] for c in mine if c['name'] == name and c['handler'] == handler]
                assert retries and retries[0] == record['retries'], (name, handler, record, retries)
        # Nothing of Kopf's (or ours) progress is left; the last handled configuration is there.
        assert not leftovers(after[name]), (name, leftovers(after[name]))
        assert f'{PREFIX}/last-handled-configuration' in after[name]['metadata']['annotations']

    # Everything finished, each handler succeeding exactly once per cause, over both operators.
    expected = {'creating': CREATE_HANDLERS, 'updating': CREATE_HANDLERS + ['fieldfn/spec.field', 'upd']}
    for name, handlers in expected.items():
        successes = [c['handler'] for c in all_calls if c['name'] == name and c['ok'] and c['handler'] != 'parent']
        assert sorted(successes) == sorted(h for h in handlers if h != 'parent'), (name, successes)
    # The update in flight continues with the real change only (no bookkeeping in the diff).
    diffs = [c['diff'] for c in mine if c['handler'] == 'upd']
    assert diffs and all(diff == [['change', ['spec', 'field'], 'a', 'b']] for diff in diffs), diffs
    # The creation of the 1st object is not repeated: its create handlers ran under Kopf only.
    assert not [c for c in mine if c['name'] == 'updating' and c['handler'] in CREATE_HANDLERS]
