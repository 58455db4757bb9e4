"""
Benchmark: this framework and the released Kopf side by side, on the local control plane.

The same operator file (``benchmarks/quick_operator.py``: H quick create
handlers) runs under both frameworks as a black box, ``kopf run --standalone
-n NAMESPACE quick_operator.py``, alternately (A B A B ...), each run in a
fresh namespace on one local kube-apiserver + etcd. Each run goes like this:

1. The server's raw PATCH rate is measured: a plain aiohttp loop merge-patches
   a few objects (in a namespace of their own) as fast as it can, with a
   concurrency similar to an operator's.
2. The operator is started. It is *ready* once a warm-up object is fully
   handled and the process is idle (its CPU time stands still); the CPU time,
   the resident memory ("ready RSS") and the server's request counters are
   read then, so that start-up costs nothing in the figures.
3. N objects are created (with a few parallel POSTs) while a watch follows
   them. An object is *fully handled* when the server shows the framework's
   conclusion of the creation: the last-handled-configuration annotation is
   stored, and no handler progress is left (no other ``kopf.zalando.org/``
   annotation except the touch marker, nothing in ``status.kopf.progress``).
   Both frameworks write exactly this when all handlers of the creation have
   succeeded, in the same patch that purges the progress.
4. After the last object is fully handled, the operator is left alone until it
   is idle again (at least ``--idle-settle`` seconds, 30 by default: the
   per-object workers of both frameworks end after an idle timeout of 5 s,
   their pooled connections after 5 s here and 15 s in Kopf -- aiohttp's
   default -- checked as often); then the CPU time, the
   resident memory ("idle RSS"), the peak (``VmHWM``) and the counters are
   read again.

Printed per run: objects per second (N / time from the first POST to the last
object fully handled), the operator's PATCHes and other requests per object
(the server's ``apiserver_request_total``, deltas between the readings, for
the benchmark's resource and for Events; the benchmark's own requests are
subtracted, and everything else is shown as background), CPU milliseconds per
object, the resident memory ready / peak / idle, and the share of the raw
PATCH rate that the operator's PATCHes used while handling. Then, per figure,
the median and the spread of both frameworks and the ratio (ours / Kopf).

Run from the repository root (the first run installs the released Kopf into
``~/.cache/kopf-peers/VERSION``)::

    .venv/bin/python -m benchmarks.sidebyside --objects 1000 --handlers 3 --rounds 2
    .venv/bin/python -m benchmarks.sidebyside --objects 1000 --handlers 3 --lifecycle all_at_once
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
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # for ``python benchmarks/sidebyside.py``
    sys.path.insert(0, str(REPO))

from benchmarks import apimetrics, peers, procstats  # noqa: E402
from kopf.testing import ControlPlane, ControlPlaneError  # noqa: E402

OPERATOR_FILE = Path(__file__).resolve().parent / 'quick_operator.py'
GROUP, VERSION, PLURAL, KIND = 'bench.kopf.dev', 'v1', 'kopfbenchmarks', 'KopfBenchmark'
PREFIX = 'kopf.zalando.org/'
LAST_HANDLED = PREFIX + 'last-handled-configuration'
TOUCH = PREFIX + 'touch-dummy'
MERGE_PATCH = 'application/merge-patch+json'
WARMUP = 'warmup'

CRD: dict[str, Any] = {
    'apiVersion': 'apiextensions.k8s.io/v1',
    'kind': 'CustomResourceDefinition',
    'metadata': {'name': f'{PLURAL}.{GROUP}'},
    'spec': {
        'group': GROUP,
        'scope': 'Namespaced',
        'names': {'kind': KIND, 'plural': PLURAL, 'singular': KIND.lower()},
        'versions': [{
            'name': VERSION, 'served': True, 'storage': True,
            'schema': {'openAPIV3Schema': {'type': 'object', 'properties': {
                'spec': {'type': 'object', 'x-kubernetes-preserve-unknown-fields': True},
                'status': {'type': 'object', 'x-kubernetes-preserve-unknown-fields': True},
            }}},
        }],
    },
}


class BenchmarkError(RuntimeError):
    """A run cannot be measured; the message says what was awaited and what the operator said."""


# --------------------------------------------------------------------------------------------- #
# Options and results
# --------------------------------------------------------------------------------------------- #

@dataclasses.dataclass(frozen=True)
class Options:
    objects: int = 1000
    handlers: int = 3
    rounds: int = 2
    lifecycle: str = ''
    handler_kind: str = 'async'
    events: bool = True
    peer_version: str = peers.DEFAULT_VERSION
    frameworks: tuple[str, ...] = ('ours', 'kopf')
    create_concurrency: int = 16
    raw_objects: int = 100
    raw_concurrency: int = 32
    raw_seconds: float = 3.0
    settle: float = 8.0
    idle_settle: float = 30.0
    quiet_window: float = 2.0
    startup_timeout: float = 90.0
    stall_timeout: float = 120.0
    json_path: Path | None = None
    logs: Path | None = None
    ours: Path = REPO  # the source tree whose ``kopf`` is "ours"
    baseline: Path | None = None  # another source tree of ours, run as "base" (e.g. before a change)
    c_allocator: bool = False  # ours with CPython's C allocator (PYTHONMALLOC=malloc), the documented opt-in
    metrics: str | None = None  # also run ours with ``--metrics URL``, as "metrics" (scraped every few seconds)
    scrape_interval: float = 10.0
    concurrent: bool = False  # the frameworks of a round run at the same time, under the same load


@dataclasses.dataclass(frozen=True)
class RunResult:
    framework: str
    round: int
    objects: int
    seconds: float  # from the first POST to the last object fully handled
    patches: int
    other: dict[str, int]  # the operator's other requests, by kind
    background: int  # requests of nobody in particular (the server's own, /metrics, ...)
    cpu: float  # seconds, from ready to idle
    rss_ready: int
    rss_peak: int
    rss_idle: int
    max_fds: int
    raw_patch_rate: float
    loadavg: tuple[float, float]  # the 1-minute load average before and after the run
    log_errors: int
    handler_calls: int | None  # as counted by the operator itself (excluding the warm-up object)
    scraped_calls: float | None = None  # kopf_handler_calls_total at the last scrape (warm-up included)
    scrapes: int = 0  # how many times /metrics was scraped between the two readings

    @property
    def rate(self) -> float:
        return self.objects / self.seconds

    @property
    def patches_per_object(self) -> float:
        return self.patches / self.objects

    @property
    def other_per_object(self) -> float:
        return sum(self.other.values()) / self.objects

    @property
    def events_per_object(self) -> float:
        return sum(n for kind, n in self.other.items() if 'events' in kind) / self.objects

    @property
    def calls_per_object(self) -> float:
        return self.handler_calls / self.objects if self.handler_calls is not None else math.nan

    @property
    def cpu_ms_per_object(self) -> float:
        return self.cpu / self.objects * 1000

    @property
    def patch_share(self) -> float:
        return (self.patches / self.seconds) / self.raw_patch_rate if self.raw_patch_rate else math.nan


# --------------------------------------------------------------------------------------------- #
# The API, from the benchmark's side
# --------------------------------------------------------------------------------------------- #

class Api:
    """A plain aiohttp client with the admin certificate; it counts its own requests."""

    def __init__(self, server: str, ssl_context: ssl.SSLContext) -> None:
        self.server = server
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ssl_context, limit=0))
        self.own: apimetrics.Counts = collections.Counter()

    async def close(self) -> None:
        await self.session.close()

    def count(self, verb: str, group: str, resource: str, subresource: str = '') -> None:
        self.own[apimetrics.RequestKind(verb, group, resource, subresource)] += 1

    async def request(self, method: str, path: str, body: Any = None, *, content_type: str = 'application/json',
                      ok: Sequence[int] = (200, 201, 202), timeout: float = 60) -> Any:
        async with self.session.request(method, self.server + path, data=None if body is None else json.dumps(body),
                                        headers={'Content-Type': content_type},
                                        timeout=aiohttp.ClientTimeout(total=timeout)) as response:
            text = await response.text()
            if response.status not in ok:
                raise BenchmarkError(f"{method} {path} answered HTTP {response.status}: {text[:300]}")
            return json.loads(text) if text else None

    async def metrics(self) -> apimetrics.Counts:
        async with self.session.get(self.server + '/metrics') as response:
            return apimetrics.parse(await response.text())

    async def ensure_namespace(self, name: str) -> None:
        await self.request('POST', '/api/v1/namespaces',
                           {'apiVersion': 'v1', 'kind': 'Namespace', 'metadata': {'name': name}}, ok=(201, 409))

    async def remove_namespace(self, name: str) -> None:
        """Delete the objects and Events of a namespace, then the namespace itself.

        No namespace controller runs on this control plane: the namespace's
        finalizer is removed here, once it is empty.
        """
        await self.request('DELETE', f'/apis/{GROUP}/{VERSION}/namespaces/{name}/{PLURAL}', ok=(200, 404),
                           timeout=600)
        await self.request('DELETE', f'/api/v1/namespaces/{name}/events', ok=(200, 404), timeout=600)
        await self.request('DELETE', f'/api/v1/namespaces/{name}', ok=(200, 202, 404))
        ns = await self.request('GET', f'/api/v1/namespaces/{name}', ok=(200, 404))
        if ns and ns.get('kind') == 'Namespace':
            ns['spec'] = {'finalizers': []}
            await self.request('PUT', f'/api/v1/namespaces/{name}/finalize', ns, ok=(200, 404, 409))

    async def create_objects(self, namespace: str, names: Sequence[str], *, concurrency: int) -> None:
        path = f'/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}'

        async def create(name: str) -> None:
            body = {'apiVersion': f'{GROUP}/{VERSION}', 'kind': KIND,
                    'metadata': {'name': name}, 'spec': {'field': name}}
            await self.request('POST', path, body)
            self.count('POST', GROUP, PLURAL)

        await _concurrently(create, names, concurrency=concurrency)


async def _concurrently(fn: Callable[[str], Awaitable[None]], items: Sequence[str], *, concurrency: int) -> None:
    """Call ``fn`` for every item with at most ``concurrency`` calls in flight; fail on the first error."""
    pending = iter(items)

    async def lane() -> None:
        for item in pending:
            await fn(item)

    await asyncio.gather(*(lane() for _ in range(max(1, min(concurrency, len(items))))))


def is_fully_handled(obj: dict[str, Any]) -> bool:
    """The creation is concluded: the diff-base is stored and no handler progress is left."""
    annotations = (obj.get('metadata') or {}).get('annotations') or {}
    if LAST_HANDLED not in annotations:
        return False
    if any(key.startswith(PREFIX) and key not in (LAST_HANDLED, TOUCH) for key in annotations):
        return False
    progress = ((obj.get('status') or {}).get('kopf') or {}).get('progress')
    return not progress


class HandledTracker:
    """Follows a namespace with a watch and notes when each object is first seen fully handled."""

    def __init__(self, api: Api, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.handled: dict[str, float] = {}
        self.changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> HandledTracker:
        self._task = asyncio.create_task(self._follow())
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _follow(self) -> None:
        path = f'/apis/{GROUP}/{VERSION}/namespaces/{self.namespace}/{PLURAL}'
        listing = await self.api.request('GET', path)
        self.api.count('LIST', GROUP, PLURAL)
        for obj in listing['items']:
            self._see(obj)
        version = listing['metadata']['resourceVersion']
        while True:
            url = f'{self.api.server}{path}?watch=true&allowWatchBookmarks=true&timeoutSeconds=3600' \
                  f'&resourceVersion={version}'
            try:
                async with self.api.session.get(url, timeout=aiohttp.ClientTimeout(total=None)) as response:
                    if response.status != 200:
                        raise BenchmarkError(f"The benchmark's watch failed: HTTP {response.status}")
                    async for line in response.content:
                        event = json.loads(line) if line.strip() else None
                        if event is None:
                            continue
                        if event.get('type') == 'ERROR':
                            raise BenchmarkError(f"The benchmark's watch failed: {event.get('object')}")
                        version = event['object']['metadata']['resourceVersion']
                        if event['type'] in ('ADDED', 'MODIFIED'):
                            self._see(event['object'])
            finally:
                self.api.count('WATCH', GROUP, PLURAL)

    def _see(self, obj: dict[str, Any]) -> None:
        name = obj['metadata']['name']
        if name not in self.handled and is_fully_handled(obj):
            self.handled[name] = time.monotonic()
            self.changed.set()

    def check(self) -> None:
        """Raise if the watch has failed."""
        if self._task is not None and self._task.done() and not self._task.cancelled():
            error = self._task.exception()
            raise BenchmarkError(f"The benchmark's watch has ended: {error!r}")


# --------------------------------------------------------------------------------------------- #
# The operator process
# --------------------------------------------------------------------------------------------- #

@dataclasses.dataclass(frozen=True)
class Framework:
    name: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    run_args: tuple[str, ...] = ()  # options of ``kopf run``
    metrics: str | None = None  # the metrics endpoint that the benchmark scrapes


def frameworks(options: Options) -> dict[str, Framework]:
    """How to run the operator file under each framework."""
    found: dict[str, Framework] = {}
    if 'ours' in options.frameworks:
        found['ours'] = _ours('ours', options.ours, c_allocator=options.c_allocator)
    if 'kopf' in options.frameworks:
        kopf_bin = peers.ensure_peer(options.peer_version)
        found['kopf'] = Framework('kopf', (str(kopf_bin),), tuple(peers.peer_env().items()))
    if options.baseline is not None:
        found['base'] = _ours('base', options.baseline, c_allocator=options.c_allocator)
    if options.metrics is not None:
        plain = _ours('metrics', options.ours, c_allocator=options.c_allocator)
        found['metrics'] = dataclasses.replace(plain, run_args=('--metrics', options.metrics),
                                               metrics=options.metrics)
    return found


def _ours(name: str, tree: Path, *, c_allocator: bool = False) -> Framework:
    """This framework from a source tree (its ``kopf`` package), on the benchmark's interpreter."""
    env = {**os.environ, 'PYTHONPATH': str(tree)}
    env.pop('PYTHONMALLOC', None)
    if c_allocator:
        env['PYTHONMALLOC'] = 'malloc'  # as the deployment recipe opts in
    imported = subprocess.run([sys.executable, '-c', 'import kopf; print(kopf.__file__)'], env=env,
                              cwd=tempfile.gettempdir(), capture_output=True, text=True).stdout.strip()
    if not imported.startswith(str(tree)):
        raise BenchmarkError(f"'{name}' should import kopf from {tree}, but imports {imported or 'nothing'}.")
    return Framework(name, (sys.executable, '-m', 'kopf'), tuple(env.items()))


_live: set[subprocess.Popen[bytes]] = set()


class OperatorProcess:
    """``kopf run`` in a session of its own; always stopped (and killed if need be) on exit."""

    def __init__(self, framework: Framework, *, namespace: str, kubeconfig: Path, log: Path,
                 options: Options) -> None:
        argv = [*framework.argv, 'run', '--standalone', *framework.run_args, '-n', namespace, str(OPERATOR_FILE)]
        env = {**dict(framework.env), 'KUBECONFIG': str(kubeconfig),
               'BENCH_HANDLERS': str(options.handlers), 'BENCH_LIFECYCLE': options.lifecycle,
               'BENCH_HANDLER_KIND': options.handler_kind, 'BENCH_EVENTS': 'on' if options.events else 'off',
               'BENCH_RESOURCE': f'{GROUP}/{VERSION}/{PLURAL}', 'BENCH_CALLS': str(log.with_suffix('.calls'))}
        self.log = log
        self.calls_file = log.with_suffix('.calls')
        self._log_file = log.open('wb')
        self.process = subprocess.Popen(argv, env=env, cwd=log.parent, stdin=subprocess.DEVNULL,
                                        stdout=self._log_file, stderr=subprocess.STDOUT, start_new_session=True)
        _live.add(self.process)

    @property
    def pid(self) -> int:
        return self.process.pid

    def tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors='replace').splitlines()
        return '\n'.join(text[-lines:])

    def error_lines(self) -> int:
        text = self.log.read_text(errors='replace')
        return sum(1 for line in text.splitlines() if 'ERROR' in line or 'Traceback' in line)

    def handler_calls(self) -> int | None:
        """How many times the handlers were called, as the operator has written when it exited."""
        try:
            return int(self.calls_file.read_text())
        except (OSError, ValueError):
            return None

    def check_alive(self, waiting_for: str) -> None:
        if self.process.poll() is not None:
            raise BenchmarkError(f"The operator exited with code {self.process.returncode} while waiting for "
                                 f"{waiting_for}. The last lines of {self.log}:\n{self.tail()}")

    def stop(self, timeout: float = 20) -> None:
        try:
            if self.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGTERM)
                try:
                    self.process.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    print(f"  the operator did not stop within {timeout}s of SIGTERM; killed.", file=sys.stderr)
            _kill(self.process)
        finally:
            self._log_file.close()
            _live.discard(self.process)


def _kill(process: subprocess.Popen[bytes]) -> None:
    """Kill what is left of the operator's process group (its own session, so nothing else)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)


def _kill_all_live() -> None:
    for process in list(_live):
        _kill(process)
        _live.discard(process)


# --------------------------------------------------------------------------------------------- #
# Waiting
# --------------------------------------------------------------------------------------------- #

async def wait_until_idle(operator: OperatorProcess, *, since: float, settle: float, window: float,
                          timeout: float) -> procstats.Sample:
    """
    Wait until ``settle`` seconds have passed since ``since`` and the operator's CPU time stands still.

    "Still" means less than 1% of a core over the last ``window`` seconds.
    """
    samples: collections.deque[procstats.Sample] = collections.deque()
    started = time.monotonic()
    while True:
        operator.check_alive("the operator to become idle")
        now = procstats.sample(operator.pid)
        samples.append(now)
        while len(samples) > 1 and samples[1].when <= now.when - window:
            samples.popleft()  # the oldest kept is the last one at least a window ago
        oldest = samples[0]
        if (now.when - since >= settle and now.when - oldest.when >= window and
                now.cpu - oldest.cpu <= max(0.01, window * 0.01)):
            return now
        if now.when - started > timeout:
            print(f"  warning: the operator was still busy after {timeout:.0f}s "
                  f"({now.cpu - oldest.cpu:.2f} CPU s in the last {window}s); measured anyway.", file=sys.stderr)
            return now
        await asyncio.sleep(0.2)


async def wait_handled(tracker: HandledTracker, operator: OperatorProcess, names: set[str], *,
                       stall_timeout: float, what: str, fds: list[int] | None = None) -> float:
    """Wait until all ``names`` are fully handled; fail if none is handled for ``stall_timeout`` seconds."""
    last_progress, last_count = time.monotonic(), -1
    while True:
        tracker.check()
        operator.check_alive(what)
        done = names.intersection(tracker.handled)
        if len(done) == len(names):
            return max(tracker.handled[name] for name in names)
        if len(done) != last_count:
            last_progress, last_count = time.monotonic(), len(done)
        elif time.monotonic() - last_progress > stall_timeout:
            missing = sorted(names - done)
            raise BenchmarkError(
                f"No progress for {stall_timeout:.0f}s while waiting for {what}: {len(done)} of {len(names)} "
                f"objects are fully handled; not yet e.g. {', '.join(missing[:5])}. "
                f"The last lines of {operator.log}:\n{operator.tail()}")
        if fds is not None:
            with contextlib.suppress(OSError):
                fds.append(len(os.listdir(f'/proc/{operator.pid}/fd')))
        tracker.changed.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(tracker.changed.wait(), timeout=0.5)


# --------------------------------------------------------------------------------------------- #
# The raw PATCH rate
# --------------------------------------------------------------------------------------------- #

@dataclasses.dataclass(frozen=True)
class PatchLoop:
    """What a plain client's PATCH loop got: PATCHes per second, and its own CPU per PATCH (this process's)."""

    rate: float
    cpu_per_patch: float


async def raw_patch_rate(api: Api, namespace: str, options: Options, *, watched: bool = False) -> float:
    """PATCHes per second that one plain client gets through, at the given concurrency (see :func:`raw_patch_loop`)."""
    return (await raw_patch_loop(api, namespace, options, watched=watched)).rate


async def raw_patch_loop(api: Api, namespace: str, options: Options, *, watched: bool = False) -> PatchLoop:
    """
    A plain client's PATCH loop over objects it creates for it, at the given concurrency (see :func:`_patch_loop`).

    ``watched``: with the benchmark's own watch of the namespace open
    meanwhile (:class:`HandledTracker`), as it is while an operator is
    measured -- the server sends every patched object to it, and this
    process reads them, on the same CPUs (its CPU then counts too).
    """
    await api.ensure_namespace(namespace)
    try:
        names = [f'raw-{i:05d}' for i in range(options.raw_objects)]
        await api.create_objects(namespace, names, concurrency=options.create_concurrency)
        async with contextlib.AsyncExitStack() as stack:
            if watched:
                await stack.enter_async_context(HandledTracker(api, namespace))
            return await _patch_loop(api, namespace, names, options)
    finally:
        await api.remove_namespace(namespace)


# The plain loop's field manager: not the one that created the objects, as an operator is not.
RAW_FIELD_MANAGER = 'bench-raw-patcher'


async def _patch_loop(api: Api, namespace: str, names: list[str], options: Options) -> PatchLoop:
    """
    Merge-patch the objects round-robin from many lanes for a while.

    The PATCHes name a field manager other than the creator's, as every
    operator's do: the server then keeps two entries of ``managedFields``
    per object instead of one, which costs it a sixth to a fifth of its
    PATCH rate (one manager against two on this benchmark's objects, in
    turns: 850-950 against 715-745 PATCH/s).
    """
    path = f'/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}'
    query = f'?fieldManager={RAW_FIELD_MANAGER}'
    filler = 'x' * 150  # about as large as a handler's progress record
    count = 0
    deadline = time.monotonic() + options.raw_seconds

    async def lane(index: int) -> None:
        nonlocal count
        serial = 0
        while time.monotonic() < deadline:
            name = names[(index + serial * options.raw_concurrency) % len(names)]
            patch = {'metadata': {'annotations': {'bench.kopf.dev/raw': f'{serial}-{filler}'}}}
            await api.request('PATCH', f'{path}/{name}{query}', patch, content_type=MERGE_PATCH)
            serial += 1
            count += 1

    started, cpu = time.monotonic(), time.process_time()
    await asyncio.gather(*(lane(i) for i in range(options.raw_concurrency)))
    return PatchLoop(rate=count / (time.monotonic() - started),
                     cpu_per_patch=(time.process_time() - cpu) / count if count else math.nan)


# --------------------------------------------------------------------------------------------- #
# One run
# --------------------------------------------------------------------------------------------- #

OPERATOR_KINDS = {(GROUP, PLURAL), ('', 'events'), ('events.k8s.io', 'events')}


def split_requests(counts: apimetrics.Counts) -> tuple[int, dict[str, int], int]:
    """The operator's PATCHes, its other requests by kind, and the rest (background)."""
    patches, background = 0, 0
    other: dict[str, int] = {}
    for kind, value in counts.items():
        if (kind.group, kind.resource) not in OPERATOR_KINDS:
            background += value
        elif kind.verb == 'PATCH' and kind.resource == PLURAL:
            patches += value
        else:
            other[str(kind)] = other.get(str(kind), 0) + value
    return patches, other, background


async def one_run(api: Api, plane: ControlPlane, framework: Framework, *, round_: int, options: Options,
                  logs: Path) -> RunResult:
    tag = f'{framework.name}-{round_}-{uuid.uuid4().hex[:5]}'
    namespace = f'bench-{tag}'
    load_before = os.getloadavg()[0]
    raw_rate = await raw_patch_rate(api, f'{namespace}-raw', options)
    await api.ensure_namespace(namespace)
    assert plane.kubeconfig is not None
    operator = OperatorProcess(framework, namespace=namespace, kubeconfig=plane.kubeconfig,
                               log=logs / f'{tag}.log', options=options)
    try:
        async with HandledTracker(api, namespace) as tracker:
            await api.create_objects(namespace, [WARMUP], concurrency=1)
            handled = await wait_handled(tracker, operator, {WARMUP}, stall_timeout=options.startup_timeout,
                                         what="the operator to start and handle a warm-up object")
            ready = await wait_until_idle(operator, since=handled, settle=options.settle,
                                          window=options.quiet_window, timeout=120)
            before = await api.metrics()
            own_before = collections.Counter(api.own)
            scraper = Scraper(framework.metrics, options.scrape_interval)

            names = [f'obj-{i:05d}' for i in range(options.objects)]
            fds: list[int] = []
            started = time.monotonic()
            creation = asyncio.create_task(api.create_objects(namespace, names,
                                                              concurrency=options.create_concurrency))
            try:
                last = await wait_handled(tracker, operator, set(names), stall_timeout=options.stall_timeout,
                                          what=f"{options.objects} objects to be fully handled", fds=fds)
            finally:
                if not creation.done():
                    creation.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await creation
            idle = await wait_until_idle(operator, since=last, settle=options.idle_settle,
                                         window=options.quiet_window,
                                         timeout=max(120.0, options.objects * options.handlers * 0.05))
            after = await api.metrics()
            own = collections.Counter(api.own)
            own.subtract(own_before)
            scraped_calls, scrapes = await scraper.stop()
        counts = apimetrics.delta(apimetrics.delta(after, before), own)
        patches, other, background = split_requests(counts)
        operator.stop()
        calls = operator.handler_calls()
        return RunResult(
            framework=framework.name, round=round_, objects=options.objects, seconds=last - started,
            patches=patches, other=other, background=background, cpu=idle.cpu - ready.cpu,
            rss_ready=ready.rss, rss_peak=idle.hwm, rss_idle=idle.rss, max_fds=max(fds, default=0),
            raw_patch_rate=raw_rate, loadavg=(load_before, os.getloadavg()[0]),
            log_errors=operator.error_lines(),
            handler_calls=None if calls is None else calls - options.handlers,  # not the warm-up's
            scraped_calls=scraped_calls, scrapes=scrapes,
        )
    finally:
        operator.stop()
        await api.remove_namespace(namespace)


class Scraper:
    """Scrapes the operator's metrics every few seconds, as Prometheus would (nothing without an endpoint)."""

    def __init__(self, url: str | None, interval: float) -> None:
        self.url = url
        self.interval = interval
        self.scrapes = 0
        self.last = ''
        self._task = asyncio.create_task(self._scrape()) if url is not None else None

    async def _scrape(self) -> None:
        assert self.url is not None
        async with aiohttp.ClientSession() as session:
            while True:
                await asyncio.sleep(self.interval)
                await self._once(session)

    async def _once(self, session: aiohttp.ClientSession) -> None:
        assert self.url is not None
        try:
            async with session.get(self.url) as response:
                self.last = await response.text()
                self.scrapes += 1
        except aiohttp.ClientError as e:
            raise BenchmarkError(f"Cannot scrape the operator's metrics at {self.url}: {e}") from e

    async def stop(self) -> tuple[float | None, int]:
        """The handler calls as the operator's metrics count them (at a last scrape), and the number of scrapes."""
        if self._task is None:
            return None, 0
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        async with aiohttp.ClientSession() as session:
            await self._once(session)
        from prometheus_client.parser import text_string_to_metric_families
        calls = sum(sample.value for family in text_string_to_metric_families(self.last)
                    if family.name == 'kopf_handler_calls' for sample in family.samples
                    if sample.name == 'kopf_handler_calls_total')
        return calls, self.scrapes


# --------------------------------------------------------------------------------------------- #
# The report
# --------------------------------------------------------------------------------------------- #

MB = 1024 * 1024

FIGURES: list[tuple[str, str, Callable[[RunResult], float]]] = [
    ('obj/s', '{:.1f}', lambda r: r.rate),
    ('calls/obj', '{:.2f}', lambda r: r.calls_per_object),
    ('PATCH/obj', '{:.2f}', lambda r: r.patches_per_object),
    ('other/obj', '{:.2f}', lambda r: r.other_per_object),
    ('CPU ms/obj', '{:.2f}', lambda r: r.cpu_ms_per_object),
    ('ready MB', '{:.1f}', lambda r: r.rss_ready / MB),
    ('peak MB', '{:.1f}', lambda r: r.rss_peak / MB),
    ('idle MB', '{:.1f}', lambda r: r.rss_idle / MB),
    ('raw PATCH/s', '{:.0f}', lambda r: r.raw_patch_rate),
    ('share', '{:.0%}', lambda r: r.patch_share),
]


def format_run(r: RunResult) -> str:
    figures = '  '.join(f"{name} {fmt.format(fn(r))}" for name, fmt, fn in FIGURES)
    extras = (f"  (events/obj {r.events_per_object:.2f}, {r.seconds:.1f}s, max fds {r.max_fds}, "
              f"background {r.background} req, load {r.loadavg[0]:.1f}->{r.loadavg[1]:.1f}"
              f"{f', {r.scrapes} scrapes, handler calls in the metrics {r.scraped_calls:.0f}' if r.scrapes else ''}"
              f"{f', {r.log_errors} error lines in the log' if r.log_errors else ''})")
    return f"round {r.round} {r.framework:<5} {figures}{extras}"


def summarize(results: Sequence[RunResult], options: Options) -> str:
    by_fw: dict[str, list[RunResult]] = collections.defaultdict(list)
    for r in results:
        by_fw[r.framework].append(r)
    names = [fw for fw in ('ours', 'metrics', 'base', 'kopf') if fw in by_fw]
    header = f"{'figure':<12}" + ''.join(f"{fw + ' median [min..max]':>30}" for fw in names)
    reference = 'kopf' if 'kopf' in by_fw else 'ours' if 'metrics' in by_fw else None
    ratios = [fw for fw in ('ours', 'metrics', 'base') if fw in by_fw and fw != reference] if reference else []
    header += ''.join(f"{fw + '/' + (reference or ''):>14}" for fw in ratios)
    lines = [f"Summary: {options.objects} objects x {options.handlers} handlers, "
             f"lifecycle {options.lifecycle or 'default'}, {options.handler_kind} handlers, "
             f"{'' if options.events else 'no '}events posted, {len(results)} runs", header]
    for name, fmt, fn in FIGURES:
        line = f"{name:<12}"
        medians = {}
        for fw in names:
            values = [fn(r) for r in by_fw[fw]]
            medians[fw] = statistics.median(values)
            cell = f"{fmt.format(medians[fw])} [{fmt.format(min(values))}..{fmt.format(max(values))}]"
            line += f"{cell:>30}"
        for fw in ratios:
            assert reference is not None
            ratio = medians[fw] / medians[reference] if medians[reference] >= 0.005 else math.nan  # not of ~nothing
            line += f"{ratio:>14.3f}"
        lines.append(line)
    other_kinds = sorted({kind for r in results for kind in r.other})
    for fw in names:
        per_kind = {kind: statistics.median(r.other.get(kind, 0) / r.objects for r in by_fw[fw])
                    for kind in other_kinds}
        described = ', '.join(f"{kind} {value:.2f}" for kind, value in per_kind.items() if value)
        lines.append(f"other requests per object ({fw}, median): {described or 'none'}")
    return '\n'.join(lines)


# --------------------------------------------------------------------------------------------- #
# The whole benchmark
# --------------------------------------------------------------------------------------------- #

async def benchmark(plane: ControlPlane, options: Options, *,
                    report: Callable[[str], None] = print) -> list[RunResult]:
    """Run the rounds on a started control plane; return every run's figures."""
    if plane.kubeconfig is None:
        raise BenchmarkError("The control plane is not started.")
    fws = frameworks(options)
    api = Api(plane.server, plane.ssl_context())
    results: list[RunResult] = []
    failures: list[str] = []
    try:
        await asyncio.to_thread(_apply_crd, plane)
        with _logs_dir(options, keep=lambda: bool(failures)) as logs:
            report(f"Operator logs: {logs}")
            for round_ in range(1, options.rounds + 1):
                batches = [list(fws)] if options.concurrent else [[name] for name in fws]
                for batch in batches:
                    outcomes = await asyncio.gather(*(one_run(api, plane, fws[name], round_=round_, options=options,
                                                              logs=logs) for name in batch), return_exceptions=True)
                    for name, outcome in zip(batch, outcomes):
                        if isinstance(outcome, BenchmarkError):
                            failures.append(f"round {round_} {name}: {outcome}")
                            report(f"round {round_} {name:<5} FAILED: {outcome}")
                        elif isinstance(outcome, BaseException):
                            raise outcome
                        else:
                            results.append(outcome)
                            report(format_run(outcome))
    finally:
        await api.close()
    for failure in failures:
        report(f"FAILED: {failure}")
    return results


def _apply_crd(plane: ControlPlane) -> None:
    from kopf.testing import KubeAPI
    KubeAPI(plane).apply_crd(CRD)


@contextlib.contextmanager
def _logs_dir(options: Options, *, keep: Callable[[], bool]) -> Iterator[Path]:
    """Where the operators log: the given directory, or a temporary one kept only if a run has failed."""
    if options.logs is not None:
        options.logs.mkdir(parents=True, exist_ok=True)
        yield options.logs
        return
    path = Path(tempfile.mkdtemp(prefix='kopf-sidebyside-'))
    yield path  # an exception skips the removal too
    if not keep():
        shutil.rmtree(path, ignore_errors=True)


@contextlib.asynccontextmanager
async def _signals_stop() -> AsyncIterator[None]:
    """SIGTERM stops the benchmark like Ctrl+C: with the operators stopped and the servers down."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


def parse_args(argv: Sequence[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0] if __doc__ else None)
    parser.add_argument('-n', '--objects', type=int, default=Options.objects, help="objects per run")
    parser.add_argument('-H', '--handlers', type=int, default=Options.handlers, help="create handlers")
    parser.add_argument('-r', '--rounds', type=int, default=Options.rounds, help="rounds of A B")
    parser.add_argument('--lifecycle', default='', choices=['', 'asap', 'one_by_one', 'all_at_once',
                                                            'randomized', 'shuffled'],
                        help="kopf.lifecycles function (default: each framework's default)")
    parser.add_argument('--handler-kind', default='async', choices=['async', 'sync'])
    parser.add_argument('--no-events', action='store_true',
                        help="the operators post no Kubernetes Events for their log messages")
    parser.add_argument('--peer-version', default=peers.DEFAULT_VERSION, help="the released Kopf to compare with")
    parser.add_argument('--only', choices=['ours', 'kopf'], help="run one framework only")
    parser.add_argument('--create-concurrency', type=int, default=Options.create_concurrency)
    parser.add_argument('--raw-objects', type=int, default=Options.raw_objects)
    parser.add_argument('--raw-concurrency', type=int, default=Options.raw_concurrency)
    parser.add_argument('--raw-seconds', type=float, default=Options.raw_seconds)
    parser.add_argument('--settle', type=float, default=Options.settle,
                        help="seconds to leave the operator alone after the warm-up before measuring it ready")
    parser.add_argument('--idle-settle', type=float, default=Options.idle_settle,
                        help="seconds to leave the operator alone after handling before measuring it idle")
    parser.add_argument('--quiet-window', type=float, default=Options.quiet_window)
    parser.add_argument('--stall-timeout', type=float, default=Options.stall_timeout,
                        help="fail a run when no object gets fully handled for this long")
    parser.add_argument('--c-allocator', action='store_true',
                        help="run ours with CPython's C allocator (PYTHONMALLOC=malloc), the documented opt-in")
    parser.add_argument('--json', type=Path, help="also write every run's figures to this JSON file")
    parser.add_argument('--logs', type=Path, help="keep the operators' logs in this directory")
    parser.add_argument('--ours', type=Path, default=REPO,
                        help="the source tree whose kopf package is 'ours' (default: this repository)")
    parser.add_argument('--metrics', metavar='URL',
                        help="also run ours with --metrics URL (e.g. http://127.0.0.1:9464/metrics), as 'metrics', "
                             "scraped every --scrape-interval seconds")
    parser.add_argument('--scrape-interval', type=float, default=Options.scrape_interval)
    parser.add_argument('--concurrent', action='store_true',
                        help="run the frameworks of a round at the same time (each in its namespace), so that a "
                             "busy machine loads them alike; only the per-process figures (CPU, memory) hold then")
    parser.add_argument('--baseline', type=Path,
                        help="also run the kopf package of this source tree, as 'base' (e.g. before a change)")
    args = parser.parse_args(argv)
    if args.objects < 1 or args.handlers < 1 or args.rounds < 1:
        parser.error("--objects, --handlers and --rounds must be at least 1.")
    return Options(objects=args.objects, handlers=args.handlers, rounds=args.rounds, lifecycle=args.lifecycle,
                   handler_kind=args.handler_kind, events=not args.no_events, peer_version=args.peer_version,
                   frameworks=(args.only,) if args.only else ('ours', 'kopf'),
                   create_concurrency=args.create_concurrency, raw_objects=args.raw_objects,
                   raw_concurrency=args.raw_concurrency, raw_seconds=args.raw_seconds, settle=args.settle,
                   idle_settle=args.idle_settle,
                   quiet_window=args.quiet_window, stall_timeout=args.stall_timeout, json_path=args.json,
                   logs=args.logs, ours=args.ours.resolve(),
                   baseline=args.baseline.resolve() if args.baseline else None, c_allocator=args.c_allocator,
                   metrics=args.metrics, scrape_interval=args.scrape_interval, concurrent=args.concurrent)


async def _main(options: Options) -> list[RunResult]:
    async with _signals_stop():
        plane = await asyncio.to_thread(ControlPlane().start)
        try:
            return await benchmark(plane, options)
        finally:
            _kill_all_live()
            await asyncio.to_thread(plane.stop)


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_args(argv)
    print(f"Side by side: {options.objects} objects x {options.handlers} {options.handler_kind} create handlers, "
          f"lifecycle {options.lifecycle or 'default'}, {options.rounds} round(s) of "
          f"{' '.join(options.frameworks)}{' base' if options.baseline else ''}"
          f"{' metrics' if options.metrics else ''}; ours from {options.ours}"
          f"{f', base from {options.baseline}' if options.baseline else ''}; released Kopf {options.peer_version}; "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    try:
        results = asyncio.run(_main(options))
    except (BenchmarkError, ControlPlaneError, peers.PeerError) as e:
        print(f"The benchmark has failed: {e}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("The benchmark was interrupted.", file=sys.stderr)
        return 130
    finally:
        _kill_all_live()
    if not results:
        print("No run has succeeded.", file=sys.stderr)
        return 1
    print(summarize(results, options))
    if options.json_path is not None:
        options.json_path.write_text(json.dumps({
            'options': {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(options).items()},
            'runs': [{**dataclasses.asdict(r), 'rate': r.rate, 'cpu_ms_per_object': r.cpu_ms_per_object,
                      'calls_per_object': r.calls_per_object,
                      'patches_per_object': r.patches_per_object, 'other_per_object': r.other_per_object,
                      'patch_share': r.patch_share} for r in results],
        }, indent=2))
    return 0


if __name__ == '__main__':
    sys.exit(main())
