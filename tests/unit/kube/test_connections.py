"""Connections: TLS verification, TCP keepalive, and idle pooled connections closed."""
import socket
import ssl

import pytest
from aiohttp import web

from kopf._kube import connections
from kopf._kube.connections import make_ssl_context
from kopf._kube.session import APIContext
from kopf._structs.credentials import ConnectionInfo
from tests.unit.kube.conftest import until

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


# --- TCP keepalive ---------------------------------------------------------------------------------

def test_connections_use_tcp_keepalive():
    factory = connections.keepalive_socket_factory(30)
    sock = factory((socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, '', ('127.0.0.1', 1)))
    try:
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 30
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 10
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 3
    finally:
        sock.close()


# --- Idle pooled connections ------------------------------------------------------------------------
# aiohttp's own timer closes them (on the event loop, not the clock): the tests use a short idle timeout,
# and wait until the server sees the connection closed, not for a fixed time.

def recorder(connections: list[tuple[int, object]]):
    """A handler that records the connection of each request: the client's port, and the server's transport."""
    async def handler(request: web.BaseRequest) -> web.Response:
        assert request.transport is not None
        connections.append((request.transport.get_extra_info('peername')[1], request.transport))
        return web.json_response({'ok': True})
    return handler


def closed(connection: tuple[int, object]) -> bool:
    _, transport = connection
    return transport.is_closing()


async def test_idle_pooled_connections_are_closed(aresponses, host, info):
    seen: list[tuple[int, object]] = []
    aresponses.add(host, '/x', 'GET', recorder(seen), repeat=3)
    async with APIContext(info, idle_timeout=0.1) as context:
        await context.request('GET', '/x')
        await context.request('GET', '/x')  # at once: the pooled connection is reused
        await until(lambda: closed(seen[0]))  # closed by the client, after being idle
        await context.request('GET', '/x')  # on a new connection
    ports = [port for port, _ in seen]
    assert ports[0] == ports[1]
    assert ports[2] != ports[0]


async def test_pooled_connections_are_kept_without_an_idle_timeout(aresponses, host, info):
    seen: list[tuple[int, object]] = []
    paced: list[tuple[int, object]] = []
    aresponses.add(host, '/x', 'GET', recorder(seen), repeat=2)
    aresponses.add(host, '/pacer', 'GET', recorder(paced))
    async with APIContext(info, idle_timeout=None) as context, APIContext(info, idle_timeout=0.1) as pacer:
        await context.request('GET', '/x')
        await pacer.request('GET', '/pacer')
        await until(lambda: closed(paced[0]))  # idle for longer than an idle timeout would allow
        await context.request('GET', '/x')
    assert seen[0][0] == seen[1][0]  # the same connection
