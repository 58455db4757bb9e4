"""
Self-signed certificates for development-mode webhook servers.

The API server talks to webhooks over HTTPS only and verifies the server's
certificate against the ``caBundle`` of the webhook configuration. For
development, a fresh CA and a serving certificate signed by it are made at
every start, in memory; the CA goes to the configuration, the key never
leaves the process except for the instant when the TLS library loads it from
a file readable by the owner only.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import ipaddress
import os
import shutil
import socket
import ssl
import tempfile
from collections.abc import Iterable, Iterator

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_VALIDITY = datetime.timedelta(days=30)
CLOCK_SKEW = datetime.timedelta(hours=1)


@dataclasses.dataclass(frozen=True)
class CertificateBundle:
    """A CA certificate and a serving certificate with its private key, all as PEM."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes = dataclasses.field(repr=False)


def local_hostnames() -> list[str]:
    """The names by which this host is usually reached: loopback and its host name (no DNS lookups)."""
    names = ['localhost', '127.0.0.1', socket.gethostname()]
    return list(dict.fromkeys(name for name in names if name))


def generate(
        hostnames: Iterable[str],
        *,
        validity: datetime.timedelta = DEFAULT_VALIDITY,
        common_name: str = 'kopf webhook server',
) -> CertificateBundle:
    """A new CA and a serving certificate valid for the given host names and IP addresses."""
    sans = _alt_names(hostnames)
    if not sans:
        raise ValueError("A serving certificate needs at least one host name or IP address.")
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f'{common_name} CA')])
    ca_cert = (
        _base(subject=ca_name, issuer=ca_name, public_key=ca_key.public_key(), now=now, validity=validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        _base(subject=subject, issuer=ca_name, public_key=key.public_key(), now=now, validity=validity)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return CertificateBundle(
        ca_pem=ca_cert.public_bytes(pem),
        cert_pem=cert.public_bytes(pem),
        key_pem=key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )


def _alt_names(hostnames: Iterable[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for hostname in dict.fromkeys(hostnames):
        if not hostname:
            continue
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(hostname.strip('[]'))))
        except ValueError:
            names.append(x509.DNSName(hostname))
    return names


def _base(
        *,
        subject: x509.Name,
        issuer: x509.Name,
        public_key: ec.EllipticCurvePublicKey,
        now: datetime.datetime,
        validity: datetime.timedelta,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + validity)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
        key_agreement=False, key_cert_sign=ca, crl_sign=ca, encipher_only=False, decipher_only=False,
    )


@contextlib.contextmanager
def private_files(**contents: bytes) -> Iterator[dict[str, str]]:
    """
    Put data into files that only the current user can read, for as long as the block runs.

    The standard TLS library loads certificates and keys only from files; the
    files live in a fresh directory with 0700 permissions, each file is
    created exclusively with 0600, and everything is removed on exit.
    """
    directory = tempfile.mkdtemp(prefix='kopf-webhook-')  # 0700 by definition
    try:
        paths: dict[str, str] = {}
        for name, data in contents.items():
            path = os.path.join(directory, name)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, 'wb') as f:
                f.write(data)
            paths[name] = path
        yield paths
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def server_context(bundle: CertificateBundle) -> ssl.SSLContext:
    """A TLS server context that presents the bundle's serving certificate."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with private_files(cert=bundle.cert_pem, key=bundle.key_pem) as paths:
        context.load_cert_chain(certfile=paths['cert'], keyfile=paths['key'])
    return context
