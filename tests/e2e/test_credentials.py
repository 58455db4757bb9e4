"""
Credentials as users have them, on the real API server: exec plugins, rotating token files, revoked tokens.

The control plane issues real service-account tokens (TokenRequest); a token
is revoked by re-creating its service account (the token names the old uid).
The operators are real ``kopf run`` processes; they must keep working through
every change of credentials without a restart. Startup failures end with one
``Error:`` line, never a traceback and never a secret.
"""
from __future__ import annotations

import datetime
import json
import socket
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from benchmarks import apimetrics
from kopf.testing import KubeAPI, wait_for
from tests.e2e.harness import OPERATORS, OperatorProcess, read_calls

PREFIX = 'kopf.zalando.org'
HANDLERS = ['alpha', 'beta', 'gamma']


def kopf_run(namespace: str) -> list[str]:
    return [sys.executable, '-m', 'kopf', 'run', str(OPERATORS / 'resilient.py'), '-n', namespace]


def service_account_token(kube: KubeAPI, namespace: str, name: str, *, recreate: bool = False) -> str:
    """A fresh token of a service account with full rights; ``recreate`` revokes all earlier tokens."""
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts"
    if recreate:
        kube.delete(f"{path}/{name}")
        wait_for(lambda: kube.find(f"{path}/{name}") is None, timeout=5, what=f"the service account {name} deleted")
    if kube.find(f"{path}/{name}") is None:
        kube.create(path, {'apiVersion': 'v1', 'kind': 'ServiceAccount', 'metadata': {'name': name}})
    binding = f"e2e-{namespace}-{name}"
    if kube.find(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{binding}") is None:
        kube.create('/apis/rbac.authorization.k8s.io/v1/clusterrolebindings', {
            'apiVersion': 'rbac.authorization.k8s.io/v1', 'kind': 'ClusterRoleBinding',
            'metadata': {'name': binding},
            'roleRef': {'apiGroup': 'rbac.authorization.k8s.io', 'kind': 'ClusterRole', 'name': 'cluster-admin'},
            'subjects': [{'kind': 'ServiceAccount', 'name': name, 'namespace': namespace}]})
    request = {'apiVersion': 'authentication.k8s.io/v1', 'kind': 'TokenRequest',
               'spec': {'expirationSeconds': 3600}}
    return str(kube.create(f"{path}/{name}/token", request)['status']['token'])


def configmap_watches(kube: KubeAPI) -> int:
    """How many watches of ConfigMaps the API server has served (and ended) so far: only the operator's."""
    counts = apimetrics.parse(kube.text('/metrics'))
    return sum(count for kind, count in counts.items() if kind.resource == 'configmaps' and kind.verb == 'WATCH')


def is_valid(kube: KubeAPI, token: str) -> bool:
    review = kube.create('/apis/authentication.k8s.io/v1/tokenreviews', {
        'apiVersion': 'authentication.k8s.io/v1', 'kind': 'TokenReview', 'spec': {'token': token}})
    return bool(review['status'].get('authenticated'))


def wait_until_revoked(kube: KubeAPI, token: str) -> None:
    """The server caches good tokens for a few seconds (10 s in kube-apiserver): wait until it refuses this one."""
    wait_for(lambda: not is_valid(kube, token), timeout=20, interval=0.5, what="the old token to be refused")


def kubeconfig(path: Path, *, server: str, ca: Path | None, user: dict[str, Any]) -> Path:
    cluster: dict[str, Any] = {'server': server}
    if ca is not None:
        cluster['certificate-authority'] = str(ca)
    path.write_text(json.dumps({  # JSON is YAML
        'apiVersion': 'v1', 'kind': 'Config', 'current-context': 'ctx',
        'clusters': [{'name': 'c', 'cluster': cluster}],
        'users': [{'name': 'u', 'user': user}],
        'contexts': [{'name': 'ctx', 'context': {'cluster': 'c', 'user': 'u'}}],
    }))
    return path


def configmap(name: str) -> dict[str, Any]:
    return {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': name, 'labels': {'e2e': 'resilient'}}}


def handled(kube: KubeAPI, namespace: str, name: str) -> bool:
    obj = kube.find(f"/api/v1/namespaces/{namespace}/configmaps/{name}") or {}
    annotations = (obj.get('metadata') or {}).get('annotations') or {}
    progress = [key for key in annotations if key.startswith(f'{PREFIX}/') and not key.endswith('configuration')]
    return f'{PREFIX}/last-handled-configuration' in annotations and not progress


def replace_file(path: Path, text: str) -> None:
    """As the kubelet rotates projected tokens: write aside, then rename over atomically."""
    temporary = path.with_suffix('.new')
    temporary.write_text(text)
    temporary.replace(path)


@pytest.fixture()
def start(namespace, tmp_path):
    started: list[OperatorProcess] = []

    def start(kubeconfig: Path, **env: str) -> OperatorProcess:
        env = {'E2E_CALLS': str(tmp_path / 'calls.jsonl'), **env}
        process = OperatorProcess(kopf_run(namespace), kubeconfig=kubeconfig, env=env,
                                  log=tmp_path / f'operator-{len(started)}.log')
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()


def test_exec_plugin_credentials_are_renewed_before_they_expire(kube, control_plane, namespace, tmp_path, start):
    token_file = tmp_path / 'plugin-token'
    token_file.write_text(service_account_token(kube, namespace, 'exec-user'))
    plugin = tmp_path / 'credential-plugin'
    plugin.write_text(f'#!{sys.executable}\n' + textwrap.dedent(f'''
        import datetime, json, os, pathlib
        info = json.loads(os.environ['KUBERNETES_EXEC_INFO'])
        with open({str(tmp_path / 'plugin-calls.log')!r}, 'a') as log:
            log.write(json.dumps(info) + '\\n')
        expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=4)
        with open({str(tmp_path / 'plugin-expiries.log')!r}, 'a') as log:
            log.write(expires.strftime('%Y-%m-%dT%H:%M:%SZ') + '\\n')
        print(json.dumps({{
            'apiVersion': info['apiVersion'], 'kind': 'ExecCredential',
            'status': {{'token': pathlib.Path({str(token_file)!r}).read_text().strip(),
                        'expirationTimestamp': expires.strftime('%Y-%m-%dT%H:%M:%SZ')}},
        }}))
    '''))
    plugin.chmod(0o755)
    config = kubeconfig(tmp_path / 'kubeconfig', server=control_plane.server, ca=control_plane.ca_file, user={
        'exec': {'apiVersion': 'client.authentication.k8s.io/v1', 'command': str(plugin),
                 'interactiveMode': 'Never', 'provideClusterInfo': True}})

    operator = start(config)
    collection = f"/api/v1/namespaces/{namespace}/configmaps"
    kube.create(collection, configmap('first'))
    operator.wait(lambda: handled(kube, namespace, 'first'), what="the first object handled")
    first_expiry = (tmp_path / 'plugin-expiries.log').read_text().splitlines()[0]
    expired = datetime.datetime.strptime(first_expiry, '%Y-%m-%dT%H:%M:%SZ').replace(tzinfo=datetime.timezone.utc)
    wait_for(lambda: datetime.datetime.now(datetime.timezone.utc) >= expired, timeout=10,
             what="the first credentials to expire")
    kube.create(collection, configmap('second'))
    operator.wait(lambda: handled(kube, namespace, 'second'), what="the second object handled")
    operator.wait_for_output("Re-authenticating to the Kubernetes API: the credentials expire at")
    assert operator.stop() == 0

    calls = [json.loads(line) for line in (tmp_path / 'plugin-calls.log').read_text().splitlines()]
    assert len(calls) >= 2
    assert calls[0]['spec']['interactive'] is False
    assert calls[0]['spec']['cluster']['server'] == control_plane.server
    assert 'got 401' not in operator.output  # renewed in time, not after a refusal


def test_a_rotated_token_file_is_followed_without_a_restart(kube, control_plane, namespace, tmp_path, start):
    token_path = tmp_path / 'token'
    old_token = service_account_token(kube, namespace, 'rotating')
    token_path.write_text(old_token)
    config = kubeconfig(tmp_path / 'kubeconfig', server=control_plane.server, ca=control_plane.ca_file,
                        user={'tokenFile': str(token_path)})
    operator = start(config, E2E_SERVER_TIMEOUT='3')
    collection = f"/api/v1/namespaces/{namespace}/configmaps"
    kube.create(collection, configmap('before'))
    operator.wait(lambda: handled(kube, namespace, 'before'), what="the object before the rotation handled")

    replace_file(token_path, service_account_token(kube, namespace, 'rotating', recreate=True))
    wait_until_revoked(kube, old_token)
    kube.create(collection, configmap('after'))
    operator.wait(lambda: handled(kube, namespace, 'after'), what="the object after the rotation handled")
    watches = configmap_watches(kube)  # the server ends a watch after 3 s; it is opened again with the new token
    operator.wait(lambda: configmap_watches(kube) > watches, what="the watch of the old token to end")
    kube.create(collection, configmap('later'))
    operator.wait(lambda: handled(kube, namespace, 'later'), what="an object after the re-watch handled")
    assert operator.process.poll() is None
    assert operator.stop() == 0
    assert 'got 401' not in operator.output  # the new token was used before the old one was refused


def test_a_revoked_token_is_replaced_by_logging_in_again(kube, control_plane, namespace, tmp_path, start):
    login_file = tmp_path / 'identity-service.json'

    def issue(*, recreate: bool) -> str:
        token = service_account_token(kube, namespace, 'revoked', recreate=recreate)
        replace_file(login_file, json.dumps({'server': control_plane.server, 'ca_path': str(control_plane.ca_file),
                                             'token': token}))
        return token

    old_token = issue(recreate=False)
    config = kubeconfig(tmp_path / 'kubeconfig', server='https://127.0.0.1:1', ca=None, user={})  # unused
    operator = start(config, E2E_LOGIN_FILE=str(login_file), E2E_SERVER_TIMEOUT='60')
    collection = f"/api/v1/namespaces/{namespace}/configmaps"
    kube.create(collection, configmap('before'))
    operator.wait(lambda: handled(kube, namespace, 'before'), what="the object before the revocation handled")

    issue(recreate=True)  # the operator's token is revoked; the identity service has a new one
    wait_until_revoked(kube, old_token)
    kube.create(collection, configmap('after'))
    operator.wait(lambda: handled(kube, namespace, 'after'), what="the object after the revocation handled")
    operator.wait_for_output("Re-authenticating to the Kubernetes API: PATCH")
    assert operator.process.poll() is None
    assert operator.stop() == 0

    calls = read_calls(tmp_path / 'calls.jsonl')
    assert [call['handler'] for call in calls if call['handler'] == 'login'] == ['login', 'login']
    assert len({call['pid'] for call in calls}) == 1  # one process throughout: no restart
    assert sorted(call['handler'] for call in calls if call['handler'] != 'login') == sorted(HANDLERS * 2)


# --- Startup failures: one line, no traceback, no secret ------------------------------------------------

SECRET = 'e2e-secret-token-never-printed'


def run_to_the_end(argv: list[str], kubeconfig: Path, tmp_path: Path, **env: str) -> tuple[int, str]:
    process = OperatorProcess(argv, kubeconfig=kubeconfig, log=tmp_path / 'startup.log',
                              env={'E2E_CALLS': str(tmp_path / 'calls.jsonl'), **env})
    try:
        code = process.process.wait(timeout=30)
    finally:
        process.kill()
    return code, process.output


def error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith('Error:')]


def test_wrong_credentials_end_with_one_error_line(control_plane, namespace, tmp_path):
    config = kubeconfig(tmp_path / 'kubeconfig', server=control_plane.server, ca=control_plane.ca_file,
                        user={'token': SECRET})
    code, output = run_to_the_end(kopf_run(namespace), config, tmp_path)
    assert code == 1
    [line] = error_lines(output)
    assert line.startswith("Error: The Kubernetes API has refused the credentials, also after logging in again: "
                           "401 Unauthorized")
    assert 'Traceback' not in output
    assert SECRET not in output


def test_an_unreachable_server_ends_with_one_error_line(namespace, tmp_path):
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(('127.0.0.1', 0))
        port = sock.getsockname()[1]
    config = kubeconfig(tmp_path / 'kubeconfig', server=f'https://127.0.0.1:{port}', ca=None,
                        user={'token': SECRET})
    code, output = run_to_the_end(kopf_run(namespace), config, tmp_path, E2E_BACKOFFS='0.1')
    assert code == 1
    [line] = error_lines(output)
    assert line.startswith(f"Error: Cannot reach the Kubernetes API: GET https://127.0.0.1:{port}/")
    assert 'failed after 2 attempts' in line
    assert 'Traceback' not in output
    assert SECRET not in output


def test_a_malformed_kubeconfig_ends_with_one_error_line_and_no_content(namespace, tmp_path):
    config = tmp_path / 'kubeconfig'
    config.write_text(f"apiVersion: v1\nusers:\n- name: u\n  user:\n    token: {SECRET}: oops\n")
    code, output = run_to_the_end(kopf_run(namespace), config, tmp_path)
    assert code == 1
    [line] = error_lines(output)
    assert f"The kubeconfig {config} is not valid YAML at line 5" in line
    assert 'Traceback' not in output
    assert SECRET not in output
    assert 'oops' not in output
