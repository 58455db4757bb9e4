"""
The operator of the soak (``benchmarks/soak.py``), run with ``kopf run``.

Handlers: create, update (of ``spec.gen``), delete, and a timer per object.
The create and update handlers fail once (a ``TemporaryError``) for one object
change in ten, chosen by a hash, so that retries happen all the time but
every change finishes. Every call is one JSON line in ``$SOAK_CALLS``:
the handler, the object's uid, ``spec.gen``, the retry, the wall time, and
for first attempts the latency from the driver's change (``spec.stamp``).

Every ``$SOAK_INTERVAL`` seconds (60) a sampler task appends to
``$SOAK_SAMPLES`` what only the process itself knows: its resident memory,
open file descriptors, asyncio tasks, per-object workers and how many of
them hold an event not yet taken (the queue depth), and the percentiles of
the change-to-handler latency of the calls since the previous sample.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import pathlib
import time
from typing import Any

import kopf

GROUP, VERSION, PLURAL = 'soak.kopf.dev', 'v1', 'soaks'
CALLS = pathlib.Path(os.environ['SOAK_CALLS'])
SAMPLES = pathlib.Path(os.environ['SOAK_SAMPLES'])
INTERVAL = float(os.environ.get('SOAK_INTERVAL', '60'))
TIMER_INTERVAL = float(os.environ.get('SOAK_TIMER_INTERVAL', '60'))
FAIL_ONE_IN = int(os.environ.get('SOAK_FAIL_ONE_IN', '10'))

_latencies: list[float] = []
_calls = CALLS.open('a', buffering=1)


def _record(handler: str, body: kopf.Body, retry: int, **extra: Any) -> None:
    now = time.time()
    spec = body.get('spec', {})
    line = {'h': handler, 'uid': body.metadata.uid, 'name': body.metadata.name, 'gen': spec.get('gen'),
            'retry': retry, 't': now, 'pid': os.getpid(), **extra}
    if retry == 0 and handler in ('create', 'update') and spec.get('stamp'):
        line['latency'] = now - float(spec['stamp'])
        _latencies.append(line['latency'])
    _calls.write(json.dumps(line) + '\n')


def _fails(body: kopf.Body, retry: int) -> bool:
    """One change in FAIL_ONE_IN fails on its first attempt: decided by a hash, the same after a restart."""
    digest = hashlib.sha1(f"{body.metadata.uid}/{body.get('spec', {}).get('gen')}".encode()).digest()
    return retry == 0 and digest[0] % FAIL_ONE_IN == 0


@kopf.on.create(GROUP, VERSION, PLURAL)
def create(body: kopf.Body, retry: int, **_: Any) -> None:
    failing = _fails(body, retry)
    _record('create', body, retry, failing=failing)
    if failing:
        raise kopf.TemporaryError("failing on purpose, once", delay=2)


@kopf.on.update(GROUP, VERSION, PLURAL, field='spec.gen')
def update(body: kopf.Body, retry: int, old: Any, new: Any, **_: Any) -> None:
    failing = _fails(body, retry)
    _record('update', body, retry, failing=failing, old=old, new=new)
    if failing:
        raise kopf.TemporaryError("failing on purpose, once", delay=2)


@kopf.on.delete(GROUP, VERSION, PLURAL)
def delete(body: kopf.Body, retry: int, **_: Any) -> None:
    _record('delete', body, retry)


@kopf.timer(GROUP, VERSION, PLURAL, interval=TIMER_INTERVAL)
def tick(body: kopf.Body, **_: Any) -> None:
    _record('timer', body, 0)


def _percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def _workers() -> tuple[int, int]:
    """The per-object workers, and how many of them have an event waiting (read from their frames)."""
    workers = depth = 0
    for task in asyncio.all_tasks():
        if not task.get_name().startswith('kopf worker '):
            continue
        workers += 1
        frame = getattr(task.get_coro(), 'cr_frame', None)
        mailbox = frame.f_locals.get('mailbox') if frame is not None else None
        if getattr(mailbox, 'latest', None) is not None:
            depth += 1
    return workers, depth


def _sample(started: float) -> dict[str, Any]:
    status = pathlib.Path('/proc/self/status').read_text()
    rss = next(int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith('VmRSS:'))
    workers, depth = _workers()
    latencies = list(_latencies)
    _latencies.clear()
    return {'t': time.time(), 'pid': os.getpid(), 'uptime': time.monotonic() - started, 'rss': rss,
            'fds': len(os.listdir('/proc/self/fd')), 'tasks': len(asyncio.all_tasks()),
            'workers': workers, 'queue': depth, 'calls': len(latencies),
            'p50': _percentile(latencies, 0.50), 'p99': _percentile(latencies, 0.99),
            'max': max(latencies) if latencies else None}


def _append(line: str) -> None:
    with SAMPLES.open('a') as f:  # a line a minute: opened each time, so the file may be moved meanwhile
        f.write(line + '\n')


async def _sampler() -> None:
    started = time.monotonic()
    while True:
        await asyncio.sleep(INTERVAL)
        _append(json.dumps(_sample(started)))


_tasks: set[asyncio.Task[None]] = set()


@kopf.on.startup()
async def start_sampler(**_: Any) -> None:
    _tasks.add(asyncio.get_running_loop().create_task(_sampler(), name='soak sampler'))
