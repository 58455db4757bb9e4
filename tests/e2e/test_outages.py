"""
Outages of the control plane itself, on a control plane of the module's own.

* kube-apiserver, and separately etcd, stop for 30 seconds while objects are
  being handled, and start again with their data: every object finishes,
  nothing is re-run after its success was visible, the operator says once
  that the server is away and once that it is back, and its memory does not
  grow with the failed attempts;
* etcd compacts its history past the operator's resourceVersion while the
  operator's watch is cut off: the operator lists again (410 Gone) and
  handles each change made meanwhile exactly once, with the right diff.

The control plane serves watches from etcd itself (``--watch-cache=false``):
with the API server's watch cache, a reconnecting watch is answered from the
cache's window of recent events, and etcd's compaction would never show.
"""
from __future__ import annotations

import json
import math
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kopf.testing import ControlPlane, ControlPlaneError, KubeAPI, wait_for
from tests.e2e.faultproxy import FaultProxy
from tests.e2e.harness import OPERATORS, OperatorProcess, kopf_run, read_calls
from tests.e2e.test_replicas import CRD, GROUP, PLURAL, calls_of, collection, create_objects
from tests.e2e.witnesses import Witness

OUTAGE = 30.0  # seconds
HANDLERS = ('slow', 'flaky')


@pytest.fixture(scope='module')
def plane() -> Iterator[ControlPlane]:
    plane = ControlPlane(apiserver_args=['--watch-cache=false'])
    try:
        plane.start()
    except (ControlPlaneError, OSError) as exc:
        pytest.fail(f"The Kubernetes control plane could not be started:\n{exc}", pytrace=False)
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope='module')
def kube(plane: ControlPlane) -> KubeAPI:
    kube = KubeAPI(plane)
    kube.apply_crd(CRD)
    return kube


@pytest.fixture()
def namespace(kube: KubeAPI, request: pytest.FixtureRequest) -> str:
    name = f"outage-{request.node.name.replace('_', '-')[5:30].strip('-').lower()}-{uuid.uuid4().hex[:6]}"
    kube.ensure_namespace(name)
    return name


@pytest.fixture()
def operator(plane: ControlPlane, namespace: str, tmp_path: Path) -> Iterator[Callable[..., OperatorProcess]]:
    started: list[OperatorProcess] = []

    def start(kubeconfig: Path | None = None, script: str = 'replicas.py', **env: str) -> OperatorProcess:
        assert plane.kubeconfig is not None
        process = OperatorProcess(kopf_run(OPERATORS / script, namespace=namespace),
                                  kubeconfig=kubeconfig or plane.kubeconfig, log=tmp_path / 'operator.log', env={
                                      'E2E_RESOURCE': f'{PLURAL}.{GROUP}', 'E2E_CALLS': str(tmp_path / 'calls.jsonl'),
                                      **env})
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()


def rss(pid: int) -> int:
    status = Path(f'/proc/{pid}/status').read_text()
    return next(int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith('VmRSS:'))


@pytest.mark.parametrize('server', ['kube-apiserver', 'etcd'])
def test_a_stopped_server_costs_two_lines_and_nothing_else(
        plane: ControlPlane, kube: KubeAPI, namespace: str, operator: Callable[..., OperatorProcess],
        tmp_path: Path, server: str) -> None:
    witness = Witness(kube, collection(namespace), handlers=HANDLERS, outlasts_outages=True)
    process = operator(E2E_WORK='0.1', E2E_FAILS='1', E2E_DELAY='1')
    names = [f'obj-{i}' for i in range(12)]
    try:
        create_objects(kube, namespace, names)
        process.wait(lambda: len(read_calls(tmp_path / 'calls.jsonl')) >= 6, what="the handling under way")
        plane.stop_server(server)  # type: ignore[arg-type]
        stopped = time.monotonic()
        early = late = 0
        while time.monotonic() - stopped < OUTAGE:
            # The outage itself is the test's input: it lasts so long whatever the operator does meanwhile.
            time.sleep(1)
            early = early or rss(process.process.pid) if time.monotonic() - stopped > 5 else early
            late = rss(process.process.pid)
        plane.start_server(server)  # type: ignore[arg-type]
        process.wait(lambda: witness.finished(names), timeout=60, what="every object to be handled")
    finally:
        witness.stop()
    calls = calls_of(tmp_path / 'calls.jsonl')
    assert witness.reruns(calls) == []
    succeeded = {(call.name, call.handler) for call in calls if call.outcome == 'success'}
    assert succeeded == {(name, handler) for name in names for handler in HANDLERS}
    output = process.output
    print(output[-5000:])
    print(f"RSS during the outage: {early / 2**20:.1f} MiB after 5 s, {late / 2**20:.1f} MiB at the end")
    assert late - early < 4 * 2**20, (early, late)
    away = [line for line in output.splitlines() if 'The Kubernetes API is unreachable' in line]
    back = [line for line in output.splitlines() if 'The Kubernetes API is reachable again' in line]
    assert len(away) == 1 and len(back) == 1, output
    assert 'Traceback' not in output


def compact(plane: ControlPlane, revision: int) -> None:
    """Compact etcd's history up to this revision, through etcd's own HTTP/JSON gateway of its v3 API."""
    body = json.dumps({'revision': str(revision), 'physical': True}).encode()
    request = urllib.request.Request(f'{plane.etcd_url}/v3/kv/compaction', data=body, method='POST',
                                     headers={'Content-Type': 'application/json'})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200, response.read()


def test_a_watch_compacted_away_relists_and_handles_each_change_once(
        plane: ControlPlane, kube: KubeAPI, namespace: str, operator: Callable[..., OperatorProcess],
        tmp_path: Path) -> None:
    proxy = FaultProxy(plane, tmp_path / 'proxy').start()
    calls = tmp_path / 'calls.jsonl'
    witness = Witness(kube, collection(namespace), handlers=(), outlasts_outages=True)
    try:
        process = operator(kubeconfig=proxy.kubeconfig, script='gaps.py', E2E_INACTIVITY='2')
        create_objects(kube, namespace, ['kept', 'changed', 'deleted'])
        process.wait(lambda: witness.finished(['kept', 'changed', 'deleted']), what="the first objects handled")
        before = len(read_calls(calls))

        proxy.blackhole(math.inf)  # the operator's watch goes silent, and every reconnection too
        wait_for(lambda: proxy.figures().get('blackhole', 0) >= 1, what="the open watch black-holed")
        for field in ('one', 'two', 'three'):  # several changes; the operator can only see the last one
            kube.patch(f'{collection(namespace)}/changed', {'spec': {'field': field}})
        kube.delete(f'{collection(namespace)}/deleted')  # held by the finalizer: marked for deletion
        create_objects(kube, namespace, ['new'])
        latest = kube.patch(f'{collection(namespace)}/kept', {'metadata': {'labels': {'touched': 'yes'}}})
        compact(plane, int(latest['metadata']['resourceVersion']))
        proxy.heal()

        process.wait(lambda: witness.finished(['new']) and kube.find(f'{collection(namespace)}/deleted') is None
                     and len([c for c in read_calls(calls)[before:] if c['handler'] == 'update']) >= 2,
                     what="the changes made during the gap handled", timeout=60)
        process.wait_for_output('has expired; relisting')
        assert process.stop() == 0
    finally:
        witness.stop()
        proxy.stop()
    after = [(c['handler'], c['name'], c.get('diff')) for c in read_calls(calls)[before:]]
    assert sorted(after, key=str) == sorted([
        ('update', 'changed', [['change', ['spec', 'field'], 'changed', 'three']]),
        ('update', 'kept', [['add', ['metadata'], None, {'labels': {'touched': 'yes'}}]]),
        ('delete', 'deleted', None),
        ('create', 'new', None),
    ], key=str)
    assert 'Traceback' not in process.output
