import dataclasses
import ssl

import aiohttp
import pytest
from aiohttp import web

from kopf._structs.credentials import AiohttpSession, ConnectionInfo


def test_only_the_server_is_required():
    info = ConnectionInfo(server='https://k8s')
    assert info.server == 'https://k8s'
    assert info.ca_path is None
    assert info.ca_data is None
    assert info.insecure is False
    assert info.username is None
    assert info.password is None
    assert info.token is None
    assert info.certificate_path is None
    assert info.private_key_path is None
    assert info.certificate_data is None
    assert info.private_key_data is None
    assert info.default_namespace is None


def test_is_frozen():
    info = ConnectionInfo(server='https://k8s')
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.token = 'x'  # type: ignore[misc]


def test_secrets_are_not_in_repr():
    info = ConnectionInfo(
        server='https://k8s', username='admin', password='p4ssw0rd', token='t0k3n',
        ca_data=b'CA-DATA', certificate_data=b'CERT-DATA', private_key_data=b'KEY-DATA',
    )
    text = repr(info)
    assert 'https://k8s' in text
    assert 'admin' in text
    for secret in ['p4ssw0rd', 't0k3n', 'CA-DATA', 'CERT-DATA', 'KEY-DATA']:
        assert secret not in text


def test_http_headers_as_kopf_gives_them():
    assert ConnectionInfo(server='s', token='t').as_http_headers() == {'Authorization': 'Bearer t'}
    assert ConnectionInfo(server='s', token='t', scheme='Custom').as_http_headers() == {'Authorization': 'Custom t'}
    assert ConnectionInfo(server='s', username='u', password='p').as_http_headers() == {'Authorization': 'Basic dTpw'}
    assert ConnectionInfo(server='s').as_http_headers() == {}


@pytest.mark.parametrize('info, expected', [
    (ConnectionInfo(server='http://fake-k8s', username='u', password='p'), 'Basic dTpw'),
    (ConnectionInfo(server='http://fake-k8s', token='t'), 'Bearer t'),
])
async def test_a_session_made_as_kopfs_docs_show_authenticates_once(aresponses, info, expected):
    seen = []

    async def answer(request):
        seen.append(request.headers.getall('Authorization'))
        return web.json_response({})

    aresponses.add('fake-k8s', '/api', 'GET', answer)
    # Kopf's custom session: the headers and the basic auth of the credentials, side by side.
    async with aiohttp.ClientSession(headers=info.as_http_headers(), auth=info.as_aiohttp_basic_auth()) as session:
        async with session.get(f'{info.server}/api') as response:
            assert response.status == 200

    assert seen == [[expected]]


def test_http_headers_read_the_token_file(tmp_path):
    path = tmp_path / 'token'
    path.write_text('from-file\n')
    info = ConnectionInfo(server='s', token='stale', token_path=str(path))
    assert info.as_http_headers() == {'Authorization': 'Bearer from-file'}
    path.unlink()
    assert info.as_http_headers() == {'Authorization': 'Bearer stale'}


def test_an_ssl_context_verifies_unless_insecure():
    assert ConnectionInfo(server='s').as_ssl_context().verify_mode == ssl.CERT_REQUIRED
    assert ConnectionInfo(server='s', insecure=True).as_ssl_context().verify_mode == ssl.CERT_NONE


def test_a_provided_session_is_kopfs_keyword_only_credentials():
    with pytest.raises(TypeError):
        AiohttpSession('https://k8s', object())  # type: ignore[misc]
    credentials = AiohttpSession(server='https://k8s', aiohttp_session='x', default_namespace='ns')
    assert (credentials.priority, credentials.expiration, credentials.default_namespace) == (0, None, 'ns')
    assert 'aiohttp_session' not in repr(credentials)
