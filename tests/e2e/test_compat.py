"""
Operators written for Kopf 1.x, run unchanged on the real control plane -- here and, side by side, under Kopf.

One operator per feature group (``operators/compat/``), written as Kopf's
users write them (Kopf's type names in the annotations, Kopf's options).
Where it is cheap, the same operator runs under the released Kopf 1.45.2 too
(a black box from PyPI), in a namespace of its own, through the same steps
at the same time; the test checks the documented effect from the server
side (status, children, events, finalizers) and from the handlers' own
records of their calls, and compares the call counts of both frameworks.
Where they differ on purpose, the test says so and why.

The feature groups covered elsewhere are not repeated here: indexes and the
field filters (``test_indexing.py``, also beside Kopf), admission webhooks
(``test_admission.py``), the liveness endpoint's failures and which log
messages become Events (``test_surface.py``), and our own examples
(``test_examples.py``). Probes are checked here beside Kopf once, with the
handlers.
"""
from __future__ import annotations

import collections
import datetime
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks import apimetrics
from kopf.testing import KubeAPI, wait_for
from tests.e2e import peers
from tests.e2e.harness import OPERATORS, REPO, TIMEOUT, OperatorProcess, kopf_run, read_calls

KOPF = '1.45.2'
COMPAT = OPERATORS / 'compat'
FINALIZER = 'kopf.zalando.org/KopfFinalizerMarker'

CRD: dict[str, Any] = {
    'apiVersion': 'apiextensions.k8s.io/v1',
    'kind': 'CustomResourceDefinition',
    'metadata': {'name': 'kopfcompats.kopf.dev'},
    'spec': {
        'group': 'kopf.dev',
        'scope': 'Namespaced',
        'names': {'kind': 'KopfCompat', 'plural': 'kopfcompats', 'singular': 'kopfcompat'},
        'versions': [{
            'name': 'v1', 'served': True, 'storage': True,
            'subresources': {'status': {}},
            'schema': {'openAPIV3Schema': {'type': 'object', 'properties': {
                'spec': {'type': 'object', 'x-kubernetes-preserve-unknown-fields': True},
                'status': {'type': 'object', 'x-kubernetes-preserve-unknown-fields': True},
            }}},
        }],
    },
}


@pytest.fixture(scope='module')
def crd(kube: KubeAPI) -> None:
    kube.apply_crd(CRD)


def collection(namespace: str) -> str:
    return f'/apis/kopf.dev/v1/namespaces/{namespace}/kopfcompats'


def body(name: str, **spec: Any) -> dict[str, Any]:
    return {'apiVersion': 'kopf.dev/v1', 'kind': 'KopfCompat', 'metadata': {'name': name}, 'spec': spec}


class Side:
    """One framework running one operator in a namespace of its own, with the handlers' records of calls."""

    def __init__(self, framework: str, namespace: str, calls: Path, start: Callable[[str], OperatorProcess]) -> None:
        self.framework = framework
        self.namespace = namespace
        self.calls = calls
        self._start = start
        self.liveness: str | None = None  # the URL of its liveness endpoint, if it serves one
        self.runs = 0
        self.process = self._start(f'operator-{self.runs}.log')

    def restart(self) -> None:
        """Stop gracefully and start anew, as on a deployment's rollout."""
        assert self.process.stop() == 0, self.process.output
        self.runs += 1
        self.process = self._start(f'operator-{self.runs}.log')

    def __repr__(self) -> str:
        return f'<{self.framework} in {self.namespace}>'

    def records(self, handler: str | None = None, name: str | None = None) -> list[dict[str, Any]]:
        return [call for call in read_calls(self.calls)
                if (handler is None or call['handler'] == handler) and (name is None or call.get('name') == name)]

    def counts(self) -> collections.Counter[tuple[str, str]]:
        return collections.Counter((call['handler'], call.get('name', '')) for call in read_calls(self.calls))

    def path(self, name: str) -> str:
        return f'{collection(self.namespace)}/{name}'

    def wait(self, condition: Callable[[], Any], *, what: str, timeout: float = TIMEOUT) -> Any:
        return self.process.wait(condition, what=f"{what} ({self.framework})", timeout=timeout)


def start_side(framework: str, script: Path, *, namespace: str, kubeconfig: Path, workdir: Path,
               args: tuple[str, ...] = (), env: dict[str, str] | None = None) -> Side:
    """Start the operator under our ``kopf run`` or under the released Kopf (never importing ours)."""
    workdir.mkdir(parents=True, exist_ok=True)
    calls = workdir / 'calls.jsonl'
    env = {'E2E_CALLS': str(calls), **(env or {})}

    def start(log: str) -> OperatorProcess:
        if framework == 'ours':
            argv = kopf_run(script, namespace=namespace) + list(args)
            return OperatorProcess(argv, kubeconfig=kubeconfig, log=workdir / log, env=env)
        argv = [str(peers.ensure(framework)), 'run', str(script), '--standalone', '--verbose', '-n', namespace,
                *args]
        return OperatorProcess(argv, kubeconfig=kubeconfig, log=workdir / log, env={**env, 'PYTHONPATH': ''},
                               cwd=workdir)

    return Side(framework, namespace, calls, start)


@pytest.fixture()
def sides(kube: KubeAPI, kubeconfig: Path, namespace: str, tmp_path: Path, crd: None
          ) -> Iterator[Callable[..., list[Side]]]:
    """``sides(script, kopf=True)``: the operator under ours and (unless told not to) under Kopf."""
    started: list[Side] = []

    def start(script: str, *, kopf: bool = True, liveness: bool = False, **env: str) -> list[Side]:
        frameworks = ['ours', KOPF] if kopf else ['ours']
        result = []
        for framework in frameworks:
            ns = namespace if framework == 'ours' else f'{namespace[:50]}-kopf'
            kube.ensure_namespace(ns)
            url = f'http://127.0.0.1:{free_port()}/healthz' if liveness else None
            side = start_side(framework, COMPAT / script, namespace=ns, kubeconfig=kubeconfig,
                              workdir=tmp_path / f'{framework}-{len(started)}',
                              args=('--liveness', url) if url else (), env=env)
            side.liveness = url
            started.append(side)
            result.append(side)
        return result

    try:
        yield start
    finally:
        for side in started:
            side.process.kill()
        for side in started:  # objects with finalizers are released, so that nothing is left behind
            for item in (kube.find(collection(side.namespace)) or {}).get('items', []):
                path = side.path(item['metadata']['name'])
                if item['metadata'].get('finalizers'):
                    kube.patch(path, {'metadata': {'finalizers': None}})
                kube.delete(path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return int(s.getsockname()[1])


def probe(url: str) -> tuple[int, Any] | None:
    """The status and the JSON of a liveness endpoint, or ``None`` while it does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
    except OSError:
        return None


# Peering: Kopf's --peering, --priority, --dev, kopf freeze and kopf resume, on the Lease-based replicas.

def kopf_command(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, '-m', 'kopf', *args], capture_output=True, text=True, timeout=TIMEOUT,
                          env={**os.environ, 'KUBECONFIG': str(kubeconfig), 'PYTHONPATH': str(REPO)})


def test_peering_one_replica_handles_freeze_pauses_it_resume_and_a_higher_priority_take_over(
        kube: KubeAPI, kubeconfig: Path, namespace: str, tmp_path: Path, crd: None) -> None:
    lease = f'compat-{uuid.uuid4().hex[:6]}'
    calls = tmp_path / 'calls.jsonl'
    started: list[OperatorProcess] = []

    def replica(*args: str) -> OperatorProcess:
        argv = kopf_run(COMPAT / 'peering.py', namespace=namespace) + ['--peering', lease, *args]
        process = OperatorProcess(argv, kubeconfig=kubeconfig, log=tmp_path / f'replica-{len(started)}.log',
                                  env={'E2E_CALLS': str(calls)})
        started.append(process)
        return process

    def handled_by(name: str) -> int | None:
        return ((kube.find(f'{collection(namespace)}/{name}') or {}).get('status') or {}).get('created', {}).get('pid')

    def ticks(pid: int, since: float = 0, until: float = float('inf')) -> list[float]:
        return [c['t'] for c in read_calls(calls) if c['handler'] == 'tick' and c['pid'] == pid
                and since <= c['t'] <= until]

    try:
        first = replica()
        first.wait_for_output("Leading as")
        second = replica()
        second.wait_for_output("Standing by:")
        kube.create(collection(namespace), body('o1', ticking=True))
        assert first.wait(lambda: handled_by('o1'), what="o1 handled") == first.process.pid
        first.wait(lambda: len(ticks(first.process.pid)) >= 2, what="the timer ticking on the leader")

        # Frozen: the leader stops, and nobody handles, not even after the leader's lease would expire.
        frozen = kopf_command(kubeconfig, 'freeze', '--peering', lease, '-n', namespace, '--lifetime', '60',
                              '--message', 'maintenance', '--id', 'tester')
        assert frozen.returncode == 0, frozen.stderr
        assert f"Frozen the replicas of the lease {namespace}/{lease} for 60s as tester" in frozen.stdout
        record = kube.get(f'/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{lease}')
        assert record['spec']['holderIdentity'] == 'frozen:tester'
        assert json.loads(record['metadata']['annotations']['kopf.dev/freeze'])['message'] == 'maintenance'
        first.wait_for_output("Paused: the lease is frozen by tester (maintenance)")
        paused = time.time()
        kube.create(collection(namespace), body('o2'))
        # Until the leader's lease would have expired (3 s after the freeze at the latest), and then until
        # the replicas have looked at the lease a few times more: any of them would have taken it by then.
        frozen_at = datetime.datetime.fromisoformat(record['spec']['renewTime']).timestamp()
        previous = json.loads(record['metadata']['annotations']['kopf.dev/freeze'])['previousDuration']
        assert previous == 3
        wait_for(lambda: time.time() > frozen_at + previous, what="the leader's lease to be past its duration")
        looked = lease_reads(kube)
        first.wait(lambda: lease_reads(kube) >= looked + 6, what="the replicas to look at the lease again")
        lease_now = kube.get(f'/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{lease}')
        assert lease_now['spec']['holderIdentity'] == 'frozen:tester'  # nobody has taken it
        assert handled_by('o2') is None
        assert not ticks(first.process.pid, since=paused + 1.5)  # timers stop too (within a second)
        assert not [c for c in read_calls(calls) if c['pid'] == second.process.pid]

        resumed = kopf_command(kubeconfig, 'resume', '--peering', lease, '-n', namespace, '--id', 'tester')
        assert resumed.returncode == 0, resumed.stderr
        assert "given back to" in resumed.stdout
        assert first.wait(lambda: handled_by('o2'), what="o2 handled after the resume") == first.process.pid
        first.wait(lambda: ticks(first.process.pid, since=time.time() - 0.5), what="the timer ticking again")

        # A developer's --dev replica (priority 666) takes over, once the leader has surely stopped.
        dev = replica('--dev')
        dev.wait_for_output("with a higher priority (666 > 0)")
        first.wait_for_output("with a higher priority (666 > 0) has taken the lease over: stopped handling")
        kube.create(collection(namespace), body('o3'))
        assert dev.wait(lambda: handled_by('o3'), what="o3 handled by the --dev replica") == dev.process.pid
        dev_ticks = dev.wait(lambda: ticks(dev.process.pid), what="the --dev replica's timer")
        assert max(ticks(first.process.pid)) < min(dev_ticks)  # never both at once

        # The --dev replica stops and gives the lease back at once: the others take over.
        assert dev.stop() == 0
        kube.create(collection(namespace), body('o4'))
        owner = first.wait(lambda: handled_by('o4'), what="o4 handled after the --dev replica stopped")
        assert owner in (first.process.pid, second.process.pid)
        assert "Released the lease" in dev.output
    finally:
        for process in started:
            process.kill()
        for item in (kube.find(collection(namespace)) or {}).get('items', []):
            kube.patch(f"{collection(namespace)}/{item['metadata']['name']}", {'metadata': {'finalizers': None}})




def lease_reads(kube: KubeAPI) -> int:
    """How many times the API server has served a Lease so far (to anyone: the replicas, mostly)."""
    counts = apimetrics.parse(kube.text('/metrics'))
    return sum(count for kind, count in counts.items() if kind.resource == 'leases' and kind.verb == 'GET')


# Helpers of the side-by-side runs.

LAST_HANDLED = 'kopf.zalando.org/last-handled-configuration'


def progress(obj: dict[str, Any] | None) -> dict[str, str]:
    """The handlers' progress records (Kopf's annotations), not the diff-base."""
    annotations = ((obj or {}).get('metadata') or {}).get('annotations') or {}
    return {k: v for k, v in annotations.items() if k.startswith('kopf.zalando.org/') and k != LAST_HANDLED}


def settled(kube: KubeAPI, side: Side, name: str, *results: str) -> Callable[[], dict[str, Any] | None]:
    """The object once its cause is fully handled: the diff-base stored, no progress left, the results there."""
    def condition() -> dict[str, Any] | None:
        obj = kube.find(side.path(name))
        annotations = ((obj or {}).get('metadata') or {}).get('annotations') or {}
        status = (obj or {}).get('status') or {}
        done = LAST_HANDLED in annotations and not progress(obj) and all(r in status for r in results)
        return obj if done else None
    return condition


def results(obj: dict[str, Any]) -> dict[str, Any]:
    """The handlers' results in the status (Kopf's own status stanza aside)."""
    return {k: v for k, v in (obj.get('status') or {}).items() if k != 'kopf'}


# Handlers and their results.

def test_handlers_and_their_results_as_in_kopf(kube: KubeAPI, sides: Callable[..., list[Side]]) -> None:
    both = sides('handlers.py', liveness=True)
    for side in both:
        kube.create(collection(side.namespace), {**body('o1', field='a', other=1),
                                                 'metadata': {'name': 'o1', 'labels': {'tier': 'web'}}})
    for side in both:
        obj = side.wait(settled(kube, side, 'o1', 'created', 'named-creation', 'field_changed/spec.field'),
                        what="the creation handled")
        assert results(obj) == {'created': {'field': 'a'}, 'named-creation': 'named',
                                'field_changed/spec.field': {'new': 'a'}}
        assert obj['metadata']['finalizers'] == [FINALIZER]  # for the deletion handler
        assert json.loads(obj['metadata']['annotations'][LAST_HANDLED]) == {
            'metadata': {'labels': {'tier': 'web'}}, 'spec': {'field': 'a', 'other': 1}}

    for side in both:
        kube.patch(side.path('o1'), {'spec': {'field': 'b'}})
    for side in both:
        side.wait(lambda s=side: (kube.get(s.path('o1')).get('status') or {}).get('updated') == {'changes': 1},
                  what="the field's update handled")
        kube.patch(side.path('o1'), {'spec': {'other': 2}})
        kube.patch(f"{side.path('o1')}/status", {'status': {'external': 'x'}})  # not in the essence: no cause
    for side in both:
        side.wait(lambda s=side: len(s.records('updated')) == 2 and not progress(kube.get(s.path('o1'))),
                  what="the second update handled")

    for side in both:  # the probes, through the liveness endpoint: {probe id: result}
        assert side.liveness is not None
        health = side.wait(lambda s=side: probe(s.liveness), what="the liveness endpoint")
        assert health[0] == 200 and health[1]['answer'] == 42 and health[1]['handled'] >= 4
        side.restart()
    for side in both:
        side.wait(lambda s=side: s.records('resumed'), what="the resuming after a restart")
        kube.delete(side.path('o1'))
    for side in both:
        side.wait(lambda s=side: kube.find(s.path('o1')) is None, what="the deletion handled, the object gone")

    ours, theirs = both
    assert ours.records('updated') == theirs.records('updated') == [
        {'handler': 'updated', 'name': 'o1', 'changes': [['change', 'spec.field', 'a', 'b']], 'old': 'a', 'new': 'b'},
        {'handler': 'updated', 'name': 'o1', 'changes': [['change', 'spec.other', 1, 2]], 'old': 'b', 'new': 'b'},
    ]
    assert ours.records('field_changed') == theirs.records('field_changed')
    assert ours.counts() == theirs.counts() == collections.Counter({
        ('created', 'o1'): 1, ('field_changed', 'o1'): 2, ('updated', 'o1'): 2, ('resumed', 'o1'): 1,
        ('deleted', 'o1'): 1})


# Errors and retries.

def test_errors_and_retries_as_in_kopf(kube: KubeAPI, sides: Callable[..., list[Side]]) -> None:
    both = sides('errors.py')
    for side in both:
        kube.create(collection(side.namespace), body('o1'))
    for side in both:
        # The results of the last cycle go to /status after the progress is purged: wait for them all.
        obj = side.wait(settled(kube, side, 'o1', 'temporary', 'arbitrary', 'last'),
                        what="every handler finished or given up")
        assert results(obj) == {'temporary': {'attempts': 3}, 'arbitrary': 'recovered', 'last': 'done'}

    ours, theirs = both
    retries = {handler: [call.get('retry') for call in ours.records(handler)]
               for handler in ['permanent', 'temporary', 'exhausted', 'arbitrary', 'ignored', 'permanent_mode',
                               'timed_out', 'last']}
    assert retries == {'permanent': [0], 'temporary': [0, 1, 2], 'exhausted': [0, 1, 2], 'arbitrary': [0, 1],
                       'ignored': [0], 'permanent_mode': [0], 'timed_out': [0], 'last': [None]}
    assert ours.counts() == theirs.counts()


# Sub-handlers.

def test_subhandlers_as_in_kopf(kube: KubeAPI, sides: Callable[..., list[Side]]) -> None:
    both = sides('subhandlers.py')
    for side in both:
        kube.create(collection(side.namespace), body('o1', items=['a', 'b', 'c']))
    for side in both:
        obj = side.wait(settled(kube, side, 'o1', 'per_item', 'registered/two', 'executed'),
                        what="the handlers and their sub-handlers finished")
        assert results(obj) == {
            'per_item': 'items registered',
            'per_item/item-a': {'item': 'a'}, 'per_item/item-b': {'item': 'b'}, 'per_item/item-c': {'item': 'c'},
            'registered/one': 1, 'registered/two': 2,
            'executed': 'all executed', 'executed/a': 1, 'executed/b': 2,
        }
    ours, theirs = both
    assert [call['retry'] for call in ours.records('item-b')] == [0, 1]
    assert len(ours.records('item-a')) == len(ours.records('item-c')) == 1  # a finished one is never called again
    assert ours.counts() == collections.Counter({
        ('per_item', 'o1'): 2, ('item-a', 'o1'): 1, ('item-b', 'o1'): 2, ('item-c', 'o1'): 1,
        ('registered', 'o1'): 1, ('executed', 'o1'): 1, ('first', 'o1'): 2, ('second', 'o1'): 2})
    # Kopf calls a parent once more after its sub-handlers have all finished, only to see that they have
    # (as its documentation says, the parent is called "again and again ... until all the sub-handlers are
    # finished"). Here the parent is done in the call in which its last sub-handler succeeds: the same
    # sub-handler calls, fewer parent calls (and fewer patches). Parents should have no side effects anyway.
    parents = {('per_item', 'o1'), ('registered', 'o1'), ('executed', 'o1')}
    assert {k: v for k, v in ours.counts().items() if k not in parents} == \
           {k: v for k, v in theirs.counts().items() if k not in parents}
    assert all(theirs.counts()[parent] > ours.counts()[parent] for parent in parents)


# Filters.

def test_filters_select_the_same_handlers_as_in_kopf(kube: KubeAPI, sides: Callable[..., list[Side]]) -> None:
    both = sides('filters.py')
    for side in both:
        kube.create(collection(side.namespace), {
            **body('web', field='x', size=13),
            'metadata': {'name': 'web', 'labels': {'tier': 'web'}, 'annotations': {'note': 'watched'}}})
        kube.create(collection(side.namespace), body('plain', size=4))
    for side in both:
        side.wait(settled(kube, side, 'web'), what="the creation of 'web' handled")
        side.wait(settled(kube, side, 'plain'), what="the creation of 'plain' handled")
        assert kube.get(side.path('web'))['metadata'].get('finalizers') == [FINALIZER]
        assert 'finalizers' not in kube.get(side.path('plain'))['metadata']  # no deletion handler selects it
        kube.patch(side.path('web'), {'spec': {'field': 'y', 'size': None}})
        kube.patch(side.path('plain'), {'spec': {'field': 'y'}})
    for side in both:
        side.wait(lambda s=side: s.records('size_removed') and s.records('web_field_changed'),
                  what="the filtered update handlers")
        side.wait(settled(kube, side, 'plain'), what="the update of 'plain' handled")
        kube.delete(side.path('web'))
        kube.delete(side.path('plain'))
    for side in both:
        side.wait(lambda s=side: kube.find(s.path('web')) is None and s.records('web_deleted'),
                  what="the deletion handled")
        side.wait(lambda s=side: any(c['type'] == 'DELETED' for c in s.records('watched')),
                  what="the deletion's event")

    ours, theirs = both
    # Events come as often as the object changes, and each framework patches differently: compare their kinds.
    # The first one has no type if it comes from the initial listing, in both.
    for side in both:
        types = [call['type'] for call in side.records('watched')]
        assert types[0] in (None, 'ADDED') and set(types[1:]) == {'MODIFIED', 'DELETED'}
    selected = collections.Counter({(h, n): c for (h, n), c in ours.counts().items() if h != 'watched'})
    assert selected == collections.Counter({(h, n): c for (h, n), c in theirs.counts().items() if h != 'watched'})
    assert selected == collections.Counter({
        ('label_value', 'web'): 1, ('label_present', 'web'): 1, ('label_callback', 'web'): 1,
        ('annotation_present', 'web'): 1, ('when_big', 'web'): 1, ('when_big_and_odd', 'web'): 1,
        ('field_value', 'web'): 1, ('web_field_changed', 'web'): 1, ('size_removed', 'web'): 1,
        ('web_deleted', 'web'): 1,
        ('label_absent', 'plain'): 1, ('when_not_big', 'plain'): 1})


# Event handlers and posted Events.

def posted(kube: KubeAPI, side: Side, name: str) -> list[tuple[str, str, str]]:
    items = (kube.find(f'/api/v1/namespaces/{side.namespace}/events') or {}).get('items', [])
    events = [e for e in items if e['involvedObject'].get('name') == name]
    for event in events:  # as configured in settings.posting
        assert event['metadata']['name'].startswith('compat-event-')
        assert event['reportingComponent'] == event['source']['component'] == 'compat-operator'
    return sorted((e.get('type', ''), e.get('reason', ''), e.get('message', '')) for e in events)


def test_event_handlers_and_posted_events_as_in_kopf(kube: KubeAPI, sides: Callable[..., list[Side]]) -> None:
    both = sides('events.py')
    for side in both:
        kube.create(collection(side.namespace), body('o1'))
    for side in both:
        side.wait(settled(kube, side, 'o1'), what="the creation handled")
        side.wait(lambda s=side: len(posted(kube, s, 'o1')) >= 5, what="the posted events")
        kube.patch(side.path('o1'), {'spec': {'changed': True}})
    for side in both:
        side.wait(lambda s=side: any(c['type'] == 'MODIFIED' for c in s.records('every_event')),
                  what="the change's event")
        kube.delete(side.path('o1'))
    for side in both:
        side.wait(lambda s=side: any(c['type'] == 'DELETED' for c in s.records('every_event')),
                  what="the deletion's event")

    ours, theirs = both
    assert posted(kube, ours, 'o1') == posted(kube, theirs, 'o1') == [
        ('Custom', 'SomeReason', 'Some message'),
        ('Error', 'ErrorReason', 'Some exception: Exception text.'),
        ('Error', 'ValueError', 'Without a reason: Exception text.'),
        ('Normal', 'InfoReason', 'Some info'),
        ('Warning', 'WarnReason', 'Some warning'),
    ]  # and no log lines: only explicit events are posted by default
    for side in both:
        calls = side.records('every_event')
        # The first event is ADDED, or typeless if it comes from the initial listing (as in Kopf). How many
        # MODIFIED events follow depends on the framework's own patches: Kopf batches the events that follow
        # its patches, kopf skips the echoes of its own patches; both see the changes made by others.
        assert calls[0]['type'] in (None, 'ADDED') and calls[-1]['type'] == 'DELETED'
        assert {call['type'] for call in calls[1:]} == {'MODIFIED', 'DELETED'}
        assert all(call['same'] for call in calls)
        assert len(side.records('failing')) == len(calls)  # called on every event, never retried
    assert ours.records('post') == theirs.records('post') == [{'handler': 'post', 'name': 'o1'}]


# Daemons and timers.

def test_daemons_and_timers_tick_and_stop_on_deletion_as_in_kopf(
        kube: KubeAPI, sides: Callable[..., list[Side]]) -> None:
    both = sides('daemons.py')
    for side in both:
        kube.create(collection(side.namespace), body('o1'))
    for side in both:
        for handler in ['sync_daemon', 'async_daemon', 'timer']:
            side.wait(lambda s=side, h=handler: len(s.records(h)) >= 3, what=f"{handler} ticking")
        side.wait(lambda s=side: (kube.get(s.path('o1')).get('status') or {}).get('ticks', 0) >= 2,
                  what="the timer's patches on the object")
        assert kube.get(side.path('o1'))['metadata']['finalizers'] == [FINALIZER]
        kube.delete(side.path('o1'))
    for side in both:
        side.wait(lambda s=side: kube.find(s.path('o1')) is None, what="the deletion done after the daemons stop")

    # Nothing of o1 ticks any more: not while another object's timer and daemons tick on (at the same
    # intervals) in the same operator, first once, then for another second.
    def of_o1(side: Side) -> collections.Counter[tuple[str, str]]:
        return collections.Counter({key: count for key, count in side.counts().items() if key[1] == 'o1'})

    def ticking(side: Side, times: int) -> bool:
        return all(len(side.records(handler, 'o2')) >= times for handler in ['timer', 'async_daemon'])
    for side in both:
        kube.create(collection(side.namespace), body('o2'))
    for side in both:
        side.wait(lambda s=side: ticking(s, 1), what="the timer and the daemon of o2 ticking")
    counts = [of_o1(side) for side in both]
    for side in both:
        side.wait(lambda s=side: ticking(s, 3), what="the timer and the daemon of o2 ticking on")
    assert [of_o1(side) for side in both] == counts

    for side in both:
        assert side.records('sync_daemon_stopped') == [
            {'handler': 'sync_daemon_stopped', 'name': 'o1', 'reason': 'RESOURCE_DELETED'}]
        assert side.records('async_daemon_cancelled') == [
            {'handler': 'async_daemon_cancelled', 'name': 'o1', 'reason': 'RESOURCE_DELETED|DAEMON_CANCELLED'}]
        assert not side.records('delayed', 'o1')  # its initial delay is longer than the object's life
        ticks = [call['ticks'] for call in side.records('timer', 'o1')]
        assert ticks == list(range(1, len(ticks) + 1))  # every tick saw the previous tick's patch


# Children and owner references.

def normalized(value: Any, side: Side, owner: dict[str, Any]) -> Any:
    """The same structure with the side's own namespace and the owner's uid put as placeholders."""
    text = json.dumps(value).replace(owner['metadata']['uid'], '<uid>').replace(side.namespace, '<ns>')
    return json.loads(text)


def test_children_are_adopted_as_in_kopf(kube: KubeAPI, sides: Callable[..., list[Side]]) -> None:
    both = sides('children.py')
    for side in both:
        kube.create(collection(side.namespace), {**body('parent'), 'metadata': {
            'name': 'parent', 'labels': {'app': 'demo'}}})
    owners = {}
    for side in both:
        side.wait(settled(kube, side, 'parent', 'adopt_children'), what="the children adopted")
        owners[side.framework] = kube.get(side.path('parent'))
        children = side.wait(
            lambda s=side: (kube.find(f'/api/v1/namespaces/{s.namespace}/configmaps') or {}).get('items'),
            what="the child on the server")
        child, = [c for c in children if c['metadata'].get('ownerReferences')]
        owner = owners[side.framework]
        assert child['metadata']['name'].startswith('parent-')  # generated from the owner's name
        assert child['metadata']['labels'] == {'app': 'demo'}
        assert child['metadata']['ownerReferences'] == [{
            'apiVersion': 'kopf.dev/v1', 'kind': 'KopfCompat', 'name': 'parent', 'uid': owner['metadata']['uid'],
            'controller': True, 'blockOwnerDeletion': True}]

    ours, theirs = both
    for handler in ['adopted', 'adopted_many', 'appended', 'harmonized', 'references']:
        mine = normalized(ours.records(handler), ours, owners['ours'])
        kopfs = normalized(theirs.records(handler), theirs, owners[KOPF])
        assert mine == kopfs, handler
    assert ours.counts() == theirs.counts()


# The operator's start: startup, login, settings, memo, cleanup.

def test_startup_login_settings_and_cleanup_as_in_kopf(kube: KubeAPI, sides: Callable[..., list[Side]]) -> None:
    both = sides('startup.py')
    for side in both:
        kube.create(collection(side.namespace), body('o1'))
    seen: dict[str, str] = {}  # the progress while retrying, which lasts only until the next attempt

    def finished(side: Side) -> dict[str, Any] | None:
        obj = kube.get(side.path('o1'))
        annotations = obj['metadata'].get('annotations', {})
        if 'compat.kopf.dev/created' in annotations:
            seen.setdefault(side.framework, annotations['compat.kopf.dev/created'])
        return obj if 'compat.kopf.dev/last-state' in annotations and 'created' in obj.get('status', {}) else None

    keys = {}
    wait_for(lambda: all([finished(side) for side in both]), timeout=TIMEOUT, interval=0.05,
             what="the handling finished under the configured storages")
    for side in both:
        assert json.loads(seen[side.framework])['retries'] == 1
        obj = kube.get(side.path('o1'))
        assert obj['metadata']['finalizers'] == ['compat.kopf.dev/finalizer']
        assert not any(key.startswith('kopf.zalando.org/') for key in obj['metadata'].get('annotations', {}))
        # The login handler's own HTTP session made the writes: the server names it by its User-Agent.
        assert 'compat-operator' in {entry['manager'] for entry in obj['metadata']['managedFields']}
        keys[side.framework] = sorted(obj['metadata']['annotations'])
        kube.delete(side.path('o1'))
    for side in both:
        side.wait(lambda s=side: kube.find(s.path('o1')) is None, what="the deletion handled")
        assert side.process.stop() == 0
    ours, theirs = both
    # Kopf also marks the objects of a custom prefix with ``<prefix>/kopf-managed: yes``, for its own key formats;
    # kopf needs no such marker (it reads Kopf's records with or without it).
    assert keys['ours'] == ['compat.kopf.dev/last-state']
    assert keys[KOPF] == ['compat.kopf.dev/kopf-managed', 'compat.kopf.dev/last-state']
    for side in both:
        assert [call['retry'] for call in side.records('startup')] == [0, 1]
        assert side.records('login')
        assert [call['greeting'] for call in side.records('created')] == ['hello', 'hello']
        assert side.records('cleanup') == [{'handler': 'cleanup', 'name': '', 'greeting': 'hello'}]
    # Kopf logs in once more when it has nothing to do yet; how often is not a contract.
    assert {k: v for k, v in ours.counts().items() if k[0] != 'login'} == \
           {k: v for k, v in theirs.counts().items() if k[0] != 'login'}
