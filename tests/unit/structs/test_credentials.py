import dataclasses

import pytest

from kopf.structs.credentials import ConnectionInfo


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
