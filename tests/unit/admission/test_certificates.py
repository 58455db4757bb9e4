import ipaddress
import os
import socket
import ssl
import stat
import tempfile

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from kopf._admission import certificates


def test_the_serving_certificate_is_issued_by_the_ca_for_the_given_names():
    bundle = certificates.generate(['127.0.0.1', 'localhost', 'my-host.example', '::1'])
    ca = x509.load_pem_x509_certificate(bundle.ca_pem)
    cert = x509.load_pem_x509_certificate(bundle.cert_pem)

    cert.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usages
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(sans.get_values_for_type(x509.DNSName)) == {'localhost', 'my-host.example'}
    assert set(sans.get_values_for_type(x509.IPAddress)) == {ipaddress.ip_address('127.0.0.1'),
                                                             ipaddress.ip_address('::1')}


def test_the_private_key_matches_the_certificate_and_is_kept_out_of_repr():
    bundle = certificates.generate(['localhost'])
    key = serialization.load_pem_private_key(bundle.key_pem, password=None)
    cert = x509.load_pem_x509_certificate(bundle.cert_pem)
    assert key.public_key().public_numbers() == cert.public_key().public_numbers()
    assert 'PRIVATE' not in repr(bundle)


def test_every_start_gets_a_new_ca():
    assert certificates.generate(['localhost']).ca_pem != certificates.generate(['localhost']).ca_pem


def test_a_certificate_without_names_is_refused():
    with pytest.raises(ValueError, match="at least one host name"):
        certificates.generate(['', ''])


def test_local_hostnames_cover_loopback_and_this_host():
    names = certificates.local_hostnames()
    assert {'localhost', '127.0.0.1', socket.gethostname()} <= set(names)
    assert len(names) == len(set(names))


def test_private_files_are_readable_by_the_owner_only_and_removed_afterwards(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))
    with certificates.private_files(key=b'secret', cert=b'public') as paths:
        directory = os.path.dirname(paths['key'])
        assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(paths['key']).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(paths['cert']).st_mode) == 0o600
        with open(paths['key'], 'rb') as f:
            assert f.read() == b'secret'
    assert list(tmp_path.iterdir()) == []


def test_private_files_are_removed_even_on_errors(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))
    with pytest.raises(RuntimeError), certificates.private_files(key=b'secret'):
        raise RuntimeError('loading failed')
    assert list(tmp_path.iterdir()) == []


def test_a_server_context_leaves_no_key_on_disk(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))
    context = certificates.server_context(certificates.generate(['localhost']))
    assert isinstance(context, ssl.SSLContext)
    assert list(tmp_path.iterdir()) == []
