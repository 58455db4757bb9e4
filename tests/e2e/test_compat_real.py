"""
Real operators' habits, here and under the released Kopf 1.45.2 side by side.

Kopf's own examples are small and written by Kopf's author; operators written
by other people rely on more: resources named by their kind or singular, a
module beside the operator file, a file called ``operator.py``, the official
``kubernetes`` client used without configuring it, ``**kwargs`` passed on to
their own helpers, handlers filtered to a few objects among many,
sub-handlers of very different durations, and login handlers that take the
official client's or pykube's configuration. Each test runs one small operator
written in that style (``operators/real/``) under both frameworks, each in a
namespace of its own, and compares what they do, from the server's side and
from the handlers' own records of their calls.
"""
from __future__ import annotations

import collections
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks import apimetrics
from kopf.testing import KubeAPI
from tests.e2e import peers
from tests.e2e.harness import OPERATORS, REPO, TIMEOUT, OperatorProcess, kopf_run, read_calls

KOPF = '1.45.2'
REAL = OPERATORS / 'real'

NAMES_CRD: dict[str, Any] = {
    'apiVersion': 'apiextensions.k8s.io/v1',
    'kind': 'CustomResourceDefinition',
    'metadata': {'name': 'kopfnames.kopf.dev'},
    'spec': {
        'group': 'kopf.dev',
        'scope': 'Namespaced',
        'names': {'kind': 'KopfName', 'plural': 'kopfnames', 'singular': 'kopfname', 'shortNames': ['kn'],
                  'categories': ['kopf-names']},
        'versions': [{
            'name': 'v1', 'served': True, 'storage': True,
            'schema': {'openAPIV3Schema': {'type': 'object', 'x-kubernetes-preserve-unknown-fields': True}},
        }],
    },
}


class Side:
    """One framework running one operator in a namespace of its own."""

    def __init__(self, framework: str, namespace: str, workdir: Path, start: Callable[[str], OperatorProcess],
                 liveness: str | None) -> None:
        self.framework = framework
        self.namespace = namespace
        self.calls = workdir / 'calls.jsonl'
        self.liveness = liveness
        self._start = start
        self.runs = 0
        self.process = start(f'operator-{self.runs}.log')

    def __repr__(self) -> str:
        return f'<{self.framework} in {self.namespace}>'

    def records(self, handler: str | None = None) -> list[dict[str, Any]]:
        return [call for call in read_calls(self.calls) if handler is None or call['handler'] == handler]

    def wait(self, condition: Callable[[], Any], *, what: str, timeout: float = TIMEOUT) -> Any:
        return self.process.wait(condition, what=f"{what} ({self.framework})", timeout=timeout)

    def kill_and_restart(self) -> None:
        """SIGKILL, as a crash or an evicted pod ends it; then a new process, as the deployment starts one."""
        self.process.kill()
        self.runs += 1
        self.process = self._start(f'operator-{self.runs}.log')

    def configmaps(self) -> str:
        return f'/api/v1/namespaces/{self.namespace}/configmaps'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return int(s.getsockname()[1])


@pytest.fixture()
def sides(kube: KubeAPI, kubeconfig: Path, namespace: str, tmp_path: Path) -> Iterator[Callable[..., list[Side]]]:
    """
    ``sides(*scripts, ...)``: the operator under ours and under Kopf, each in a namespace of its own.

    ``packages`` are installed beside Kopf (ours has the test dependencies);
    with a ``tree``, it is copied into each side's directory, which is the
    working directory of both, and the scripts are paths within it;
    ``liveness`` serves a liveness endpoint on a port of each side's own.
    """
    started: list[Side] = []

    def start(*scripts: Path, packages: tuple[str, ...] = (), tree: Path | None = None,
              liveness: bool = False) -> list[Side]:
        result = []
        for framework in ['ours', KOPF]:
            ns = namespace if framework == 'ours' else f'{namespace[:50]}-kopf'
            kube.ensure_namespace(ns)
            workdir = tmp_path / framework
            workdir.mkdir(parents=True, exist_ok=True)
            if tree is not None:
                shutil.copytree(tree, workdir / tree.name)
            url = f'http://127.0.0.1:{free_port()}/healthz' if liveness else None
            args = ['--liveness', url] if url else []
            env = {'E2E_CALLS': str(workdir / 'calls.jsonl')}
            paths = [str(script) for script in scripts]
            kopf = peers.ensure(framework, packages=packages) if framework != 'ours' else None

            def launch(log: str, ns: str = ns, workdir: Path = workdir, env: dict[str, str] = env,
                       args: list[str] = args, kopf: Path | None = kopf, paths: list[str] = paths) -> OperatorProcess:
                if kopf is None:
                    argv = [*kopf_run(Path(paths[0]), namespace=ns), *paths[1:], *args]
                    return OperatorProcess(argv, kubeconfig=kubeconfig, log=workdir / log, env=env,
                                           cwd=workdir if tree is not None else REPO)
                argv = [str(kopf), 'run', *paths, '--standalone', '--verbose', '-n', ns, *args]
                return OperatorProcess(argv, kubeconfig=kubeconfig, log=workdir / log, cwd=workdir,
                                       env={**env, 'PYTHONPATH': ''})

            side = Side(framework, ns, workdir, launch, url)
            started.append(side)
            result.append(side)
        return result

    try:
        yield start
    finally:
        for side in started:
            side.process.kill()


def configmap(name: str, *, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
              **data: str) -> dict[str, Any]:
    return {'apiVersion': 'v1', 'kind': 'ConfigMap', 'data': data,
            'metadata': {'name': name, 'labels': labels or {}, 'annotations': annotations or {}}}


# 1. Resources named by kind, singular, short name, in any case, in every positional and keyword form.

def test_resource_names_in_every_form_as_in_kopf(kube: KubeAPI, sides: Callable[..., list[Side]]) -> None:
    kube.apply_crd(NAMES_CRD)
    both = sides(REAL / 'resource_names.py')
    for side in both:
        kube.create(side.configmaps(), configmap('cm1', labels={'names': 'yes'}))
        kube.create(f'/apis/kopf.dev/v1/namespaces/{side.namespace}/kopfnames', {
            'apiVersion': 'kopf.dev/v1', 'kind': 'KopfName', 'metadata': {'name': 'kn1', 'labels': {'names': 'yes'}}})
    configmap_handlers = {'v1-kind', 'core-singular', 'v1-short', 'short-upper', 'dotted-core', 'kind-keyword',
                          'plural-keyword'}
    custom_handlers = {'singular', 'group-singular', 'dotted-kind', 'apiversion-kind', 'short', 'shortcut-keyword',
                       'category', 'callable'}
    expected = {(handler, 'ConfigMap', 'cm1') for handler in configmap_handlers} | \
               {(handler, 'KopfName', 'kn1') for handler in custom_handlers}

    def seen(side: Side) -> set[tuple[str, str, str]]:
        return {(call['handler'], call['kind'], call['name']) for call in side.records()}

    # Names match in any case here, as kubectl's do; Kopf matches them exactly, and does not serve 'CM' (it warns).
    kopfs = expected - {('short-upper', 'ConfigMap', 'cm1')}
    ours, theirs = both
    ours.wait(lambda: seen(ours) >= expected, what="every form of the names served")
    theirs.wait(lambda: seen(theirs) >= kopfs, what="every form of the names served")
    assert seen(ours) == expected and seen(theirs) == kopfs  # and nothing else: each sees its own resource only


# 2, 3. The operator file imports its siblings; a file called operator.py shadows nothing.

def test_operator_files_import_their_siblings_as_in_kopf(kube: KubeAPI, sides: Callable[..., list[Side]]) -> None:
    # Relative paths from the project's root, as in a Dockerfile's `kopf run src/operator.py ...`.
    both = sides(Path('loading/operator.py'), Path('loading/extra/handlers.py'), tree=REAL / 'loading')
    for side in both:
        kube.create(side.configmaps(), configmap('cm1', labels={'loading': 'yes'}))
    for side in both:
        side.wait(lambda s=side: s.records('loaded') and s.records('also_loaded'), what="both files loaded")
    ours, theirs = both
    assert ours.records('loaded')[0] == theirs.records('loaded')[0] == {
        'handler': 'loaded', 'name': 'cm1', 'child': 'cm1-child', 'third': '1/3'}
    assert ours.records('also_loaded')[0] == theirs.records('also_loaded')[0] == {
        'handler': 'also_loaded', 'name': 'cm1', 'suffix': 'extra'}


# 4, 8. The official client, used unconfigured; its models adopted as children.

def test_kubernetes_client_is_configured_by_the_login_as_in_kopf(
        kube: KubeAPI, sides: Callable[..., list[Side]]) -> None:
    both = sides(REAL / 'kubernetes_client.py', packages=('kubernetes',))
    for side in both:
        kube.create(side.configmaps(), configmap('parent', annotations={'client': 'parent'}, key='value'))
    children = {}
    for side in both:
        call, = side.wait(lambda s=side: s.records('create_child'), what="the child created with the client")
        child = kube.get(f"{side.configmaps()}/{call['child']}")
        parent = kube.get(f"{side.configmaps()}/parent")
        children[side.framework] = child
        assert child['data'] == {'from': 'parent'}
        assert child['metadata']['name'].startswith('parent-')  # named after its owner by kopf.adopt(model)
        assert child['metadata']['ownerReferences'] == [{
            'apiVersion': 'v1', 'kind': 'ConfigMap', 'name': 'parent', 'uid': parent['metadata']['uid'],
            'controller': True, 'blockOwnerDeletion': True}]
    assert children['ours']['metadata'].get('labels') == children[KOPF]['metadata'].get('labels')


# 5. The keyword arguments of every handler kind, and a helper with a `config` of its own.

def test_keyword_arguments_of_every_handler_kind_as_in_kopf(kube: KubeAPI, sides: Callable[..., list[Side]]) -> None:
    both = sides(REAL / 'kwargs.py', liveness=True)
    for side in both:
        kube.create(side.configmaps(), configmap('cm1', labels={'kwargs': 'yes'}, x='1'))
    for side in both:
        side.wait(lambda s=side: s.records('timer') and s.records('subhandler') and s.records('helper'),
                  what="the handlers of the creation, the daemon and the timer")
        assert side.liveness is not None
        side.wait(lambda s=side: _probe(s.liveness), what="the probes through the liveness endpoint")
        kube.patch(f"{side.configmaps()}/cm1", {'data': {'x': '2'}})
    for side in both:
        side.wait(lambda s=side: s.records('update') and s.records('field'), what="the update handled")
        side.kill_and_restart()
    for side in both:
        side.wait(lambda s=side: s.records('resume'), what="the resuming after a restart")
        kube.delete(f"{side.configmaps()}/cm1")
    for side in both:
        side.wait(lambda s=side: s.records('delete'), what="the deletion handled")
        assert side.process.stop() == 0
    ours, theirs = both

    def kwargs(side: Side) -> dict[str, set[str]]:
        result: dict[str, set[str]] = collections.defaultdict(set)
        for call in side.records():
            result[call['handler']].update(call['kwargs'])
        return dict(result)

    mine, kopfs = kwargs(ours), kwargs(theirs)
    assert mine['helper'] == kopfs['helper'] == {'replicas'}  # the daemon's helper got no second `config`
    assert set(mine) == set(kopfs) >= {'startup', 'login', 'probe', 'cleanup', 'index', 'create', 'subhandler',
                                       'update', 'field', 'resume', 'delete', 'event', 'daemon', 'timer'}
    for kind in sorted(mine):
        ours_alone = {'config'} if kind in ('startup', 'login', 'probe', 'cleanup') else set()  # docs/handlers.rst
        assert mine[kind] == kopfs[kind] | ours_alone, kind


# 7. A restart over handled objects calls no handler again, and the next change is handled as usual.

def test_a_restart_over_handled_objects_calls_nothing_and_the_next_change_is_handled_as_in_kopf(
        kube: KubeAPI, sides: Callable[..., list[Side]]) -> None:
    both = sides(REAL / 'restart.py', packages=('kubernetes',))
    names = ['cm1', 'cm2', 'cm3']
    for side in both:
        for name in names:
            kube.create(side.configmaps(), configmap(name, x='1'))
    for side in both:
        side.wait(lambda s=side: {c['name'] for c in s.records('create')} >= set(names), what="the creations")
    versions = {}
    for side in both:  # whatever the operator wrote has landed before the restart (both write it in one patch)
        side.wait(lambda s=side: all('kopf.zalando.org/last-handled-configuration' in
                                     (kube.get(f"{s.configmaps()}/{name}")['metadata'].get('annotations') or {})
                                     for name in names), what="the handled configurations stored")
        versions[side.framework] = {name: kube.get(f"{side.configmaps()}/{name}")['metadata']['resourceVersion']
                                    for name in names}
        side.kill_and_restart()
    for side in both:
        kube.patch(f"{side.configmaps()}/cm2", {'data': {'x': '2'}})
    for side in both:
        side.wait(lambda s=side: s.records('update'), what="the change after the restart")
        assert side.process.stop() == 0, side.process.output
    for side in both:
        creations = collections.Counter(c['name'] for c in side.records('create'))
        assert all(creations[name] == 1 for name in names), creations  # nothing created again
        assert [(c['name'], c['data']) for c in side.records('update')] == [('cm2', {'x': '2'})]
        for name in ('cm1', 'cm3'):  # not written to by the restarted operator
            assert kube.get(f"{side.configmaps()}/{name}")['metadata']['resourceVersion'] == \
                versions[side.framework][name], (side, name)


def _probe(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


# 6. Objects that no handler selects are never written to.

def test_objects_selected_by_no_handler_are_never_written_as_in_kopf(
        kube: KubeAPI, sides: Callable[..., list[Side]]) -> None:
    both = sides(REAL / 'filtered.py')
    for side in both:
        kube.create(side.configmaps(), configmap('selected', labels={'rp': 'filtered'}, x='1'))
    for side in both:  # the selected one is handled (its diff-base stored), so the operator is at work
        side.wait(lambda s=side: LAST_HANDLED in _annotations(kube.get(f"{s.configmaps()}/selected")),
                  what="the selected object's diff-base")

    before = apimetrics.parse(kube.text('/metrics'))
    for side in both:  # changed with PUT, so that every PATCH counted is an operator's
        for index in range(3):
            created = kube.create(side.configmaps(), configmap(f'other-{index}', x='1'))
            kube.request('PUT', f"{side.configmaps()}/other-{index}", {**created, 'data': {'x': '2'}})
    for side in both:  # both have seen the last change of every object (their event handlers)
        for index in range(3):
            rv = kube.get(f"{side.configmaps()}/other-{index}")['metadata']['resourceVersion']
            side.wait(lambda s=side, i=index, rv=rv: any(c['name'] == f'other-{i}' and c['rv'] == rv
                                                         for c in s.records('seen')),
                      what=f"the last change of other-{index} seen")
    after = apimetrics.parse(kube.text('/metrics'))

    patches = {kind: count for kind, count in apimetrics.delta(after, before).items()
               if kind.verb == 'PATCH' and kind.resource == 'configmaps'}
    assert patches == {}  # not one request: no diff-base, no finalizer, nothing
    for side in both:
        for index in range(3):
            obj = kube.get(f"{side.configmaps()}/other-{index}")
            assert not _annotations(obj)
            assert {entry['manager'] for entry in obj['metadata']['managedFields']} <= {'Python-urllib'}, obj
        assert not side.records('updated')


LAST_HANDLED = 'kopf.zalando.org/last-handled-configuration'


def _annotations(obj: dict[str, Any]) -> dict[str, str]:
    return dict(obj['metadata'].get('annotations') or {})


# 7. A finished sub-handler is stored while its sibling still runs.

def test_a_finished_subhandler_is_persisted_while_a_sibling_runs(
        kube: KubeAPI, sides: Callable[..., list[Side]]) -> None:
    both = sides(REAL / 'subhandlers.py')
    for side in both:
        kube.create(side.configmaps(), configmap('o1', labels={'sub': 'yes'}))

    def quick_stored(side: Side) -> bool:
        annotations = _annotations(kube.get(f"{side.configmaps()}/o1"))
        return any(key.startswith('kopf.zalando.org/parent.quick') and json.loads(value).get('success')
                   for key, value in annotations.items())

    for side in both:
        side.wait(lambda s=side: quick_stored(s) and s.records('slow'),
                  what="the quick sub-handler's success stored while the slow one runs")
        side.kill_and_restart()  # in the middle of the slow one
    for side in both:
        side.wait(lambda s=side: LAST_HANDLED in _annotations(kube.get(f"{s.configmaps()}/o1")),
                  what="the creation handled after the restart")
    for side in both:
        calls = collections.Counter(call['handler'] for call in side.records())
        assert calls == {'quick': 1, 'slow': 2}, side  # the finished one is never run again


# 9. A login handler that takes the official client's or pykube's configuration, as many operators have.

@pytest.mark.parametrize('via, package', [('client', 'kubernetes'), ('pykube', 'pykube-ng')])
def test_a_login_handler_with_a_library_login_as_in_kopf(
        kube: KubeAPI, sides: Callable[..., list[Side]], via: str, package: str) -> None:
    both = sides(REAL / f'login_{via}.py', packages=(package,))
    for side in both:
        for name in ['cm1', 'cm2']:
            kube.create(side.configmaps(), configmap(name, labels={'login': via}))
    for side in both:
        side.wait(lambda s=side: len(s.records('created')) == 2, what="both objects handled after the login")
    ours, theirs = both
    assert [call['server'] for call in ours.records('login')] == [call['server'] for call in theirs.records('login')]
    assert ours.records('login')[0]['server'].rstrip('/') == kube.server.rstrip('/')
    if via == 'client':  # the handlers' own client is configured by the login, as in Kopf
        for side in both:
            assert all(call['name'] in call['listed'] for call in side.records('created')), side.records()
    for side in both:
        assert side.process.stop() == 0


# The command line: every option of Kopf's commands is an option of ours.

def _options(argv: list[str], env: dict[str, str] | None = None) -> set[str]:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    return set(re.findall(r'(?<![\w-])(-[a-zA-Z]|--[a-z][-a-z]*)', result.stdout))


@pytest.mark.parametrize('command', ['run', 'freeze', 'resume'])
def test_every_option_of_kopfs_commands_is_taken(command: str) -> None:
    kopf = str(peers.ensure(KOPF))
    theirs = _options([kopf, command, '--help'], env=peers.clean_env())
    ours = _options([sys.executable, '-m', 'kopf', command, '--help'],
                    env={**os.environ, 'PYTHONPATH': str(REPO)})
    assert {'-v', '--verbose', '-n', '--namespace'} <= theirs  # the parsing of the help text works
    assert theirs - ours == set()
    assert _options([kopf, '--help'], env=peers.clean_env()) <= _options(
        [sys.executable, '-m', 'kopf', '--help'], env={**os.environ, 'PYTHONPATH': str(REPO)})
