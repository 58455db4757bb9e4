"""
The operator of the side-by-side benchmark: H quick create handlers, nothing else.

The very same file runs under this framework and under the released Kopf
(``kopf run --standalone -n NAMESPACE quick_operator.py``), so it uses only
the public API that both share. Configured by environment variables:

* ``BENCH_HANDLERS``: how many create handlers (default 3).
* ``BENCH_LIFECYCLE``: the name of a ``kopf.lifecycles`` function (default: the framework's default).
* ``BENCH_HANDLER_KIND``: ``async`` (default) or ``sync`` (run in the framework's thread pool).
* ``BENCH_RESOURCE``: ``group/version/plural`` (default ``bench.kopf.dev/v1/kopfbenchmarks``).
* ``BENCH_EVENTS``: ``off`` to stop posting log messages as Kubernetes Events (default ``on``).
* ``BENCH_CALLS``: a file where the number of handler calls is written when the operator exits.
* ``BENCH_WORKER_LIMIT``: ``settings.batching.worker_limit``, how many objects are handled at once
  (default: the framework's default).
* ``BENCH_UPDATES``: a file; if given, an update handler notes, for every change that carries a
  ``spec.stamp`` (the sender's ``time.time()``), the object's name, the stamp and when it was called;
  these and the update handler's calls are written there as JSON when the operator exits (the scale
  benchmark's steady load).

The handlers return nothing, so that no handler result is written into the
status: what is measured is the framework's own bookkeeping per object.
"""
import json
import os
import time

import kopf

HANDLERS = int(os.environ.get('BENCH_HANDLERS', '3'))
LIFECYCLE = os.environ.get('BENCH_LIFECYCLE', '')
HANDLER_KIND = os.environ.get('BENCH_HANDLER_KIND', 'async')
GROUP, VERSION, PLURAL = os.environ.get('BENCH_RESOURCE', 'bench.kopf.dev/v1/kopfbenchmarks').split('/')
EVENTS = os.environ.get('BENCH_EVENTS', 'on') != 'off'
CALLS_FILE = os.environ.get('BENCH_CALLS', '')
WORKER_LIMIT = os.environ.get('BENCH_WORKER_LIMIT', '')
UPDATES_FILE = os.environ.get('BENCH_UPDATES', '')
calls = 0
latencies = []
update_calls = 0

if LIFECYCLE:
    kopf.set_default_lifecycle(getattr(kopf.lifecycles, LIFECYCLE))

if not EVENTS:
    @kopf.on.startup()
    def no_events(settings, **_):
        settings.posting.enabled = False


if WORKER_LIMIT:
    @kopf.on.startup()
    def limit_workers(settings, **_):
        settings.batching.worker_limit = int(WORKER_LIMIT)


if CALLS_FILE:
    @kopf.on.cleanup()
    def write_calls(**_):
        with open(CALLS_FILE, 'w') as f:
            f.write(str(calls))


async def quick_async(**_):
    global calls
    calls += 1


def quick_sync(**_):
    global calls
    calls += 1


for index in range(HANDLERS):
    fn = quick_async if HANDLER_KIND == 'async' else quick_sync
    kopf.on.create(GROUP, VERSION, PLURAL, id=f'quick{index}')(fn)


if UPDATES_FILE:
    @kopf.on.update(GROUP, VERSION, PLURAL, id='stamped')
    async def stamped(spec, name, **_):
        global update_calls
        update_calls += 1
        stamp = spec.get('stamp')
        if stamp is not None:
            latencies.append((name, float(stamp), time.time()))

    @kopf.on.cleanup()
    def write_latencies(**_):
        with open(UPDATES_FILE, 'w') as f:
            json.dump({'calls': update_calls, 'latencies': latencies}, f)
