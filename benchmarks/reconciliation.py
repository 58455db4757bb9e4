"""
Benchmark: ``examples/10-reconciliation`` written both ways, repairing a child side by side on the local control plane.

The released Kopf runs ``kopf_way.py`` (create/update/resume handlers, a
polling timer, and an event handler on the children, with the official
``kubernetes`` client); this framework runs ``example.py`` (one
``@kopf.on.reconcile`` with ``owns=['configmaps']`` and ``kopf.apply``).
Each runs alone, ``kopf run --standalone -n NAMESPACE``, in a fresh
namespace of one local kube-apiserver + etcd, with one KopfExample
(``examples/obj.yaml``) and its ConfigMap. Then, ``--repairs`` times each:

* **deletion**: the ConfigMap is deleted by hand;
* **edit**: its ``data.items`` is changed by hand (a merge-patch);

and the time from the hand's request to the ConfigMap being as the spec
says again is measured (polled every 20 ms). The API requests of a repair
are the server's own count (``apiserver_request_total``) from before the
hand's request until ``--settle`` seconds after the repair (so that the
echoes of the repair count too), for ConfigMaps, KopfExamples and Events,
without the benchmark's own requests. Last, the operator is left alone
for ``--idle`` seconds: the requests it makes meanwhile, per minute, are
the cost of watching for drift, and its resident memory is read then. With
``--owners N``, N-1 more KopfExamples (and their ConfigMaps) are there from
the start: the memory that the watched children cost (the requests counted
per repair then include what the other objects cost meanwhile). The lines of code are
those of the files, without blank lines, comments and docstrings.

Run from the repository root (the first run installs the released Kopf with
the ``kubernetes`` client into ``~/.cache/kopf-peers/``)::

    .venv/bin/python -m benchmarks.reconciliation --repairs 10 --idle 60
"""
from __future__ import annotations

import argparse
import ast
import asyncio
import collections
import contextlib
import dataclasses
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tokenize
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # for ``python benchmarks/reconciliation.py``
    sys.path.insert(0, str(REPO))

from benchmarks import apimetrics, procstats, sidebyside  # noqa: E402
from kopf.testing import ControlPlane, KubeAPI  # noqa: E402
from tests.e2e import peers  # noqa: E402

EXAMPLE = REPO / 'examples' / '10-reconciliation'
CRD = yaml.safe_load((REPO / 'examples' / 'crd.yaml').read_text())
OBJ = yaml.safe_load((REPO / 'examples' / 'obj.yaml').read_text())
NAME = OBJ['metadata']['name']
CHILD = f"{NAME}-data"
DESIRED = {'field': str(OBJ['spec']['field']), 'items': ','.join(OBJ['spec']['items'])}
COUNTED = {('', 'configmaps'), ('kopf.dev', 'kopfexamples'), ('', 'events'), ('events.k8s.io', 'events')}
POLL = 0.02


@dataclasses.dataclass(frozen=True)
class Options:
    repairs: int = 10
    owners: int = 1
    idle: float = 60.0
    settle: float = 2.0
    peer: str = '1.45.2'
    frameworks: tuple[str, ...] = ('kopf', 'ours')
    logs: Path | None = None


@dataclasses.dataclass(frozen=True)
class Framework:
    name: str
    argv: tuple[str, ...]
    file: Path
    env: tuple[tuple[str, str], ...]


@dataclasses.dataclass
class Result:
    framework: str
    lines: int
    repairs: dict[str, list[float]] = dataclasses.field(default_factory=dict)  # seconds, by kind
    requests: dict[str, list[collections.Counter[str]]] = dataclasses.field(default_factory=dict)  # per repair
    idle: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)  # per minute
    rss: int = 0
    owners: int = 1
    errors: int = 0


def code_lines(path: Path) -> int:
    """Lines with code: no blank lines, comments or docstrings."""
    source = path.read_text()
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, 'body', None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            docstrings.update(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
    lines: set[int] = set()
    skipped = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
               tokenize.ENDMARKER}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in skipped:
            lines.update(range(token.start[0], token.end[0] + 1))
    return len(lines - docstrings)


def frameworks(options: Options) -> list[Framework]:
    found: list[Framework] = []
    for name in options.frameworks:
        if name == 'kopf':
            binary = peers.ensure(options.peer, packages=('kubernetes',))
            found.append(Framework(f'kopf {options.peer}', (str(binary),), EXAMPLE / 'kopf_way.py',
                                   tuple(peers.clean_env().items())))
        elif name == 'ours':
            env = {**os.environ, 'PYTHONPATH': str(REPO)}
            found.append(Framework('ours', (sys.executable, '-m', 'kopf'), EXAMPLE / 'example.py', tuple(env.items())))
        else:
            raise SystemExit(f"Unknown framework {name!r}: 'kopf' or 'ours'.")
    return found


def counted(delta: apimetrics.Counts) -> collections.Counter[str]:
    """The requests of the operator's resources, by verb and resource (e.g. ``PATCH configmaps``)."""
    result: collections.Counter[str] = collections.Counter()
    for kind, value in delta.items():
        if (kind.group, kind.resource) in COUNTED and kind.verb != 'WATCH':
            result[f"{kind.verb} {kind.resource}" + (f"/{kind.subresource}" if kind.subresource else '')] += value
    return result


class Hand:
    """The benchmark's own client: it breaks the child and watches it being repaired, counting its requests."""

    def __init__(self, api: sidebyside.Api, namespace: str) -> None:
        self.api = api
        self.path = f'/api/v1/namespaces/{namespace}/configmaps/{CHILD}'

    async def child(self) -> dict[str, Any] | None:
        self.api.count('GET', '', 'configmaps')
        found = await self.api.request('GET', self.path, ok=(200, 404))
        return found if found and found.get('kind') == 'ConfigMap' else None

    async def repaired(self, *, timeout: float = 120) -> float:
        deadline = time.monotonic() + timeout
        while True:
            child = await self.child()
            if child is not None and {k: child.get('data', {}).get(k) for k in DESIRED} == DESIRED:
                return time.monotonic()
            if time.monotonic() > deadline:
                raise sidebyside.BenchmarkError(f"The child was not repaired within {timeout}s: {child!r}")
            await asyncio.sleep(POLL)

    async def all_repaired(self, namespace: str, count: int, *, timeout: float = 600) -> None:
        """Wait until every owner has its child as the spec says."""
        deadline = time.monotonic() + timeout
        while True:
            self.api.count('LIST', '', 'configmaps')
            items = (await self.api.request('GET', f'/api/v1/namespaces/{namespace}/configmaps'))['items']
            if sum(1 for item in items if item.get('data') == DESIRED) >= count:
                return
            if time.monotonic() > deadline:
                raise sidebyside.BenchmarkError(f"Not all {count} children were made within {timeout}s.")
            await asyncio.sleep(0.5)

    async def delete(self) -> None:
        self.api.count('DELETE', '', 'configmaps')
        await self.api.request('DELETE', self.path)

    async def edit(self) -> None:
        self.api.count('PATCH', '', 'configmaps')
        await self.api.request('PATCH', self.path, {'data': {'items': 'edited-by-hand'}},
                               content_type='application/merge-patch+json')


@contextlib.contextmanager
def running(framework: Framework, *, namespace: str, kubeconfig: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    argv = [*framework.argv, 'run', '--standalone', '-n', namespace, str(framework.file)]
    with log.open('wb') as output:
        process = subprocess.Popen(argv, env={**dict(framework.env), 'KUBECONFIG': str(kubeconfig)},
                                   stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   cwd=log.parent, start_new_session=True)
        try:
            yield process
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, 15)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait()


async def measure(api: sidebyside.Api, plane: ControlPlane, framework: Framework, options: Options, *,
                  logs: Path, report: Any) -> Result:
    namespace = f"bench-reconcile-{framework.name.split()[0]}-{uuid.uuid4().hex[:6]}"
    await api.ensure_namespace(namespace)
    hand = Hand(api, namespace)
    result = Result(framework=framework.name, lines=code_lines(framework.file), owners=options.owners)
    assert plane.kubeconfig is not None
    log = logs / f"{namespace}.log"
    with running(framework, namespace=namespace, kubeconfig=plane.kubeconfig, log=log) as process:
        collection = f'/apis/kopf.dev/v1/namespaces/{namespace}/kopfexamples'

        async def create(name: str) -> None:
            await api.request('POST', collection, {**OBJ, 'metadata': {**OBJ['metadata'], 'name': name}})

        await sidebyside._concurrently(create, [NAME] + [f"{NAME}-{i}" for i in range(1, options.owners)],
                                       concurrency=10)
        await hand.repaired()
        await hand.all_repaired(namespace, options.owners)
        await asyncio.sleep(options.settle)
        for kind, breaking in (('deletion', hand.delete), ('edit', hand.edit)):
            for _ in range(options.repairs):
                if process.poll() is not None:
                    raise sidebyside.BenchmarkError(f"{framework.name} has exited; see {log}.")
                before, own = await api.metrics(), collections.Counter(api.own)
                began = time.monotonic()
                await breaking()
                result.repairs.setdefault(kind, []).append(await hand.repaired() - began)
                await asyncio.sleep(options.settle)
                delta = apimetrics.delta(await api.metrics(), before)
                mine = apimetrics.delta(api.own, own)
                result.requests.setdefault(kind, []).append(counted(apimetrics.delta(delta, mine)))
        before = await api.metrics()
        await asyncio.sleep(options.idle)
        idle = counted(apimetrics.delta(await api.metrics(), before))
        result.idle = collections.Counter({k: round(v * 60 / options.idle, 1) for k, v in idle.items()})
        result.rss = procstats.memory(process.pid)[0]
    text = log.read_text(errors='replace')
    result.errors = sum(1 for line in text.splitlines() if 'ERROR' in line or 'Traceback' in line)
    report(format_result(result))
    return result


def _a(kind: str) -> str:
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float('nan')


def _per_repair(counts: list[collections.Counter[str]]) -> tuple[float, str]:
    total = sum(sum(c.values()) for c in counts) / max(len(counts), 1)
    kinds: collections.Counter[str] = collections.Counter()
    for c in counts:
        kinds.update(c)
    detail = ', '.join(f"{kind} {value / max(len(counts), 1):g}" for kind, value in sorted(kinds.items()))
    return total, detail


def format_result(r: Result) -> str:
    lines = [f"{r.framework}: {r.lines} lines of code, RSS {r.rss / 1024 / 1024:.1f} MiB with {r.owners} owner(s), "
             f"{r.errors} error line(s)"]
    for kind, times in r.repairs.items():
        total, detail = _per_repair(r.requests[kind])
        lines.append(f"  repair after {_a(kind)}: median {_median(times) * 1000:.0f} ms "
                     f"(max {max(times) * 1000:.0f} ms); {total:g} requests per repair ({detail})")
    lines.append(f"  idle: {sum(r.idle.values()):g} requests per minute"
                 + (f" ({', '.join(f'{k} {v:g}' for k, v in sorted(r.idle.items()))})" if r.idle else ''))
    return '\n'.join(lines)


def summarize(results: Sequence[Result]) -> str:
    """A Markdown table of the figures, one column per framework."""
    def row(title: str, cells: Iterator[str]) -> str:
        return f"| {title} | " + ' | '.join(cells) + ' |'

    rows = [row('', (r.framework for r in results)), '|---' * (len(results) + 1) + '|',
            row('lines of code', (str(r.lines) for r in results))]
    for kind in ('deletion', 'edit'):
        rows.append(row(f'time to repair after {_a(kind)} (median / max)', (
            f"{_median(r.repairs.get(kind, [])) * 1000:.0f} / {max(r.repairs.get(kind, [0])) * 1000:.0f} ms"
            for r in results)))
        rows.append(row(f'API requests per repair after {_a(kind)}', (
            f"{_per_repair(r.requests.get(kind, []))[0]:g}" for r in results)))
    rows.append(row('API requests per minute while idle', (f"{sum(r.idle.values()):g}" for r in results)))
    rows.append(row('resident memory (RSS) while idle', (f"{r.rss / 1024 / 1024:.1f} MiB with {r.owners} owner(s)"
                                                          for r in results)))
    return '\n'.join(rows)


async def benchmark(plane: ControlPlane, options: Options, *, report: Any = print) -> list[Result]:
    KubeAPI(plane).apply_crd(CRD)
    api = sidebyside.Api(plane.server, plane.ssl_context())
    logs = options.logs or Path(tempfile.mkdtemp(prefix='kopf-reconciliation-'))
    logs.mkdir(parents=True, exist_ok=True)
    try:
        return [await measure(api, plane, framework, options, logs=logs, report=report)
                for framework in frameworks(options)]
    finally:
        await api.close()


def parse_args(argv: Sequence[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0] if __doc__ else None)
    parser.add_argument('--repairs', type=int, default=Options.repairs, help="repairs of each kind per framework")
    parser.add_argument('--owners', type=int, default=Options.owners, help="KopfExamples with a child each")
    parser.add_argument('--idle', type=float, default=Options.idle, help="seconds left alone at the end")
    parser.add_argument('--settle', type=float, default=Options.settle, help="seconds after each repair")
    parser.add_argument('--peer', default=Options.peer, help="the released Kopf's version")
    parser.add_argument('--frameworks', default=','.join(Options.frameworks), help="kopf,ours")
    parser.add_argument('--logs', type=Path, default=None, help="where the operators log (default: a temp dir)")
    args = parser.parse_args(argv)
    return Options(repairs=args.repairs, owners=args.owners, idle=args.idle, settle=args.settle, peer=args.peer,
                   frameworks=tuple(args.frameworks.split(',')), logs=args.logs)


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_args(argv)
    with ControlPlane() as plane:
        results = asyncio.run(benchmark(plane, options))
    print()
    print(summarize(results))
    return 0


if __name__ == '__main__':
    sys.exit(main())
