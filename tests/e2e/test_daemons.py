"""
Daemons and timers on the real control plane: they tick on real objects, and stop when the object is
deleted (the deletion waits for them), when it stops matching the filters, and when the operator exits.

That a timer does not tick any more is seen against the operator's own clock: the timer of another
object (``clock``), at the same interval, ticks on meanwhile.
"""
from __future__ import annotations

import time
from pathlib import Path

from kopf.testing import KubeAPI
from tests.e2e.harness import OperatorProcess, read_calls


def configmap(name: str, **labels: str) -> dict[str, object]:
    return {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': name, 'labels': labels}}


def events(calls: Path, handler: str, event: str, name: str) -> list[dict[str, object]]:
    return [c for c in read_calls(calls) if (c['handler'], c['event'], c['name']) == (handler, event, name)]


def ticks_of_another_timer(operator: OperatorProcess, calls: Path, count: int) -> None:
    """Wait until the timer of the object ``clock`` has ticked so often more: a second or more at 0.5 s."""
    already = len(events(calls, 'pinger', 'tick', 'clock'))
    operator.wait(lambda: len(events(calls, 'pinger', 'tick', 'clock')) >= already + count,
                  what=f"{count} more ticks of the other object's timer")


def test_daemons_and_timers_tick_and_stop_on_deletion_mismatch_and_exit(
        kube: KubeAPI, namespace: str, operators, tmp_path: Path):
    calls = tmp_path / 'calls.jsonl'
    operator = operators('daemons.py', E2E_CALLS=str(calls))
    operator.wait_for_output("Serving")
    path = f'/api/v1/namespaces/{namespace}/configmaps'
    kube.create(path, configmap('a', **{'e2e-daemons': 'on'}))
    kube.create(path, configmap('b', **{'e2e-daemons': 'on', 'stubborn': 'yes'}))
    kube.create(path, configmap('c', **{'e2e-daemons': 'on'}))
    kube.create(path, configmap('quiet', **{'e2e-daemons': 'off'}))
    kube.create(path, configmap('clock', **{'e2e-daemons': 'on'}))

    # Ticks on real objects; the timer's patches land on them.
    for name in ['a', 'b', 'c']:
        for handler in ['watcher', 'worker']:
            operator.wait(lambda h=handler, n=name: len(events(calls, h, 'tick', n)) >= 2,
                          what=f"{handler} ticking for {name}")
    operator.wait(lambda: int(kube.get(f'{path}/a')['metadata'].get('annotations', {}).get('e2e-pings', 0)) >= 2,
                  what="the timer's patches on the object")
    assert 'kopf.zalando.org/KopfFinalizerMarker' in kube.get(f'{path}/a')['metadata']['finalizers']
    assert not [c for c in read_calls(calls) if c['name'] == 'quiet']

    # Deletion: the daemons are stopped, and the object stays until they have exited.
    kube.delete(f'{path}/a')
    held = operator.wait(lambda: events(calls, 'watcher', 'stop', 'a'), what="the async daemon stopped")
    assert held[0]['reason'] == 'RESOURCE_DELETED'
    pending = kube.find(f'{path}/a')
    assert pending is not None and pending['metadata'].get('deletionTimestamp')  # the worker still tidies up
    operator.wait(lambda: kube.find(f'{path}/a') is None, what="the deletion of a")
    exited = events(calls, 'worker', 'stop', 'a')
    assert exited and exited[0]['reason'] == 'RESOURCE_DELETED'  # recorded before the object was gone
    ticks = len(events(calls, 'pinger', 'tick', 'a'))
    ticks_of_another_timer(operator, calls, 3)
    assert len(events(calls, 'pinger', 'tick', 'a')) == ticks

    # A daemon that ignores its stop flag is abandoned after its cancellation_timeout; the deletion proceeds.
    kube.delete(f'{path}/b')
    operator.wait(lambda: kube.find(f'{path}/b') is None, what="the deletion of b despite the stubborn daemon")
    warnings = [line for line in operator.output.splitlines() if "Daemon 'stubborn'" in line and 'WARNING' in line]
    assert len(warnings) == 1, warnings
    assert f'[{namespace}/b]' in warnings[0] and 'cancellation_timeout of 1.0s' in warnings[0]

    # Stops matching the label filter: the daemons and the timer stop, the object stays.
    kube.patch(f'{path}/c', {'metadata': {'labels': {'e2e-daemons': 'off'}}})
    stops = operator.wait(lambda: events(calls, 'watcher', 'stop', 'c') and events(calls, 'worker', 'stop', 'c'),
                          what="the daemons of c stopped on the mismatch")
    assert {c['reason'] for c in read_calls(calls) if c['event'] == 'stop' and c['name'] == 'c'} == \
        {'FILTERS_MISMATCH'}
    assert stops
    ticks = len(events(calls, 'pinger', 'tick', 'c'))
    ticks_of_another_timer(operator, calls, 3)
    assert len(events(calls, 'pinger', 'tick', 'c')) == ticks
    assert kube.find(f'{path}/c') is not None

    # Matching again: started again; then the operator's exit stops them all, threads included.
    kube.patch(f'{path}/c', {'metadata': {'labels': {'e2e-daemons': 'on'}}})
    operator.wait(lambda: len(events(calls, 'worker', 'start', 'c')) == 2 and
                  len(events(calls, 'watcher', 'start', 'c')) == 2, what="the daemons of c started again")
    began = time.monotonic()
    assert operator.stop(timeout=15) == 0
    assert time.monotonic() - began < 8
    final = [c for c in read_calls(calls) if c['event'] == 'stop' and c['name'] == 'c'][-2:]
    assert {c['handler'] for c in final} == {'watcher', 'worker'}
    assert {c['reason'] for c in final} == {'OPERATOR_EXITING'}
