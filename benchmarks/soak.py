"""
The soak: hours of continuous changes, faults and restarts against one operator.

It starts a control plane of its own, the fault proxy of the end-to-end
tests in front of it, and one ``kopf run benchmarks/soak_operator.py``
process behind the proxy. Then, for ``--hours``:

* a driver creates, updates (``spec.gen``, ``spec.stamp``) and deletes objects
  at ``--rate`` changes per second around a population of ``--objects``;
* the operator's handlers fail once for one change in ten; a timer ticks per
  object (see ``soak_operator.py``);
* the proxy cuts every watch stream after 2 to 5 minutes (``--cut``);
* every ``--kill-every`` minutes the operator is SIGKILLed and started again;
* a checker watches the objects directly (not through the proxy) and notes
  when each change becomes *visibly* handled: the diff-base annotation holds
  its ``spec.gen``.

Every minute, a line goes into ``OUT/driver.jsonl`` (changes made, objects
pending, handled latency percentiles, re-runs found so far, faults injected),
and the operator appends its own into ``OUT/samples.jsonl`` (RSS, fds,
asyncio tasks, workers, queue depth, change-to-handler latency): a run cut
short is still usable. A re-run is a handler call that starts after the
checker has seen its change handled. At the end, the driver stops changing,
waits for every object to be handled (``--drain`` seconds at most), and
writes ``OUT/summary.json``; ``benchmarks/soak_report.py`` makes the figures
and the plot.

Run from the repository root::

    nohup .venv/bin/python -m benchmarks.soak --hours 2 --rate 6 --out /tmp/soak > /tmp/soak.log 2>&1 &
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from kopf.testing import ControlPlane, KubeAPI, KubeAPIError  # noqa: E402
from tests.e2e.faultproxy import Fault, FaultProxy, Request  # noqa: E402

GROUP, VERSION, PLURAL = 'soak.kopf.dev', 'v1', 'soaks'
NAMESPACE = 'soak'
LAST_HANDLED = 'kopf.zalando.org/last-handled-configuration'
CRD = {
    'apiVersion': 'apiextensions.k8s.io/v1', 'kind': 'CustomResourceDefinition',
    'metadata': {'name': f'{PLURAL}.{GROUP}'},
    'spec': {'group': GROUP, 'scope': 'Namespaced',
             'names': {'plural': PLURAL, 'singular': 'soak', 'kind': 'Soak'},
             'versions': [{'name': VERSION, 'served': True, 'storage': True,
                           'schema': {'openAPIV3Schema': {'type': 'object',
                                                          'x-kubernetes-preserve-unknown-fields': True}}}]},
}
COLLECTION = f'/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/{PLURAL}'


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


class CutWatches:
    """The proxy's policy: every watch stream is cut after a random time within the range."""

    def __init__(self, low: float, high: float, seed: int = 0) -> None:
        self.random = random.Random(seed)
        self.low, self.high = low, high

    def __call__(self, request: Request) -> Fault | None:
        if request.is_watch:
            return Fault('cut', after=self.random.uniform(self.low, self.high))
        return None


@dataclasses.dataclass
class Seen:
    """What the checker knows of one object."""

    name: str
    created: float | None = None  # when it was first seen handled (the diff-base present)
    handled: dict[int, float] = dataclasses.field(default_factory=dict)  # gen -> when first seen handled
    gone: float | None = None


class Checker:
    """Watches the objects directly (admin client, no proxy) and notes when each change is visibly handled."""

    def __init__(self, kube: KubeAPI) -> None:
        self.kube = kube
        self.seen: dict[str, Seen] = {}
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.latencies: list[float] = []  # change -> visibly handled, since the last take
        self.stamps: dict[tuple[str, int], float] = {}  # (name, gen) -> when the driver made it
        self.errors = 0
        self.thread = threading.Thread(target=self._run, name='checker', daemon=True)

    def start(self) -> None:
        self.thread.start()

    def take_latencies(self) -> list[float]:
        with self.lock:
            taken, self.latencies = self.latencies, []
        return taken

    def _note(self, event_type: str, obj: dict[str, Any]) -> None:
        meta = obj['metadata']
        now = time.time()
        with self.lock:
            seen = self.seen.setdefault(meta['uid'], Seen(meta['name']))
            if event_type == 'DELETED':
                seen.gone = seen.gone or now
                return
            raw = (meta.get('annotations') or {}).get(LAST_HANDLED)
            if raw is None:
                return
            if seen.created is None:
                seen.created = now
            gen = int((json.loads(raw).get('spec') or {}).get('gen', 0))
            for g in range(max(seen.handled) + 1 if seen.handled else 0, gen + 1):
                if g not in seen.handled:
                    seen.handled[g] = now
                    stamp = self.stamps.pop((meta['name'], g), None)
                    if stamp is not None:
                        self.latencies.append(now - stamp)

    def _run(self) -> None:
        while not self.stopped.is_set():
            try:
                listing = self.kube.get(COLLECTION)
                for item in listing['items']:
                    self._note('ADDED', item)
                self._watch(listing['metadata']['resourceVersion'])
            except Exception as e:
                self.errors += 1
                log(f"checker: {type(e).__name__}: {e}; relisting")
                time.sleep(1)

    def _watch(self, version: str) -> None:
        url = f"{self.kube.server}{COLLECTION}?watch=true&resourceVersion={version}&timeoutSeconds=240"
        request = urllib.request.Request(url, headers={**self.kube.headers, 'Accept': 'application/json'})
        with urllib.request.urlopen(request, context=self.kube.ssl, timeout=300) as response:
            for line in response:
                if self.stopped.is_set():
                    return
                event = json.loads(line)
                if event['type'] == 'ERROR':
                    return  # 410 Gone or similar: relist
                if event['type'] in ('ADDED', 'MODIFIED', 'DELETED'):
                    self._note(event['type'], event['object'])


class Operator:
    """The ``kopf run`` process, restartable."""

    def __init__(self, out: Path, kubeconfig: Path, env: dict[str, str]) -> None:
        self.out, self.kubeconfig, self.env = out, kubeconfig, env
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        logfile = (self.out / 'operator.log').open('ab')
        logfile.write(f"\n===== start #{self.starts} at {time.strftime('%H:%M:%S')}\n".encode())
        logfile.flush()
        self.process = subprocess.Popen(
            [sys.executable, '-m', 'kopf', 'run', str(REPO / 'benchmarks' / 'soak_operator.py'),
             '-n', NAMESPACE, '--standalone'],
            env={**os.environ, 'KUBECONFIG': str(self.kubeconfig), 'PYTHONPATH': str(REPO), **self.env},
            stdout=logfile, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)
        logfile.close()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()


class Calls:
    """Reads the operator's call log as it grows and finds re-runs after a visible success."""

    def __init__(self, path: Path, checker: Checker) -> None:
        self.path, self.checker = path, checker
        self.offset = 0
        self.counts: collections.Counter[str] = collections.Counter()
        self.reruns: list[dict[str, Any]] = []

    def read(self) -> None:
        if not self.path.exists():
            return
        with self.path.open('rb') as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b'\n') + 1
        self.offset += end
        for line in data[:end].splitlines():
            call = json.loads(line)
            self.counts[call['h']] += 1
            self._check(call)

    def _check(self, call: dict[str, Any]) -> None:
        with self.checker.lock:
            seen = self.checker.seen.get(call['uid'])
            if seen is None:
                return
            if call['h'] == 'create':
                done = seen.created
            elif call['h'] == 'update':
                done = min((t for g, t in seen.handled.items() if g >= int(call['gen'])), default=None)
            elif call['h'] == 'delete':
                done = seen.gone
            else:
                return
        if done is not None and call['t'] > done:
            self.reruns.append({**call, 'visible': done})
            log(f"RE-RUN after a visible success: {call}")


def driver_step(kube: KubeAPI, rng: random.Random, live: dict[str, int], checker: Checker,
                counter: list[int], population: int, made: collections.Counter[str]) -> None:
    """One change: create below the population, else update mostly, delete sometimes."""
    roll = rng.random()
    now = time.time()
    if not live or (len(live) < population and roll < 0.3):
        counter[0] += 1
        name = f"soak-{counter[0]}"
        with checker.lock:
            checker.stamps[(name, 0)] = now
        kube.create(COLLECTION, {'apiVersion': f'{GROUP}/{VERSION}', 'kind': 'Soak',
                                 'metadata': {'name': name}, 'spec': {'gen': 0, 'stamp': now}})
        live[name] = 0
        made['create'] += 1
    elif roll < 0.85 or len(live) < population // 2:
        name = rng.choice(list(live))
        gen = live[name] + 1
        with checker.lock:
            checker.stamps[(name, gen)] = now
        kube.patch(f"{COLLECTION}/{name}", {'spec': {'gen': gen, 'stamp': now}})
        live[name] = gen
        made['update'] += 1
    else:
        name = rng.choice(list(live))
        kube.delete(f"{COLLECTION}/{name}")
        del live[name]
        made['delete'] += 1


def percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def pending(kube: KubeAPI) -> list[str]:
    """Objects whose last change is not handled yet, or whose deletion is not finished."""
    names = []
    for item in kube.get(COLLECTION)['items']:
        meta = item['metadata']
        raw = (meta.get('annotations') or {}).get(LAST_HANDLED)
        handled = json.loads(raw).get('spec', {}).get('gen') if raw else None
        if meta.get('deletionTimestamp') or handled != item['spec'].get('gen'):
            names.append(meta['name'])
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--hours', type=float, default=2.0)
    parser.add_argument('--rate', type=float, default=6.0, help='changes per second')
    parser.add_argument('--objects', type=int, default=200, help='the population of live objects')
    parser.add_argument('--kill-every', type=float, default=20.0, help='minutes between SIGKILLs')
    parser.add_argument('--cut', type=float, nargs=2, default=(120.0, 300.0), help='watch cut range, seconds')
    parser.add_argument('--interval', type=float, default=60.0, help='seconds between records')
    parser.add_argument('--drain', type=float, default=600.0)
    parser.add_argument('--seed', type=int, default=1)
    parser.add_argument('--out', type=Path, required=True)
    args = parser.parse_args()

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    plane = ControlPlane(keep_workdir=False)
    plane.start()
    proxy = FaultProxy(plane, out / 'proxy', policy=CutWatches(*args.cut, seed=args.seed)).start()
    kube = KubeAPI(plane)
    kube.apply_crd(CRD)
    kube.ensure_namespace(NAMESPACE)
    checker = Checker(kube)
    checker.start()
    calls = Calls(out / 'calls.jsonl', checker)
    operator = Operator(out, proxy.kubeconfig, {
        'SOAK_CALLS': str(out / 'calls.jsonl'), 'SOAK_SAMPLES': str(out / 'samples.jsonl'),
        'SOAK_INTERVAL': str(args.interval)})
    operator.start()
    started = time.time()
    log(f"started: plane {plane.server}, proxy :{proxy.port}, operator pid {operator.process.pid}")  # type: ignore[union-attr]

    rng = random.Random(args.seed)
    live: dict[str, int] = {}
    counter = [0]
    made: collections.Counter[str] = collections.Counter()
    errors: collections.Counter[str] = collections.Counter()
    next_record = started + args.interval
    next_kill = started + args.kill_every * 60
    kills = 0
    deadline = started + args.hours * 3600
    step = 1.0 / args.rate
    next_step = time.monotonic()
    records = (out / 'driver.jsonl').open('a', buffering=1)
    interrupted = False

    def record() -> None:
        calls.read()
        latencies = checker.take_latencies()
        try:
            lagging = len(pending(kube))
        except (KubeAPIError, OSError) as e:
            lagging = -1
            errors[type(e).__name__] += 1
        line = {'t': time.time(), 'minute': round((time.time() - started) / 60, 2), 'made': dict(made),
                'live': len(live), 'pending': lagging, 'handled': len(latencies),
                'p50': percentile(latencies, 0.5), 'p99': percentile(latencies, 0.99),
                'max': max(latencies) if latencies else None, 'calls': dict(calls.counts),
                'reruns': len(calls.reruns), 'kills': kills, 'operator_pid': operator.process.pid,  # type: ignore[union-attr]
                'faults': proxy.figures(), 'driver_errors': dict(errors), 'checker_errors': checker.errors}
        records.write(json.dumps(line) + '\n')
        made.clear()

    def on_signal(*_: Any) -> None:
        nonlocal interrupted
        interrupted = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        while time.time() < deadline and not interrupted:
            if operator.process is not None and operator.process.poll() is not None:
                log(f"the operator exited by itself with {operator.process.returncode}: restarting it")
                errors['operator exited'] += 1
                time.sleep(min(30.0, 2.0 ** min(errors['operator exited'], 5)))  # not in a tight loop
                operator.start()
            if time.time() >= next_kill:
                operator.kill()
                kills += 1
                operator.start()
                log(f"SIGKILL #{kills}; restarted as pid {operator.process.pid}")  # type: ignore[union-attr]
                next_kill += args.kill_every * 60
            if time.time() >= next_record:
                record()
                next_record += args.interval
            try:
                driver_step(kube, rng, live, checker, counter, args.objects, made)
            except (KubeAPIError, OSError) as e:
                errors[type(e).__name__] += 1
                log(f"driver: {type(e).__name__}: {e}")
            next_step += step
            time.sleep(max(0.0, next_step - time.monotonic()))
        ran = time.time() - started
        log(f"changes stopped after {ran / 60:.1f} min; draining")
        drain_deadline = time.time() + args.drain
        left = pending(kube)
        while left and time.time() < drain_deadline:
            if time.time() >= next_record:
                record()
                next_record += args.interval
            time.sleep(5)
            left = pending(kube)
        record()
        calls.read()
        with checker.lock:
            never_created = [s.name for s in checker.seen.values() if s.created is None and s.gone is None]
        summary = {'minutes': ran / 60, 'rate': args.rate, 'objects': args.objects, 'created': counter[0],
                   'kills': kills, 'operator_starts': operator.starts, 'calls': dict(calls.counts),
                   'reruns': calls.reruns, 'unhandled': left, 'never_handled': never_created,
                   'faults': proxy.figures(), 'driver_errors': dict(errors), 'interrupted': interrupted}
        (out / 'summary.json').write_text(json.dumps(summary, indent=2))
        log(f"summary: {json.dumps({k: v for k, v in summary.items() if k != 'reruns'})}; "
            f"{len(calls.reruns)} re-runs")
    finally:
        operator.stop()
        checker.stopped.set()
        proxy.stop()
        plane.stop()


if __name__ == '__main__':
    main()
