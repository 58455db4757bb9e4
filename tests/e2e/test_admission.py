"""
Admission webhooks on a real API server: the kube-apiserver calls the operator's
webhook server over HTTPS, verified by the CA bundle that the operator put into
the webhook configurations it manages.
"""
from __future__ import annotations

import base64
import json
import re
import ssl
import urllib.error
import urllib.request
from typing import Any

import pytest

from kopf._admission import serving
from kopf._replicas import ownership
from kopf.testing import KubeAPI, KubeAPIError, wait_for
from tests.e2e.harness import OPERATORS, OperatorProcess, kopf_run, read_calls

CONFIGS = '/apis/admissionregistration.k8s.io/v1'


def configmap(name: str, **data: str) -> dict[str, Any]:
    return {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': name}, 'data': data}


def create(kube: KubeAPI, namespace: str, obj: dict[str, Any], **params: str) -> Any:
    return kube.request('POST', f'/api/v1/namespaces/{namespace}/configmaps', obj, params=params or None)


def rejection(kube: KubeAPI, namespace: str, obj: dict[str, Any], **params: str) -> KubeAPIError | None:
    try:
        create(kube, namespace, obj, **params)
    except KubeAPIError as e:
        return e
    return None


def message(error: KubeAPIError | None) -> str:
    assert error is not None, "The request was not rejected."
    return str(json.loads(error.body)['message'])


def configurations(kube: KubeAPI, managed: str) -> tuple[Any, Any]:
    return (kube.find(f'{CONFIGS}/validatingwebhookconfigurations/{managed}'),
            kube.find(f'{CONFIGS}/mutatingwebhookconfigurations/{managed}'))


def post_to_webhook(client_config: dict[str, Any], data: bytes) -> tuple[int, str]:
    """Call the webhook as the API server does: HTTPS, verified with the configuration's CA bundle."""
    context = ssl.create_default_context(cadata=base64.b64decode(client_config['caBundle']).decode('ascii'))
    request = urllib.request.Request(client_config['url'], data=data, method='POST',
                                     headers={'Content-Type': 'application/json'})
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.fixture()
def files(tmp_path):
    return {'E2E_CALLS': str(tmp_path / 'calls.jsonl'), 'E2E_EFFECTS': str(tmp_path / 'effects.txt')}


def wait_until_enforced(kube: KubeAPI, namespace: str) -> None:
    """The API server picks new webhook configurations up shortly after they are written."""
    wait_for(lambda: rejection(kube, namespace, configmap('probe', forbidden='x'), dryRun='All'),
             timeout=15, what="the validating webhook to be enforced")


def test_webhooks_validate_mutate_honour_dry_runs_and_are_removed_on_exit(kube, operators, namespace, files, tmp_path):
    managed = f'{namespace}.e2e.kopf.dev'
    operator = operators('admission.py', E2E_MANAGED=managed, **files)
    operator.wait_for_output("Admission webhooks are configured")
    validating, mutating = configurations(kube, managed)
    webhook, = validating['webhooks']
    assert webhook['name'] == f'check-data.{managed}'
    assert webhook['clientConfig']['url'].startswith('https://127.0.0.1:')
    assert webhook['clientConfig']['url'].endswith('/check-data')
    assert webhook['clientConfig']['caBundle']
    assert webhook['namespaceSelector']['matchExpressions'][0]['values'] == [namespace]
    assert [w['sideEffects'] for w in mutating['webhooks']] == ['NoneOnDryRun']

    # The server is verified by the configuration's CA; what is not an AdmissionReview gets a plain 400.
    status, text = post_to_webhook(webhook['clientConfig'], b'{"kind": "Pod"}')
    assert (status, text) == (400, "Not an AdmissionReview: kind='Pod'.\n")
    status, text = post_to_webhook(webhook['clientConfig'], b'garbage')
    assert (status, text) == (400, "The request body is not JSON; expected an AdmissionReview.\n")
    wait_until_enforced(kube, namespace)

    # An invalid object is rejected with the handler's message and code, naming the webhook.
    error = rejection(kube, namespace, configmap('bad', forbidden='x'))
    assert message(error) == (f'admission webhook "check-data.{managed}" denied the request: '
                              f"The key 'forbidden' is not allowed here.")
    assert error is not None and error.status == 422
    assert kube.find(f'/api/v1/namespaces/{namespace}/configmaps/bad') is None

    # A handler that crashes rejects the request, and the message names the handler.
    error = rejection(kube, namespace, configmap('crashing', crash='x'))
    assert message(error).endswith("Handler 'check-data' failed: RuntimeError: crashed on purpose")

    # A valid object is created as mutated; the handlers see the real user.
    created = create(kube, namespace, configmap('good', k='v'))
    assert created['metadata']['labels'] == {'mutated-by': 'kopf'}
    stored = kube.get(f'/api/v1/namespaces/{namespace}/configmaps/good')
    assert stored['metadata']['labels'] == {'mutated-by': 'kopf'}
    assert stored['data'] == {'k': 'v'}

    # Warnings reach the API client.
    request = urllib.request.Request(f'{kube.server}/api/v1/namespaces/{namespace}/configmaps', method='POST',
                                     data=json.dumps(configmap('odd', odd='1')).encode(),
                                     headers={'Content-Type': 'application/json'})
    with urllib.request.urlopen(request, context=kube.ssl, timeout=30) as response:
        assert "The key 'odd' is odd." in (response.headers.get('Warning') or '')

    # A dry run is mutated and validated but not stored; the handlers know it and skip their side effects.
    dry = create(kube, namespace, configmap('dry', k='v'), dryRun='All')
    assert dry['metadata']['labels'] == {'mutated-by': 'kopf'}
    assert kube.find(f'/api/v1/namespaces/{namespace}/configmaps/dry') is None
    calls = read_calls(tmp_path / 'calls.jsonl')
    assert {(c['handler'], c['dryrun']) for c in calls if c['name'] == 'dry'} == \
           {('add-label', True), ('check-data', True)}
    assert {(c['handler'], c['dryrun']) for c in calls if c['name'] == 'good'} == \
           {('add-label', False), ('check-data', False)}
    assert {c['user'] for c in calls if c['handler'] == 'check-data'} == {'admin'}
    # Mutations come before validations: rejected requests had side effects too, dry runs never.
    assert (tmp_path / 'effects.txt').read_text().split() == ['bad', 'crashing', 'good', 'odd']

    # Other namespaces are not the operator's business.
    other = f'{namespace}-other'
    kube.ensure_namespace(other)
    assert create(kube, other, configmap('elsewhere', forbidden='x'))['metadata'].get('labels') is None

    # A clean exit removes the configurations: the cluster works as before, without the operator.
    assert operator.stop() == 0
    assert configurations(kube, managed) == (None, None)
    after = create(kube, namespace, configmap('after', forbidden='x'))
    assert after['metadata'].get('labels') is None
    assert "Admission webhooks are configured" in operator.output


def test_the_auto_tunnel_falls_back_to_a_local_server_on_loopback(kube, operators, namespace, files):
    managed = f'{namespace}.e2e.kopf.dev'
    operator = operators('admission.py', E2E_MANAGED=managed, E2E_SERVER='autotunnel', **files)
    operator.wait_for_output("Admission webhooks are configured")
    assert "falling back to a WebhookAutoServer" in operator.output
    assert "runs on this machine" in operator.output
    validating, _ = configurations(kube, managed)
    assert validating['webhooks'][0]['clientConfig']['url'].startswith('https://127.0.0.1:')
    wait_until_enforced(kube, namespace)
    assert create(kube, namespace, configmap('good', k='v'))['metadata']['labels'] == {'mutated-by': 'kopf'}
    assert operator.stop() == 0
    assert configurations(kube, managed) == (None, None)


def test_a_busy_port_stops_the_operator_with_a_clear_error(kube, operators, namespace, files):
    import socket

    managed = f'{namespace}.e2e.kopf.dev'
    with socket.create_server(('127.0.0.1', 0)) as taken:
        port = taken.getsockname()[1]
        operator = operators('admission.py', E2E_MANAGED=managed, E2E_PORT=str(port), **files)
        assert operator.process.wait(timeout=30) == 1
    assert f"Cannot serve admission webhooks on 127.0.0.1:{port}: the address is already in use" in operator.output
    assert 'Traceback' not in operator.output
    assert configurations(kube, managed) == (None, None)


@pytest.mark.parametrize('mode', ['--shards', '--ha'])
def test_replicas_share_one_configuration_hand_it_over_and_the_last_one_removes_it(
        kube, kubeconfig, namespace, files, tmp_path, mode):
    managed = f'{namespace}.e2e.kopf.dev'
    started = []

    def replica():
        argv = kopf_run(OPERATORS / 'admission.py', namespace=namespace) + [mode]
        process = OperatorProcess(argv, kubeconfig=kubeconfig, log=tmp_path / f'replica-{len(started)}.log', env={
            'E2E_MANAGED': managed, 'E2E_LEASE': '4', 'E2E_RENEW': '3', 'E2E_RETRY': '0.5', **files})
        started.append(process)
        return process

    def steward():
        """Who keeps both configurations; ``None`` while one of them is being taken over (two objects)."""
        validating, mutating = configurations(kube, managed)
        stewards = {c['metadata'].get('annotations', {}).get('kopf.dev/steward') for c in (validating, mutating)}
        return stewards.pop() if len(stewards) == 1 else None

    def identity(process):
        return re.search(r'Coordinating as (\S+) ', process.output).group(1)

    def works():
        created = create(kube, namespace, configmap('probe', k='v'), dryRun='All')  # the mutation answers
        return created['metadata'].get('labels') == {'mutated-by': 'kopf'}

    def leases():
        return {item['metadata']['name']: item['metadata']['resourceVersion']
                for item in kube.get(f'/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases')['items']}

    try:
        first = replica()
        first.wait_for_output("Admission webhooks are configured")
        second = replica()
        second.wait_for_output('Shard members (2)' if mode == '--shards' else 'Standing by')
        # One steward keeps them: the leader, or the shard that owns them by the ring of both.
        ring = ownership.make_ring([identity(first), identity(second)])
        expected = identity(first) if mode == '--ha' else ownership.owner(serving.steward_key(managed), ring)
        wait_for(lambda: steward() == expected, timeout=15, what=f"{expected} to keep the configurations")
        wait_until_enforced(kube, namespace)
        wait_for(works, timeout=15, what="the mutating webhook to answer")
        writes = [line for process in started for line in process.output.splitlines()
                  if 'Admission webhooks are configured' in line]
        assert len(writes) == (1 if expected == identity(first) else 2), writes  # once per steward

        # Both replicas run and renew their leases; the configurations are not rewritten meanwhile.
        versions = [c['metadata']['resourceVersion'] for c in configurations(kube, managed)]
        renewals: dict[str, set[str]] = {}

        def renewed_often() -> bool:
            for name, version in leases().items():
                renewals.setdefault(name, set()).add(version)
            return sum(len(seen) for seen in renewals.values()) >= 12

        wait_for(renewed_often, timeout=30, what="the leases to be renewed a dozen times")
        assert [c['metadata']['resourceVersion'] for c in configurations(kube, managed)] == versions
        assert steward() in {identity(first), identity(second)}

        # The steward leaves: the other one takes the configurations over before its server stops.
        leaving, staying = (first, second) if steward() == identity(first) else (second, first)
        assert leaving.stop() == 0, leaving.output
        assert "waiting for one of them to take them over" in leaving.output
        assert f"are kept by {identity(staying)} now" in leaving.output
        assert steward() == identity(staying)
        validating, _ = configurations(kube, managed)
        assert validating['webhooks'][0]['clientConfig']['url'].startswith('https://127.0.0.1:')
        wait_for(works, timeout=15, what="the webhooks to work with the remaining replica")
        assert rejection(kube, namespace, configmap('bad', forbidden='x')) is not None

        # The last replica removes them.
        assert staying.stop() == 0, staying.output
        assert configurations(kube, managed) == (None, None)
        assert create(kube, namespace, configmap('after', forbidden='x'))['metadata'].get('labels') is None
        for process in started:
            assert 'Traceback' not in process.output
    finally:
        for process in started:
            process.kill()
