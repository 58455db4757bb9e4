"""The Grafana dashboard: drawn from the panels' definitions, on metrics that exist, with PromQL that evaluates."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kopf._observability import metrics

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / 'tools'))
import dashboard_picture  # noqa: E402


def exposed_names(recorder: metrics.MetricsRecorder) -> set[str]:
    """Every sample name that the recorder can expose, the gauges read at scrapes included."""
    recorder.follow_indexes({'idx': {}})
    recorder.follow_readiness(lambda: None)
    recorder.follow_replica(lambda: metrics.ReplicaState(mode='ha', leading=True, members=1, admitting=True,
                                                         writable=True))
    names = set()
    for family in recorder.registry.collect():
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
    for collector in (recorder.handler_calls, recorder.handler_duration, recorder.api_requests, recorder.daemons):
        names.update(sample.name for family in collector.collect() for sample in family.samples)
    return names


def test_the_dashboard_json_is_the_one_the_panels_make():
    result = subprocess.run([sys.executable, 'tools/dashboard_picture.py', '--check'], cwd=REPO,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_every_metric_of_the_dashboard_is_one_that_kopf_exposes():
    recorder = metrics.MetricsRecorder()
    # Children with labels make the _total, _bucket, ... samples appear.
    with recorder.cycle(metrics.labels.Resource('kopf.dev', 'v1', 'kopfexamples'), {}, 'ADDED'):
        recorder.caused('create', 1.0)
        with recorder.handler(None, 'create', 'h') as handler:
            handler.ended(final=True, error=None)
        recorder.patched(metrics.labels.Resource('kopf.dev', 'v1', 'kopfexamples'), {})
        recorder.patch_refused(metrics.labels.Resource('kopf.dev', 'v1', 'kopfexamples'), 'rejected')
    recorder.api_retry('GET', 'https://h/api/v1/pods', throttled=True, delay=1)
    recorder.daemon_started(None, 'daemon')
    recorder.daemon_restarted(None, 'd', 'daemon')
    recorder.lease_renewed('ha', 0.1)
    recorder.lease_failed('ha', ValueError())
    recorder.webhook('w', 'allowed')
    watch = recorder.watch(metrics.labels.Resource('', 'v1', 'pods'), None)
    watch.event('ADDED')
    watch.restarted('expired')
    queue = recorder.queue(metrics.labels.Resource('', 'v1', 'pods'))
    queue.arrived('k')
    recorder.api_requests.labels('GET', 'pods', '200').inc()
    recorder.api_duration.labels('GET', 'pods').observe(0.1)
    exposed = exposed_names(recorder)

    used = {name for panel in json.loads(dashboard_picture.DASHBOARD.read_text())['panels']
            for target in panel['targets'] for name in re.findall(r'\b(?:kopf|process)_[a-z_]+', target['expr'])}
    assert used and used <= exposed, sorted(used - exposed)
    assert len(used) >= 20  # the dashboard covers the metrics broadly


def test_the_panels_promql_is_evaluated_as_prometheus_would():
    series = dashboard_picture.Series()
    bucket = 'kopf_queue_latency_seconds_bucket'

    def sample(t, calls, le_1, le_inf):
        def key(name, **labels):
            return name, frozenset({'job': 'kopf', 'resource': 'pods', **labels}.items())
        series.add(t, {key('kopf_handler_calls_total', handler='a', outcome='success'): calls,
                       key('kopf_handler_calls_total', handler='a', outcome='permanent_error'): calls / 2,
                       key(bucket, le='1.0'): le_1, key(bucket, le='+Inf'): le_inf,
                       key('kopf_queue_waiting_objects'): 3})

    sample(0, 0, 0, 0)
    sample(10, 20, 10, 20)
    sample(20, 40, 20, 40)
    evaluate = dashboard_picture.Evaluator(series, {'job': 'kopf', 'resource': '.*', '__rate_interval': '15s'})
    rates = evaluate('sum by (outcome) (rate(kopf_handler_calls_total{job="$job", resource=~"$resource"}'
                     '[$__rate_interval]))', 20)
    assert rates == {frozenset({('outcome', 'success')}): pytest.approx(2.0),
                     frozenset({('outcome', 'permanent_error')}): pytest.approx(1.0)}
    failing = evaluate('sum by (handler) (increase(kopf_handler_calls_total{outcome!~"success|waiting"}[1m]))', 20)
    assert failing == {frozenset({('handler', 'a')}): pytest.approx(20.0)}  # the growth in the range, unextrapolated
    quantile = evaluate(f'histogram_quantile(0.25, sum by (le) (rate({bucket}[15s])))', 20)
    assert quantile == {frozenset(): pytest.approx(0.5)}  # half-way into the first bucket (0..1 s)
    assert evaluate('max by (resource) (kopf_queue_waiting_objects)', 15) == {frozenset({('resource', 'pods')}): 3}
