"""Webhook servers, with real sockets and TLS on the loopback interface."""
import asyncio
import base64
import contextlib
import datetime
import logging
import socket
import ssl
import sys

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

import kopf
from kopf._admission import certificates
from kopf._admission import servers as webhooks
from kopf._structs.reviews import InvalidReviewError
from tests.unit.conftest import until

REVIEW = {'apiVersion': 'admission.k8s.io/v1', 'kind': 'AdmissionReview', 'request': {'uid': 'u1'}}


class Recorder:
    """A WebhookFn that remembers its calls and answers with a fixed review (or raises)."""

    def __init__(self, error=None):
        self.calls = []
        self.error = error

    async def __call__(self, request, *, webhook=None, headers=None, sslpeer=None):
        self.calls.append({'request': request, 'webhook': webhook, 'headers': headers, 'sslpeer': sslpeer})
        if self.error is not None:
            raise self.error
        return {'apiVersion': 'admission.k8s.io/v1', 'kind': 'AdmissionReview',
                'response': {'uid': request['request']['uid'], 'allowed': True}}


@contextlib.asynccontextmanager
async def running(server, fn):
    """Start a server, give its first client config, and stop it afterwards."""
    generator = server(fn)
    config = await generator.__anext__()
    try:
        yield config
    finally:
        await generator.aclose()


def ca_context(config):
    return ssl.create_default_context(cadata=base64.b64decode(config['caBundle']).decode('ascii'))


def port_of(config):
    return int(config['url'].rsplit(':', 1)[1].split('/')[0])


async def post(url, *, ssl_context=None, json=None, data=None):
    async with aiohttp.ClientSession() as session:
        async with session.post(url, json=json, data=data, ssl=ssl_context if ssl_context else False) as response:
            return response.status, await response.text()


async def test_reviews_are_served_over_https_verified_by_the_ca_bundle():
    fn = Recorder()
    async with running(kopf.WebhookServer(addr='127.0.0.1'), fn) as config:
        assert config['url'] == f'https://127.0.0.1:{port_of(config)}'
        status, text = await post(config['url'] + '/check-it', ssl_context=ca_context(config), json=REVIEW)
    assert status == 200
    assert '"allowed": true' in text
    call, = fn.calls
    assert call['request'] == REVIEW
    assert call['webhook'] == 'check-it'
    assert call['headers']['Content-Type'] == 'application/json'
    assert call['sslpeer'] == {}  # no client certificate: an empty mapping, as Kopf gives it


async def test_the_handler_id_is_taken_from_the_url_unquoted():
    fn = Recorder()
    async with running(kopf.WebhookServer(addr='127.0.0.1'), fn) as config:
        await post(config['url'] + '/Fn.%3Clocals%3E.check%2Fspec.x', ssl_context=ca_context(config), json=REVIEW)
        await post(config['url'], ssl_context=ca_context(config), json=REVIEW)
    assert [call['webhook'] for call in fn.calls] == ['Fn.<locals>.check/spec.x', None]


async def test_the_certificate_is_valid_for_loopback_and_this_host():
    async with running(kopf.WebhookServer(), Recorder()) as config:
        port = port_of(config)
        assert config['url'] == f'https://localhost:{port}'
        for host in ['localhost', '127.0.0.1']:
            status, _ = await post(f'https://{host}:{port}/', ssl_context=ca_context(config), json=REVIEW)
            assert status == 200
        _, writer = await asyncio.open_connection('127.0.0.1', port, ssl=ca_context(config),
                                                  server_hostname='localhost')
        der = writer.get_extra_info('ssl_object').getpeercert(binary_form=True)
        writer.close()
    sans = x509.load_der_x509_certificate(der).extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert socket.gethostname() in sans.value.get_values_for_type(x509.DNSName)


async def test_a_path_prefix_is_part_of_the_url_and_other_paths_are_not_found():
    fn = Recorder()
    async with running(kopf.WebhookServer(addr='127.0.0.1', path='/hooks/'), fn) as config:
        assert config['url'].endswith('/hooks')
        ok, _ = await post(config['url'] + '/fn1', ssl_context=ca_context(config), json=REVIEW)
        missing, _ = await post(config['url'].replace('/hooks', '/other'), ssl_context=ca_context(config),
                                json=REVIEW)
    assert ok == 200
    assert missing == 404
    assert [call['webhook'] for call in fn.calls] == ['fn1']


async def test_a_request_that_is_not_json_gets_400_without_calling_the_framework():
    fn = Recorder()
    async with running(kopf.WebhookServer(addr='127.0.0.1'), fn) as config:
        status, text = await post(config['url'], ssl_context=ca_context(config), data=b'{not json')
    assert status == 400
    assert 'not JSON' in text
    assert fn.calls == []


async def test_an_invalid_review_gets_400_with_the_reason():
    fn = Recorder(error=InvalidReviewError("Not an AdmissionReview: kind='Pod'."))
    async with running(kopf.WebhookServer(addr='127.0.0.1'), fn) as config:
        status, text = await post(config['url'], ssl_context=ca_context(config), json={'kind': 'Pod'})
    assert status == 400
    assert text.strip() == "Not an AdmissionReview: kind='Pod'."


async def test_an_unexpected_failure_gets_500_without_a_traceback(caplog):
    fn = Recorder(error=RuntimeError('internal details'))
    async with running(kopf.WebhookServer(addr='127.0.0.1'), fn) as config:
        status, text = await post(config['url'] + '/fn1', ssl_context=ca_context(config), json=REVIEW)
    assert status == 500
    assert 'Traceback' not in text and 'internal details' not in text
    assert "see the operator's log" in text
    assert any(record.exc_info and 'fn1' in record.getMessage() for record in caplog.records)


async def test_a_port_in_use_fails_the_start_clearly():
    with socket.create_server(('127.0.0.1', 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(webhooks.WebhookServerError) as e:
            async with running(kopf.WebhookServer(addr='127.0.0.1', port=port), Recorder()):
                pass
    assert f"127.0.0.1:{port}" in str(e.value)
    assert "already in use" in str(e.value)
    assert "port=" in str(e.value)


async def test_without_the_webhooks_extra_self_signed_certificates_fail_the_start_naming_it(monkeypatch):
    monkeypatch.delitem(sys.modules, 'kopf._admission.certificates', raising=False)
    monkeypatch.setitem(sys.modules, 'cryptography', None)  # as if not installed
    with pytest.raises(webhooks.WebhookServerError) as e:
        async with running(kopf.WebhookServer(addr='127.0.0.1'), Recorder()):
            pass
    assert "'cryptography'" in str(e.value) and "pip install 'kopf[webhooks]'" in str(e.value)
    assert "certfile=" in str(e.value)  # or what to do instead
    async with running(kopf.WebhookServer(addr='127.0.0.1', insecure=True), Recorder()):
        pass  # a server without TLS does not need it


async def test_cadump_saves_the_ca_of_the_configuration(tmp_path):
    path = tmp_path / 'ca.pem'
    async with running(kopf.WebhookServer(addr='127.0.0.1', cadump=path), Recorder()) as config:
        assert path.read_bytes() == base64.b64decode(config['caBundle'])
        ssl_context = ssl.create_default_context(cafile=str(path))
        status, _ = await post(config['url'], ssl_context=ssl_context, json=REVIEW)
    assert status == 200


async def test_insecure_servers_speak_plain_http_without_a_ca_bundle():
    async with running(kopf.WebhookServer(addr='127.0.0.1', insecure=True), Recorder()) as config:
        assert config['url'].startswith('http://127.0.0.1:')
        assert 'caBundle' not in config
        status, _ = await post(config['url'], json=REVIEW)
    assert status == 200


async def test_provided_certificates_are_used_with_the_provided_ca(tmp_path):
    bundle = certificates.generate(['127.0.0.1'])
    (tmp_path / 'cert.pem').write_bytes(bundle.cert_pem)
    (tmp_path / 'key.pem').write_bytes(bundle.key_pem)
    (tmp_path / 'ca.pem').write_bytes(bundle.ca_pem)
    server = kopf.WebhookServer(addr='127.0.0.1', certfile=tmp_path / 'cert.pem', pkeyfile=tmp_path / 'key.pem',
                                cafile=tmp_path / 'ca.pem')
    async with running(server, Recorder()) as config:
        assert base64.b64decode(config['caBundle']) == bundle.ca_pem
        status, _ = await post(config['url'], ssl_context=ca_context(config), json=REVIEW)
    assert status == 200


async def served_certificate(port):
    """The certificate that a new connection to the server gets (DER)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    _, writer = await asyncio.open_connection('127.0.0.1', port, ssl=context)
    try:
        return writer.get_extra_info('ssl_object').getpeercert(binary_form=True)
    finally:
        writer.close()


def der(pem):
    return ssl.PEM_cert_to_DER_cert(pem.decode('ascii'))


async def test_renewed_certificate_files_are_served_without_a_restart(tmp_path, caplog):
    first, second = certificates.generate(['127.0.0.1']), certificates.generate(['127.0.0.1'])
    cert, key, ca = tmp_path / 'cert.pem', tmp_path / 'key.pem', tmp_path / 'ca.pem'
    cert.write_bytes(first.cert_pem)
    key.write_bytes(first.key_pem)
    ca.write_bytes(first.ca_pem)
    server = kopf.WebhookServer(addr='127.0.0.1', certfile=cert, pkeyfile=key, cafile=ca, file_check_interval=0.01)
    configs = asyncio.Queue()

    async def serve():  # as the framework runs a server: its configs are taken as they come
        async for config in server(Recorder()):
            configs.put_nowait(config)

    serving = asyncio.create_task(serve())
    try:
        port = port_of(await configs.get())
        assert await served_certificate(port) == der(first.cert_pem)

        # Half renewed: the new certificate does not go with the old key. The old pair is served meanwhile.
        cert.write_bytes(second.cert_pem)
        await until(lambda: "cannot be used yet" in caplog.text)
        assert await served_certificate(port) == der(first.cert_pem)

        key.write_bytes(second.key_pem)
        ca.write_bytes(second.ca_pem)
        renewed = await asyncio.wait_for(configs.get(), timeout=10)  # the new CA: a new client config
        assert base64.b64decode(renewed['caBundle']) == second.ca_pem
        assert await served_certificate(port) == der(second.cert_pem)
        status, _ = await post(renewed['url'], ssl_context=ca_context(renewed), json=REVIEW)
        assert status == 200
    finally:
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)


@pytest.mark.parametrize('kwargs, message', [
    ({'certfile': '/nonexistent/cert.pem'}, "both certfile= and pkeyfile="),
    ({'certfile': '/nonexistent/cert.pem', 'pkeyfile': '/nonexistent/key.pem'}, "/nonexistent/cert.pem"),
    ({'cafile': '/nonexistent/ca.pem'}, "cafile='/nonexistent/ca.pem'"),
])
async def test_unusable_certificate_options_fail_the_start_clearly(kwargs, message):
    with pytest.raises(webhooks.WebhookServerError, match=message.replace('.', r'\.')):
        async with running(kopf.WebhookServer(addr='127.0.0.1', **kwargs), Recorder()):
            pass


def client_certificate(ca_key, ca_name):
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, 'apiserver')]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(1)
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert, key


async def test_verified_client_certificates_reach_the_handlers_as_sslpeer(tmp_path):
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, 'client-ca')])
    now = datetime.datetime.now(datetime.timezone.utc)
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(2).not_valid_before(now - datetime.timedelta(hours=1))
          .not_valid_after(now + datetime.timedelta(hours=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    cert, key = client_certificate(ca_key, ca_name)
    pem = serialization.Encoding.PEM
    (tmp_path / 'client.pem').write_bytes(cert.public_bytes(pem))
    (tmp_path / 'client.key').write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    fn = Recorder()
    server = kopf.WebhookServer(addr='127.0.0.1', verify_cadata=ca.public_bytes(pem).decode('ascii'))
    async with running(server, fn) as config:
        with_cert = ca_context(config)
        with_cert.load_cert_chain(tmp_path / 'client.pem', tmp_path / 'client.key')
        await post(config['url'], ssl_context=with_cert, json=REVIEW)
        await post(config['url'], ssl_context=ca_context(config), json=REVIEW)  # optional: no certificate
    assert fn.calls[0]['sslpeer']['subject'] == ((('commonName', 'apiserver'),),)
    assert fn.calls[1]['sslpeer'] == {}


@pytest.mark.parametrize('cls, host', [
    (kopf.WebhookK3dServer, 'host.k3d.internal'),
    (kopf.WebhookMinikubeServer, 'host.minikube.internal'),
    (kopf.WebhookDockerDesktopServer, 'host.docker.internal'),
])
async def test_local_cluster_servers_use_their_magic_host_names(cls, host):
    async with running(cls(), Recorder()) as config:
        port = port_of(config)
        assert config['url'] == f'https://{host}:{port}'
        # The cluster connects by the magic name; here, the certificate is checked for it via loopback.
        _, writer = await asyncio.open_connection('127.0.0.1', port, ssl=ca_context(config),
                                                  server_hostname=host)
        writer.close()


async def test_an_explicit_host_wins_over_the_magic_one():
    async with running(kopf.WebhookK3dServer(host='example.test'), Recorder()) as config:
        assert config['url'].startswith('https://example.test:')


def test_choose_host_for_local_clusters_by_the_kubeconfig_context():
    for context, host in [('k3d-dev', 'host.k3d.internal'), ('minikube', 'host.minikube.internal'),
                          ('docker-desktop', 'host.docker.internal')]:
        choice = webhooks.choose_host(server='https://127.0.0.1:6443', context=context)
        assert (choice.addr, choice.host) == (None, host)
        assert repr(context) in choice.reason


def test_choose_host_for_an_api_server_on_this_machine_listens_on_loopback_only():
    choice = webhooks.choose_host(server='https://127.0.0.1:6443', context='kopf-controlplane')
    assert (choice.addr, choice.host) == ('127.0.0.1', '127.0.0.1')
    assert 'runs on this machine' in choice.reason


def test_choose_host_for_a_remote_api_server_uses_the_address_routing_to_it():
    routes = []

    def route(host, port):
        routes.append((host, port))
        return '10.1.2.3'

    choice = webhooks.choose_host(server='https://cluster.example:8443', context='prod', route=route)
    assert routes == [('cluster.example', 8443)]
    assert (choice.addr, choice.host) == (None, '10.1.2.3')


@pytest.mark.parametrize('server', [None, '', 'not-a-url'])
def test_choose_host_without_a_known_api_server_falls_back_to_localhost(server):
    choice = webhooks.choose_host(server=server, context=None, route=lambda host, port: None)
    assert (choice.addr, choice.host) == (None, 'localhost')


def test_choose_host_with_an_unresolvable_api_server_falls_back_to_localhost():
    choice = webhooks.choose_host(server='https://nowhere.invalid', context=None, route=lambda host, port: None)
    assert (choice.addr, choice.host) == (None, 'localhost')
    assert 'nowhere.invalid' in choice.reason


@pytest.fixture()
def cluster(tmp_path, monkeypatch):
    """Pretend the operator works with an API server on this machine, and a kubeconfig context."""
    def setup(context):
        path = tmp_path / 'kubeconfig'
        path.write_text(f'current-context: {context}\n')
        monkeypatch.setenv('KUBECONFIG', str(path))
    token = webhooks.api_server_var.set('https://127.0.0.1:6443')
    yield setup
    webhooks.api_server_var.reset(token)


async def test_auto_server_serves_on_loopback_for_a_cluster_on_this_machine(cluster, caplog):
    cluster('kopf-controlplane')
    caplog.set_level(logging.INFO)
    async with running(kopf.WebhookAutoServer(), Recorder()) as config:
        assert config['url'] == f'https://127.0.0.1:{port_of(config)}'
        status, _ = await post(config['url'], ssl_context=ca_context(config), json=REVIEW)
    assert status == 200
    assert "runs on this machine" in caplog.text


async def test_auto_server_uses_the_magic_host_of_a_local_cluster(cluster):
    cluster('k3d-mycluster')
    async with running(kopf.WebhookAutoServer(), Recorder()) as config:
        assert config['url'].startswith('https://host.k3d.internal:')


async def test_auto_server_keeps_an_explicit_host(cluster):
    cluster('k3d-mycluster')
    async with running(kopf.WebhookAutoServer(host='example.test', addr='127.0.0.1'), Recorder()) as config:
        assert config['url'].startswith('https://example.test:')


async def test_auto_tunnel_falls_back_to_the_auto_server_and_says_so(cluster, caplog):
    cluster('kopf-controlplane')
    caplog.set_level(logging.INFO)
    async with running(kopf.WebhookAutoTunnel(path='/hooks'), Recorder()) as config:
        assert config['url'] == f'https://127.0.0.1:{port_of(config)}/hooks'
        status, _ = await post(config['url'] + '/fn', ssl_context=ca_context(config), json=REVIEW)
    assert status == 200
    assert "no tunnel service is available" in caplog.text
    assert "falling back to a WebhookAutoServer" in caplog.text


async def test_ngrok_tunnels_refuse_to_start_with_an_explanation():
    tunnel = kopf.WebhookNgrokTunnel(token='secret-token')
    assert 'secret-token' not in repr(tunnel)
    with pytest.raises(webhooks.WebhookServerError, match="not supported") as e:
        async with running(tunnel, Recorder()):
            pass
    assert 'kopf.WebhookServer' in str(e.value)
