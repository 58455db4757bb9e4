"""
Benchmark: what holds memory per handled object in this framework's operator.

Runs the side-by-side benchmark's operator file under this framework on the
local control plane, in a process of its own with ``tracemalloc`` on, and
takes three snapshots of it: *ready* (a warm-up object handled, idle), *peak*
(right after the last of N objects is fully handled) and *idle* (after the
per-object workers have ended). Prints, for peak and idle against ready, the
source lines that hold the most memory (bytes and blocks per handled object),
the live objects by type (an objgraph-style census through ``gc``), the open
file descriptors (mostly HTTP connections), the asyncio tasks, and the
resident memory — of which ``tracemalloc`` sees only the Python allocations,
not those of C libraries such as OpenSSL.

Run from the repository root::

    .venv/bin/python -m benchmarks.memory --objects 1000 --handlers 3 [--frames 1] [--top 25]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import linecache
import os
import pstats
import signal
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import procstats, sidebyside  # noqa: E402
from benchmarks.traced_operator import ARENAS_ENV, FRAMES_ENV, PROFILE_ENV, REGIONS_ENV, SNAPSHOT_DIR_ENV  # noqa: E402
from kopf.testing import ControlPlane  # noqa: E402

# --------------------------------------------------------------------------------------------- #
# The driver
# --------------------------------------------------------------------------------------------- #

async def _snapshot(operator: sidebyside.OperatorProcess, directory: Path, index: int) -> dict[str, Any]:
    os.kill(operator.pid, signal.SIGUSR1)
    done = directory / f'snapshot-{index}.done'
    deadline = time.monotonic() + 300
    while not done.exists():
        operator.check_alive("a memory snapshot")
        if time.monotonic() > deadline:
            raise sidebyside.BenchmarkError("The operator did not write its memory snapshot within 300s.")
        await asyncio.sleep(0.2)
    details: dict[str, Any] = json.loads((directory / f'snapshot-{index}.json').read_text())
    rss, hwm = procstats.memory(operator.pid)
    details.update(rss=rss, hwm=hwm, fds=len(os.listdir(f'/proc/{operator.pid}/fd')))
    return details


async def measure(plane: ControlPlane, options: sidebyside.Options, directory: Path,
                  frames: int, profile: bool = False, regions: bool = False,
                  arenas: bool = False) -> list[dict[str, Any]]:
    framework = sidebyside.Framework(
        'ours', (sys.executable, '-m', 'benchmarks.traced_operator'),
        tuple({**os.environ, 'PYTHONPATH': str(REPO), SNAPSHOT_DIR_ENV: str(directory),
               FRAMES_ENV: str(frames), **({PROFILE_ENV: str(directory / 'profile.out')} if profile else {}),
               **({REGIONS_ENV: '1'} if regions else {}),
               **({ARENAS_ENV: '1', 'PYTHONMALLOC': 'pymalloc'} if arenas else {}),  # its arenas are the walk's
               }.items()))
    api = sidebyside.Api(plane.server, plane.ssl_context())
    namespace = f'memory-{os.getpid()}'
    assert plane.kubeconfig is not None
    try:
        await asyncio.to_thread(sidebyside._apply_crd, plane)
        await api.ensure_namespace(namespace)
        operator = sidebyside.OperatorProcess(framework, namespace=namespace, kubeconfig=plane.kubeconfig,
                                              log=directory / 'operator.log', options=options)
        try:
            async with sidebyside.HandledTracker(api, namespace) as tracker:
                await api.create_objects(namespace, [sidebyside.WARMUP], concurrency=1)
                handled = await sidebyside.wait_handled(tracker, operator, {sidebyside.WARMUP},
                                                        stall_timeout=options.startup_timeout,
                                                        what="the warm-up object")
                await sidebyside.wait_until_idle(operator, since=handled, settle=options.settle,
                                                 window=options.quiet_window, timeout=120)
                snapshots = [await _snapshot(operator, directory, 0)]
                names = [f'obj-{i:05d}' for i in range(options.objects)]
                creation = asyncio.create_task(api.create_objects(namespace, names,
                                                                  concurrency=options.create_concurrency))
                last = await sidebyside.wait_handled(tracker, operator, set(names),
                                                     stall_timeout=options.stall_timeout,
                                                     what="all objects to be fully handled")
                await creation
                snapshots.append(await _snapshot(operator, directory, 1))
                await sidebyside.wait_until_idle(operator, since=last, settle=options.idle_settle,
                                                 window=options.quiet_window, timeout=600)
                snapshots.append(await _snapshot(operator, directory, 2))
                os.kill(operator.pid, signal.SIGUSR2)
                while not (directory / 'trimmed.done').exists():
                    operator.check_alive("the allocator's trim")
                    await asyncio.sleep(0.1)
                snapshots[-1]['rss_trimmed'] = procstats.memory(operator.pid)[0]
            return snapshots
        finally:
            operator.stop()
    finally:
        await api.remove_namespace(namespace)
        await api.close()


def _where(frame: tracemalloc.Frame) -> str:
    filename = frame.filename
    for root in (str(REPO) + os.sep, sys.prefix + os.sep, sys.base_prefix + os.sep):
        if filename.startswith(root):
            filename = filename[len(root):]
            break
    return f"{filename}:{frame.lineno}"


def report_diff(directory: Path, label: str, index: int, objects: int, top: int, key: str) -> None:
    base = tracemalloc.Snapshot.load(str(directory / 'snapshot-0.bin'))
    snap = tracemalloc.Snapshot.load(str(directory / f'snapshot-{index}.bin'))
    stats = snap.compare_to(base, key)
    total = sum(stat.size_diff for stat in stats)
    print(f"\n== {label} vs ready: Python allocations {total / 1024 / 1024:+.1f} MB, "
          f"{total / objects:+.0f} bytes per object; the top {top} by {key}:")
    for stat in stats[:top]:
        frame = stat.traceback[0]
        code = linecache.getline(frame.filename, frame.lineno).strip()[:70]
        print(f"  {stat.size_diff / objects:>+9.0f} B/obj {stat.count_diff / objects:>+7.2f} blocks/obj  "
              f"{_where(frame)}  {code}")
        if key == 'traceback' and len(stat.traceback) > 1:
            for outer in list(stat.traceback)[1:]:
                print(f"{'':>40}<- {_where(outer)}")


def report_census(snapshots: list[dict[str, Any]], objects: int, top: int) -> None:
    ready = snapshots[0]['census']
    for label, snap in (('peak', snapshots[1]), ('idle', snapshots[2])):
        growth = {name: count - ready.get(name, 0) for name, count in snap['census'].items()}
        ranked = sorted(growth.items(), key=lambda item: -item[1])[:top]
        print(f"\n== live objects by type, {label} vs ready (per handled object):")
        print('  ' + ', '.join(f"{name} {count / objects:+.2f}" for name, count in ranked if count > 0))


def report_arenas(snapshots: list[dict[str, Any]], top: int) -> None:
    for label, snap in zip(('ready', 'peak', 'idle'), snapshots):
        walk = snap['arenas']
        print(f"\n== pymalloc at {label}: {walk['arenas']} arenas, {walk['live_mb']:.1f} MB in live blocks; "
              f"{walk['sparse_arenas']} arenas less than half used hold {walk['sparse_live_mb']:.1f} MB, of:")
        print('  ' + ', '.join(f"{kind} {count}" for kind, count in walk['in_sparse_arenas'][:top]))
        print("  held by: " + ', '.join(f"{kind} {count}" for kind, count in walk['held_by'][:top]))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="What holds memory per handled object (this framework).")
    parser.add_argument('-n', '--objects', type=int, default=1000)
    parser.add_argument('-H', '--handlers', type=int, default=3)
    parser.add_argument('--lifecycle', default='')
    parser.add_argument('--frames', type=int, default=1,
                        help="traceback depth of tracemalloc (slower if > 1; 0: no tracemalloc, only RSS)")
    parser.add_argument('--top', type=int, default=25)
    parser.add_argument('--profile', action='store_true', help="also profile the operator's CPU with cProfile")
    parser.add_argument('--regions', action='store_true',
                        help="also list the objects that live, when idle, in 1 MiB regions not used when ready "
                             "(what keeps pymalloc's arenas; slow)")
    parser.add_argument('--arenas', action='store_true',
                        help="also walk pymalloc's pools and list what lives in its sparsely used arenas "
                             "(what keeps them resident; the walk itself raises the peak figures)")
    parser.add_argument('--settle', type=float, default=sidebyside.Options.idle_settle,
                        help="seconds after the last handled object before the idle snapshot")
    parser.add_argument('--keep', type=Path, help="keep the snapshots and the log in this directory")
    args = parser.parse_args(argv)
    options = sidebyside.Options(objects=args.objects, handlers=args.handlers, lifecycle=args.lifecycle,
                                 frameworks=('ours',), idle_settle=args.settle)
    directory = args.keep or Path(tempfile.mkdtemp(prefix='kopf-memory-'))
    directory.mkdir(parents=True, exist_ok=True)

    async def run() -> list[dict[str, Any]]:
        plane = await asyncio.to_thread(ControlPlane().start)
        try:
            return await measure(plane, options, directory, args.frames, args.profile, args.regions, args.arenas)
        finally:
            sidebyside._kill_all_live()
            await asyncio.to_thread(plane.stop)

    try:
        snapshots = asyncio.run(run())
    except sidebyside.BenchmarkError as e:
        print(f"The memory benchmark has failed: {e}", file=sys.stderr)
        return 1
    mb = 1024 * 1024
    print(f"{args.objects} objects x {args.handlers} handlers; snapshots in {directory}")
    for label, snap in zip(('ready', 'peak', 'idle'), snapshots):
        print(f"  {label:<5}: RSS {snap['rss'] / mb:6.1f} MB (peak so far {snap['hwm'] / mb:6.1f} MB), "
              f"Python allocations {snap['traced'][0] / mb:6.1f} MB, {snap['fds']} fds, {snap['tasks']} tasks")
    print(f"  idle after gc.collect() and malloc_trim(0): RSS {snapshots[2]['rss_trimmed'] / mb:6.1f} MB "
          f"(the rest of the idle RSS was free memory kept by the allocator)")
    if args.frames:
        key = 'traceback' if args.frames > 1 else 'lineno'
        report_diff(directory, 'peak', 1, args.objects, args.top, key)
        report_diff(directory, 'idle', 2, args.objects, args.top, key)
    report_census(snapshots, args.objects, args.top)
    if args.regions:
        print(f"\n== idle: live objects in 1 MiB regions not used when ready (by type and allocation"
              f"{'' if args.frames else '; run with --frames 3 to see where they were allocated'}):")
        for what, count in snapshots[2]['in_new_regions'][:args.top]:
            print(f"  {count:>7}  {what}")
    if args.arenas:
        report_arenas(snapshots, args.top)
    if args.profile:
        print(f"\n== CPU profile of the whole operator run (cProfile), the top {args.top} by own time:")
        stats = pstats.Stats(str(directory / 'profile.out'), stream=sys.stdout)
        stats.sort_stats('tottime').print_stats(args.top)
    return 0


if __name__ == '__main__':
    sys.exit(main())
