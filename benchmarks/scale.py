"""
Benchmark: one operator and many objects (100,000 by default), this framework and the released Kopf.

The side-by-side benchmark's operator file (``benchmarks/quick_operator.py``)
runs under both frameworks as a black box, on the local control plane, in
these scenarios:

* **burst** (1 and 3 quick create handlers): N objects created as fast as the
  server takes them; objects per second until the last one is fully handled,
  the operator's PATCHes per object, its CPU per object, its peak RSS, and the
  share of the server's raw PATCH rate (a plain client loop, measured in the
  same control plane just before) that its PATCHes reach -- also of the raw
  rate with the benchmark's own watch open meanwhile, which is open while
  the operator is measured (the server sends it every patched object, and
  the benchmark reads them on the same CPUs). Beside the CPU per object: the
  plain loop's own CPU per PATCH (what a Python HTTP client spends on one
  PATCH on this machine that day), and the CPU per object in those units.
* **backlog** (1 and 3 handlers): N objects created before the operator
  starts, then the operator started: the same figures, counted from its
  start (its imports and its listing included), without the creations
  competing for the server -- the raw PATCH rate is measured so too.
* **idle** (after the 1-handler burst): the resident memory per watched object
  once the operator is idle, above its level when it was ready.
* **restart** (the 1-handler operator stopped and started again over the N
  handled objects, twice): the time from the start to "every object seen and
  nothing to do" -- the operator has opened its watch and its CPU then stands
  still --, its requests (list pages, watches, PATCHes) and handler calls, and
  its peak RSS (reached while listing); beside the time a plain paginated LIST
  of the same objects takes (pages of 500, each decoded).
* **steady**: a paced loop changes ``spec.stamp`` of the handled objects (each
  once at most) at ``--steady-rate`` changes per second for
  ``--steady-seconds``; an update handler notes how long after the change it
  was called (event-to-handler latency, both clocks are this machine's);
  p50/p99/max, the operator's CPU and PATCHes per change.

Each phase (the 1-handler chain burst/idle/restart/steady, the 3-handler burst, the backlogs)
runs on a fresh control plane, the frameworks alternating (ours, Kopf, ours,
Kopf). A framework's phase that does not finish within ``--cap`` seconds (30
minutes) is reported as such, with how far it got. Then one table: the figures
of both frameworks and the targets of this framework.

Run from the repository root::

    .venv/bin/python -m benchmarks.scale                    # 100,000 objects, both frameworks
    .venv/bin/python -m benchmarks.scale -n 10000 --only ours --steady-seconds 60
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import json
import math
import os
import random
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import apimetrics, peers, procstats, sidebyside  # noqa: E402
from benchmarks.sidebyside import GROUP, PLURAL, VERSION, Api, BenchmarkError, Framework  # noqa: E402
from kopf._testkit import processes  # noqa: E402
from kopf.testing import ControlPlane, ControlPlaneError  # noqa: E402

MB = 1024 * 1024
_WATCHERS = re.compile(r'^apiserver_longrunning_requests\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)', re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class ScaleOptions:
    objects: int = 100_000
    frameworks: tuple[str, ...] = ('ours', 'kopf')
    phases: tuple[str, ...] = ('chain', 'burst3', 'backlog1', 'backlog3')
    steady_rate: float = 200.0
    steady_seconds: float = 300.0
    steady_concurrency: int = 64
    restarts: int = 2
    cap: float = 1800.0
    page: int = 500
    events: bool = True
    json_path: Path | None = None
    logs: Path | None = None
    ours: Path = REPO
    pin: bool = False  # the API server and etcd on one CPU, the operator (and this client) on the other


@dataclasses.dataclass
class Figures:
    """Everything measured for one framework in one phase (missing figures stay absent)."""
    framework: str
    phase: str
    values: dict[str, float] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)


# --------------------------------------------------------------------------------------------- #
# Measuring helpers
# --------------------------------------------------------------------------------------------- #

async def watchers(api: Api) -> int:
    """Watch requests open on the benchmark's resource now (the server's own gauge)."""
    async with api.session.get(api.server + '/metrics') as response:
        text = await response.text()
    total = 0
    for match in _WATCHERS.finditer(text):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match['labels']))
        if labels.get('verb') == 'WATCH' and labels.get('resource') == PLURAL:
            total += int(float(match['value']))
    return total


async def plain_list_seconds(api: Api, namespace: str, page: int) -> tuple[float, int]:
    """How long a plain client takes to list the namespace in pages (each page decoded); and how many."""
    path = f'/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}'
    started = time.monotonic()
    token, count = '', 0
    while True:
        query = f'?limit={page}' + (f'&continue={token}' if token else '')
        document = await api.request('GET', path + query, timeout=600)
        api.count('LIST', GROUP, PLURAL)
        count += len(document['items'])
        token = document['metadata'].get('continue') or ''
        if not token:
            return time.monotonic() - started, count


async def wait_seen_and_quiet(api: Api, operator: sidebyside.OperatorProcess, *, window: float,
                              timeout: float, baseline_watchers: int) -> tuple[float, procstats.Sample]:
    """
    Wait until the operator has opened its watch and then its CPU stands still for ``window`` seconds.

    Both frameworks list first and watch after; what the listing brought is
    handled when the CPU stands still. Returns the moment the stillness began
    and the sample at its end.
    """
    started = time.monotonic()
    while await watchers(api) <= baseline_watchers:
        operator.check_alive("the operator to open its watch")
        if time.monotonic() - started > timeout:
            raise BenchmarkError(f"The operator opened no watch within {timeout:.0f}s.")
        await asyncio.sleep(0.25)
    samples: collections.deque[procstats.Sample] = collections.deque()
    while True:
        operator.check_alive("the operator to become idle after its listing")
        now = procstats.sample(operator.pid)
        samples.append(now)
        while len(samples) > 1 and samples[1].when <= now.when - window:
            samples.popleft()
        oldest = samples[0]
        if now.when - oldest.when >= window and now.cpu - oldest.cpu <= window * 0.02:
            return oldest.when, now
        if now.when - started > timeout:
            raise BenchmarkError(f"The operator was still busy {timeout:.0f}s after its start.")
        await asyncio.sleep(0.1)


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


# --------------------------------------------------------------------------------------------- #
# Phases
# --------------------------------------------------------------------------------------------- #

def _options(scale: ScaleOptions, handlers: int) -> sidebyside.Options:
    return sidebyside.Options(objects=scale.objects, handlers=handlers, rounds=1, events=scale.events,
                              stall_timeout=min(300.0, scale.cap), startup_timeout=120.0)


def _with_updates(framework: Framework, path: Path) -> Framework:
    return Framework(framework.name, framework.argv, (*framework.env, ('BENCH_UPDATES', str(path))))


async def _ready(api: Api, operator: sidebyside.OperatorProcess, tracker: sidebyside.HandledTracker,
                 options: sidebyside.Options) -> procstats.Sample:
    await api.create_objects(tracker.namespace, [sidebyside.WARMUP], concurrency=1)
    handled = await sidebyside.wait_handled(tracker, operator, {sidebyside.WARMUP},
                                            stall_timeout=options.startup_timeout,
                                            what="the operator to start and handle a warm-up object")
    return await sidebyside.wait_until_idle(operator, since=handled, settle=options.settle,
                                            window=options.quiet_window, timeout=120)


def _handling_figures(figures: Figures, counts: apimetrics.Counts, *, objects: int, seconds: float, cpu: float,
                      idle: procstats.Sample) -> str:
    """The figures of handling N objects in so many seconds with so much CPU; the other requests, in words."""
    patches, other, _ = sidebyside.split_requests(counts)
    figures.values.update({
        'obj/s': objects / seconds,
        'PATCH/obj': patches / objects,
        'other req/obj': sum(other.values()) / objects,
        'CPU ms/obj': cpu / objects * 1000,
        'peak RSS MB': idle.hwm / MB,
        'share of raw PATCH rate': (patches / seconds) / figures.values['raw PATCH/s'],
        'share of watched raw rate': (patches / seconds) / figures.values['raw PATCH/s, watched'],
        'idle RSS MB': idle.rss / MB,
    })
    # The CPU per object in units of a plain client's CPU per PATCH, measured in the same run: the speed of the
    # machine that day (it varies by a tenth and more on a shared one) weighs on both.
    yardstick = figures.values['raw client CPU ms/PATCH']
    figures.values['CPU/obj in raw client PATCHes'] = figures.values['CPU ms/obj'] / yardstick
    return ', '.join(f"{k} {v}" for k, v in sorted(other.items()))


async def _raw_rates(api: Api, namespace: str, options: sidebyside.Options, figures: Figures) -> None:
    """
    The server's raw PATCH rate, plain and with the benchmark's own watch open (as while an operator is measured).

    Twice each, the better one counts: the first also warms up a freshly
    started server. The plain loop's own CPU per PATCH is the yardstick for
    the operator's CPU per object: what an HTTP client in Python spends on
    one PATCH on this machine that day, and nothing else.
    """
    plain = [await sidebyside.raw_patch_loop(api, f'{namespace}-raw{i}', options) for i in range(2)]
    figures.values['raw PATCH/s'] = max(loop.rate for loop in plain)
    figures.values['raw client CPU ms/PATCH'] = min(loop.cpu_per_patch for loop in plain) * 1000
    figures.values['raw PATCH/s, watched'] = max([
        (await sidebyside.raw_patch_loop(api, f'{namespace}-raw{i}', options, watched=True)).rate for i in range(2)])


async def _all_handled(tracker: sidebyside.HandledTracker, operator: sidebyside.OperatorProcess, names: list[str],
                       *, scale: ScaleOptions, stall_timeout: float, what: str) -> float:
    """When the last of the objects was fully handled; a failure if not within the cap."""
    waiting = sidebyside.wait_handled(tracker, operator, set(names), stall_timeout=stall_timeout, what=what)
    try:
        return await asyncio.wait_for(waiting, timeout=scale.cap)
    except asyncio.TimeoutError:
        done = len(set(names).intersection(tracker.handled))
        raise BenchmarkError(f"not finished within {scale.cap:.0f}s: {done} of {scale.objects} objects "
                             f"fully handled by then") from None


async def burst(api: Api, plane: ControlPlane, framework: Framework, *, scale: ScaleOptions, handlers: int,
                namespace: str, logs: Path, figures: Figures, keep: bool
                ) -> sidebyside.OperatorProcess | None:
    """Create N objects under a running operator; measure; return the operator if ``keep`` (else stop it)."""
    options = _options(scale, handlers)
    await _raw_rates(api, namespace, options, figures)
    await api.ensure_namespace(namespace)
    assert plane.kubeconfig is not None
    operator = sidebyside.OperatorProcess(framework, namespace=namespace, kubeconfig=plane.kubeconfig,
                                          log=logs / f'{framework.name}-{figures.phase}.log', options=options)
    try:
        async with sidebyside.HandledTracker(api, namespace) as tracker:
            ready = await _ready(api, operator, tracker, options)
            before, own_before = await api.metrics(), collections.Counter(api.own)
            names = [f'obj-{i:06d}' for i in range(scale.objects)]
            started = time.monotonic()
            creation = asyncio.create_task(api.create_objects(namespace, names,
                                                              concurrency=options.create_concurrency))
            try:
                last = await _all_handled(tracker, operator, names, scale=scale, stall_timeout=options.stall_timeout,
                                          what=f"{scale.objects} objects to be fully handled")
            finally:
                if not creation.done():
                    creation.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await creation
            idle = await sidebyside.wait_until_idle(operator, since=last, settle=options.idle_settle,
                                                    window=options.quiet_window, timeout=600)
            after = await api.metrics()
            own = collections.Counter(api.own)
            own.subtract(own_before)
        other = _handling_figures(figures, apimetrics.delta(apimetrics.delta(after, before), own),
                                  objects=scale.objects, seconds=last - started, cpu=idle.cpu - ready.cpu, idle=idle)
        figures.values.update({
            'ready RSS MB': ready.rss / MB,
            'idle KB/obj': (idle.rss - ready.rss) / 1024 / scale.objects,
        })
        figures.notes.append(f"{last - started:.0f}s; other requests: {other}")
        if keep:
            return operator
        operator.stop()
        calls = operator.handler_calls()
        if calls is not None:
            figures.values['calls/obj'] = (calls - handlers) / scale.objects
        return None
    except BaseException:
        operator.stop()
        raise


async def backlog(api: Api, plane: ControlPlane, framework: Framework, *, scale: ScaleOptions, handlers: int,
                  namespace: str, logs: Path, figures: Figures) -> None:
    """
    Create N objects with no operator running, then start it; measure until the last one is fully handled.

    The handling rate without the creations competing for the same server
    (as the raw PATCH rate is measured); the times and the CPU count from the
    operator's start, its imports and its listing included.
    """
    options = _options(scale, handlers)
    await _raw_rates(api, namespace, options, figures)
    await api.ensure_namespace(namespace)
    assert plane.kubeconfig is not None
    async with sidebyside.HandledTracker(api, namespace) as tracker:
        names = [f'obj-{i:06d}' for i in range(scale.objects)]
        creating = time.monotonic()
        await api.create_objects(namespace, names, concurrency=options.create_concurrency)
        figures.values['created obj/s'] = scale.objects / (time.monotonic() - creating)
        before, own_before = await api.metrics(), collections.Counter(api.own)
        started = time.monotonic()
        operator = sidebyside.OperatorProcess(framework, namespace=namespace, kubeconfig=plane.kubeconfig,
                                              log=logs / f'{framework.name}-{figures.phase}.log', options=options)
        try:
            # Only the cap: an operator that sends one handler's outcome per PATCH takes the listed objects
            # round by round, and may have fully handled none of them until its last round.
            last = await _all_handled(tracker, operator, names, scale=scale, stall_timeout=scale.cap,
                                      what=f"{scale.objects} listed objects to be fully handled")
            idle = await sidebyside.wait_until_idle(operator, since=last, settle=options.idle_settle,
                                                    window=options.quiet_window, timeout=600)
            after = await api.metrics()
            own = collections.Counter(api.own)
            own.subtract(own_before)
        finally:
            operator.stop()
    other = _handling_figures(figures, apimetrics.delta(apimetrics.delta(after, before), own),
                              objects=scale.objects, seconds=last - started, cpu=idle.cpu, idle=idle)
    calls = operator.handler_calls()
    if calls is not None:
        figures.values['calls/obj'] = calls / scale.objects
    figures.notes.append(f"{last - started:.0f}s from the start; other requests: {other}")


async def restart(api: Api, plane: ControlPlane, framework: Framework, *, scale: ScaleOptions,
                  namespace: str, logs: Path, figures: Figures, index: int,
                  updates: Path) -> sidebyside.OperatorProcess:
    """Start the operator over the handled objects; measure until it has seen them all and is still."""
    options = _options(scale, 1)
    assert plane.kubeconfig is not None
    base_watchers = await watchers(api)
    before, own_before = await api.metrics(), collections.Counter(api.own)
    started = time.monotonic()
    operator = sidebyside.OperatorProcess(_with_updates(framework, updates), namespace=namespace,
                                          kubeconfig=plane.kubeconfig,
                                          log=logs / f'{framework.name}-restart{index}.log', options=options)
    try:
        done, sample = await wait_seen_and_quiet(api, operator, window=2.0, timeout=scale.cap,
                                                 baseline_watchers=base_watchers)
        after = await api.metrics()
        own = collections.Counter(api.own)
        own.subtract(own_before)
        counts = apimetrics.delta(apimetrics.delta(after, before), own)
        lists = sum(v for k, v in counts.items() if k.verb == 'LIST' and k.resource == PLURAL)
        watches_ = sum(v for k, v in counts.items() if k.verb == 'WATCH' and k.resource == PLURAL)
        patches = sum(v for k, v in counts.items() if k.verb == 'PATCH' and k.resource == PLURAL)
        events = sum(v for k, v in counts.items() if k.resource == 'events')
        suffix = f' #{index}'
        figures.values.update({
            f'seconds{suffix}': done - started,
            f'LIST requests{suffix}': lists,
            f'WATCH requests ended{suffix}': watches_,
            f'PATCH{suffix}': patches,
            f'Event requests{suffix}': events,
            f'CPU s{suffix}': sample.cpu,
            f'peak RSS MB{suffix}': sample.hwm / MB,
        })
        return operator
    except BaseException:
        operator.stop()
        raise


async def steady(api: Api, framework_name: str, operator: sidebyside.OperatorProcess, *, scale: ScaleOptions,
                 namespace: str, updates: Path, figures: Figures) -> None:
    """Change objects at a steady rate; the operator's update handler notes the latencies."""
    options = _options(scale, 1)
    ready = await sidebyside.wait_until_idle(operator, since=time.monotonic(), settle=2.0,
                                             window=options.quiet_window, timeout=600)
    before, own_before = await api.metrics(), collections.Counter(api.own)
    total = min(scale.objects, int(scale.steady_rate * scale.steady_seconds))
    names = random.Random(7).sample([f'obj-{i:06d}' for i in range(scale.objects)], total)
    path = f'/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}'
    lanes = asyncio.Semaphore(scale.steady_concurrency)
    late = 0

    answered: dict[str, float] = {}

    async def change(name: str) -> None:
        async with lanes:
            patch = {'spec': {'stamp': repr(time.time())}}
            await api.request('PATCH', f'{path}/{name}', patch, content_type=sidebyside.MERGE_PATCH)
            answered[name] = time.time()  # the change is stored: the event is on its way
            api.count('PATCH', GROUP, PLURAL)

    started = time.monotonic()
    tasks = []
    for i, name in enumerate(names):
        due = started + i / scale.steady_rate
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        elif delay < -0.05:
            late += 1
        operator.check_alive("the steady load")
        tasks.append(asyncio.create_task(change(name)))
    await asyncio.gather(*tasks)
    sent_seconds = time.monotonic() - started
    idle = await sidebyside.wait_until_idle(operator, since=time.monotonic(), settle=10.0,
                                            window=options.quiet_window, timeout=600)
    after = await api.metrics()
    own = collections.Counter(api.own)
    own.subtract(own_before)
    counts = apimetrics.delta(apimetrics.delta(after, before), own)
    patches, _, _ = sidebyside.split_requests(counts)
    operator.stop()
    try:
        calls: list[list[Any]] = json.loads(await asyncio.to_thread(updates.read_text))['latencies']
    except (OSError, ValueError, KeyError):
        raise BenchmarkError(f"{framework_name} wrote no latencies into {updates}.") from None
    # From the server's answer to the change (stored, its event is on its way) to the handler's call;
    # and from the moment the change was sent (including its own round trip through a busy server).
    latencies = [called - answered[name] for name, _, called in calls if name in answered]
    from_sent = [called - stamp for _, stamp, called in calls]
    figures.values.update({
        'changes': total,
        'changes/s sent': total / sent_seconds,
        'handled changes': len(calls),
        'latency p50 ms': percentile(latencies, 0.5) * 1000,
        'latency p99 ms': percentile(latencies, 0.99) * 1000,
        'latency max ms': max(latencies, default=math.nan) * 1000,
        'from sending p50 ms': percentile(from_sent, 0.5) * 1000,
        'from sending p99 ms': percentile(from_sent, 0.99) * 1000,
        'CPU ms/change': (idle.cpu - ready.cpu) / total * 1000,
        'PATCH/change': patches / total,
    })
    if late:
        figures.notes.append(f"{late} changes were sent more than 50 ms late (the benchmark itself was busy)")


def _all_calls(operator: sidebyside.OperatorProcess, updates: Path) -> float:
    """Create and update handler calls of a stopped operator, as it wrote them when exiting."""
    try:
        update_calls = json.loads(updates.read_text())['calls']
    except (OSError, ValueError, KeyError):
        return math.nan
    creates = operator.handler_calls()
    return math.nan if creates is None else creates + update_calls


async def chain(api: Api, plane: ControlPlane, framework: Framework, *, scale: ScaleOptions,
                logs: Path) -> list[Figures]:
    """Burst with 1 handler, idle, restarts, steady load: on the same objects."""
    namespace = f'scale-{framework.name}'
    updates = logs / f'{framework.name}-updates.json'
    results = [Figures(framework.name, 'burst1')]
    try:
        await burst(api, plane, framework, scale=scale, handlers=1, namespace=namespace, logs=logs,
                    figures=results[0], keep=False)
    except BenchmarkError as e:
        results[0].notes.append(f"FAILED: {e}")
        return results
    results.append(Figures(framework.name, 'restart'))
    try:
        seconds, _ = await plain_list_seconds(api, namespace, scale.page)
        results[-1].values['plain paginated LIST s'] = seconds
        operator = None
        for index in range(1, scale.restarts + 1):
            if operator is not None:
                operator.stop()
                results[-1].values[f'handler calls #{index - 1}'] = _all_calls(operator, updates)
            operator = await restart(api, plane, framework, scale=scale, namespace=namespace, logs=logs,
                                     figures=results[-1], index=index, updates=updates)
        assert operator is not None
    except BenchmarkError as e:
        results[-1].notes.append(f"FAILED: {e}")
        return results
    if scale.steady_seconds <= 0:
        operator.stop()
        results[-1].values[f'handler calls #{scale.restarts}'] = _all_calls(operator, updates)
        return results
    results.append(Figures(framework.name, 'steady'))
    try:
        await steady(api, framework.name, operator, scale=scale, namespace=namespace, updates=updates,
                     figures=results[-1])
        calls = operator.handler_calls()
        if calls is not None:
            results[1].values[f'create calls #{scale.restarts} (till steady end)'] = calls
    except BenchmarkError as e:
        results[-1].notes.append(f"FAILED: {e}")
    finally:
        operator.stop()
    return results


# --------------------------------------------------------------------------------------------- #
# The whole benchmark and its table
# --------------------------------------------------------------------------------------------- #

SERVER_CPUS, OPERATOR_CPUS = {0}, {1}  # with --pin


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of a process onto these CPUs (the threads and processes it makes later inherit it)."""
    for task in Path(f'/proc/{pid}/task').iterdir():
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(int(task.name), cpus)


def _pin_apart(plane: ControlPlane) -> None:
    """The server on a CPU of its own; this client, and the operators it starts from now on, on the other."""
    if (os.cpu_count() or 1) < 2:
        raise BenchmarkError("--pin needs two CPUs at least.")
    assert plane.workdir is not None
    record = processes.read_pidfile(plane.workdir) or {}
    for child in record.get('children', {}).values():
        pin(int(child['pid']), SERVER_CPUS)
    pin(os.getpid(), OPERATOR_CPUS)


async def _phase(scale: ScaleOptions, framework: Framework, phase: str, logs: Path) -> list[Figures]:
    plane = await asyncio.to_thread(ControlPlane().start)
    api = Api(plane.server, plane.ssl_context())
    if scale.pin:
        _pin_apart(plane)
    try:
        await asyncio.to_thread(sidebyside._apply_crd, plane)
        if phase == 'chain':
            return await chain(api, plane, framework, scale=scale, logs=logs)
        if phase not in ('burst1', 'burst3', 'backlog1', 'backlog3'):
            raise BenchmarkError(f"No such phase: {phase!r} (chain, burst1, burst3, backlog1, backlog3).")
        figures = Figures(framework.name, phase)
        try:
            if phase.startswith('backlog'):
                await backlog(api, plane, framework, scale=scale, handlers=int(phase[-1]),
                              namespace=f'backlog{phase[-1]}-{framework.name}', logs=logs, figures=figures)
            else:
                await burst(api, plane, framework, scale=scale, handlers=int(phase[-1]),
                            namespace=f'scale{phase[-1]}-{framework.name}', logs=logs, figures=figures, keep=False)
        except BenchmarkError as e:
            figures.notes.append(f"FAILED: {e}")
        return [figures]
    finally:
        sidebyside._kill_all_live()
        await api.close()
        await asyncio.to_thread(plane.stop)
        if scale.pin:
            pin(os.getpid(), set(range(os.cpu_count() or 1)))


TARGETS: dict[tuple[str, str], tuple[str, float]] = {
    ('burst1', 'share of raw PATCH rate'): ('>=', 0.90),
    ('burst1', 'CPU ms/obj'): ('<=', 0.6),
    ('burst1', 'peak RSS MB'): ('<=', 300),
    ('burst3', 'peak RSS MB'): ('<=', 300),
    ('backlog1', 'share of raw PATCH rate'): ('>=', 0.90),
    ('backlog1', 'CPU ms/obj'): ('<=', 0.6),
    ('backlog1', 'peak RSS MB'): ('<=', 300),
    ('backlog3', 'peak RSS MB'): ('<=', 300),
    ('idle', 'idle KB/obj'): ('<=', 1.0),
    ('steady', 'latency p99 ms'): ('<=', 250),
}


PHASE_ORDER = ['burst1', 'burst3', 'backlog1', 'backlog3', 'idle', 'restart', 'steady']


def table(results: Sequence[Figures], scale: ScaleOptions) -> str:
    by_key: dict[tuple[str, str], dict[str, float]] = collections.defaultdict(dict)
    order: list[tuple[str, str]] = []
    for fig in results:
        phase = fig.phase
        for name, value in fig.values.items():
            idle = phase == 'burst1' and name in ('idle RSS MB', 'idle KB/obj', 'ready RSS MB')
            shown = 'idle' if idle else phase
            key = (shown, name)
            if key not in by_key:
                order.append(key)
            by_key[key][fig.framework] = value
    for (phase, name), values in list(by_key.items()):  # the restart target: vs the plain LIST
        if phase == 'restart' and name.startswith('seconds'):
            plain = by_key.get(('restart', 'plain paginated LIST s'), {})
            for fw, value in values.items():
                if fw in plain and plain[fw] > 0:
                    key = ('restart', f'x plain LIST{name[len("seconds"):]}')
                    if key not in by_key:
                        order.append(key)
                    by_key[key][fw] = value / plain[fw]
    fws = [fw for fw in ('ours', 'kopf') if fw in scale.frameworks]
    lines = [f"| scenario | figure | {' | '.join(fws)} | target (ours) |", '|---|---|' + '---|' * (len(fws) + 1)]
    for phase, name in sorted(order, key=lambda k: (PHASE_ORDER.index(k[0]),
                                                    order.index(k))):
        values = by_key[(phase, name)]
        cells = [_fmt(values.get(fw)) for fw in fws]
        target = TARGETS.get((phase, name))
        if name.startswith('x plain LIST'):
            target = ('<=', 2.0)
        if name.startswith(('PATCH #', 'handler calls #')) and phase == 'restart':
            target = ('<=', 0)
        verdict = ''
        if target is not None:
            op, limit = target
            ours = values.get('ours')
            met = ours is not None and (ours >= limit if op == '>=' else ours <= limit)
            verdict = f"{op} {_fmt(limit)}" + ('' if ours is None else f": {'met' if met else 'NOT met'}")
        lines.append(f"| {phase} | {name} | {' | '.join(cells)} | {verdict} |")
    for fig in results:
        for note in fig.notes:
            lines.append(f"\n{fig.framework} {fig.phase}: {note}")
    return '\n'.join(lines)


def _fmt(value: float | None) -> str:
    if value is None:
        return '-'
    if isinstance(value, float) and math.isnan(value):
        return 'n/a'
    if abs(value) >= 100 or value == int(value):
        return f"{value:.0f}"
    return f"{value:.2f}" if abs(value) >= 1 else f"{value:.3f}"


async def benchmark(scale: ScaleOptions, report: Any = print) -> list[Figures]:
    fws = {name: fw for name, fw in sidebyside.frameworks(sidebyside.Options(
        frameworks=scale.frameworks, ours=scale.ours)).items()}
    logs = scale.logs or Path(tempfile.mkdtemp(prefix='kopf-scale-'))
    logs.mkdir(parents=True, exist_ok=True)
    report(f"Operator logs: {logs}")
    results: list[Figures] = []
    for phase in scale.phases:
        for name, fw in fws.items():
            report(f"== {phase}: {name} (load {os.getloadavg()[0]:.1f}) at {time.strftime('%H:%M:%S')}")
            try:
                found = await _phase(scale, fw, phase, logs)
            except (BenchmarkError, ControlPlaneError, aiohttp.ClientError, OSError, ValueError, KeyError) as e:
                found = [Figures(name, phase, notes=[f"FAILED: {type(e).__name__}: {e}"])]
            for fig in found:
                report(f"   {fig.phase}: " + ', '.join(f"{k} {_fmt(v)}" for k, v in fig.values.items())
                       + ''.join(f"; {n}" for n in fig.notes))
            results.extend(found)
            report(f"   (load {os.getloadavg()[0]:.1f} after)")
    return results


def parse_args(argv: Sequence[str] | None = None) -> ScaleOptions:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0] if __doc__ else None)
    parser.add_argument('-n', '--objects', type=int, default=ScaleOptions.objects)
    parser.add_argument('--only', choices=['ours', 'kopf'])
    parser.add_argument('--phases', default=','.join(ScaleOptions.phases),
                        help="chain (burst with 1 handler, idle, restart, steady), burst3 (3 handlers), "
                             "burst1 (the chain's burst alone), backlog1 and backlog3 (1 and 3 handlers)")
    parser.add_argument('--steady-rate', type=float, default=ScaleOptions.steady_rate)
    parser.add_argument('--steady-seconds', type=float, default=ScaleOptions.steady_seconds)
    parser.add_argument('--restarts', type=int, default=ScaleOptions.restarts)
    parser.add_argument('--cap', type=float, default=ScaleOptions.cap,
                        help="give up on a framework's burst after this many seconds")
    parser.add_argument('--no-events', action='store_true')
    parser.add_argument('--json', type=Path)
    parser.add_argument('--logs', type=Path)
    parser.add_argument('--ours', type=Path, default=REPO)
    parser.add_argument('--pin', action='store_true',
                        help="the API server and etcd on CPU 0, the operator and this client on CPU 1: "
                             "what the operator costs the server when they do not share CPUs")
    args = parser.parse_args(argv)
    return ScaleOptions(objects=args.objects, frameworks=(args.only,) if args.only else ('ours', 'kopf'),
                        phases=tuple(args.phases.split(',')), steady_rate=args.steady_rate,
                        steady_seconds=args.steady_seconds, restarts=max(1, args.restarts), cap=args.cap,
                        events=not args.no_events, json_path=args.json, logs=args.logs, ours=args.ours.resolve(),
                        pin=args.pin)


def main(argv: Sequence[str] | None = None) -> int:
    scale = parse_args(argv)
    print(f"Scale: {scale.objects} objects, {', '.join(scale.frameworks)}, phases {', '.join(scale.phases)}"
          f"{' (server and operator pinned to CPUs of their own)' if scale.pin else ''}; "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()}")
    try:
        results = asyncio.run(benchmark(scale))
    except (BenchmarkError, ControlPlaneError, peers.PeerError, aiohttp.ClientError) as e:
        print(f"The benchmark has failed: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("The benchmark was interrupted.", file=sys.stderr)
        return 130
    finally:
        sidebyside._kill_all_live()
    print(table(results, scale))
    if scale.json_path is not None:
        scale.json_path.write_text(json.dumps({
            'options': {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(scale).items()},
            'results': [dataclasses.asdict(r) for r in results],
            'loadavg': os.getloadavg(),
        }, indent=2))
    return 0


if __name__ == '__main__':
    sys.exit(main())
