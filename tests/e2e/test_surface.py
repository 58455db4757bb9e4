"""
Kopf's surface on the real control plane: the liveness endpoint and which messages become Events.
"""
from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from kopf.testing import KubeAPI
from tests.e2e.harness import OPERATORS, OperatorProcess, kopf_run


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return int(s.getsockname()[1])


def probe(url: str) -> tuple[int, dict[str, object]] | None:
    """The status and JSON of the liveness endpoint, or None while it does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
    except OSError:
        return None


@pytest.fixture()
def probe_fail(tmp_path: Path) -> Path:
    return tmp_path / 'probe-fails'


@pytest.fixture()
def start(kubeconfig: Path, namespace: str, tmp_path: Path, probe_fail: Path):
    started: list[OperatorProcess] = []

    def start(*extra: str, **env: str) -> OperatorProcess:
        argv = kopf_run(OPERATORS / 'surface.py', namespace=namespace) + list(extra)
        process = OperatorProcess(argv, kubeconfig=kubeconfig, log=tmp_path / f'operator-{len(started)}.log',
                                  env={'E2E_PROBE_FAIL': str(probe_fail), **env})
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()


def test_liveness_endpoint_reports_probes_and_failures(start, probe_fail: Path):
    url = f'http://127.0.0.1:{free_port()}/healthz'
    operator = start('--liveness', url)

    healthy = operator.wait(lambda: probe(url) == (200, {'answer': 42, 'marker': 'fine'}),
                            what="a healthy liveness answer with the probes' results")
    assert healthy

    probe_fail.write_text('the marker is down')
    _, data = operator.wait(lambda: (r := probe(url)) and r[0] == 500 and r, what="an unhealthy answer")
    assert 'marker: RuntimeError: the marker is down' in str(data['error'])

    probe_fail.unlink()
    operator.wait(lambda: probe(url) == (200, {'answer': 42, 'marker': 'fine'}), what="healthy again")

    # Another operator on the same port fails at once, naming the endpoint.
    second = start('--liveness', url)
    assert second.process.wait(timeout=30) == 1
    assert f'Cannot serve the liveness endpoint {url}' in second.output
    assert probe(url) is not None  # the first one is not disturbed

    assert operator.stop() == 0
    assert probe(url) is None  # the port is closed with the operator


def events_about(kube: KubeAPI, namespace: str, name: str) -> list[dict[str, str]]:
    items = kube.get(f'/api/v1/namespaces/{namespace}/events')['items']
    return [{'type': e['type'], 'reason': e['reason'], 'message': e['message']}
            for e in items if e['involvedObject'].get('name') == name]


def test_only_explicit_events_are_posted_by_default(start, kube: KubeAPI, namespace: str):
    operator = start()
    operator.wait_for_output('Serving configmaps')
    configmaps = f'/api/v1/namespaces/{namespace}/configmaps'
    for name in ['first', 'second']:
        kube.create(configmaps, {'apiVersion': 'v1', 'kind': 'ConfigMap',
                                 'metadata': {'name': name, 'labels': {'e2e': 'yes'}}})
        # Events are posted one by one in order: the 2nd object's last one means the 1st is complete.
        operator.wait(lambda name=name: any(e['reason'] == 'ExplicitEvent'
                                            for e in events_about(kube, namespace, name)),
                      what=f"the events about {name}")

    assert "Handler 'created' succeeded" in operator.output
    assert 'Logged at WARNING: yes' in operator.output
    assert 'Logged locally only.' in operator.output
    events = sorted(events_about(kube, namespace, 'first'), key=lambda e: e['reason'])
    assert events == [
        {'type': 'Custom', 'reason': 'ExplicitEvent', 'message': 'explicit event'},
        {'type': 'Normal', 'reason': 'ExplicitInfo', 'message': 'explicit info'},
        {'type': 'Warning', 'reason': 'ExplicitWarn', 'message': 'explicit warn'},
        {'type': 'Warning', 'reason': 'Logging', 'message': 'Logged through a posting object logger.'},
    ]
    assert operator.stop() == 0


def test_everything_serves_all_resources_of_the_cluster(start, kube: KubeAPI, namespace: str, tmp_path: Path):
    seen = tmp_path / 'seen.txt'
    operator = start(E2E_EVERYTHING=str(seen))
    operator.wait_for_output('Serving everything')
    labels = {'e2e-everything': 'yes'}
    kube.create(f'/api/v1/namespaces/{namespace}/secrets',
                {'apiVersion': 'v1', 'kind': 'Secret', 'metadata': {'name': 's1', 'labels': labels}})
    kube.create(f'/api/v1/namespaces/{namespace}/serviceaccounts',
                {'apiVersion': 'v1', 'kind': 'ServiceAccount', 'metadata': {'name': 'sa1', 'labels': labels}})
    kube.create(f'/api/v1/namespaces/{namespace}/configmaps',
                {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': 'unlabelled'}})
    operator.wait(lambda: seen.exists() and {'Secret/s1', 'ServiceAccount/sa1'} <= set(seen.read_text().split()),
                  what="the labelled objects of two resources that no handler names")
    assert 'ConfigMap/unlabelled' not in seen.read_text()
    assert operator.stop() == 0
