"""
Running an operator as a ServiceAccount bound only to the role that ``kopf manifests`` generated for it.

:func:`generate` runs ``kopf manifests`` for the operator of ``operators/rbac.py``
(one feature at a time); :func:`run` applies the ServiceAccount and the roles
into a fresh namespace, gets a token for the account from the TokenRequest
API, runs ``kopf run`` with only that token, drives the feature's scenario,
and stops the operator gracefully. :func:`variants` takes the generated
roles apart: every role with one verb of one rule less.

A run *fails observably* when its log has a refusal in it (a 403, the word
"forbidden", or a missing permission named) or the operator exits with an
error; a run with the whole role must do all its work without either.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from kopf.testing import ControlPlane, KubeAPI, KubeAPIError
from tests.e2e.harness import FORBIDDEN, OPERATORS, REPO, OperatorProcess, read_calls

OPERATOR = OPERATORS / 'rbac.py'
PLACEHOLDER = 'e2e-rbac-placeholder'
REFUSAL = re.compile(FORBIDDEN + '|permission')
# The CRDs are listed first and watched afterwards: a scenario shorter than that would not notice a missing 'watch'.
CRDS_WATCHED = "The watch of customresourcedefinitions.v1.apiextensions.k8s.io is open"

RBAC = '/apis/rbac.authorization.k8s.io/v1'
WIDGETS = '/apis/rbac.e2e.kopf.dev/v1'

_COLLECTIONS = {
    'ServiceAccount': '/api/v1/namespaces/{namespace}/serviceaccounts',
    'Role': RBAC + '/namespaces/{namespace}/roles',
    'RoleBinding': RBAC + '/namespaces/{namespace}/rolebindings',
    'ClusterRole': RBAC + '/clusterroles',
    'ClusterRoleBinding': RBAC + '/clusterrolebindings',
}


def generate(feature: str, *args: str, kubeconfig: Path, only: str = 'rbac', env: dict[str, str] | None = None) -> str:
    """The text that ``kopf manifests`` prints for the feature's operator (in the placeholder namespace)."""
    command = [sys.executable, '-m', 'kopf', 'manifests', str(OPERATOR), '-n', PLACEHOLDER, '--name', PLACEHOLDER,
               '--only', only, *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=REPO,
                            env={'PATH': '/usr/bin:/bin', 'PYTHONPATH': str(REPO), 'KUBECONFIG': str(kubeconfig),
                                 'E2E_FEATURE': feature, 'E2E_MANAGED': f'{PLACEHOLDER}.e2e.kopf.dev',
                                 **(env or {})})
    assert result.returncode == 0, result.stderr
    return result.stdout


def documents(text: str, namespace: str) -> list[dict[str, Any]]:
    """The generated objects, moved from the placeholder namespace (and name) to the run's own."""
    return [doc for doc in yaml.safe_load_all(text.replace(PLACEHOLDER, namespace)) if doc]


@dataclasses.dataclass(frozen=True)
class Removal:
    """Which verb of which rule of which role is taken away (``None``: the whole role as generated)."""

    kind: str
    rule: int
    verb: str
    resources: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.kind}: {', '.join(self.resources)} without {self.verb}"


def variants(text: str) -> Iterator[Removal]:
    """Every verb of every rule of every generated role, one at a time."""
    for doc in yaml.safe_load_all(text):
        if doc and doc['kind'] in ('Role', 'ClusterRole'):
            for index, rule in enumerate(doc['rules']):
                for verb in rule['verbs']:
                    yield Removal(doc['kind'], index, verb, tuple(rule['resources']))


def without(docs: list[dict[str, Any]], removal: Removal | None) -> list[dict[str, Any]]:
    """The objects with the removal done: the verb taken out of the rule (the rule too, if it was its only verb)."""
    docs = copy.deepcopy(docs)
    if removal is None:
        return docs
    for doc in docs:
        if doc['kind'] == removal.kind:
            rule = doc['rules'][removal.rule]
            rule['verbs'] = [verb for verb in rule['verbs'] if verb != removal.verb]
            if not rule['verbs']:
                del doc['rules'][removal.rule]
    return docs


class Context:
    """One run: its namespace, the files where the operator records its calls, and the process."""

    def __init__(self, kube: KubeAPI, namespace: str, workdir: Path) -> None:
        self.kube = kube
        self.namespace = namespace
        self.calls = workdir / 'calls.jsonl'
        self.gate = workdir / 'gate'
        self.gate.mkdir(parents=True, exist_ok=True)
        self.managed = f'{namespace}.e2e.kopf.dev'
        self.process: OperatorProcess | None = None

    @property
    def refused(self) -> bool:
        """Whether the operator has failed observably: a refusal in its log, or an exit with an error."""
        assert self.process is not None
        exited = self.process.process.poll()
        return bool(REFUSAL.search(self.process.output)) or (exited is not None and exited != 0)

    def until(self, condition: Callable[[], Any], timeout: float = 30) -> bool:
        """Wait for the condition; give up early once the operator has failed (or has exited)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return True
            assert self.process is not None
            if self.refused or self.process.process.poll() is not None:
                return False
            time.sleep(0.1)
        return False

    def called(self, handler: str, name: str) -> bool:
        return any(call['handler'] == handler and call['name'] == name for call in read_calls(self.calls))

    # The objects of the scenarios.

    def widget(self, name: str, *, size: int = 1, shape: str = 'round', labels: dict[str, str] | None = None) -> Any:
        body = {'apiVersion': 'rbac.e2e.kopf.dev/v1', 'kind': 'Widget', 'spec': {'size': size, 'shape': shape},
                'metadata': {'name': name, 'labels': labels or {}}}
        return self.kube.create(f'{WIDGETS}/namespaces/{self.namespace}/widgets', body)

    def path(self, name: str) -> str:
        return f'{WIDGETS}/namespaces/{self.namespace}/widgets/{name}'

    def find(self, name: str) -> Any:
        return self.kube.find(self.path(name))

    def held(self, name: str) -> bool:
        """Hold the operator in its filter, change the object meanwhile, and let the operator go on."""
        if not self.until(lambda: (self.gate / f'{name}.held').exists()):
            return False
        self.kube.patch(self.path(name), {'metadata': {'labels': {'e2e/changed': 'meanwhile'}}})
        (self.gate / f'{name}.go').touch()
        return True


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What a run did: whether its scenario completed, whether it failed observably, and its log."""

    completed: bool
    refused: bool
    exit_code: int
    log: str


def _follows_crds(docs: list[dict[str, Any]]) -> bool:
    """Whether the roles let the operator list or watch the CRDs (and so it will try to watch them)."""
    return any('customresourcedefinitions' in rule.get('resources', ())
               for doc in docs if doc['kind'] in ('ClusterRole', 'Role') for rule in doc.get('rules', ()))


def run(
        *,
        control_plane: ControlPlane,
        kube: KubeAPI,
        feature: str,
        docs: list[dict[str, Any]],
        scenario: Callable[[Context], bool],
        workdir: Path,
        args: tuple[str, ...] = (),
) -> Outcome:
    """Run the feature's operator in a namespace of its own, as its ServiceAccount with only these roles."""
    namespace = docs[0]['metadata']['namespace']
    kube.ensure_namespace(namespace)
    created = apply(kube, docs, namespace=namespace)
    ctx = Context(kube, namespace, workdir)
    try:
        account = next(doc for doc in docs if doc['kind'] == 'ServiceAccount')['metadata']['name']
        config = token_kubeconfig(control_plane, kube, namespace, account, workdir / 'kubeconfig')
        command = [sys.executable, '-m', 'kopf', 'run', str(OPERATOR), '--verbose', '-n', namespace, *args]
        ctx.process = process = OperatorProcess(command, kubeconfig=config, log=workdir / 'operator.log',
                                                env={'E2E_FEATURE': feature, 'E2E_CALLS': str(ctx.calls),
                                                     'E2E_GATE': str(ctx.gate), 'E2E_MANAGED': ctx.managed})
        try:
            if _follows_crds(docs):
                ctx.until(lambda: CRDS_WATCHED in process.output)  # a refusal of it ends the wait as well
            completed = scenario(ctx)
        finally:
            code = stop(ctx.process)
        return Outcome(completed=completed, refused=ctx.refused, exit_code=code, log=ctx.process.output)
    finally:
        for path in created:
            kube.delete(path)
        for kind in ('validating', 'mutating'):
            kube.delete(f'/apis/admissionregistration.k8s.io/v1/{kind}webhookconfigurations/{ctx.managed}')


def stop(process: OperatorProcess) -> int:
    """Stop gracefully (what an operator does at its exit is part of its work); kill it if it hangs."""
    try:
        return process.stop(timeout=20)
    except AssertionError:
        return -9


def apply(kube: KubeAPI, docs: list[dict[str, Any]], *, namespace: str) -> list[str]:
    """Create the ServiceAccount and the roles; the paths of the cluster-wide ones, to be deleted afterwards."""
    created: list[str] = []
    for doc in docs:
        collection = _COLLECTIONS[doc['kind']].format(namespace=doc['metadata'].get('namespace', namespace))
        body = {key: value for key, value in doc.items()}
        try:
            kube.create(collection, body)
        except KubeAPIError as e:
            if e.status != 409:
                raise
        if 'namespace' not in doc['metadata']:
            created.append(f"{collection}/{doc['metadata']['name']}")
    return created


def token_kubeconfig(control_plane: ControlPlane, kube: KubeAPI, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig with a token of the ServiceAccount, from the TokenRequest API, and nothing else."""
    request = {'apiVersion': 'authentication.k8s.io/v1', 'kind': 'TokenRequest', 'spec': {'expirationSeconds': 3600}}
    answer = kube.request('POST', f'/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token', request)
    q = json.dumps
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: plane\n  cluster:\n    server: {q(control_plane.server)}\n"
        f"    certificate-authority: {q(str(control_plane.ca_file))}\n"
        f"users:\n- name: {q(account)}\n  user:\n    token: {q(answer['status']['token'])}\n"
        f"contexts:\n- name: plane\n  context:\n    cluster: plane\n    user: {q(account)}\n"
        f"    namespace: {q(namespace)}\n"
        "current-context: plane\n")
    return path


def fresh_namespace(prefix: str) -> str:
    return f"e2e-rbac-{prefix}-{uuid.uuid4().hex[:6]}"
