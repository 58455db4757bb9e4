"""
Benchmark: how throughput scales with shard replicas, and what coordinating costs in API requests.

On a local control plane (etcd + kube-apiserver, as in the end-to-end
tests), for each configuration -- standalone, and 1, 2, 3 replicas with
``--shards`` -- it starts the replicas of ``replicas_operator.py`` (one
synchronous handler doing ~20 ms of pure-Python work per object), waits
until they have formed their ring, creates N objects, lets the handlers go
(they wait until all objects exist, so that the API server's rate of
creations does not limit what is measured), and measures:

* objects per second, from the go to the last object handled (its
  diff-base stored), and in the steady middle (10%..90% of the calls);
* API requests by resource during the run, from the server's own
  ``apiserver_request_total`` (``/metrics``): the Lease requests are what the
  membership protocol adds; listings of the served resource beyond the
  first ones are what re-listing on ring changes adds;
* CPU seconds of the replica processes per object (``/proc``).

The machine is shared and has few cores: every configuration is repeated,
and the spread, the load average and a CPU probe (the time of the same 20 ms
of work in this process, before each run) are printed with the figures.
Finally, the cost of dropping another replica's event (parsing the watch
line and deciding the owner) is measured in-process.

Run: ``python benchmarks/replicas.py [--objects 300] [--repeats 3]``. Prints
figures; asserts nothing.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import timeit
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.replicas_operator import burn  # noqa: E402
from kopf._cycle.queueing import event_key  # noqa: E402
from kopf._replicas import ownership  # noqa: E402
from kopf.testing import ControlPlane, KubeAPI  # noqa: E402

OPERATOR = REPO / 'benchmarks' / 'replicas_operator.py'
CRD_PATH = REPO / 'examples' / 'crd.yaml'
LAST_HANDLED = 'kopf.zalando.org/last-handled-configuration'
HANDLER_SECONDS = 0.020
RETRY_PERIOD = 2.0  # the default peering timing is used
CONFIGURATIONS = [('standalone', 1), ('shards', 1), ('shards', 2), ('shards', 3)]
_METRIC = re.compile(r'^apiserver_request_total\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)$')
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def calibrate(seconds: float) -> int:
    """Iterations of the handler's loop that take this long here (the fastest of several trials)."""
    probe = 50_000
    best = min(timeit.repeat(lambda: burn(probe), number=1, repeat=50))  # the least disturbed of many
    return int(probe * seconds / best)


def cpu_probe(iterations: int) -> float:
    """How long the handler's work takes in this process right now (ms): the machine's contention."""
    return 1000 * statistics.median(timeit.repeat(lambda: burn(iterations), number=1, repeat=5))


def request_counts(kube: KubeAPI) -> collections.Counter[tuple[str, str]]:
    """``apiserver_request_total`` summed by (verb, resource)."""
    text = kube_text(kube, '/metrics')
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    for line in text.splitlines():
        match = _METRIC.match(line)
        if match:
            labels = dict(_LABEL.findall(match['labels']))
            if not labels.get('resource'):
                continue  # non-resource requests: /metrics, /healthz, discovery
            resource = labels.get('resource', '') + ('/' + labels['subresource'] if labels.get('subresource') else '')
            counts[labels.get('verb', ''), resource] += int(float(match['value']))
    return counts


def kube_text(kube: KubeAPI, path: str) -> str:
    import urllib.request
    with urllib.request.urlopen(f'{kube.server}{path}', context=kube.ssl, timeout=30) as response:
        return str(response.read().decode())


def cpu_seconds(pid: int) -> float:
    fields = Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def loadavg() -> float:
    return float(Path('/proc/loadavg').read_text().split()[0])


def start_replicas(mode: str, count: int, *, namespace: str, kubeconfig: Path, env: dict[str, str],
                   logdir: Path) -> list[subprocess.Popen[bytes]]:
    processes = []
    for index in range(count):
        argv = [sys.executable, '-m', 'kopf', 'run', str(OPERATOR), '-n', namespace, f'--{mode}']
        log = (logdir / f'{namespace}-{index}.log').open('wb')
        processes.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                                          env={**os.environ, 'KUBECONFIG': str(kubeconfig),
                                               'PYTHONPATH': str(REPO), **env}))
    return processes


def wait_until(condition: Any, *, timeout: float, what: str, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"Timed out waiting for {what}.")
        time.sleep(interval)


def create_objects(kube: KubeAPI, namespace: str, count: int, *, threads: int = 4) -> float:
    """Create the objects from a few threads at once; returns when the first creation was sent."""
    collection = f'/apis/kopf.dev/v1/namespaces/{namespace}/kopfexamples'
    names = [f'obj-{i:05}' for i in range(count)]
    started = time.time()

    def create(chunk: list[str]) -> None:
        for name in chunk:
            kube.create(collection, {'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
                                     'metadata': {'name': name}, 'spec': {'field': name}})

    workers = [threading.Thread(target=create, args=(names[i::threads],)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return started


def all_handled(kube: KubeAPI, namespace: str, count: int, polls: list[int]) -> bool:
    polls.append(1)  # our own listings, not to be counted as the operator's
    items = kube.get(f'/apis/kopf.dev/v1/namespaces/{namespace}/kopfexamples')['items']
    return sum(LAST_HANDLED in item['metadata'].get('annotations', {}) for item in items) == count


def run_once(kube: KubeAPI, kubeconfig: Path, *, mode: str, replicas: int, objects: int, iterations: int,
             workdir: Path) -> dict[str, Any]:
    namespace = f'bench-{mode}-{replicas}-{uuid.uuid4().hex[:6]}'
    kube.ensure_namespace(namespace)
    calls = workdir / f'{namespace}.jsonl'
    go = workdir / f'{namespace}.go'
    env = {'BENCH_ITERATIONS': str(iterations), 'BENCH_CALLS': str(calls), 'BENCH_GO': str(go)}
    probe = cpu_probe(iterations)
    load_before = loadavg()
    processes = start_replicas(mode, replicas, namespace=namespace, kubeconfig=kubeconfig, env=env, logdir=workdir)
    logs = [workdir / f'{namespace}-{index}.log' for index in range(replicas)]
    try:
        marker = 'Serving ' if mode == 'standalone' else f'Shard members ({replicas})'
        wait_until(lambda: all(marker in log.read_text() for log in logs), timeout=120, what="the replicas")
        time.sleep(1.0 if mode == 'standalone' else 2 * RETRY_PERIOD + 1.0)  # the first listings, the last claims
        creating = create_objects(kube, namespace, objects)
        created = time.time()
        before = request_counts(kube)
        cpu_before = [cpu_seconds(process.pid) for process in processes]
        go.touch()
        started = time.time()
        wait_until(lambda: calls.exists() and len(calls.read_text().splitlines()) >= objects,
                   timeout=600, what="all handler calls", interval=0.2)
        polls: list[int] = []
        wait_until(lambda: all_handled(kube, namespace, objects, polls), timeout=60, what="all objects",
                   interval=0.2)
        finished = time.time()
        after = request_counts(kube)
        cpu_after = [cpu_seconds(process.pid) for process in processes]
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
    records = [json.loads(line) for line in calls.read_text().splitlines()]
    times = sorted(record['t'] for record in records)
    lo, hi = times[len(times) // 10], times[len(times) * 9 // 10]
    delta = {key: after[key] - before.get(key, 0) for key in after if after[key] - before.get(key, 0) > 0}
    by_pid = collections.Counter(record['pid'] for record in records)
    return {
        'mode': mode, 'replicas': replicas, 'objects': objects,
        'seconds': finished - started, 'creation': created - creating,
        'rate': objects / (finished - started),
        'steady': (len(times) * 8 // 10) / (hi - lo) if hi > lo else float('nan'),
        'leases': sum(v for (verb, resource), v in delta.items() if resource == 'leases'),
        'lists': delta.get(('LIST', 'kopfexamples'), 0) - len(polls),
        'watches': delta.get(('WATCH', 'kopfexamples'), 0),
        'patches': sum(v for (verb, resource), v in delta.items()
                       if verb == 'PATCH' and resource.startswith('kopfexamples')),
        'reviews': sum(v for (verb, resource), v in delta.items() if resource == 'selfsubjectaccessreviews'),
        'all': sum(delta.values()) - len(polls),  # without our own listings
        'cpu': sum(b - a for a, b in zip(cpu_before, cpu_after)),
        'share': sorted(by_pid.values(), reverse=True),
        'probe': probe, 'load': (load_before + loadavg()) / 2,
    }


def filtering_cost() -> tuple[float, float]:
    """Microseconds to parse one watch line of another replica's object and to decide that it is not ours."""
    obj = {'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
           'metadata': {'name': 'obj-00001', 'namespace': 'bench', 'uid': str(uuid.uuid4()), 'resourceVersion': '12345',
                        'generation': 1, 'creationTimestamp': '2024-01-01T00:00:00Z',
                        'annotations': {LAST_HANDLED: json.dumps({'spec': {'field': 'obj-00001'}})},
                        'managedFields': [{'manager': 'kopf', 'operation': 'Update', 'fieldsType': 'FieldsV1',
                                           'fieldsV1': {'f:metadata': {'f:annotations': {}}}}]},
           'spec': {'field': 'obj-00001'}, 'status': {'work': None}}
    line = json.dumps({'type': 'MODIFIED', 'object': obj}).encode()
    ring = ownership.make_ring(['replica-a', 'replica-b', 'replica-c'])
    permit = ownership.ShardPermit('replica-a', ring, {'replica-b': ring, 'replica-c': ring})
    number = 20000
    parse = min(timeit.repeat(lambda: json.loads(line), number=number, repeat=5)) / number * 1e6
    decide = min(timeit.repeat(lambda: permit(event_key(json.loads(line))), number=number, repeat=5)) / number * 1e6
    return parse, decide - parse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--objects', type=int, default=300)
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--only', help="one configuration, e.g. 'shards:2'")
    parser.add_argument('--logs', type=Path, help="keep the replicas' logs and call records in this directory")
    args = parser.parse_args()
    configurations = CONFIGURATIONS
    if args.only:
        mode, _, count = args.only.partition(':')
        configurations = [(mode, int(count or 1))]

    iterations = calibrate(HANDLER_SECONDS)
    print(f"Handler: {iterations} loop iterations, calibrated to {HANDLER_SECONDS * 1000:.0f} ms here "
          f"(machine: {os.cpu_count()} CPUs, load average {loadavg():.2f}).")
    results: dict[tuple[str, int], list[dict[str, Any]]] = collections.defaultdict(list)
    with ControlPlane() as plane, tempfile.TemporaryDirectory(prefix='kopf-bench-replicas-') as tmp:
        workdir = args.logs or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        assert plane.kubeconfig is not None
        kube = KubeAPI(plane)
        import yaml
        kube.apply_crd(yaml.safe_load(CRD_PATH.read_text()))
        for repeat in range(args.repeats):
            for mode, count in configurations:  # interleaved, so that a noisy minute hits all alike
                result = run_once(kube, plane.kubeconfig, mode=mode, replicas=count, objects=args.objects,
                                  iterations=iterations, workdir=workdir)
                results[mode, count].append(result)
                print(f"  run {repeat + 1}: {mode:10} x{count}: {result['rate']:6.1f} obj/s overall, "
                      f"{result['steady']:6.1f} obj/s steady, {result['seconds']:5.1f}s "
                      f"(after creating them in {result['creation']:.1f}s), calls per replica {result['share']}, "
                      f"probe {result['probe']:.1f} ms, load {result['load']:.2f}", flush=True)

    print()
    print(f"{args.objects} objects, one ~{HANDLER_SECONDS * 1000:.0f} ms CPU-bound synchronous handler each; "
          f"{args.repeats} runs per configuration: mean (min..max).")
    header = (f"{'configuration':16} {'objects/s overall':>22} {'objects/s steady':>22} {'speed-up':>8} "
              f"{'CPU s/obj':>9} {'lease req/obj':>13} {'lease req/s/replica':>19} {'relists':>7} "
              f"{'PATCH/obj':>9} {'all req/obj':>11}")
    print(header)
    print('-' * len(header))
    base = statistics.mean(r['rate'] for r in results.get(('shards', 1)) or next(iter(results.values())))
    # The API server renews Leases of its own (kube-system); the standalone runs measure that background.
    standalone = results.get(('standalone', 1), [])
    background = statistics.mean(r['leases'] / r['seconds'] for r in standalone) if standalone else 0.0
    for (mode, count), runs in results.items():
        rates = [r['rate'] for r in runs]
        steady = [r['steady'] for r in runs]
        n = args.objects
        net = [max(0.0, r['leases'] - background * r['seconds']) for r in runs]
        lease_rate = statistics.mean(n_ / r['seconds'] / count for n_, r in zip(net, runs))
        print(f"{mode + ' x' + str(count):16} "
              f"{statistics.mean(rates):7.1f} ({min(rates):5.1f}..{max(rates):5.1f}) "
              f"{statistics.mean(steady):7.1f} ({min(steady):5.1f}..{max(steady):5.1f}) "
              f"{statistics.mean(rates) / base:8.2f} "
              f"{statistics.mean(r['cpu'] for r in runs) / n:9.4f} "
              f"{statistics.mean(net) / n:13.3f} "
              f"{lease_rate:19.2f} "
              f"{statistics.mean(r['lists'] for r in runs):7.1f} "
              f"{statistics.mean(r['patches'] for r in runs) / n:9.2f} "
              f"{statistics.mean(r['all'] for r in runs) / n:11.2f}")
    spread = max((max(rates) - min(rates)) / statistics.mean(rates)
                 for rates in ([r['rate'] for r in runs] for runs in results.values()))
    probes = [r['probe'] for runs in results.values() for r in runs]
    loads = [r['load'] for runs in results.values() for r in runs]
    print(f"Lease requests are net of the API server's own ({background:.2f}/s, measured in the standalone runs); "
          f"relists are listings of the served resource beyond the first one per replica, per run.")
    print(f"Noise: the largest spread of one configuration's runs is {spread * 100:.0f}% of its mean; "
          f"the 20 ms CPU probe took {min(probes):.1f}..{max(probes):.1f} ms before the runs; "
          f"load average {min(loads):.2f}..{max(loads):.2f}.")
    parse, decide = filtering_cost()
    print(f"Dropping another replica's event: {parse:.1f} us to parse its watch line (which any watcher pays), "
          f"{decide:.1f} us more to find its owner among 3 members.")


if __name__ == '__main__':
    main()
