"""
Benchmark: what the recording of metrics costs per object, in the process alone (no API server).

The calls that the operator makes on its recorder for one object of the
side-by-side benchmark (``sidebyside.py``: three quick create handlers) are
made here in a loop, as they are made there: two watch events (the object's
ADDED, and the MODIFIED of the operator's own patch), two handling cycles
(the creation with its three handler calls and its patch, then the ``noop``
of the patch's own event), the queue's notes, and one API request (the
PATCH). Printed: microseconds of CPU per object with the null recorder (the
default: metrics off), with the Prometheus recorder, and with it while
``/metrics`` is rendered every 10,000 objects; the share of a given CPU
budget per object (``--budget-ms``, e.g. the side-by-side figure) is shown.

    .venv/bin/python -m benchmarks.recording --objects 20000 --budget-ms 2.3
"""
from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from kopf._observability import recording  # noqa: E402
from kopf._observability.recording import Recorder  # noqa: E402
from kopf._structs.resources import Resource  # noqa: E402

RESOURCE = Resource('bench.kopf.dev', 'v1', 'kopfbenchmarks')
BODY = {'metadata': {'name': 'obj-00001', 'namespace': 'bench', 'uid': 'uid-1'}}
PATCH = {'metadata': {'annotations': {'kopf.zalando.org/last-handled-configuration': '{"spec":{}}\n'}},
         'status': {'kopf': {'progress': None}}}
URL = 'https://127.0.0.1:6443/apis/bench.kopf.dev/v1/namespaces/bench/kopfbenchmarks/obj-00001'


def one_object(recorder: Recorder, index: int) -> None:
    """The recorder's calls for one object's creation, as the operator makes them."""
    key = f'uid-{index}'
    watch = recorder.watch(RESOURCE, 'bench') if index == 0 else _streams[recorder][0]
    queue = recorder.queue(RESOURCE) if index == 0 else _streams[recorder][1]
    if index == 0:
        _streams[recorder] = (watch, queue)
    for event, cause, handlers in (('ADDED', 'create', ('quick0', 'quick1', 'quick2')), ('MODIFIED', 'noop', ())):
        watch.event(event)
        queue.arrived(key)
        queue.taken(key, woken_up=False)
        with recorder.cycle(RESOURCE, BODY, event):
            for handler_id in handlers:
                with recorder.handler(RESOURCE, cause, handler_id) as call:
                    call.ended(final=True, error=None)
            recorder.caused(cause, None)
            if handlers:
                with recorder.api_request('PATCH', URL) as request:
                    request.answered(200)
                recorder.patched(RESOURCE, PATCH)
    queue.forget(key)


_streams: dict[Recorder, tuple[object, object]] = {}


def measure(recorder: Recorder, objects: int, *, every: Callable[[], object] | None = None) -> float:
    """Microseconds of CPU per object."""
    token = recording.install(recorder)
    try:
        one_object(recorder, 0)
        started = time.process_time()
        for index in range(1, objects + 1):
            one_object(recorder, index)
            if every is not None and index % 10_000 == 0:
                every()
        return (time.process_time() - started) / objects * 1e6
    finally:
        recording.uninstall(token)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0] if __doc__ else None)
    parser.add_argument('--objects', type=int, default=20_000)
    parser.add_argument('--budget-ms', type=float, default=None, help="CPU ms per object to compare with")
    args = parser.parse_args(argv)
    from kopf._observability import metrics
    prometheus = metrics.MetricsRecorder()
    scraped = metrics.MetricsRecorder()
    figures = {
        'null (metrics off)': measure(recording.NULL, args.objects),
        'prometheus': measure(prometheus, args.objects),
        'prometheus, scraped': measure(scraped, args.objects,
                                       every=lambda: metrics.render(scraped.registry, 'text/plain')),
    }
    for name, micros in figures.items():
        share = f"  ({micros / 1000 / args.budget_ms:.1%} of {args.budget_ms} ms)" if args.budget_ms else ''
        print(f"{name:<22} {micros:8.1f} us of CPU per object{share}")
    return 0


if __name__ == '__main__':
    sys.exit(main())
