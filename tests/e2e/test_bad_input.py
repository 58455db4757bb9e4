"""
Bad input where the server matters: corrupt progress on real objects, and an operator with few permissions.

* Corrupt records, as ``kubectl edit`` leaves them, cost one warning each and
  nothing else: every handler runs once, no update handler fires for the
  purge of the corrupt annotations, and the deletion goes through.
* An operator that runs as a plain user, bound only to the Role that
  docs/install.rst documents, does all its work; without a permission, it
  says in one line which verb on which resource it lacks.
"""
from __future__ import annotations

import json
import re
import ssl
import textwrap
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from kopf.testing import KubeAPI, KubeAPIError
from tests.e2e.harness import FORBIDDEN, REPO, handlers_called

PREFIX = 'kopf.zalando.org'
LAST_HANDLED = f'{PREFIX}/last-handled-configuration'
# The examples' resource as the docs' Role has it, under names of its own: other tests define kopfexamples.
GROUP, PLURAL, KIND = 'rbac.e2e.kopf.dev', 'rbacexamples', 'RbacExample'


def concluded(kube: KubeAPI, path: str) -> dict[str, Any] | None:
    """The object once its cause is concluded: the diff-base is stored, no progress is left."""
    obj = kube.get(path)
    annotations = obj['metadata'].get('annotations') or {}
    progress = [key for key in annotations if key.startswith(f'{PREFIX}/') and key != LAST_HANDLED]
    return obj if LAST_HANDLED in annotations and not progress else None


def test_corrupt_records_cost_one_warning_each_and_nothing_else(kube, namespace, operators, tmp_path):
    calls = tmp_path / 'calls.jsonl'
    operator = operators('tracing.py', E2E_RESOURCE='configmaps', E2E_CALLS=str(calls), E2E_SECOND_FAILS='0')
    operator.wait_for_output('Serving configmaps')
    corrupt = {
        f'{PREFIX}/first': '{"subrefs": 5}',
        f'{PREFIX}/second': '{"started": "0001-01-01T00:00:00+01:00"}',
        f'{PREFIX}/third': 'not json',
    }
    path = f'/api/v1/namespaces/{namespace}/configmaps/cm'
    kube.create(f'/api/v1/namespaces/{namespace}/configmaps', {
        'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': 'cm', 'annotations': corrupt},
        'data': {'key': 'value'}})

    obj = operator.wait(lambda: concluded(kube, path), what="the creation to be concluded")
    assert json.loads(obj['metadata']['annotations'][LAST_HANDLED]) == {'data': {'key': 'value'}}
    assert sorted(handlers_called(calls)) == ['first', 'second', 'third']
    warnings = [line for line in operator.output.splitlines() if 'Ignoring the unreadable progress' in line]
    assert len(warnings) == 3, operator.output
    for key in corrupt:
        assert sum(key in line for line in warnings) == 1

    kube.patch(path, {'data': {'key': 'changed'}})  # a real change: one update, with only that in its diff
    operator.wait(lambda: 'update' in handlers_called(calls), what="the update handler")
    updates = [call for call in json.loads(f'[{",".join(calls.read_text().splitlines())}]')
               if call['handler'] == 'update']
    assert [update['diff'] for update in updates] == [[['change', ['data', 'key'], 'value', 'changed']]]

    kube.delete(path)
    operator.wait(lambda: kube.find(path) is None, what="the deletion to go through")
    assert handlers_called(calls).count('delete') == 1
    assert 'Traceback' not in operator.output
    assert operator.stop() == 0


# RBAC: the operator as a user bound only to the documented Role.

def documented_role(namespace: str, user: str, *, drop: tuple[str, str] | None = None) -> list[dict[str, Any]]:
    """The Role and RoleBinding of docs/install.rst, for this namespace, user and resource; ``drop`` removes a verb."""
    text = (REPO / 'docs' / 'install.rst').read_text()
    section = text[text.index('Permissions (RBAC)'):]
    block = section[section.index('.. code-block:: yaml') + len('.. code-block:: yaml'):]
    lines = []
    for line in block.splitlines()[1:]:
        if line and not line.startswith(' '):
            break
        lines.append(line)
    role, binding = yaml.safe_load_all(textwrap.dedent('\n'.join(lines)))
    assert role['kind'] == 'Role' and binding['kind'] == 'RoleBinding'
    for document in (role, binding):
        document['metadata']['namespace'] = namespace
    binding['subjects'] = [{'kind': 'User', 'name': user, 'apiGroup': 'rbac.authorization.k8s.io'}]
    for rule in role['rules']:
        rule['apiGroups'] = [GROUP if group == 'kopf.dev' else group for group in rule['apiGroups']]
        rule['resources'] = [resource.replace('kopfexamples', PLURAL) for resource in rule['resources']]
    assert {PLURAL, f'{PLURAL}/status', 'events'} <= {r for rule in role['rules'] for r in rule['resources']}
    if drop is not None:
        resource, verb = drop
        for rule in role['rules']:
            if resource in rule['resources']:
                rule['verbs'] = [v for v in rule['verbs'] if v != verb]
    return [role, binding]


@pytest.fixture(scope='module')
def rbacexamples(kube: KubeAPI) -> None:
    """The examples' CRD (with the status subresource), renamed."""
    crd = yaml.safe_load((REPO / 'examples' / 'crd.yaml').read_text())
    crd['metadata']['name'] = f'{PLURAL}.{GROUP}'
    crd['spec']['group'] = GROUP
    crd['spec']['names'] = {'plural': PLURAL, 'singular': KIND.lower(), 'kind': KIND}
    kube.apply_crd(crd)


@pytest.fixture()
def as_user(kube, user_kubeconfig, namespace, rbacexamples):
    """Bind the documented Role (maybe lacking a verb) to a fresh user; its kubeconfig."""
    def bind(drop: tuple[str, str] | None = None) -> Path:
        user = f'kopf-operator-{namespace[-6:]}'
        role, binding = documented_role(namespace, user, drop=drop)
        base = f'/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}'
        kube.create(f'{base}/roles', role)
        kube.create(f'{base}/rolebindings', binding)
        return user_kubeconfig(user)
    return bind


def create_example(kube: KubeAPI, namespace: str) -> str:
    collection = f'/apis/{GROUP}/v1/namespaces/{namespace}/{PLURAL}'
    kube.create(collection, {'apiVersion': f'{GROUP}/v1', 'kind': KIND, 'metadata': {'name': 'ex'},
                             'spec': {'field': 'value'}})
    return f'{collection}/ex'


def test_the_documented_role_is_all_an_operator_needs(kube, namespace, operators, tmp_path, as_user):
    kubeconfig = as_user()
    with pytest.raises(KubeAPIError):  # the user is not an admin: it cannot even list ConfigMaps
        user_request(kube, kubeconfig, f'/api/v1/namespaces/{namespace}/configmaps')
    calls = tmp_path / 'calls.jsonl'
    operator = operators('tracing.py', kubeconfig=kubeconfig, E2E_RESOURCE=f'{PLURAL}.{GROUP}',
                         E2E_CALLS=str(calls), E2E_SECOND_FAILS='0')
    path = create_example(kube, namespace)

    # The results arrive through the status subresource, in a request right before the main one.
    obj = operator.wait(lambda: (lambda o: o if o and 'first' in (o.get('status') or {}) else None)(
        concluded(kube, path)), what="the creation to be concluded, with its results")
    assert obj['status']['first'] == 'first-done'  # the result, through the status subresource
    assert obj['metadata']['finalizers'] == [f'{PREFIX}/finalizer']
    kube.delete(path)
    operator.wait(lambda: kube.find(path) is None, what="the deletion to go through")
    assert sorted(handlers_called(calls)) == ['delete', 'first', 'second', 'third']
    assert not re.search(FORBIDDEN + '|Traceback', operator.output), operator.output
    assert operator.stop() == 0


def test_a_missing_patch_permission_is_one_clear_line(kube, namespace, operators, tmp_path, as_user):
    kubeconfig = as_user(drop=(PLURAL, 'patch'))
    operator = operators('tracing.py', kubeconfig=kubeconfig, E2E_RESOURCE=f'{PLURAL}.{GROUP}',
                         E2E_CALLS=str(tmp_path / 'calls.jsonl'))
    create_example(kube, namespace)
    operator.wait_for_output(f'The operator may not patch {PLURAL}')
    [line] = [line for line in operator.output.splitlines() if 'may not patch' in line]
    assert f'cannot patch resource "{PLURAL}" in API group "{GROUP}"' in line
    assert f"Grant it the 'patch' verb on {PLURAL} (and on {PLURAL}/status)" in line
    assert 'Traceback' not in operator.output
    assert operator.stop() == 0


def test_a_missing_list_permission_stops_the_operator_with_one_line(namespace, operators, tmp_path, as_user):
    kubeconfig = as_user(drop=(PLURAL, 'list'))
    operator = operators('tracing.py', kubeconfig=kubeconfig, E2E_RESOURCE=f'{PLURAL}.{GROUP}',
                         E2E_CALLS=str(tmp_path / 'calls.jsonl'))
    assert operator.process.wait(timeout=30) == 1
    errors = [line for line in operator.output.splitlines() if line.startswith('Error:')]
    assert len(errors) == 1, operator.output
    assert f'cannot list resource "{PLURAL}" in API group "{GROUP}"' in errors[0]
    assert f"Grant the operator's user or service account the 'list' and 'watch' verbs on {PLURAL}" in errors[0]
    assert 'Traceback' not in operator.output


def user_request(kube: KubeAPI, kubeconfig: Path, path: str) -> Any:
    """A request as the user of this kubeconfig, with the client certificate it names."""
    config = yaml.safe_load(kubeconfig.read_text())
    user = config['users'][0]['user']
    context = ssl.create_default_context(cafile=config['clusters'][0]['cluster']['certificate-authority'])
    context.load_cert_chain(user['client-certificate'], user['client-key'])
    try:
        with urllib.request.urlopen(f'{kube.server}{path}', context=context, timeout=10) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as e:
        raise KubeAPIError(e.code, e.read().decode()) from None
