"""
Faults are normal: an operator behind a fault-injecting proxy, killed and restarted again and again.

The proxy answers 500/409/429 (with Retry-After), resets connections before
and after forwarding (the server has done the work, the operator never hears
so), cuts watch streams, and black-holes connections. Meanwhile the operator
is SIGKILLed and restarted several times while it handles more than a hundred
objects with three handlers each. What counts comes from the server (a plain
watch noting when each handler's success became visible there) and from the
handlers' own call log, never from the operator's word.
"""
from __future__ import annotations

import collections
import http.client
import json
import random
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from kopf.testing import KubeAPI, wait_for
from tests.e2e.faultproxy import Fault, FaultProxy, RandomFaults
from tests.e2e.harness import OPERATORS, OperatorProcess, read_calls

PREFIX = 'kopf.zalando.org'
HANDLERS = ['alpha', 'beta', 'gamma']
DIFFBASE = f'{PREFIX}/last-handled-configuration'
LABELS = {'e2e': 'resilient'}

OBJECTS_BEFORE = 60  # exist before the first start: handled from the (paginated) listing
OBJECTS_DURING = 60  # created while the operator is killed and restarted: handled from the watch
KILLS = 5


def kopf_run(namespace: str) -> list[str]:
    return [sys.executable, '-m', 'kopf', 'run', str(OPERATORS / 'resilient.py'), '-n', namespace]


class Observer(threading.Thread):
    """Notes, from the server's side, when each handler's success of each object is first visible."""

    def __init__(self, kube: KubeAPI, namespace: str) -> None:
        super().__init__(name='observer', daemon=True)
        self.kube = kube
        self.namespace = namespace
        self.visible: dict[tuple[str, str], float] = {}  # (uid, handler) -> when its success was first seen
        self.finished: dict[str, float] = {}  # uid -> when all was done: diff-base stored, progress purged
        self.history: dict[str, list[tuple[float, str, dict[str, str]]]] = collections.defaultdict(list)
        self.stopped = threading.Event()
        self.lock = threading.Lock()

    def note(self, obj: dict[str, Any]) -> None:
        now = time.time()
        meta = obj.get('metadata') or {}
        if (meta.get('labels') or {}).get('e2e') != 'resilient':
            return
        uid = meta['uid']
        annotations = meta.get('annotations') or {}
        progress = [key for key in annotations if key.startswith(f'{PREFIX}/') and key != DIFFBASE]
        ours = {key: value for key, value in annotations.items() if key.startswith(f'{PREFIX}/')}
        with self.lock:
            history = self.history[uid]
            if not history or history[-1][1] != meta.get('resourceVersion'):
                history.append((now, meta.get('resourceVersion', ''), ours))  # for a failure's message
            for handler in HANDLERS:
                raw = annotations.get(f'{PREFIX}/{handler}')
                if raw and json.loads(raw).get('success'):
                    self.visible.setdefault((uid, handler), now)
            if DIFFBASE in annotations and not progress:
                self.finished.setdefault(uid, now)
                for handler in HANDLERS:
                    self.visible.setdefault((uid, handler), now)

    def run(self) -> None:
        path = f"/api/v1/namespaces/{self.namespace}/configmaps"
        listing = self.kube.get(path)
        for item in listing['items']:
            self.note(item)
        version = listing['metadata']['resourceVersion']
        while not self.stopped.is_set():
            query = urllib.parse.urlencode({'watch': 'true', 'resourceVersion': version, 'timeoutSeconds': '2',
                                            'allowWatchBookmarks': 'true'})
            try:
                with urllib.request.urlopen(f"{self.kube.server}{path}?{query}", context=self.kube.ssl,
                                            timeout=10) as response:
                    for line in response:
                        event = json.loads(line)
                        if event['type'] == 'ERROR':  # expired: relist
                            listing = self.kube.get(path)
                            for item in listing['items']:
                                self.note(item)
                            version = listing['metadata']['resourceVersion']
                            break
                        version = event['object']['metadata']['resourceVersion']
                        if event['type'] in ('ADDED', 'MODIFIED'):
                            self.note(event['object'])
            except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException):
                self.stopped.wait(0.1)  # a pause before watching again, not a wait for anything


def unfinished(kube: KubeAPI, collection: str, observer: Observer, uids: set[str]) -> str:
    """What the server holds of the objects the observer has not seen finished: for a failure's message."""
    with observer.lock:
        waiting = uids - set(observer.finished)
    lines = [f"observer alive: {observer.is_alive()}; unfinished: {len(waiting)}"]
    for item in kube.get(collection)['items']:
        meta = item['metadata']
        if meta['uid'] in waiting:
            ours = {key: value for key, value in (meta.get('annotations') or {}).items() if key.startswith(PREFIX)}
            lines.append(f"{meta['name']} rv={meta['resourceVersion']} finalizers={meta.get('finalizers')} "
                         f"annotations={ours}")
            with observer.lock:
                for when, version, seen in observer.history[meta['uid']]:
                    lines.append(f"  seen at {when:.3f}: rv={version} {seen}")
    return '\n'.join(lines)


def configmap(name: str) -> dict[str, Any]:
    return {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': name, 'labels': LABELS},
            'data': {'key': name}}


@pytest.fixture()
def observer(kube, namespace):
    thread = Observer(kube, namespace)
    thread.start()
    yield thread
    thread.stopped.set()
    thread.join(15)


def test_nothing_is_lost_and_nothing_rerun_under_faults_and_kills(kube, control_plane, namespace, tmp_path,
                                                                  observer):
    rng = random.Random(20261130)
    policy = RandomFaults(
        seed=rng.randrange(2 ** 32),
        patch={Fault('status', 500): 0.04, Fault('status', 409): 0.04, Fault('status', 429, retry_after=1): 0.04,
               Fault('reset'): 0.02, Fault('reset-after'): 0.03},
        listing={Fault('status', 500): 0.05, Fault('status', 429, retry_after=1): 0.05, Fault('reset'): 0.02},
        watch={Fault('status', 500): 0.05, Fault('status', 429, retry_after=1): 0.05, Fault('cut'): 0.9},
        cut_after=(0.3, 1.5),
    )
    proxy = FaultProxy(control_plane, tmp_path / 'proxy', policy=policy).start()
    calls = tmp_path / 'calls.jsonl'
    env = {'E2E_CALLS': str(calls), 'E2E_INACTIVITY': '3', 'E2E_REQUEST_TIMEOUT': '5', 'E2E_LIST_LIMIT': '25',
           'E2E_HANDLER_SLEEP': '0.05', 'E2E_SERVER_TIMEOUT': '20'}
    started: list[OperatorProcess] = []

    def start() -> OperatorProcess:
        process = OperatorProcess(kopf_run(namespace), kubeconfig=proxy.kubeconfig, env=env,
                                  log=tmp_path / f'operator-{len(started)}.log')
        started.append(process)
        return process

    collection = f"/api/v1/namespaces/{namespace}/configmaps"

    def worked(process: OperatorProcess, calls_made: int) -> bool:
        """Whether the process has called so many handlers (or there is nothing left to do)."""
        mine = [call for call in read_calls(calls) if call['pid'] == process.process.pid]
        with observer.lock:
            everything_done = len(observer.finished) >= OBJECTS_BEFORE + OBJECTS_DURING
        return len(mine) >= calls_made or everything_done

    began = time.monotonic()
    try:
        for index in range(OBJECTS_BEFORE):
            kube.create(collection, configmap(f'before-{index:03d}'))
        operator = start()
        for kill in range(1, KILLS + 1):
            # Killed at a random point of its work: in the middle of a handler (each works for 0.05 s), or of
            # whatever follows the handler's call -- never before it has started to work at all.
            calls_made = rng.randint(5, 40)
            operator.wait(lambda o=operator, n=calls_made: worked(o, n), what=f"{calls_made} handler calls",
                          timeout=60)
            if kill == 1:
                for index in range(OBJECTS_DURING):
                    kube.create(collection, configmap(f'during-{index:03d}'))
            if kill == 3:
                wait_for(lambda: proxy.open_streams > 0, timeout=15, what="an open watch stream to black-hole")
                holes = proxy.figures().get('blackhole', 0)
                proxy.blackhole(1.0)
                wait_for(lambda h=holes: proxy.figures().get('blackhole', 0) > h, timeout=15,
                         what="the open streams black-holed")
            operator.kill()
            operator = start()

        uids = {item['metadata']['uid'] for item in kube.get(collection)['items']
                if (item['metadata'].get('labels') or {}).get('e2e') == 'resilient'}
        assert len(uids) == OBJECTS_BEFORE + OBJECTS_DURING

        def all_finished() -> bool:
            with observer.lock:
                return uids <= set(observer.finished)

        try:
            operator.wait(all_finished, what="every object finished on the server", timeout=120)
        except AssertionError as e:
            raise AssertionError(f"{unfinished(kube, collection, observer, uids)}\n{e}") from None
        handled_within = time.monotonic() - began
        policy.enabled = False
        operator.wait_for_output("Serving configmaps")  # not stopped while still starting up
        assert operator.stop() == 0
    finally:
        for process in started:
            process.kill()
        proxy.stop()

    records = [call for call in read_calls(calls) if call['handler'] in HANDLERS]
    per_handler = collections.Counter((call['uid'], call['handler']) for call in records)
    with observer.lock:
        visible = dict(observer.visible)
    reruns = [call for call in records
              if (call['uid'], call['handler']) in visible and call['time'] > visible[call['uid'], call['handler']]]
    missing = [(uid, handler) for uid in uids for handler in HANDLERS if per_handler[uid, handler] == 0]
    extra = len(records) - len(uids) * len(HANDLERS)
    faults = proxy.figures()
    requests = dict(proxy.requests)
    summary = (f"Fault suite: {len(uids)} objects x {len(HANDLERS)} handlers, {KILLS} kills, "
               f"injected faults: {', '.join(f'{k}: {v}' for k, v in sorted(faults.items()))} "
               f"(total {sum(faults.values())}) in {sum(requests.values())} requests "
               f"({', '.join(f'{k}: {v}' for k, v in sorted(requests.items()))}); "
               f"handler calls: {len(records)}, extra calls: {extra}, "
               f"re-runs after visible success: {len(reruns)}; all finished in {handled_within:.1f}s.")
    print(summary)
    Path(tmp_path / 'summary.txt').write_text(summary)

    assert not missing, f"Handlers never called: {missing[:10]}"
    assert reruns == [], f"Handlers re-run after their success was visible on the server: {reruns[:10]}"
    assert extra >= 0
    # The faults must really have happened, or the test proves nothing.
    kinds = set(faults)
    assert {'PATCH 500', 'PATCH 409', 'PATCH 429', 'PATCH reset', 'PATCH reset-after', 'watch cut',
            'blackhole'} <= kinds, faults
    assert any(kind.startswith('GET ') for kind in kinds), faults
    outputs = ''.join(process.output for process in started)
    assert '429 Too Many Requests); retrying in 1.00s as asked' in outputs
    assert 'Traceback' not in outputs, outputs[-5000:]


def test_a_black_holed_connection_is_noticed_and_reopened(kube, control_plane, namespace, tmp_path, observer):
    proxy = FaultProxy(control_plane, tmp_path / 'proxy').start()
    calls = tmp_path / 'calls.jsonl'
    env = {'E2E_CALLS': str(calls), 'E2E_INACTIVITY': '2', 'E2E_REQUEST_TIMEOUT': '2', 'E2E_SERVER_TIMEOUT': '60'}
    operator = OperatorProcess(kopf_run(namespace), kubeconfig=proxy.kubeconfig, env=env, log=tmp_path / 'op.log')
    collection = f"/api/v1/namespaces/{namespace}/configmaps"
    try:
        first = kube.create(collection, configmap('first'))
        operator.wait(lambda: first['metadata']['uid'] in observer.finished, what="the first object handled")
        proxy.blackhole(0.3)  # the open watch stream (and anything started meanwhile) goes silent for good
        wait_for(lambda: proxy.figures().get('blackhole', 0) >= 1, timeout=15, what="the open stream black-holed")
        created = time.monotonic()
        second = kube.create(collection, configmap('second'))
        operator.wait(lambda: second['metadata']['uid'] in observer.finished, what="the second object handled",
                      timeout=20)
        delay = time.monotonic() - created
        operator.wait_for_output("has been silent for 2s, not even a bookmark: the connection is probably dead")
        assert operator.stop() == 0
    finally:
        operator.kill()
        proxy.stop()
    print(f"Black hole: the second object was handled {delay:.1f}s after its creation "
          f"(inactivity timeout 2s).")
    assert delay < 10
    assert proxy.figures().get('blackhole', 0) >= 1
    assert [call['handler'] for call in read_calls(calls)] == HANDLERS * 2


def test_a_listing_throttled_and_expired_midway_starts_over_and_loses_nothing(kube, control_plane, namespace,
                                                                              tmp_path, observer):
    collection = f"/api/v1/namespaces/{namespace}/configmaps"
    injected: list[str] = []

    def policy(request) -> Fault | None:
        """The listing's second page: throttled once, then its continue token has expired."""
        if request.method != 'GET' or request.is_watch or 'continue' not in request.query:
            return None
        if request.path != collection or len(injected) >= 2:
            return None
        injected.append('429' if not injected else '410')
        return Fault('status', 429, retry_after=1) if injected[-1] == '429' else Fault('status', 410)

    objects = 30
    for index in range(objects):
        kube.create(collection, configmap(f'listed-{index:03d}'))
    uids = {item['metadata']['uid'] for item in kube.get(collection)['items']}
    proxy = FaultProxy(control_plane, tmp_path / 'proxy', policy=policy).start()
    calls = tmp_path / 'calls.jsonl'
    operator = OperatorProcess([*kopf_run(namespace), '--verbose'], kubeconfig=proxy.kubeconfig,
                               env={'E2E_CALLS': str(calls), 'E2E_LIST_LIMIT': '10'}, log=tmp_path / 'operator.log')
    try:
        def all_finished() -> bool:
            with observer.lock:
                return uids <= set(observer.finished)

        operator.wait(all_finished, what="every listed object finished on the server", timeout=120)
        operator.wait_for_output("Serving configmaps")
        assert operator.stop() == 0
    finally:
        operator.kill()
        proxy.stop()

    assert injected == ['429', '410']
    per_handler = collections.Counter((call['uid'], call['handler']) for call in read_calls(calls)
                                      if call['handler'] in HANDLERS)
    # The first page is listed twice (before and after the restart of the listing), its objects handled once.
    assert per_handler == {(uid, handler): 1 for uid in uids for handler in HANDLERS}
    assert 'retrying in 1.00s as asked' in operator.output
    assert ("The continue token of the listing of configmaps.v1 has expired after 10 objects; "
            "listing again from the start.") in operator.output
    assert 'Traceback' not in operator.output, operator.output[-5000:]
