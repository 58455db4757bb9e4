"""
The operator of ``benchmarks/replicas.py``: one CPU-bound synchronous handler per object.

``BENCH_ITERATIONS`` sets the pure-Python work of one call (the benchmark
calibrates it to ~20 ms); every call appends ``{name, pid, t}`` to
``BENCH_CALLS``. The work starts only once the file ``BENCH_GO`` exists, so
that creating the objects is not part of what is measured. ``BENCH_LEASE``, ``BENCH_RENEW``, ``BENCH_RETRY`` set the
peering timing (default: Kubernetes' own, 15 / 10 / 2 seconds).
"""
import json
import os
import time

import kopf

RESOURCE = os.environ.get('BENCH_RESOURCE', 'kopfexamples')
ITERATIONS = int(os.environ.get('BENCH_ITERATIONS', '0'))
CALLS = os.environ.get('BENCH_CALLS', os.devnull)
GO = os.environ.get('BENCH_GO', '')


def burn(iterations: int) -> int:
    total = 0
    for i in range(iterations):
        total += i * i % 7
    return total


@kopf.on.startup()
def configure(config, **_):
    config.peering.lease_duration = int(os.environ.get('BENCH_LEASE', '15'))
    config.peering.renew_deadline = float(os.environ.get('BENCH_RENEW', '10'))
    config.peering.retry_period = float(os.environ.get('BENCH_RETRY', '2'))
    config.posting.enabled = False  # Events are not what is measured here


@kopf.on.create(RESOURCE)
def work(name, **_):
    while GO and not os.path.exists(GO):
        time.sleep(0.01)
    burn(ITERATIONS)
    line = json.dumps({'name': name, 'pid': os.getpid(), 't': time.time()}) + '\n'
    fd = os.open(CALLS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
