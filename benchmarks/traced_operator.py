"""
This framework's ``kopf run``, observable from outside: for ``benchmarks/memory.py``.

With ``tracemalloc`` on (``$BENCH_MEMORY_FRAMES`` frames; 0: off), it dumps a
snapshot and a census of live objects into ``$BENCH_MEMORY_SNAPSHOTS`` on
SIGUSR1, and gives the allocator's free memory back to the system on SIGUSR2;
with ``$BENCH_PROFILE``, it writes cProfile's statistics there when it exits.
It imports nothing beyond what the operator itself needs, so that its memory
is the operator's.
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import cProfile
import gc
import json
import os
import signal
import sys
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path

SNAPSHOT_DIR_ENV = 'BENCH_MEMORY_SNAPSHOTS'
FRAMES_ENV = 'BENCH_MEMORY_FRAMES'
MALLOC_STATS_ENV = 'BENCH_MEMORY_MALLOC_STATS'
PROFILE_ENV = 'BENCH_PROFILE'  # a file for cProfile's statistics of the whole run


REGIONS_ENV = 'BENCH_MEMORY_REGIONS'  # also report the objects in memory regions that were not used when ready
REGION_BITS = 20  # 1 MiB, the size of pymalloc's arenas
ARENAS_ENV = 'BENCH_MEMORY_ARENAS'  # also walk pymalloc's pools and name what lives in sparse arenas


def _live_objects() -> dict[int, object]:
    """Every object reachable from those the garbage collector tracks, by address (strings, numbers, ... too)."""
    found: dict[int, object] = {}
    stack = list(gc.get_objects())
    while stack:
        obj = stack.pop()
        if id(obj) in found:
            continue
        found[id(obj)] = obj
        stack.extend(ref for ref in gc.get_referents(obj) if id(ref) not in found and not gc.is_tracked(ref))
    return found


def regions(ready: set[int] | None) -> tuple[set[int], list[tuple[str, int]]]:
    """
    The 1 MiB regions that live objects occupy; and, given those of the ready state, what lives in the new ones.

    Memory that pymalloc took for a burst of work goes back to the system only
    when a whole arena is free: the objects in regions that were not used when
    the operator was ready are what keeps them (allocations of C code that are
    no objects, e.g. free lists and the tables of long-lived dicts, are not seen).
    """
    objects = _live_objects()
    used = {address >> REGION_BITS for address in objects}
    if ready is None:
        return used, []
    counts: collections.Counter[str] = collections.Counter()
    for address, obj in objects.items():
        if address >> REGION_BITS not in ready:
            trace = tracemalloc.get_object_traceback(obj)
            where = ' <- '.join(f"{Path(f.filename).name}:{f.lineno}" for f in list(trace or [])[:3])
            counts[f"{type(obj).__qualname__} at {where or '?'}"] += 1
    return used, counts.most_common(40)


def census() -> dict[str, int]:
    """Live objects tracked by the garbage collector, by type name."""
    counts: collections.Counter[str] = collections.Counter()
    for obj in gc.get_objects():
        counts[type(obj).__qualname__] += 1
    return dict(counts)


_READY_REGIONS: set[int] = set()


def _dump(directory: Path) -> None:
    index = len(list(directory.glob('snapshot-*.done')))
    gc.collect()
    in_new_regions: list[tuple[str, int]] = []
    if os.environ.get(REGIONS_ENV) and index != 1:  # ready and idle only: it takes a while
        used, in_new_regions = regions(_READY_REGIONS if index else None)
        if not index:
            _READY_REGIONS.update(used)
    if tracemalloc.is_tracing():
        tracemalloc.take_snapshot().dump(str(directory / f'snapshot-{index}.bin'))
    tasks = 0
    with contextlib.suppress(RuntimeError):
        tasks = len(asyncio.all_tasks())
    details = {'census': census(), 'tasks': tasks, 'traced': tracemalloc.get_traced_memory(),
               'in_new_regions': in_new_regions}
    if os.environ.get(ARENAS_ENV):
        from benchmarks import arenas  # only when asked: it is no part of the operator
        details['arenas'] = arenas.summary(arenas.walk())
    (directory / f'snapshot-{index}.json').write_text(json.dumps(details))
    if os.environ.get(MALLOC_STATS_ENV):
        print(f"=== pymalloc statistics at snapshot {index}", file=sys.stderr, flush=True)
        sys._debugmallocstats()  # into the operator's log
    (directory / f'snapshot-{index}.done').touch()


def _trim(directory: Path) -> None:
    """Give the allocator's free memory back to the system, to tell free-but-kept memory from live."""
    from kopf._runtime import allocation
    gc.collect()
    allocation.release_free_memory()
    (directory / 'trimmed.done').touch()


def main(argv: Sequence[str]) -> None:
    """``kopf run`` of this framework, with tracemalloc on and a snapshot dumped on SIGUSR1."""
    frames = int(os.environ.get(FRAMES_ENV, '1'))
    if frames:
        tracemalloc.start(frames)
    directory = Path(os.environ[SNAPSHOT_DIR_ENV])
    signal.signal(signal.SIGUSR1, lambda *_: _dump(directory))
    signal.signal(signal.SIGUSR2, lambda *_: _trim(directory))
    from kopf.cli import main as kopf_main
    profile_path = os.environ.get(PROFILE_ENV)
    if not profile_path:
        kopf_main(list(argv), standalone_mode=True)
        return
    profiler = cProfile.Profile(time.process_time)  # CPU time: waiting costs nothing
    profiler.enable()
    try:
        kopf_main(list(argv), standalone_mode=True)
    finally:
        profiler.disable()
        profiler.dump_stats(profile_path)


if __name__ == '__main__':
    main(sys.argv[1:])
