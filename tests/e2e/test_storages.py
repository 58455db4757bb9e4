"""
The storages users choose, on a real API server: outside of the objects (SQLite, ConfigMaps), what they cost,
``kopf inspect`` and ``kopf migrate``, the startup check of status fields, and the annotation budget.

Requests are counted by the API server itself (``apiserver_request_total``
in its ``/metrics``); handler calls are counted from the operators' call logs.
"""
from __future__ import annotations

import collections
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from kopf.testing import KubeAPI
from tests.e2e.harness import OPERATORS, REPO, read_calls

GROUP, VERSION = 'e2e.kopf.dev', 'v1'
PLURAL, KIND = 'keeps', 'Keep'
RESOURCE = f'{PLURAL}.{GROUP}'
PREFIX = 'kopf.zalando.org'
LAST = f'{PREFIX}/last-handled-configuration'
FINALIZER = f'{PREFIX}/KopfFinalizerMarker'
KUBECTL = 'kubectl.kubernetes.io/last-applied-configuration'


@pytest.fixture(scope='module', autouse=True)
def crd(kube: KubeAPI) -> None:
    """Strict: the status schema prunes unknown fields (as structural schemas do), with the status subresource."""
    kube.apply_crd({
        'apiVersion': 'apiextensions.k8s.io/v1', 'kind': 'CustomResourceDefinition',
        'metadata': {'name': f'{PLURAL}.{GROUP}'},
        'spec': {'group': GROUP, 'scope': 'Namespaced',
                 'names': {'plural': PLURAL, 'singular': KIND.lower(), 'kind': KIND},
                 'versions': [{'name': VERSION, 'served': True, 'storage': True, 'subresources': {'status': {}},
                               'schema': {'openAPIV3Schema': {'type': 'object', 'properties': {
                                   'spec': {'type': 'object', 'x-kubernetes-preserve-unknown-fields': True},
                                   'status': {'type': 'object', 'properties': {'phase': {'type': 'string'}}},
                               }}}}]},
    })


@pytest.fixture()
def start(operators, tmp_path):
    calls = tmp_path / 'calls.jsonl'

    def start(**env: str):
        return operators('storages.py', E2E_RESOURCE=RESOURCE, E2E_CALLS=str(calls), **env)
    start.calls = calls  # type: ignore[attr-defined]
    return start


def collection(namespace: str) -> str:
    return f'/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}'


def create(kube: KubeAPI, namespace: str, name: str, annotations: dict[str, str] | None = None,
           **spec: Any) -> str:
    kube.create(collection(namespace), {'apiVersion': f'{GROUP}/{VERSION}', 'kind': KIND,
                                        'metadata': {'name': name, 'annotations': annotations or {}},
                                        'spec': {'field': 'value', **spec}})
    return f'{collection(namespace)}/{name}'


def ours(obj: dict[str, Any]) -> dict[str, str]:
    """The framework's annotations on an object."""
    return {k: v for k, v in (obj['metadata'].get('annotations') or {}).items() if k.startswith(f'{PREFIX}/')}


def calls_of(path: Path, handler: str, name: str | None = None) -> list[dict[str, Any]]:
    return [c for c in read_calls(path) if c['handler'] == handler and (name is None or c['name'] == name)]


def metrics(kube: KubeAPI) -> collections.Counter[tuple[str, str]]:
    """The API server's request counts so far, by (resource, verb)."""
    with urllib.request.urlopen(urllib.request.Request(f"{kube.server}/metrics"), context=kube.ssl,
                                timeout=30) as response:
        text = response.read().decode()
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    for line in text.splitlines():
        if line.startswith('apiserver_request_total{'):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split('}', 1)[0]))
            counts[(labels.get('resource', ''), labels.get('verb', ''))] += int(float(line.rsplit(' ', 1)[1]))
    return counts


def quiet(kube: KubeAPI, *, period: float = 2.0, timeout: float = 30) -> collections.Counter[tuple[str, str]]:
    """Wait until the server has served no new requests to our resources for a while; the counts then."""
    def relevant(counts: collections.Counter[tuple[str, str]]) -> dict[tuple[str, str], int]:
        return {key: value for key, value in counts.items()
                if key[0] in (PLURAL, 'configmaps') and key[1] not in ('WATCH', 'LIST')}
    deadline = time.monotonic() + timeout
    last, since = metrics(kube), time.monotonic()
    while time.monotonic() - since < period:
        assert time.monotonic() < deadline, "The operator keeps sending requests."
        time.sleep(0.3)
        current = metrics(kube)
        if relevant(current) != relevant(last):
            last, since = current, time.monotonic()
    return last


def kopf_cli(*args: str, kubeconfig: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    """The ``kopf`` command as users run it; only the kubeconfig (and an operator's settings) come from the test."""
    env = {'KUBECONFIG': str(kubeconfig), 'PYTHONPATH': str(REPO), 'PATH': os.environ.get('PATH', '/usr/bin'),
           **extra}
    return subprocess.run([sys.executable, '-m', 'kopf', *args], capture_output=True, text=True, timeout=60,
                          cwd=REPO, env=env)


# The same work for every storage: objects whose 2nd handler fails once, then their deletion.
OBJECTS = 4
OPERATORS_REQUESTS = {(PLURAL, 'PATCH'), *(('configmaps', verb) for verb in ('GET', 'POST', 'PATCH', 'DELETE'))}


@pytest.mark.parametrize('storage', ['smart', 'sqlite', 'configmaps'])
def test_the_storages_keep_the_state_where_they_say_at_a_measured_cost(kube, namespace, start, tmp_path, storage):
    database = tmp_path / 'state.db'
    spec = f'sqlite:{database}' if storage == 'sqlite' else storage
    operator = start(E2E_STORAGE=spec)
    operator.wait_for_output('Serving')
    before = quiet(kube, period=1.0)

    names = [f'obj{index}' for index in range(OBJECTS)]
    for name in names:
        create(kube, namespace, name, fails=1, delay=0.5)
    seen: set[str] = set()  # every annotation key the objects ever had while being handled

    def created() -> bool:
        for name in names:
            seen.update(ours(kube.get(f'{collection(namespace)}/{name}')))
        return len(calls_of(start.calls, 'second')) == 2 * OBJECTS
    operator.wait(created, what="all creations", timeout=30)
    handled = quiet(kube)
    cycles = operator.output.count('Handling cycle for')

    # Where the state is, and where it is not.
    for name in names:
        obj = kube.get(f'{collection(namespace)}/{name}')
        assert obj['metadata']['finalizers'] == [FINALIZER]
        if storage == 'smart':
            assert list(ours(obj)) == [LAST]
        else:
            assert ours(obj) == {}
    if storage == 'smart':
        assert any(key.endswith('/second') for key in seen)  # the progress was in the object meanwhile
    else:
        assert seen == set()
    if storage == 'sqlite':
        with sqlite3.connect(database) as db:
            assert db.execute('SELECT COUNT(*) FROM kopf_progress').fetchone() == (0,)  # purged
            assert db.execute('SELECT COUNT(*) FROM kopf_diffbase').fetchone() == (OBJECTS,)
    if storage == 'configmaps':
        for name in names:
            obj = kube.get(f'{collection(namespace)}/{name}')
            uid = obj['metadata']['uid']
            configmap = kube.get(f'/api/v1/namespaces/{namespace}/configmaps/kopf-{uid}')
            assert configmap['metadata']['ownerReferences'] == [
                {'apiVersion': f'{GROUP}/{VERSION}', 'kind': KIND, 'name': name, 'uid': uid}]
            assert list(configmap['data']) == ['last-handled-configuration']
            assert json.loads(configmap['data']['last-handled-configuration']) == {
                'spec': {'field': 'value', 'fails': 1, 'delay': 0.5}}
    assert [c['retry'] for c in calls_of(start.calls, 'second', 'obj0')] == [0, 1]
    assert len(calls_of(start.calls, 'first')) == OBJECTS  # nothing ran twice

    # An update is seen as such (the diff-base is where the storage keeps it), and deletions clean up.
    kube.patch(f'{collection(namespace)}/obj0', {'spec': {'field': 'new'}})
    operator.wait(lambda: calls_of(start.calls, 'update'), what="the update", timeout=20)
    assert calls_of(start.calls, 'update')[0]['diff'] == [['change', ['spec', 'field'], 'value', 'new']]
    quiet(kube)
    before_deletion = metrics(kube)
    for name in names:
        kube.delete(f'{collection(namespace)}/{name}')
    operator.wait(lambda: all(kube.find(f'{collection(namespace)}/{name}') is None for name in names),
                  what="the deletions", timeout=30)
    deleted = quiet(kube)
    assert len(calls_of(start.calls, 'delete')) == OBJECTS
    if storage == 'sqlite':
        with sqlite3.connect(database) as db:
            assert db.execute('SELECT COUNT(*) FROM kopf_diffbase').fetchone() == (0,)  # erased when gone
    if storage == 'configmaps':
        assert kube.get(f'/api/v1/namespaces/{namespace}/configmaps')['items'] == []
    assert operator.stop() == 0

    # The cost, as the API server counted it (printed with -s; the figures in docs/configuration.rst).
    def cost(after, since):  # the operator's requests: the test itself only reads, creates and deletes objects
        return {f'{verb} {resource}': (after[(resource, verb)] - since[(resource, verb)]) / OBJECTS
                for resource, verb in sorted(after) if (resource, verb) in OPERATORS_REQUESTS
                and after[(resource, verb)] > since[(resource, verb)]}
    creation, deletion = cost(handled, before), cost(deleted, before_deletion)
    print(f"\n{storage}: {cycles / OBJECTS:.1f} cycles per creation; per object: creation {creation}, "
          f"deletion {deletion}")
    reads = creation.get('GET configmaps', 0)
    writes = sum(value for key, value in creation.items() if key.endswith('configmaps') and not key.startswith('GET'))
    attempts = 3  # 1st, 2nd, 2nd again
    if storage == 'configmaps':
        assert reads <= cycles / OBJECTS  # one read per cycle, for both storages together
        assert writes <= 1 + attempts + 2  # the start, each attempt, the purge, the diff-base
        assert creation[f'PATCH {PLURAL}'] == 1  # only the finalizer goes into the object
    else:
        assert reads == writes == 0
        assert creation[f'PATCH {PLURAL}'] <= (4 if storage == 'smart' else 1)


def test_inspect_then_migrate_and_the_new_storage_runs_nothing_again(kube, namespace, start, kubeconfig, tmp_path):
    old = start()  # the default: annotations
    old.wait_for_output('Serving')
    done = create(kube, namespace, 'done')
    waiting = create(kube, namespace, 'waiting', fails=1, delay=10)
    old.wait(lambda: len(read_calls(start.calls)) == 4 and LAST in ours(kube.get(done)),
             what="the first handlers", timeout=20)
    old.wait(lambda: json.loads(ours(kube.get(waiting)).get(f'{PREFIX}/second', '{}')).get('retries') == 1,
             what="the retry to be stored", timeout=20)
    assert old.stop() == 0

    # What is kept, as a table and as JSON.
    table = kopf_cli('inspect', RESOURCE, '-n', namespace, kubeconfig=kubeconfig)
    assert table.returncode == 0, table.stderr
    block = table.stdout.split('\n\n')[1]
    assert block.startswith(f'{PLURAL}.{VERSION}.{GROUP} {namespace}/waiting')
    assert f'finalizer:     {FINALIZER} (present)' in block
    assert re.search(r'second +waiting +1 .* \(in \d+s\) +not yet', block), block  # 10 s are not over yet
    assert re.search(r'first +succeeded +1', block), block
    listed = json.loads(kopf_cli('inspect', RESOURCE, '-n', namespace, '-o', 'json', kubeconfig=kubeconfig).stdout)
    assert [(o['name'], [h['id'] for h in o['handlers']], o['last_handled']) for o in listed] == [
        ('done', [], {'spec': {'field': 'value'}}),
        ('waiting', ['first', 'second'], None),
    ]

    # A dry run changes nothing; the migration moves everything; a second one finds nothing.
    migrate = ['migrate', RESOURCE, '-n', namespace, '--from', 'smart', '--to', 'configmaps']
    dry = kopf_cli(*migrate, '--dry-run', kubeconfig=kubeconfig)
    assert dry.returncode == 0 and 'waiting: would move 2 progress record(s) (first, second)' in dry.stdout
    assert ours(kube.get(waiting))
    moved = kopf_cli(*migrate, kubeconfig=kubeconfig)
    assert moved.returncode == 0, moved.stderr
    assert 'done: moved the last-handled configuration' in moved.stdout
    assert ours(kube.get(done)) == {} and ours(kube.get(waiting)) == {}
    again = kopf_cli(*migrate, kubeconfig=kubeconfig)
    assert 'done: nothing to move' in again.stdout and 'waiting: nothing to move' in again.stdout
    assert '2 object(s)' in again.stdout and again.returncode == 0
    there = json.loads(kopf_cli('inspect', RESOURCE, 'waiting', '-n', namespace, '--progress-storage', 'configmaps',
                                '-o', 'json', kubeconfig=kubeconfig).stdout)
    def progress(listed: list[dict[str, Any]]) -> list[tuple[str, str, int]]:
        return [(h['id'], h['state'].replace('due', 'waiting'), h['attempts']) for h in listed[0]['handlers']]
    assert progress(there) == [('first', 'succeeded', 1), ('second', 'waiting', 1)]  # or due by now
    operator_file = str(OPERATORS / 'storages.py')  # the storages as its startup handlers configure them
    configured = kopf_cli('inspect', RESOURCE, 'waiting', '-n', namespace, '-f', operator_file, '-o', 'json',
                          kubeconfig=kubeconfig, E2E_STORAGE='configmaps', E2E_RESOURCE=RESOURCE,
                          E2E_CALLS=str(tmp_path / 'inspect-calls.jsonl'))
    assert progress(json.loads(configured.stdout)) == progress(there), configured.stderr

    # The operator with the new storage continues: the retry is done, nothing else runs (no create, no update).
    # A later change of each object is handled as an update: what came before it in the object's order is done.
    new = start(E2E_STORAGE='configmaps')
    new.wait(lambda: len(calls_of(start.calls, 'second', 'waiting')) == 2, what="the retry", timeout=30)
    for path in [done, waiting]:
        kube.patch(path, {'spec': {'later': True}})
    new.wait(lambda: {c['name'] for c in calls_of(start.calls, 'update')} == {'done', 'waiting'},
             what="the later changes handled", timeout=30)
    calls = [c for c in read_calls(start.calls) if c['pid'] == new.process.pid]
    assert [c['handler'] for c in calls if c['handler'] != 'update'] == ['second']
    assert sorted((c['name'], c['diff']) for c in calls if c['handler'] == 'update') == [
        ('done', [['add', ['spec', 'later'], None, True]]),
        ('waiting', [['add', ['spec', 'later'], None, True]]),
    ]  # only the later changes: the migrated diff-base is as the old storage kept it
    assert calls_of(start.calls, 'second', 'waiting')[1]['retry'] == 1
    assert new.stop() == 0


def test_inspect_explains_in_one_line_what_it_cannot_do(kube, namespace, kubeconfig, tmp_path):
    missing = kopf_cli('inspect', 'nonexistents.e2e.kopf.dev', kubeconfig=kubeconfig)
    assert missing.returncode == 1
    assert missing.stderr.strip().count('\n') == 0 and 'nonexistents' in missing.stderr and 'Error:' in missing.stderr

    pruned = kopf_cli('migrate', RESOURCE, '-n', namespace, '--from', 'smart', '--to', 'status', kubeconfig=kubeconfig)
    assert pruned.returncode == 1 and pruned.stdout == ''  # nothing moved into fields the schema drops
    assert pruned.stderr.strip().count('\n') == 0 and 'status.kopf' in pruned.stderr, pruned.stderr

    # A user who may do nothing at all (a fresh service account without any role).
    kube.create(f'/api/v1/namespaces/{namespace}/serviceaccounts',
                {'apiVersion': 'v1', 'kind': 'ServiceAccount', 'metadata': {'name': 'nobody'}})
    token = kube.create(f'/api/v1/namespaces/{namespace}/serviceaccounts/nobody/token',
                        {'apiVersion': 'authentication.k8s.io/v1', 'kind': 'TokenRequest', 'spec': {}})
    config = yaml.safe_load(kubeconfig.read_text())
    config['users'] = [{'name': 'admin', 'user': {'token': token['status']['token']}}]
    restricted = tmp_path / 'nobody.kubeconfig'
    restricted.write_text(json.dumps(config))
    forbidden = kopf_cli('inspect', RESOURCE, '-n', namespace, kubeconfig=restricted)
    assert forbidden.returncode == 1
    assert forbidden.stderr.strip().count('\n') == 0 and 'forbidden' in forbidden.stderr.lower(), forbidden.stderr
    assert token['status']['token'] not in forbidden.stderr


def test_a_status_storage_on_a_pruning_schema_is_reported_before_any_object(kube, namespace, start):
    create(kube, namespace, 'existing')
    warned = start(E2E_STORAGE='status')
    warned.wait_for_output('Handling cycle')
    lines = warned.output.splitlines()
    [warning] = [index for index, line in enumerate(lines) if 'x-kubernetes-preserve-unknown-fields' in line]
    assert warning < min(index for index, line in enumerate(lines) if 'Handling cycle' in line)
    assert 'WARNING' in lines[warning] and f'CRD {PLURAL}.{GROUP}' in lines[warning]
    assert 'status.kopf.progress' in lines[warning] and 'kopf.AnnotationsProgressStorage' in lines[warning]
    assert warned.stop() == 0

    refused = start(E2E_STORAGE='status', E2E_FAIL_ON_PRUNING='1')
    assert refused.process.wait(timeout=30) == 1
    errors = [line for line in refused.output.splitlines() if line.startswith('Error:')]
    assert len(errors) == 1 and 'fail_on_pruning' in errors[0] and 'status.kopf' in errors[0]
    assert 'Traceback' not in refused.output


def test_annotations_over_the_limit_are_never_sent_and_never_block_the_deletion(kube, namespace, start):
    operator = start()
    operator.wait_for_output('Serving')
    # As with `kubectl apply`: the server keeps a copy of the whole object in an annotation.
    path = create(kube, namespace, 'big', annotations={KUBECTL: 'k' * 150_000}, blob='b' * 150_000)
    operator.wait(lambda: LAST in ours(kube.get(path)), what="the creation to be concluded", timeout=30)

    obj = kube.get(path)
    stored = json.loads(obj['metadata']['annotations'][LAST])
    assert stored['spec']['field'] == 'value' and '$kopf-trimmed' in stored['spec']['blob']
    assert 'rejected' not in operator.output
    [error] = [line for line in operator.output.splitlines() if "over Kubernetes' limit" in line]
    assert 'ERROR' in error and f'{KIND} {namespace}/big' in error and KUBECTL in error and 'spec.blob' in error

    kube.patch(path, {'spec': {'field': 'changed'}})
    operator.wait(lambda: calls_of(start.calls, 'update'), what="the update", timeout=20)
    assert calls_of(start.calls, 'update')[0]['diff'] == [['change', ['spec', 'field'], 'value', 'changed']]
    handlers = [c['handler'] for c in read_calls(start.calls)]
    before_update = handlers[:handlers.index('update')]  # all that came before in the object's order
    assert before_update in (['first', 'second'], ['second', 'first'])  # no handler ran again

    kube.delete(path)
    operator.wait(lambda: kube.find(path) is None, what="the deletion", timeout=20)
    assert [c['handler'] for c in read_calls(start.calls)].count('delete') == 1
    assert [c['handler'] for c in read_calls(start.calls)].count('first') == 1
    assert operator.stop() == 0


def test_a_sqlite_file_that_cannot_be_used_stops_the_operator_at_startup_naming_it(start, tmp_path):
    path = tmp_path / 'no-such-directory' / 'state.db'
    refused = start(E2E_STORAGE=f'sqlite:{path}')
    assert refused.process.wait(timeout=30) == 1
    errors = [line for line in refused.output.splitlines() if line.startswith('Error:')]
    assert len(errors) == 1 and str(path) in errors[0] and 'does not exist' in errors[0]
    assert 'Traceback' not in refused.output and 'Handling cycle' not in refused.output
