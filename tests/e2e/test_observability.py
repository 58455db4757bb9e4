"""
Observability on the real control plane: metrics that match what happened, readiness, traces, and bad input.

The operator runs behind the fault proxy, which holds its first listing (so
that readiness can be seen to wait for it), cuts its first watch stream, and
answers its first PATCH with a 409. The metrics are scraped with
``prometheus_client``'s own parser and compared with what the handlers
recorded and what the proxy injected -- never with the operator's word alone.
"""
from __future__ import annotations

import collections
import json
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kopf.testing import KubeAPI
from tests.e2e.faultproxy import Fault, FaultProxy, Request
from tests.e2e.harness import OPERATORS, OperatorProcess, read_calls

DIFFBASE = 'kopf.zalando.org/last-handled-configuration'

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return int(s.getsockname()[1])


def get(url: str) -> tuple[int, str] | None:
    """The status and text of a GET, or None while nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return None


def scrape(url: str) -> Samples:
    answer = get(url)
    assert answer is not None and answer[0] == 200, answer
    samples: Samples = {}
    for family in text_string_to_metric_families(answer[1]):
        for sample in family.samples:
            samples[sample.name, frozenset(sample.labels.items())] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples of this name whose labels include these."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


def configmap(name: str, label: str = 'observed') -> dict[str, Any]:
    return {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': name, 'labels': {'e2e': label}},
            'data': {'key': name}}


class Scripted:
    """
    Faults at known moments: the first watch is cut, the first PATCH 409s, and the listings of ConfigMaps
    fail until ``released`` is set -- the first one hangs until the client gives up, the next ones answer 500.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done: set[str] = set()
        self.released = threading.Event()

    def once(self, what: str) -> bool:
        with self.lock:
            first = what not in self.done
            self.done.add(what)
            return first

    def __call__(self, request: Request) -> Fault | None:
        if not request.path.endswith('/configmaps') and '/configmaps/' not in request.path:
            return None
        if request.method == 'GET' and not request.is_watch and not self.released.is_set():
            # The client gives up after its request timeout, retries, and then reconnects, until released.
            return Fault('blackhole') if self.once('list') else Fault('status', 500)
        if request.is_watch and self.once('watch'):
            return Fault('cut', after=1.0)
        if request.method == 'PATCH' and self.once('patch'):
            return Fault('status', 409)
        return None


@pytest.fixture()
def started(kubeconfig: Path, namespace: str, tmp_path: Path):
    processes: list[OperatorProcess] = []

    def start(script: str, *extra: str, kubeconfig: Path = kubeconfig, **env: str) -> OperatorProcess:
        argv = [sys.executable, '-m', 'kopf', 'run', str(OPERATORS / script), '--verbose', '-n', namespace, *extra]
        process = OperatorProcess(argv, kubeconfig=kubeconfig, env=env, log=tmp_path / f'op-{len(processes)}.log')
        processes.append(process)
        return process

    yield start
    for process in processes:
        process.kill()


def test_metrics_match_what_happened_and_readiness_waits_for_the_listing(
        kube: KubeAPI, control_plane, namespace: str, tmp_path: Path, started) -> None:
    script = Scripted()
    proxy = FaultProxy(control_plane, tmp_path / 'proxy', policy=script).start()
    collection = f'/api/v1/namespaces/{namespace}/configmaps'
    calls = tmp_path / 'calls.jsonl'
    port = free_port()
    base = f'http://127.0.0.1:{port}'
    try:
        for name in ('listed-1', 'listed-2'):
            kube.create(collection, configmap(name))
        operator = started('observed.py', '--liveness', f'{base}/healthz', '--metrics', f'{base}/metrics',
                           kubeconfig=proxy.kubeconfig, E2E_CALLS=str(calls), E2E_REQUEST_TIMEOUT='2')

        # Ready only after the initial listing, which the proxy holds until released; alive meanwhile.
        first = operator.wait(lambda: get(f'{base}/readyz'), what="the readiness endpoint answering")
        assert first[0] == 503, first  # from the start: served with the liveness endpoint, never a 404
        assert json.loads(first[1])['ready'] is False
        operator.wait(lambda: proxy.figures().get('GET 500'), what="the listing failing after the first one hung")
        assert get(f'{base}/healthz') == (200, '{}')
        assert get(f'{base}/readyz')[0] == 503  # the listing is still held
        script.released.set()
        operator.wait(lambda: get(f'{base}/readyz') == (200, '{"ready": true}'), what="ready after the listing")
        held = scrape(f'{base}/metrics')
        failed = proxy.figures()
        assert failed.get('GET blackhole') == 1
        assert value(held, 'kopf_api_requests_total', verb='LIST', resource='configmaps', code='500') == \
            failed['GET 500']  # every answered attempt, counted by its code
        assert value(held, 'kopf_api_requests_total', verb='LIST', resource='configmaps', code='error') == 1  # hung
        assert value(held, 'kopf_api_retries_total', verb='LIST', resource='configmaps', reason='error') >= 1
        assert value(held, 'kopf_ready') == 1

        for name in ('watched-1', 'watched-2'):
            kube.create(collection, configmap(name))

        def all_handled() -> bool:
            items = kube.get(collection)['items']
            return sum(1 for item in items if DIFFBASE in (item['metadata'].get('annotations') or {})) == 4

        operator.wait(all_handled, what="all four objects handled", timeout=60)
        operator.wait(lambda: proxy.figures().get('watch cut'), what="the first watch stream cut")
        operator.wait(lambda: value(scrape(f'{base}/metrics'), 'kopf_watch_streams_open', resource='configmaps'),
                      what="the watch stream open again")
        samples = scrape(f'{base}/metrics')
        faults = proxy.figures()
        assert operator.stop() == 0
    finally:
        proxy.stop()

    # Handler calls: per handler and outcome, exactly what the handlers recorded.
    recorded = collections.Counter((call['handler'], call['outcome']) for call in read_calls(calls))
    assert recorded == {('fine', 'success'): 4, ('flaky', 'temporary_error'): 4, ('flaky', 'success'): 4,
                        ('broken', 'permanent_error'): 4}
    counted = {(dict(labels)['handler'], dict(labels)['outcome']): v for (name, labels), v in samples.items()
               if name == 'kopf_handler_calls_total' and dict(labels)['resource'] == 'configmaps'}
    assert counted == recorded
    for handler in ('fine', 'flaky', 'broken'):
        calls_of = sum(n for (h, _), n in recorded.items() if h == handler)
        assert value(samples, 'kopf_handler_duration_seconds_count', handler=handler, cause='create') == calls_of

    # The injected 409: re-based once, and seen by the API client once.
    assert faults.get('PATCH 409') == 1
    assert value(samples, 'kopf_patch_outcomes_total', resource='configmaps', outcome='conflict_rebased') == 1
    assert value(samples, 'kopf_api_requests_total', verb='PATCH', resource='configmaps', code='409') == 1
    assert value(samples, 'kopf_patch_outcomes_total', resource='configmaps', outcome='sent') >= 4

    # The cut watch stream: one restart after an error; listed and watched objects counted by type.
    assert faults.get('watch cut') == 1
    assert value(samples, 'kopf_watch_restarts_total', resource='configmaps', reason='error') == 1
    assert value(samples, 'kopf_watch_events_total', resource='configmaps', type='LISTED') == 2
    assert value(samples, 'kopf_watch_events_total', resource='configmaps', type='ADDED') >= 2
    assert value(samples, 'kopf_watch_streams_open', resource='configmaps') == 1  # one stream, not two
    assert value(samples, 'kopf_watch_last_event_age_seconds', resource='configmaps', namespace=namespace) >= 0
    assert value(samples, 'kopf_api_requests_total', verb='WATCH', resource='configmaps', code='200') >= 2

    # Cycles, the queue: every object's creation went through them.
    assert value(samples, 'kopf_cycles_total', resource='configmaps', cause='create') >= 8  # 4 x (first, retry)
    assert value(samples, 'kopf_queue_latency_seconds_count', resource='configmaps') >= 4
    assert value(samples, 'kopf_queue_retries_total', resource='configmaps') >= 4  # flaky's retries
    assert ('kopf_queue_waiting_objects', frozenset({('resource', 'configmaps')})) in samples

    # The standard process and Python collectors.
    assert value(samples, 'process_cpu_seconds_total') > 0
    assert any(name.startswith('python_gc_') for name, _ in samples)


def test_a_busy_or_invalid_metrics_address_exits_at_startup_naming_it(started, tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(('127.0.0.1', 0))
        busy.listen()
        url = f'http://127.0.0.1:{busy.getsockname()[1]}/metrics'
        operator = started('observed.py', '--metrics', url, E2E_CALLS=str(tmp_path / 'calls.jsonl'))
        assert operator.process.wait(timeout=60) != 0
    lines = [line for line in operator.output.splitlines() if 'metrics endpoint' in line]
    assert len(lines) == 1, operator.output
    assert f"Cannot serve the metrics endpoint {url}" in lines[0]
    assert "Choose another one with --metrics" in lines[0]
    assert 'Traceback' not in operator.output

    invalid = started('observed.py', '--metrics', 'ftp://127.0.0.1:9/metrics', E2E_CALLS=str(tmp_path / 'c.jsonl'))
    assert invalid.process.wait(timeout=60) != 0
    assert "The metrics endpoint 'ftp://127.0.0.1:9/metrics' (--metrics) is not served: only http://" in invalid.output
    assert 'Traceback' not in invalid.output


def test_a_scrape_during_the_exit_is_answered_or_refused_never_hung(kube, namespace, started, tmp_path) -> None:
    url = f'http://127.0.0.1:{free_port()}/metrics'
    operator = started('observed.py', '--metrics', url, E2E_CALLS=str(tmp_path / 'calls.jsonl'))
    operator.wait(lambda: get(url.replace('/metrics', '/readyz')) == (200, '{"ready": true}'), what="ready")
    operator.process.terminate()
    answers: list[int | None] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # until the server is gone (refused), at most 30 s
        began = time.monotonic()
        answer = get(url)  # a hang would end in a timeout here: 5 s
        assert time.monotonic() - began < 4.5, "a scrape hung during the exit"
        answers.append(answer[0] if answer is not None else None)
        if answer is None:
            break
    assert answers[-1] is None, answers  # refused at last
    assert set(answers) <= {200, None}
    assert operator.process.wait(timeout=30) == 0


def test_the_trace_of_one_cycle_nests_handlers_and_requests(kube: KubeAPI, namespace: str, started,
                                                            tmp_path: Path) -> None:
    spans_file = tmp_path / 'spans.jsonl'
    operator = started('traced.py', E2E_SPANS=str(spans_file))
    operator.wait_for_output("Tracing the handling with OpenTelemetry.")
    path = f'/api/v1/namespaces/{namespace}/configmaps'
    created = kube.create(path, configmap('traced-1', label='traced'))
    operator.wait(lambda: DIFFBASE in (kube.get(f'{path}/traced-1')['metadata'].get('annotations') or {}),
                  what="the object handled")
    operator.wait_for_output("Handler 'traced' succeeded")
    assert operator.stop() == 0

    spans = [json.loads(line) for line in spans_file.read_text().splitlines()]
    by_id = {span['span']: span for span in spans}
    cycles = [span for span in spans if span['name'] == 'kopf.cycle'
              and span['attributes'].get('kopf.cause') == 'create'
              and span['attributes'].get('kopf.object.uid') == created['metadata']['uid']]
    assert len(cycles) == 1, [span['name'] for span in spans]
    cycle = cycles[0]
    assert cycle['parent'] is None
    assert cycle['attributes']['kopf.object.kind'] == 'ConfigMap'
    assert cycle['attributes']['kopf.object.name'] == 'traced-1'
    assert cycle['attributes']['k8s.namespace.name'] == namespace
    children = [span for span in spans if span['parent'] == cycle['span']]
    handlers = [span for span in children if span['name'] == 'kopf.handler']
    assert [span['attributes'] for span in handlers] == [
        {'kopf.handler': 'traced', 'kopf.cause': 'create', 'kopf.outcome': 'success'}]
    patches = [span for span in children if span['name'] == 'PATCH configmaps']
    assert len(patches) == 1
    assert patches[0]['attributes']['http.response.status_code'] == 200
    own = [span for span in spans if span['name'] == 'handler-work']
    assert len(own) == 1 and own[0]['parent'] == handlers[0]['span']  # the handler's own span nests under it
    assert own[0]['attributes'] == {'work': 'done'}
    assert {span['trace'] for span in [cycle, *children, *own]} == {cycle['trace']}
    assert all(by_id.get(span['parent']) is not None for span in children)


def test_an_unreachable_trace_collector_is_warned_about_once_and_the_handling_goes_on(
        kube: KubeAPI, namespace: str, started, tmp_path: Path) -> None:
    calls = tmp_path / 'calls.jsonl'
    operator = started('observed.py', E2E_CALLS=str(calls),
                       OTEL_EXPORTER_OTLP_ENDPOINT=f'http://127.0.0.1:{free_port()}',
                       OTEL_BSP_SCHEDULE_DELAY='100', OTEL_EXPORTER_OTLP_TIMEOUT='1')
    operator.wait_for_output("Tracing the handling with OpenTelemetry.")
    path = f'/api/v1/namespaces/{namespace}/configmaps'
    began = time.monotonic()
    for index in range(3):
        kube.create(path, configmap(f'untraced-{index}'))

    def handled() -> bool:
        items = kube.get(path)['items']
        return sum(1 for item in items if DIFFBASE in (item['metadata'].get('annotations') or {})) == 3

    operator.wait(handled, what="the objects handled", timeout=60)
    elapsed = time.monotonic() - began
    operator.wait_for_output("Cannot export the traces")
    assert operator.stop() == 0
    warnings = [line for line in operator.output.splitlines() if 'Cannot export the traces' in line]
    assert len(warnings) == 1, warnings
    assert 'Cannot export the traces to http://127.0.0.1:' in warnings[0] and '(otlp): ' in warnings[0]
    assert 'Traceback' not in operator.output
    assert 'Failed to export' not in operator.output and 'Transient error' not in operator.output
    assert elapsed < 30  # flaky's retry is 0.2 s: the handling does not wait for the exporter
