"""
The Grafana dashboard of kopf's metrics (``deploy/grafana-dashboard.json``), and a picture of it from a real run.

The panels are defined here once: their PromQL goes into the dashboard's
JSON as it is, and the picture (``docs/observability-dashboard.png``) is
drawn from the very same expressions. No Grafana is needed: an operator runs
on the local control plane (the end-to-end tests' kube-apiserver + etcd,
behind their fault proxy, which answers some PATCHes with 409 and cuts a
watch stream now and then), with ``--metrics``; objects are created in
waves, some of whose handlers fail or retry; ``/metrics`` is scraped every
second; each panel's expression is evaluated over the scraped series by a
small evaluator of the PromQL that the panels use (selectors with matchers,
``rate``/``increase`` over a range, ``sum``/``max``/``min`` ``by``,
``histogram_quantile``) -- as Prometheus would over the same samples, but
without its extrapolation to the edges of a range (``increase`` is the
growth between the first and the last sample in the range, ``rate`` that
growth per second between them) -- and drawn with
matplotlib in the dashboard's layout.

    python tools/dashboard_picture.py            # the JSON and the picture (needs matplotlib; ~2 minutes)
    python tools/dashboard_picture.py --json     # only the JSON (no run)
    python tools/dashboard_picture.py --check    # fail if the JSON is not the one the panels make
"""
from __future__ import annotations

import argparse
import bisect
import dataclasses
import itertools
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DASHBOARD = REPO / 'deploy' / 'grafana-dashboard.json'
PICTURE = REPO / 'docs' / 'observability-dashboard.png'

# What the dashboard's variables are while the picture is drawn.
SEL = 'job="$job", resource=~"$resource"'
JOB = 'job="$job"'
RATE = '$__rate_interval'


@dataclasses.dataclass(frozen=True)
class Target:
    expr: str
    legend: str


@dataclasses.dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    targets: tuple[Target, ...]
    description: str = ''


def _t(expr: str, legend: str) -> Target:
    return Target(expr, legend)


PANELS: tuple[Panel, ...] = (
    Panel("Handling cycles", 'ops', (
        _t(f'sum by (cause) (rate(kopf_cycles_total{{{SEL}}}[{RATE}]))', '{{cause}}'),),
        "Handling cycles per second, by their cause."),
    Panel("Handler calls by outcome", 'ops', (
        _t(f'sum by (outcome) (rate(kopf_handler_calls_total{{{SEL}}}[{RATE}]))', '{{outcome}}'),),
        "Is it working? Handler calls per second: success, temporary_error, permanent_error, timeout, exhausted."),
    Panel("Failing handlers", 'ops', (
        _t(f'sum by (handler, outcome) (rate(kopf_handler_calls_total{{{SEL}, outcome!~"success|waiting"}}'
           f'[{RATE}]))', '{{handler}} {{outcome}}'),),
        "Which handler fails, and how?"),
    Panel("Objects waiting", 'short', (
        _t(f'sum by (resource) (kopf_queue_waiting_objects{{{SEL}}})', '{{resource}}'),),
        "Is it keeping up? Objects whose events wait for their worker."),
    Panel("Oldest waiting event", 's', (
        _t(f'max by (resource) (kopf_queue_oldest_waiting_seconds{{{SEL}}})', '{{resource}}'),),
        "How long the oldest waiting event has waited."),
    Panel("From change to handler", 's', (
        _t(f'histogram_quantile(0.5, sum by (le) (rate(kopf_queue_latency_seconds_bucket{{{SEL}}}[{RATE}])))',
           'p50'),
        _t(f'histogram_quantile(0.99, sum by (le) (rate(kopf_queue_latency_seconds_bucket{{{SEL}}}[{RATE}])))',
           'p99')),
        "From an event's arrival to the start of the first handler it causes."),
    Panel("Handler duration (p95)", 's', (
        _t(f'histogram_quantile(0.95, sum by (handler, le) (rate(kopf_handler_duration_seconds_bucket{{{SEL}}}'
           f'[{RATE}])))', '{{handler}}'),),
        "Which handler is slow?"),
    Panel("Retries scheduled", 'ops', (
        _t(f'sum by (resource) (rate(kopf_queue_retries_total{{{SEL}}}[{RATE}]))', '{{resource}}'),),
        "Cycles that end asking to come back later."),
    Panel("Patches", 'ops', (
        _t(f'sum by (outcome) (rate(kopf_patch_outcomes_total{{{SEL}}}[{RATE}]))', '{{outcome}}'),),
        "The cycles' patches: sent, conflict_rebased, rejected, too_large, deferred."),
    Panel("API requests", 'reqps', (
        _t(f'sum by (verb, code) (rate(kopf_api_requests_total{{{JOB}}}[{RATE}]))', '{{verb}} {{code}}'),),
        "API requests per second, by verb and status code."),
    Panel("API latency (p99)", 's', (
        _t(f'histogram_quantile(0.99, sum by (verb, le) (rate(kopf_api_request_duration_seconds_bucket{{{JOB}}}'
           f'[{RATE}])))', '{{verb}}'),),
        "From sending an API request to its response's headers."),
    Panel("Watch streams", 'short', (
        _t(f'sum by (resource) (kopf_watch_streams_open{{{SEL}}})', 'open {{resource}}'),
        _t(f'sum by (reason) (increase(kopf_watch_restarts_total{{{SEL}}}[1m]))', 'restarts {{reason}} (1m)')),
        "Watch requests open now, and restarts by reason."),
    Panel("Watch events", 'ops', (
        _t(f'sum by (type) (rate(kopf_watch_events_total{{{SEL}}}[{RATE}]))', '{{type}}'),),
        "Objects listed and watch events per second, by type."),
    Panel("Daemons and timers", 'short', (
        _t(f'sum by (kind) (kopf_daemons_running{{{SEL}}})', '{{kind}} running'),
        _t(f'sum by (handler) (increase(kopf_daemon_restarts_total{{{SEL}}}[1m]))', 'restarts {{handler}} (1m)')),
        "Daemons and timers running, and daemons restarted after failures."),
    Panel("Replicas", 'short', (
        _t(f'sum by (mode) (kopf_replica_leading{{{JOB}}})', 'leading ({{mode}})'),
        _t(f'max by (mode) (kopf_replica_members{{{JOB}}})', 'members ({{mode}})'),
        _t(f'sum by (mode) (rate(kopf_lease_renew_failures_total{{{JOB}}}[{RATE}]))', 'renew failures ({{mode}})')),
        "With --ha or --shards: the leaders (1 with HA), the members, Lease renewal failures."),
    Panel("Operator CPU and readiness", 'percentunit', (
        _t(f'rate(process_cpu_seconds_total{{{JOB}}}[{RATE}])', 'CPU'),
        _t(f'min(kopf_ready{{{JOB}}})', 'ready')),
        "The operator's CPU (cores), and whether it is ready."),
    Panel("Operator memory", 'bytes', (
        _t(f'process_resident_memory_bytes{{{JOB}}}', 'resident'),),
        "The operator's resident memory."),
    Panel("Index sizes", 'short', (
        _t(f'sum by (index) (kopf_index_keys{{{JOB}}})', '{{index}}'),),
        "Keys in each in-memory index."),
)

COLUMNS = 3


# --------------------------------------------------------------------------------------------- #
# The dashboard's JSON
# --------------------------------------------------------------------------------------------- #

def dashboard() -> dict[str, Any]:
    """The Grafana dashboard (schema of Grafana 10/11), with variables for the data source, the job, the resource."""
    datasource = {'type': 'prometheus', 'uid': '${datasource}'}
    panels = []
    for index, panel in enumerate(PANELS):
        panels.append({
            'id': index + 1,
            'type': 'timeseries',
            'title': panel.title,
            'description': panel.description,
            'datasource': datasource,
            'gridPos': {'h': 8, 'w': 24 // COLUMNS, 'x': (index % COLUMNS) * (24 // COLUMNS),
                        'y': index // COLUMNS * 8},
            'fieldConfig': {'defaults': {'unit': panel.unit, 'custom': {'lineWidth': 1, 'fillOpacity': 10}},
                            'overrides': []},
            'options': {'legend': {'displayMode': 'list', 'placement': 'bottom', 'showLegend': True},
                        'tooltip': {'mode': 'multi', 'sort': 'desc'}},
            'targets': [{'datasource': datasource, 'expr': target.expr, 'legendFormat': target.legend,
                         'refId': chr(ord('A') + n)} for n, target in enumerate(panel.targets)],
        })
    return {
        'title': 'kopf operator',
        'uid': 'kopf-operator',
        'description': "The metrics of a kopf operator (kopf run --metrics); see docs/observability.rst.",
        'tags': ['kopf', 'kubernetes', 'operator'],
        'schemaVersion': 39,
        'version': 1,
        'editable': True,
        'refresh': '30s',
        'time': {'from': 'now-1h', 'to': 'now'},
        'timepicker': {},
        'annotations': {'list': []},
        'templating': {'list': [
            {'name': 'datasource', 'label': 'Data source', 'type': 'datasource', 'query': 'prometheus'},
            {'name': 'job', 'label': 'Job', 'type': 'query', 'datasource': datasource,
             'query': {'query': 'label_values(kopf_cycles_total, job)', 'refId': 'job'},
             'definition': 'label_values(kopf_cycles_total, job)', 'refresh': 2},
            {'name': 'resource', 'label': 'Resource', 'type': 'query', 'datasource': datasource,
             'query': {'query': 'label_values(kopf_cycles_total{job="$job"}, resource)', 'refId': 'resource'},
             'definition': 'label_values(kopf_cycles_total{job="$job"}, resource)', 'refresh': 2,
             'includeAll': True, 'allValue': '.*', 'multi': True},
        ]},
        'panels': panels,
    }


def dashboard_text() -> str:
    return json.dumps(dashboard(), indent=2) + '\n'


# --------------------------------------------------------------------------------------------- #
# A small PromQL evaluator over scraped series
# --------------------------------------------------------------------------------------------- #

Labels = frozenset[tuple[str, str]]
Vector = dict[Labels, float]


class Series:
    """Scrapes by time: each a mapping of (name, labels) to the value."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.scrapes: list[dict[tuple[str, Labels], float]] = []

    def add(self, when: float, samples: dict[tuple[str, Labels], float]) -> None:
        self.times.append(when)
        self.scrapes.append(samples)

    def at(self, when: float) -> dict[tuple[str, Labels], float]:
        index = bisect.bisect_right(self.times, when) - 1
        return self.scrapes[index] if index >= 0 else {}

    def window(self, start: float, end: float) -> Iterator[tuple[float, dict[tuple[str, Labels], float]]]:
        lo, hi = bisect.bisect_right(self.times, start), bisect.bisect_right(self.times, end)
        yield from zip(self.times[lo:hi], self.scrapes[lo:hi])


_TOKEN = re.compile(r'\s*(?:(?P<dur>\d+[smh](?![\w.]))|(?P<num>\d+(?:\.\d+)?)|(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)'
                    r'|(?P<str>"(?:[^"\\]|\\.)*")|(?P<op>=~|!~|!=|=|[(){}\[\],]))')
_DURATION = re.compile(r'(\d+)([smh])')


def _tokens(text: str) -> list[str]:
    tokens, pos = [], 0
    text = text.strip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise ValueError(f"Cannot read the PromQL at {text[pos:]!r}")
        tokens.append(match.group().strip())
        pos = match.end()
    return tokens


class Evaluator:
    """Evaluates the PromQL of the panels at a moment, over the scraped series."""

    def __init__(self, series: Series, variables: Mapping[str, str]) -> None:
        self.series = series
        self.variables = variables

    def __call__(self, expr: str, when: float) -> Vector:
        for name, value in sorted(self.variables.items(), key=lambda kv: -len(kv[0])):
            expr = expr.replace(f'${name}', value)
        self._tokens = _tokens(expr)
        self._pos = 0
        self._when = when
        result = self._expr()
        if self._pos != len(self._tokens):
            raise ValueError(f"Unexpected {self._tokens[self._pos]!r} in {expr!r}")
        assert isinstance(result, dict)
        return result

    def _peek(self) -> str:
        return self._tokens[self._pos] if self._pos < len(self._tokens) else ''

    def _take(self, expected: str | None = None) -> str:
        token = self._peek()
        if expected is not None and token != expected:
            raise ValueError(f"Expected {expected!r}, got {token!r}")
        self._pos += 1
        return token

    def _expr(self) -> Vector | float:
        token = self._take()
        if re.fullmatch(r'\d+(\.\d+)?', token):
            return float(token)
        if token in ('sum', 'max', 'min'):
            by: list[str] | None = None
            if self._peek() == 'by':
                self._take()
                by = self._names()
            self._take('(')
            inner = self._expr()
            self._take(')')
            assert isinstance(inner, dict)
            return _aggregate(token, inner, by)
        if token in ('rate', 'increase'):
            self._take('(')
            name, matchers = self._selector()
            self._take('[')
            seconds = _seconds(self._take())
            self._take(']')
            self._take(')')
            return self._rate(name, matchers, seconds, increase=token == 'increase')
        if token == 'histogram_quantile':
            self._take('(')
            q = self._expr()
            self._take(',')
            inner = self._expr()
            self._take(')')
            assert isinstance(q, float) and isinstance(inner, dict)
            return _quantile(q, inner)
        self._pos -= 1
        name, matchers = self._selector()
        return {labels: value for (n, labels), value in self.series.at(self._when).items()
                if n == name and _matches(labels, matchers)}

    def _names(self) -> list[str]:
        self._take('(')
        names = []
        while self._peek() != ')':
            names.append(self._take())
            if self._peek() == ',':
                self._take()
        self._take(')')
        return names

    def _selector(self) -> tuple[str, list[tuple[str, str, str]]]:
        name = self._take()
        matchers = []
        if self._peek() == '{':
            self._take()
            while self._peek() != '}':
                label, op, value = self._take(), self._take(), json.loads(self._take())
                matchers.append((label, op, value))
                if self._peek() == ',':
                    self._take()
            self._take('}')
        return name, matchers

    def _rate(self, name: str, matchers: list[tuple[str, str, str]], seconds: float, *, increase: bool) -> Vector:
        scrapes = list(self.series.window(self._when - seconds, self._when))
        keys = {labels for _, samples in scrapes for (n, labels) in samples if n == name and _matches(labels, matchers)}
        # A counter that is not there yet is 0: prometheus_client shows a labelled child from its first use on.
        points = {labels: [(when, samples.get((name, labels), 0.0)) for when, samples in scrapes] for labels in keys}
        result: Vector = {}
        for labels, values in points.items():
            if len(values) < 2:
                continue
            growth = sum(b - a if b >= a else b for (_, a), (_, b) in itertools.pairwise(values))  # b < a: a reset
            result[labels] = growth if increase else growth / (values[-1][0] - values[0][0])
        return result


def _seconds(text: str) -> float:
    match = _DURATION.fullmatch(text)
    if match is None:
        raise ValueError(f"Cannot read the duration {text!r}")
    return int(match.group(1)) * {'s': 1, 'm': 60, 'h': 3600}[match.group(2)]


def _matches(labels: Labels, matchers: Sequence[tuple[str, str, str]]) -> bool:
    values = dict(labels)
    for label, op, wanted in matchers:
        value = values.get(label, '')
        if op in ('=', '!=') and (value == wanted) != (op == '='):
            return False
        if op in ('=~', '!~') and bool(re.fullmatch(wanted, value)) != (op == '=~'):
            return False
    return True


def _aggregate(how: str, vector: Vector, by: list[str] | None) -> Vector:
    groups: dict[Labels, list[float]] = {}
    for labels, value in vector.items():
        key = frozenset((k, v) for k, v in labels if by is not None and k in by)
        groups.setdefault(key, []).append(value)
    fn: Callable[[list[float]], float] = {'sum': sum, 'max': max, 'min': min}[how]
    return {key: fn(values) for key, values in groups.items()}


def _quantile(q: float, vector: Vector) -> Vector:
    """Prometheus' histogram_quantile: linear within the bucket that holds the rank."""
    groups: dict[Labels, list[tuple[float, float]]] = {}
    for labels, value in vector.items():
        le = dict(labels).get('le')
        if le is None:
            continue
        key = frozenset((k, v) for k, v in labels if k != 'le')
        groups.setdefault(key, []).append((math.inf if le == '+Inf' else float(le), value))
    result: Vector = {}
    for key, buckets in groups.items():
        buckets.sort()
        total = buckets[-1][1]
        if total <= 0:
            continue
        rank = q * total
        lower_bound, lower_count = 0.0, 0.0
        for bound, count in buckets:
            if count >= rank:
                if math.isinf(bound):
                    result[key] = lower_bound
                else:
                    share = (rank - lower_count) / (count - lower_count) if count > lower_count else 0.0
                    result[key] = lower_bound + (bound - lower_bound) * share
                break
            lower_bound, lower_count = bound, count
    return result


def legend(template: str, labels: Labels) -> str:
    values = dict(labels)
    return re.sub(r'\{\{\s*(\w+)\s*\}\}', lambda m: values.get(m.group(1), ''), template).strip() or 'value'


# --------------------------------------------------------------------------------------------- #
# The run
# --------------------------------------------------------------------------------------------- #

def scrape(url: str) -> dict[tuple[str, Labels], float]:
    from prometheus_client.parser import text_string_to_metric_families
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[sample.name, frozenset({**sample.labels, 'job': 'kopf'}.items())] = sample.value
    return samples


def run(seconds: float, waves: int, per_wave: int) -> tuple[Series, float, float]:
    """An operator handles waves of ConfigMaps behind the fault proxy; its metrics are scraped every second."""
    sys.path.insert(0, str(REPO))
    from kopf.testing import ControlPlane, KubeAPI
    from tests.e2e.faultproxy import Fault, FaultProxy, Request

    counter = {'patch': 0, 'watch': 0}
    lock = threading.Lock()

    def policy(request: Request) -> Fault | None:
        if '/configmaps' not in request.path:
            return None
        with lock:
            if request.method == 'PATCH':
                counter['patch'] += 1
                return Fault('status', 409) if counter['patch'] % 25 == 0 else None
            if request.is_watch:
                counter['watch'] += 1
                return Fault('cut', after=40.0) if counter['watch'] % 2 == 1 else None
        return None

    plane = ControlPlane().start()
    workdir = Path(tempfile.mkdtemp(prefix='kopf-dashboard-'))
    proxy = FaultProxy(plane, workdir / 'proxy', policy=policy).start()
    kube = KubeAPI(plane)
    namespace = 'dashboard'
    kube.ensure_namespace(namespace)
    port = _free_port()
    url = f'http://127.0.0.1:{port}/metrics'
    env = {**os.environ, 'KUBECONFIG': str(proxy.kubeconfig), 'E2E_CALLS': str(workdir / 'calls.jsonl'),
           'PYTHONPATH': str(REPO)}
    operator = subprocess.Popen([sys.executable, '-m', 'kopf', 'run', str(REPO / 'tests/e2e/operators/observed.py'),
                                 '-n', namespace, '--metrics', url], env=env,
                                stdout=(workdir / 'operator.log').open('wb'), stderr=subprocess.STDOUT)
    series = Series()
    try:
        _wait(lambda: _ready(url.replace('/metrics', '/readyz')), 60)
        began = time.monotonic()
        created = 0
        next_wave = began + 20  # a rate's window of scrapes before the first wave
        while time.monotonic() - began < seconds:
            now = time.monotonic()
            series.add(now, scrape(url))
            if created < waves * per_wave and now >= next_wave:
                for _ in range(per_wave):
                    kube.create(f'/api/v1/namespaces/{namespace}/configmaps', {
                        'apiVersion': 'v1', 'kind': 'ConfigMap',
                        'metadata': {'name': f'cm-{created:04d}', 'labels': {'e2e': 'observed'}}})
                    created += 1
                next_wave = now + (seconds - 45) / waves
            time.sleep(max(0.0, 1.0 - (time.monotonic() - now)))
        return series, began, time.monotonic()
    finally:
        operator.terminate()
        operator.wait(timeout=30)
        proxy.stop()
        plane.stop()
        print(f"The operator's log and calls: {workdir}; the proxy injected {proxy.figures()}")


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return int(s.getsockname()[1])


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _wait(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError("The operator did not get ready in time.")
        time.sleep(0.2)


def draw(series: Series, began: float, ended: float, path: Path) -> None:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    evaluate = Evaluator(series, {'job': 'kopf', 'resource': '.*', '__rate_interval': '15s'})
    rows = math.ceil(len(PANELS) / COLUMNS)
    figure, axes = plt.subplots(rows, COLUMNS, figsize=(6 * COLUMNS, 2.9 * rows), squeeze=False)
    figure.patch.set_facecolor('#111217')
    moments = [t for t in series.times if began <= t <= ended]
    for index, panel in enumerate(PANELS):
        ax = axes[index // COLUMNS][index % COLUMNS]
        ax.set_facecolor('#181b1f')
        ax.set_title(panel.title, color='#d8d9da', fontsize=10, loc='left')
        ax.tick_params(colors='#8e8e8e', labelsize=7)
        for spine in ax.spines.values():
            spine.set_color('#2c3235')
        ax.grid(color='#2c3235', linewidth=0.5)
        lines: dict[str, list[tuple[float, float]]] = {}
        for target in panel.targets:
            for when in moments:
                for labels, value in evaluate(target.expr, when).items():
                    if math.isfinite(value):
                        lines.setdefault(legend(target.legend, labels), []).append((when - began, value))
        for name, points in sorted(lines.items()):
            xs, ys = zip(*points)
            ax.plot(xs, ys, linewidth=1.2, label=name)
        if lines:
            ax.legend(fontsize=6.5, loc='upper left', facecolor='#181b1f', labelcolor='#d8d9da', edgecolor='#2c3235',
                      ncol=2)
        else:
            ax.text(0.5, 0.5, 'No data', ha='center', va='center', color='#8e8e8e', transform=ax.transAxes)
        ax.set_xlim(0, ended - began)
        ax.set_ylabel(panel.unit, color='#8e8e8e', fontsize=7)
    for index in range(len(PANELS), rows * COLUMNS):
        axes[index // COLUMNS][index % COLUMNS].set_visible(False)
    figure.suptitle("kopf operator -- the panels of deploy/grafana-dashboard.json over a real run "
                    "(seconds since the start; evaluated from scrapes every 1 s)", color='#d8d9da', fontsize=11)
    figure.tight_layout(rect=(0, 0, 1, 0.98))
    figure.savefig(path, dpi=80, facecolor=figure.get_facecolor())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0] if __doc__ else None)
    parser.add_argument('--json', action='store_true', help="only write the dashboard's JSON")
    parser.add_argument('--check', action='store_true', help="fail if the JSON is not the one the panels make")
    parser.add_argument('--seconds', type=float, default=170)
    parser.add_argument('--waves', type=int, default=6)
    parser.add_argument('--per-wave', type=int, default=50)
    args = parser.parse_args(argv)
    if args.check:
        if not DASHBOARD.exists() or DASHBOARD.read_text() != dashboard_text():
            print(f"{DASHBOARD.relative_to(REPO)} is not the one the panels make: "
                  f"run python tools/dashboard_picture.py --json", file=sys.stderr)
            return 1
        return 0
    DASHBOARD.parent.mkdir(exist_ok=True)
    DASHBOARD.write_text(dashboard_text())
    print(f"Written {DASHBOARD.relative_to(REPO)}")
    if args.json:
        return 0
    series, began, ended = run(args.seconds, args.waves, args.per_wave)
    draw(series, began, ended, PICTURE)
    print(f"Drawn {PICTURE.relative_to(REPO)} from {len(series.times)} scrapes")
    return 0


if __name__ == '__main__':
    sys.exit(main())
