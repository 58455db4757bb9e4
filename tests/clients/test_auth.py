import asyncio
import base64
import datetime
import itertools
import logging
import os
import socket
import ssl
import sys
import time

import pytest
import yaml

import kopf
from kopf.clients import auth
from kopf.clients.auth import (
    APIContext,
    LoginError,
    login_default,
    login_via_incluster,
    login_via_kubeconfig,
    make_ssl_context,
)
from kopf.clients.errors import (
    APIConflictError,
    APIConnectionError,
    APIForbiddenError,
    APINotFoundError,
    APIServerError,
    APITooManyRequestsError,
    APIUnauthorizedError,
)
from kopf.structs.credentials import ConnectionInfo


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    """No test may see the real kubeconfig or the real pod environment of the machine."""
    monkeypatch.delenv('KUBECONFIG', raising=False)
    monkeypatch.delenv('KUBERNETES_SERVICE_HOST', raising=False)
    monkeypatch.delenv('KUBERNETES_SERVICE_PORT', raising=False)
    monkeypatch.setenv('HOME', str(tmp_path / 'home'))
    monkeypatch.setattr(auth, 'SERVICE_ACCOUNT_DIR', str(tmp_path / 'no-service-account'))


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode('ascii')


def write_kubeconfig(path, *, clusters, users, contexts, current=None):
    doc = {
        'apiVersion': 'v1',
        'kind': 'Config',
        'clusters': [{'name': name, 'cluster': cluster} for name, cluster in clusters.items()],
        'users': [{'name': name, 'user': user} for name, user in users.items()],
        'contexts': [{'name': name, 'context': context} for name, context in contexts.items()],
    }
    if current is not None:
        doc['current-context'] = current
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return path


def simple_kubeconfig(path, *, server='https://k8s:6443', user=None, cluster_extra=None, namespace=None):
    context = {'cluster': 'c1', 'user': 'u1'}
    if namespace:
        context['namespace'] = namespace
    return write_kubeconfig(
        path,
        clusters={'c1': {'server': server, **(cluster_extra or {})}},
        users={'u1': user or {'token': 'tkn'}},
        contexts={'ctx1': context},
        current='ctx1',
    )


# --- Kubeconfig ----------------------------------------------------------------------------------

def test_kubeconfig_with_a_bearer_token(tmp_path):
    path = simple_kubeconfig(tmp_path / 'kubeconfig', user={'token': 'secret-token'}, namespace='ns1')
    info = login_via_kubeconfig(path)
    assert info == ConnectionInfo(server='https://k8s:6443', token='secret-token', default_namespace='ns1')


def test_kubeconfig_with_basic_auth(tmp_path):
    path = simple_kubeconfig(tmp_path / 'kubeconfig', user={'username': 'admin', 'password': 'pw'})
    info = login_via_kubeconfig(path)
    assert info.username == 'admin'
    assert info.password == 'pw'
    assert info.token is None


def test_kubeconfig_with_certificates_as_files_relative_to_the_kubeconfig(tmp_path, tls):
    (tmp_path / 'certs').mkdir()
    (tmp_path / 'certs' / 'ca.crt').write_bytes(tls.ca_cert)
    (tmp_path / 'certs' / 'client.crt').write_bytes(tls.client_cert)
    (tmp_path / 'certs' / 'client.key').write_bytes(tls.client_key)
    path = simple_kubeconfig(
        tmp_path / 'kubeconfig',
        cluster_extra={'certificate-authority': 'certs/ca.crt'},
        user={'client-certificate': 'certs/client.crt', 'client-key': str(tmp_path / 'certs' / 'client.key')},
    )
    info = login_via_kubeconfig(path)
    assert info.ca_path == str(tmp_path / 'certs' / 'ca.crt')
    assert info.certificate_path == str(tmp_path / 'certs' / 'client.crt')
    assert info.private_key_path == str(tmp_path / 'certs' / 'client.key')
    assert info.ca_data is None
    assert info.certificate_data is None
    assert info.private_key_data is None
    assert info.token is None


def test_kubeconfig_with_inline_certificate_data(tmp_path, tls):
    path = simple_kubeconfig(
        tmp_path / 'kubeconfig',
        cluster_extra={'certificate-authority-data': b64(tls.ca_cert)},
        user={'client-certificate-data': b64(tls.client_cert), 'client-key-data': b64(tls.client_key)},
    )
    info = login_via_kubeconfig(path)
    assert info.ca_data == tls.ca_cert
    assert info.certificate_data == tls.client_cert
    assert info.private_key_data == tls.client_key
    assert info.ca_path is None
    assert info.certificate_path is None
    assert info.private_key_path is None


def test_kubeconfig_insecure_skip_tls_verify(tmp_path):
    path = simple_kubeconfig(tmp_path / 'kubeconfig', cluster_extra={'insecure-skip-tls-verify': True})
    assert login_via_kubeconfig(path).insecure is True


def test_kubeconfig_is_secure_by_default(tmp_path):
    path = simple_kubeconfig(tmp_path / 'kubeconfig')
    assert login_via_kubeconfig(path).insecure is False


def test_kubeconfig_token_file(tmp_path):
    (tmp_path / 'token.txt').write_text('file-token\n')
    path = simple_kubeconfig(tmp_path / 'kubeconfig', user={'tokenFile': 'token.txt'})
    assert login_via_kubeconfig(path).token == 'file-token'


def test_kubeconfig_oidc_provider_token(tmp_path):
    path = simple_kubeconfig(tmp_path / 'kubeconfig', user={
        'auth-provider': {'name': 'oidc', 'config': {'id-token': 'oidc-token', 'idp-issuer-url': 'https://x'}},
    })
    assert login_via_kubeconfig(path).token == 'oidc-token'


def two_contexts(path):
    return write_kubeconfig(
        path,
        clusters={'dev': {'server': 'https://dev:6443'}, 'prod': {'server': 'https://prod:6443'}},
        users={'dev-user': {'token': 'dev-token'}, 'prod-user': {'token': 'prod-token'}},
        contexts={'dev': {'cluster': 'dev', 'user': 'dev-user', 'namespace': 'dev-ns'},
                  'prod': {'cluster': 'prod', 'user': 'prod-user'}},
        current='dev',
    )


def test_kubeconfig_uses_the_current_context(tmp_path):
    info = login_via_kubeconfig(two_contexts(tmp_path / 'kubeconfig'))
    assert info.server == 'https://dev:6443'
    assert info.token == 'dev-token'
    assert info.default_namespace == 'dev-ns'


def test_kubeconfig_uses_the_given_context(tmp_path):
    info = login_via_kubeconfig(two_contexts(tmp_path / 'kubeconfig'), context='prod')
    assert info.server == 'https://prod:6443'
    assert info.token == 'prod-token'
    assert info.default_namespace is None


def test_kubeconfig_unknown_context_is_a_login_error_naming_it(tmp_path):
    with pytest.raises(LoginError, match="'staging'"):
        login_via_kubeconfig(two_contexts(tmp_path / 'kubeconfig'), context='staging')


def test_kubeconfig_without_current_context_is_a_login_error(tmp_path):
    path = write_kubeconfig(tmp_path / 'kubeconfig', clusters={'c': {'server': 'https://k8s'}},
                            users={'u': {'token': 't'}}, contexts={'x': {'cluster': 'c', 'user': 'u'}})
    with pytest.raises(LoginError, match='no current-context'):
        login_via_kubeconfig(path)
    assert login_via_kubeconfig(path, context='x').token == 't'


def test_kubeconfig_empty_file_is_a_login_error(tmp_path):
    (tmp_path / 'kubeconfig').write_text('')
    with pytest.raises(LoginError, match='kubeconfig'):
        login_via_kubeconfig(tmp_path / 'kubeconfig')


def test_kubeconfig_missing_file_is_a_login_error_naming_it(tmp_path):
    with pytest.raises(LoginError, match='does-not-exist'):
        login_via_kubeconfig(tmp_path / 'does-not-exist')


def test_kubeconfig_missing_certificate_file_is_a_login_error(tmp_path):
    path = simple_kubeconfig(tmp_path / 'kubeconfig', cluster_extra={'certificate-authority': 'nope.crt'})
    with pytest.raises(LoginError, match=r'nope\.crt'):
        login_via_kubeconfig(path)


def test_kubeconfig_from_the_env_var(tmp_path, monkeypatch):
    path = simple_kubeconfig(tmp_path / 'custom', user={'token': 'env-token'})
    monkeypatch.setenv('KUBECONFIG', str(path))
    assert login_via_kubeconfig().token == 'env-token'


def test_kubeconfig_env_var_with_several_files_uses_the_first(tmp_path, monkeypatch):
    first = simple_kubeconfig(tmp_path / 'first', user={'token': 'first-token'})
    second = simple_kubeconfig(tmp_path / 'second', user={'token': 'second-token'})
    monkeypatch.setenv('KUBECONFIG', os.pathsep.join([str(first), str(second)]))
    assert login_via_kubeconfig().token == 'first-token'


def test_kubeconfig_defaults_to_the_home_directory(tmp_path):
    simple_kubeconfig(tmp_path / 'home' / '.kube' / 'config', user={'token': 'home-token'})
    assert login_via_kubeconfig().token == 'home-token'


def test_kubeconfig_explicit_path_wins_over_the_env_var(tmp_path, monkeypatch):
    explicit = simple_kubeconfig(tmp_path / 'explicit', user={'token': 'explicit-token'})
    env = simple_kubeconfig(tmp_path / 'env', user={'token': 'env-token'})
    monkeypatch.setenv('KUBECONFIG', str(env))
    assert login_via_kubeconfig(explicit).token == 'explicit-token'


# --- In-cluster ----------------------------------------------------------------------------------

@pytest.fixture()
def service_account(tmp_path, monkeypatch, tls):
    directory = tmp_path / 'serviceaccount'
    directory.mkdir()
    (directory / 'token').write_text('sa-token\n')
    (directory / 'ca.crt').write_bytes(tls.ca_cert)
    (directory / 'namespace').write_text('operator-ns')
    monkeypatch.setattr(auth, 'SERVICE_ACCOUNT_DIR', str(directory))
    monkeypatch.setenv('KUBERNETES_SERVICE_HOST', '10.0.0.1')
    monkeypatch.setenv('KUBERNETES_SERVICE_PORT', '443')
    return directory


def test_incluster_login(service_account):
    info = login_via_incluster()
    assert info == ConnectionInfo(
        server='https://10.0.0.1:443',
        ca_path=str(service_account / 'ca.crt'),
        token='sa-token',
        token_path=str(service_account / 'token'),
        default_namespace='operator-ns',
    )


def test_incluster_login_with_ipv6(service_account, monkeypatch):
    monkeypatch.setenv('KUBERNETES_SERVICE_HOST', 'fd00::1')
    assert login_via_incluster().server == 'https://[fd00::1]:443'


def test_incluster_login_outside_of_a_pod_fails(service_account, monkeypatch):
    monkeypatch.delenv('KUBERNETES_SERVICE_HOST')
    with pytest.raises(LoginError, match='KUBERNETES_SERVICE_HOST'):
        login_via_incluster()


def test_incluster_login_without_token_fails(service_account):
    (service_account / 'token').unlink()
    with pytest.raises(LoginError, match='token'):
        login_via_incluster()


def test_default_login_prefers_incluster_in_a_pod(service_account, tmp_path):
    simple_kubeconfig(tmp_path / 'home' / '.kube' / 'config', user={'token': 'home-token'})
    assert login_default().token == 'sa-token'


def test_default_login_uses_kubeconfig_outside_of_a_pod(tmp_path):
    simple_kubeconfig(tmp_path / 'home' / '.kube' / 'config', user={'token': 'home-token'})
    assert login_default().token == 'home-token'


def test_default_login_falls_back_to_kubeconfig_if_incluster_fails(service_account, tmp_path):
    (service_account / 'token').write_text('')
    simple_kubeconfig(tmp_path / 'home' / '.kube' / 'config', user={'token': 'home-token'})
    assert login_default().token == 'home-token'


def test_default_login_says_what_was_tried(tmp_path):
    with pytest.raises(LoginError) as excinfo:
        login_default()
    message = str(excinfo.value)
    assert 'in-cluster' in message
    assert 'kubeconfig' in message
    assert str(tmp_path / 'home' / '.kube' / 'config') in message


# --- TLS -----------------------------------------------------------------------------------------

def test_ssl_verifies_the_server_by_default():
    context = make_ssl_context(ConnectionInfo(server='https://k8s'))
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname is True


def test_ssl_insecure_only_when_asked():
    context = make_ssl_context(ConnectionInfo(server='https://k8s', insecure=True))
    assert context.verify_mode == ssl.CERT_NONE
    assert context.check_hostname is False


def _ca_subjects(context):
    return [dict(item[0] for item in cert['subject']).get('commonName') for cert in context.get_ca_certs()]


def test_ssl_ca_from_data(tls):
    context = make_ssl_context(ConnectionInfo(server='https://k8s', ca_data=tls.ca_cert))
    assert _ca_subjects(context) == ['test-ca']


def test_ssl_ca_from_file(tls, tmp_path):
    (tmp_path / 'ca.crt').write_bytes(tls.ca_cert)
    context = make_ssl_context(ConnectionInfo(server='https://k8s', ca_path=str(tmp_path / 'ca.crt')))
    assert _ca_subjects(context) == ['test-ca']


def test_ssl_client_certificate_from_files(tls, tmp_path):
    (tmp_path / 'c.crt').write_bytes(tls.client_cert)
    (tmp_path / 'c.key').write_bytes(tls.client_key)
    make_ssl_context(ConnectionInfo(server='https://k8s', certificate_path=str(tmp_path / 'c.crt'),
                                    private_key_path=str(tmp_path / 'c.key')))


def test_ssl_client_certificate_from_data_leaves_no_files(tls, tmp_path, monkeypatch):
    monkeypatch.setattr('tempfile.tempdir', str(tmp_path))
    make_ssl_context(ConnectionInfo(server='https://k8s', certificate_data=tls.client_cert,
                                    private_key_data=tls.client_key))
    assert list(tmp_path.iterdir()) == []


def test_ssl_client_certificate_mismatching_key_fails(tls):
    other_key = tls.ca_cert  # not a key at all
    with pytest.raises(ssl.SSLError):
        make_ssl_context(ConnectionInfo(server='https://k8s', certificate_data=tls.client_cert,
                                        private_key_data=other_key))


# --- API context ---------------------------------------------------------------------------------

async def test_request_sends_the_bearer_token_and_parses_json(context, aresponses, host, history):
    aresponses.add(host, '/api/v1/namespaces/ns1/pods/p1', 'GET', {'kind': 'Pod', 'metadata': {'name': 'p1'}})
    result = await context.request('GET', '/api/v1/namespaces/ns1/pods/p1')
    assert result == {'kind': 'Pod', 'metadata': {'name': 'p1'}}
    assert history()[0].headers['Authorization'] == 'Bearer the-token'


async def test_request_with_basic_auth(aresponses, host, history):
    aresponses.add(host, '/api', 'GET', {})
    async with APIContext(ConnectionInfo(server=f'http://{host}', username='admin', password='pw')) as context:
        await context.request('GET', '/api')
    assert history()[0].headers['Authorization'] == 'Basic ' + b64(b'admin:pw')


async def test_request_accepts_full_urls_params_and_json_bodies(context, aresponses, host, history):
    aresponses.add(host, '/apis/x/v1/things', 'POST', {'ok': True})
    result = await context.request('POST', f'http://{host}/apis/x/v1/things', json={'a': [1, None]},
                                   params={'dryRun': 'All', 'pretty': True, 'skip': None},
                                   headers={'X-Extra': 'yes'})
    assert result == {'ok': True}
    request = history()[0]
    assert dict(request.query) == {'dryRun': 'All', 'pretty': 'true'}
    assert request.headers['Content-Type'] == 'application/json'
    assert request.headers['X-Extra'] == 'yes'
    assert await request.json() == {'a': [1, None]}


async def test_request_with_empty_body_returns_none(context, aresponses, host):
    aresponses.add(host, '/empty', 'DELETE', aresponses.Response(status=200, text=''))
    assert await context.request('DELETE', '/empty') is None


def status_response(aresponses, code, reason, message):
    return aresponses.Response(status=code, content_type='application/json', text=(
        f'{{"kind": "Status", "code": {code}, "reason": "{reason}", "message": "{message}"}}'))


@pytest.mark.parametrize('code, reason, cls', [
    (403, 'Forbidden', APIForbiddenError),
    (404, 'NotFound', APINotFoundError),
    (409, 'Conflict', APIConflictError),
])
async def test_request_raises_4xx_at_once(context, aresponses, host, history, code, reason, cls):
    aresponses.add(host, '/x', 'GET', status_response(aresponses, code, reason, 'the message'), repeat=5)
    with pytest.raises(cls, match='the message'):
        await context.request('GET', '/x')
    assert len(history()) == 1


async def test_request_retries_5xx_then_succeeds(context, aresponses, host, history, caplog):
    aresponses.add(host, '/x', 'GET', status_response(aresponses, 503, 'ServiceUnavailable', 'busy'))
    aresponses.add(host, '/x', 'GET', {'ok': True})
    with caplog.at_level(logging.WARNING, logger='kopf.clients.auth'):
        assert await context.request('GET', '/x') == {'ok': True}
    assert len(history()) == 2
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert 'busy' in warnings[0].getMessage()
    assert 'retry 1 of 2' in warnings[0].getMessage()


async def test_request_retries_429(context, aresponses, host, history):
    aresponses.add(host, '/x', 'GET', status_response(aresponses, 429, 'TooManyRequests', 'slow down'))
    aresponses.add(host, '/x', 'GET', {'ok': True})
    assert await context.request('GET', '/x') == {'ok': True}
    assert len(history()) == 2


async def test_request_gives_up_on_5xx_after_the_bounded_retries(context, aresponses, host, history):
    aresponses.add(host, '/x', 'GET', status_response(aresponses, 500, 'InternalError', 'broken'), repeat=10)
    with pytest.raises(APIServerError, match='broken'):
        await context.request('GET', '/x')
    assert len(history()) == 3  # the first attempt and 2 retries


async def test_request_retries_connection_errors_then_succeeds(context, aresponses, host, history):
    aresponses.add(host, '/x', 'GET', aresponses.RawResponse(b''))  # the server closes without answering
    aresponses.add(host, '/x', 'GET', {'ok': True})
    assert await context.request('GET', '/x') == {'ok': True}
    assert len(history()) == 2


async def test_request_gives_up_on_connection_errors_with_a_typed_error(context, aresponses, host, caplog):
    aresponses.add(host, '/x', 'GET', aresponses.RawResponse(b''), repeat=aresponses.INFINITY)
    with caplog.at_level(logging.WARNING, logger='kopf.clients.auth'):
        with pytest.raises(APIConnectionError, match=r'/x.*3 attempts'):
            await context.request('GET', '/x')
    # (aiohttp itself may repeat a request once on a dropped keep-alive connection, so count our retries)
    assert [r.getMessage().endswith(f'(retry {n} of 2).') for n, r in enumerate(caplog.records, 1)] == [True, True]


async def test_request_backoff_grows_and_is_capped(aresponses, host, monkeypatch):
    delays = []

    async def fake_sleep(delay):
        delays.append(delay)

    monkeypatch.setattr(auth.asyncio, 'sleep', fake_sleep)
    aresponses.add(host, '/x', 'GET', status_response(aresponses, 500, 'InternalError', 'x'), repeat=10)
    info = ConnectionInfo(server=f'http://{host}')
    async with APIContext(info, retries=5, backoff=1.0, max_backoff=5.0) as context:
        with pytest.raises(APIServerError):
            await context.request('GET', '/x')
    assert delays == [1.0, 2.0, 4.0, 5.0, 5.0]


async def test_stream_yields_the_open_response(context, aresponses, host, stream_response, history):
    aresponses.add(host, '/api/v1/pods', 'GET', stream_response(b'line1\n', b'line2\n'))
    async with context.stream('GET', '/api/v1/pods', params={'watch': True}) as response:
        assert await response.content.read() == b'line1\nline2\n'
    assert dict(history()[0].query) == {'watch': 'true'}
    assert history()[0].headers['Authorization'] == 'Bearer the-token'


async def test_stream_raises_typed_errors(context, aresponses, host):
    aresponses.add(host, '/api/v1/pods', 'GET', status_response(aresponses, 410, 'Expired', 'too old'))
    with pytest.raises(Exception, match='too old') as excinfo:
        async with context.stream('GET', '/api/v1/pods'):
            pass
    assert type(excinfo.value).__name__ == 'APIGoneError'


async def test_context_requires_being_open(info):
    context = APIContext(info)
    with pytest.raises(RuntimeError, match='not open'):
        await context.request('GET', '/api')
    assert context.server == 'http://fake-k8s'


# --- Timeouts and keepalive -------------------------------------------------------------------------

async def test_a_request_without_an_answer_times_out_and_names_the_limit(aresponses, host):
    async def never_answers(request):
        await asyncio.sleep(5)
        return aresponses.Response(text='{}')

    aresponses.add(host, '/x', 'GET', never_answers)
    info = ConnectionInfo(server=f'http://{host}')
    started = time.monotonic()
    async with APIContext(info, timeout=0.2, backoffs=()) as context:
        with pytest.raises(APIConnectionError, match=r'GET http://fake-k8s/x failed after 1 attempts: '
                                                     r'no response within 0.2s'):
            await context.request('GET', '/x')
    assert time.monotonic() - started < 2.0


def test_connections_use_tcp_keepalive():
    factory = auth.keepalive_socket_factory(30)
    sock = factory((socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, '', ('127.0.0.1', 1)))
    try:
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 30
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 10
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 3
    finally:
        sock.close()


async def test_endless_backoffs_are_used_lazily(aresponses, host, history):
    aresponses.add(host, '/x', 'GET', status_response(aresponses, 503, 'ServiceUnavailable', 'busy'), repeat=7)
    aresponses.add(host, '/x', 'GET', {'ok': True})
    async with APIContext(ConnectionInfo(server=f'http://{host}'), backoffs=itertools.repeat(0.0)) as context:
        assert context.retries is None
        assert await context.request('GET', '/x') == {'ok': True}
    assert len(history()) == 8


# --- 429 Too Many Requests -------------------------------------------------------------------------

@pytest.fixture()
def sleeps(monkeypatch):
    delays = []

    async def fake_sleep(delay):
        delays.append(delay)

    monkeypatch.setattr(auth.asyncio, 'sleep', fake_sleep)
    return delays


def throttled(aresponses, retry_after=None):
    headers = {'Retry-After': str(retry_after)} if retry_after is not None else {}
    return aresponses.Response(status=429, headers=headers, content_type='application/json', text=(
        '{"kind": "Status", "code": 429, "reason": "TooManyRequests", "message": "slow down"}'))


async def test_429_waits_as_long_as_the_server_asks(context, aresponses, host, history, sleeps, caplog):
    aresponses.add(host, '/x', 'PATCH', throttled(aresponses, retry_after=7))
    aresponses.add(host, '/x', 'PATCH', throttled(aresponses, retry_after=2))
    aresponses.add(host, '/x', 'PATCH', {'ok': True})
    with caplog.at_level(logging.WARNING, logger='kopf.clients.auth'):
        assert await context.request('PATCH', '/x', json={'a': 1}) == {'ok': True}
    assert sleeps == [7.0, 2.0]
    assert [await r.json() for r in history()] == [{'a': 1}] * 3  # the same patch, re-sent
    assert '429 Too Many Requests); retrying in 7.00s as asked (1 of 20)' in caplog.records[0].getMessage()


async def test_429_retry_after_is_capped(aresponses, host, sleeps):
    aresponses.add(host, '/x', 'GET', throttled(aresponses, retry_after=3600))
    aresponses.add(host, '/x', 'GET', {'ok': True})
    async with APIContext(ConnectionInfo(server=f'http://{host}'), max_retry_after=30) as context:
        await context.request('GET', '/x')
    assert sleeps == [30.0]


async def test_429_without_retry_after_backs_off(context, aresponses, host, sleeps):
    aresponses.add(host, '/x', 'GET', throttled(aresponses), repeat=3)
    aresponses.add(host, '/x', 'GET', {'ok': True})
    await context.request('GET', '/x')
    assert sleeps == [1.0, 2.0, 4.0]


async def test_429_does_not_use_up_the_retries_of_errors(context, aresponses, host, sleeps):
    aresponses.add(host, '/x', 'GET', throttled(aresponses, retry_after=0), repeat=5)
    aresponses.add(host, '/x', 'GET', status_response(aresponses, 500, 'InternalError', 'x'), repeat=2)
    aresponses.add(host, '/x', 'GET', {'ok': True})
    assert await context.request('GET', '/x') == {'ok': True}  # 2 retries of errors, 5 waits for throttling


async def test_429_for_too_long_is_a_typed_transient_error(aresponses, host, history, sleeps):
    aresponses.add(host, '/x', 'GET', throttled(aresponses, retry_after=1), repeat=10)
    async with APIContext(ConnectionInfo(server=f'http://{host}'), throttle_retries=3) as context:
        with pytest.raises(APITooManyRequestsError) as excinfo:
            await context.request('GET', '/x')
    assert isinstance(excinfo.value, APIServerError)  # callers re-send it later like a 5xx
    assert excinfo.value.retry_after == 1.0
    assert len(history()) == 4


# --- Re-authentication -------------------------------------------------------------------------------

def unauthorized(aresponses):
    return aresponses.Response(status=401, content_type='application/json', text=(
        '{"kind": "Status", "code": 401, "reason": "Unauthorized", "message": "Unauthorized"}'))


class Relogin:
    """A login that hands out new tokens, counting its calls."""

    def __init__(self, host, *tokens, **extra):
        self.host = host
        self.tokens = list(tokens)
        self.extra = extra
        self.calls = 0

    async def __call__(self):
        self.calls += 1
        await asyncio.sleep(0.01)
        return ConnectionInfo(server=f'http://{self.host}', token=self.tokens.pop(0), **self.extra)


async def test_401_logs_in_again_and_repeats_the_request_once(aresponses, host, history, caplog):
    aresponses.add(host, '/x', 'GET', unauthorized(aresponses))
    aresponses.add(host, '/x', 'GET', {'ok': True})
    relogin = Relogin(host, 'new-token')
    with caplog.at_level(logging.INFO, logger='kopf.clients.auth'):
        async with APIContext(ConnectionInfo(server=f'http://{host}', token='old'), relogin=relogin) as context:
            assert await context.request('GET', '/x') == {'ok': True}
    assert relogin.calls == 1
    assert [r.headers['Authorization'] for r in history()] == ['Bearer old', 'Bearer new-token']
    assert any('Re-authenticating to the Kubernetes API: GET http://fake-k8s/x got 401' in r.getMessage()
               for r in caplog.records)


async def test_401_again_after_logging_in_is_raised(aresponses, host, history):
    aresponses.add(host, '/x', 'GET', unauthorized(aresponses), repeat=5)
    relogin = Relogin(host, 'also-wrong')
    async with APIContext(ConnectionInfo(server=f'http://{host}', token='wrong'), relogin=relogin) as context:
        with pytest.raises(APIUnauthorizedError):
            await context.request('GET', '/x')
    assert relogin.calls == 1
    assert len(history()) == 2


async def test_401_without_a_way_to_log_in_is_raised_at_once(context, aresponses, host, history):
    aresponses.add(host, '/x', 'GET', unauthorized(aresponses), repeat=5)
    with pytest.raises(APIUnauthorizedError):
        await context.request('GET', '/x')
    assert len(history()) == 1


async def test_concurrent_401s_log_in_once(aresponses, host, history):
    aresponses.add(host, '/x', 'GET', unauthorized(aresponses), repeat=3)
    aresponses.add(host, '/x', 'GET', {'ok': True}, repeat=3)
    relogin = Relogin(host, 'new-token', 'newer-token')
    async with APIContext(ConnectionInfo(server=f'http://{host}', token='old'), relogin=relogin) as context:
        results = await asyncio.gather(*[context.request('GET', '/x') for _ in range(3)])
    assert results == [{'ok': True}] * 3
    assert relogin.calls == 1


async def test_a_failing_login_keeps_the_401(aresponses, host, caplog):
    aresponses.add(host, '/x', 'GET', unauthorized(aresponses))

    async def broken_login():
        raise LoginError("the identity provider is down")

    async with APIContext(ConnectionInfo(server=f'http://{host}', token='old'), relogin=broken_login) as context:
        with pytest.raises(APIUnauthorizedError):
            await context.request('GET', '/x')
    assert any('Re-authentication has failed: the identity provider is down' in r.getMessage()
               for r in caplog.records)


async def test_401_on_a_watch_logs_in_again_too(aresponses, host, history, stream_response):
    aresponses.add(host, '/w', 'GET', unauthorized(aresponses))
    aresponses.add(host, '/w', 'GET', stream_response(b'line\n'))
    relogin = Relogin(host, 'new-token')
    async with APIContext(ConnectionInfo(server=f'http://{host}', token='old'), relogin=relogin) as context:
        async with context.stream('GET', '/w') as response:
            assert await response.content.read() == b'line\n'
    assert [r.headers['Authorization'] for r in history()] == ['Bearer old', 'Bearer new-token']


async def test_expiring_credentials_are_renewed_before_a_request(aresponses, host, history):
    aresponses.add(host, '/x', 'GET', {'ok': True}, repeat=2)
    soon = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=1)
    later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
    relogin = Relogin(host, 'fresh-token', expiration=later)
    info = ConnectionInfo(server=f'http://{host}', token='expiring', expiration=soon)
    async with APIContext(info, relogin=relogin) as context:
        await context.request('GET', '/x')  # still valid for 1s, renewed at 4/5 of it: 0.8s
        await asyncio.sleep(1.0)
        await context.request('GET', '/x')
    assert relogin.calls == 1
    assert [r.headers['Authorization'] for r in history()] == ['Bearer expiring', 'Bearer fresh-token']


async def test_naive_expiration_times_are_utc(aresponses, host, history):
    aresponses.add(host, '/x', 'GET', {'ok': True})
    past = datetime.datetime.utcnow() - datetime.timedelta(minutes=1)
    relogin = Relogin(host, 'fresh-token')
    async with APIContext(ConnectionInfo(server=f'http://{host}', token='old', expiration=past),
                          relogin=relogin) as context:
        await context.request('GET', '/x')
    assert relogin.calls == 1
    assert history()[0].headers['Authorization'] == 'Bearer fresh-token'


async def test_a_rotated_token_file_is_followed(aresponses, host, history, tmp_path, monkeypatch):
    monkeypatch.setattr(auth, 'TOKEN_FILE_CHECK_INTERVAL', 0)
    aresponses.add(host, '/x', 'GET', {'ok': True}, repeat=2)
    token_file = tmp_path / 'token'
    token_file.write_text('first\n')
    info = ConnectionInfo(server=f'http://{host}', token='first', token_path=str(token_file))
    async with APIContext(info) as context:
        await context.request('GET', '/x')
        replacement = tmp_path / 'token.new'
        replacement.write_text('second\n')
        replacement.replace(token_file)  # as the kubelet does it: atomically
        await context.request('GET', '/x')
    assert [r.headers['Authorization'] for r in history()] == ['Bearer first', 'Bearer second']


async def test_401_re_reads_the_token_file_at_once(aresponses, host, history, tmp_path):
    token_file = tmp_path / 'token'
    token_file.write_text('first\n')

    async def rotate_and_refuse(request):
        token_file.write_text('second\n')  # rotated while the old token was on its way
        return unauthorized(aresponses)

    aresponses.add(host, '/x', 'GET', rotate_and_refuse)
    aresponses.add(host, '/x', 'GET', {'ok': True})
    info = ConnectionInfo(server=f'http://{host}', token='first', token_path=str(token_file))
    async with APIContext(info) as context:
        assert await context.request('GET', '/x') == {'ok': True}
    assert [r.headers['Authorization'] for r in history()] == ['Bearer first', 'Bearer second']


async def test_other_token_schemes(aresponses, host, history):
    aresponses.add(host, '/x', 'GET', {})
    async with APIContext(ConnectionInfo(server=f'http://{host}', scheme='Digest', token='abc')) as context:
        await context.request('GET', '/x')
    assert history()[0].headers['Authorization'] == 'Digest abc'


async def test_unusable_certificates_are_a_login_error(tmp_path):
    info = ConnectionInfo(server='https://k8s', ca_path=str(tmp_path / 'missing-ca.crt'))
    with pytest.raises(LoginError, match='TLS certificates'):
        async with APIContext(info):
            pass


# --- Kopf-compatible login helpers ------------------------------------------------------------------

def test_login_with_service_account_outside_of_a_pod_gives_nothing():
    assert kopf.login_with_service_account() is None


def test_login_with_service_account_in_a_pod(service_account):
    info = kopf.login_with_service_account(logger=logging.getLogger(), memo=None)
    assert info.token == 'sa-token'
    assert info.token_path == str(service_account / 'token')


def test_login_with_kubeconfig_without_one_gives_nothing():
    assert kopf.login_with_kubeconfig() is None


def test_login_with_kubeconfig(tmp_path):
    simple_kubeconfig(tmp_path / 'home' / '.kube' / 'config', user={'token': 'home-token'})
    assert kopf.login_with_kubeconfig(logger=logging.getLogger()).token == 'home-token'


def test_login_via_pykube_from_a_kubeconfig(tmp_path, monkeypatch):
    path = simple_kubeconfig(tmp_path / 'kubeconfig', user={'token': 'pykube-token'}, namespace='ns1',
                             cluster_extra={'insecure-skip-tls-verify': True})
    monkeypatch.setenv('KUBECONFIG', str(path))
    info = kopf.login_via_pykube(logger=logging.getLogger())
    assert info == ConnectionInfo(server='https://k8s:6443', token='pykube-token', insecure=True,
                                  default_namespace='ns1')


def test_login_via_pykube_without_configuration_gives_nothing():
    assert kopf.login_via_pykube() is None


def test_login_via_client_from_a_kubeconfig(tmp_path, monkeypatch, tls):
    (tmp_path / 'ca.crt').write_bytes(tls.ca_cert)
    path = simple_kubeconfig(tmp_path / 'kubeconfig', user={'token': 'client-token'},
                             cluster_extra={'certificate-authority': str(tmp_path / 'ca.crt')})
    monkeypatch.setenv('KUBECONFIG', str(path))
    info = kopf.login_via_client(logger=logging.getLogger())
    assert info.server == 'https://k8s:6443'
    assert info.token == 'client-token'
    assert info.scheme == 'Bearer'
    assert info.ca_path == str(tmp_path / 'ca.crt')
    assert info.insecure is False


def test_login_via_client_without_configuration_gives_nothing():
    assert kopf.login_via_client() is None


async def test_login_via_async_client_from_a_kubeconfig(tmp_path, monkeypatch):
    path = simple_kubeconfig(tmp_path / 'kubeconfig', user={'token': 'async-token'})
    monkeypatch.setenv('KUBECONFIG', str(path))
    info = await kopf.login_via_async_client(logger=logging.getLogger())
    assert info.server == 'https://k8s:6443'
    assert info.token == 'async-token'


@pytest.mark.parametrize('module, login, package', [
    ('kubernetes', kopf.login_via_client, 'pip install kubernetes'),
    ('kubernetes_asyncio', kopf.login_via_async_client, 'pip install kubernetes_asyncio'),
    ('pykube', kopf.login_via_pykube, 'pip install pykube-ng'),
])
async def test_login_via_a_missing_client_says_what_to_install(monkeypatch, module, login, package):
    monkeypatch.setitem(sys.modules, module, None)  # makes the import fail
    with pytest.raises(LoginError, match=package):
        result = login()
        if asyncio.iscoroutine(result):
            await result
