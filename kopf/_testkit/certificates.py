"""
Certificates of the local control plane: a CA, the server's, the admin's, users', service accounts' keys.

Everything is generated afresh for each control plane and lives in its
working directory only, so that nothing secret is ever shipped or reused.
The keys are EC P-256 (quick to make), except the service-account key,
which is RSA as in a typical cluster.
"""
from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVICE_CLUSTER_IP = "10.0.0.1"  # The first address of the service range: the "kubernetes" service.


def write_private_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    """Write an unencrypted PKCS#8 PEM key readable by its owner only."""
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def issue_cert(
    *,
    subject: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    is_ca: bool = False,
    usages: list[x509.ObjectIdentifier] | None = None,
    sans: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    """Sign one certificate, valid from a bit in the past (clock skew) for a day."""
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )
    if is_ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    else:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False,
        )
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def generate_certificates(cert_dir: Path) -> dict[str, Path]:
    """Create a CA, a serving cert, an admin client cert, and service-account keys.

    Everything is fresh per control plane, so nothing secret lives in the repo.
    """
    cert_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "ca_cert": cert_dir / "ca.crt",
        "ca_key": cert_dir / "ca.key",
        "serving_cert": cert_dir / "apiserver.crt",
        "serving_key": cert_dir / "apiserver.key",
        "client_cert": cert_dir / "admin.crt",
        "client_key": cert_dir / "admin.key",
        "sa_key": cert_dir / "sa.key",
        "sa_pub": cert_dir / "sa.pub",
    }

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kopf-controlplane-ca")])
    ca_cert = issue_cert(
        subject=ca_name,
        public_key=ca_key.public_key(),
        issuer=ca_name,
        issuer_key=ca_key,
        is_ca=True,
    )

    serving_key = ec.generate_private_key(ec.SECP256R1())
    serving_cert = issue_cert(
        subject=x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]),
        public_key=serving_key.public_key(),
        issuer=ca_name,
        issuer_key=ca_key,
        usages=[ExtendedKeyUsageOID.SERVER_AUTH],
        sans=[
            x509.DNSName("localhost"),
            x509.DNSName("kubernetes"),
            x509.DNSName("kubernetes.default"),
            x509.DNSName("kubernetes.default.svc"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address(SERVICE_CLUSTER_IP)),
        ],
    )

    client_key = ec.generate_private_key(ec.SECP256R1())
    client_cert = issue_cert(
        subject=x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                x509.NameAttribute(NameOID.COMMON_NAME, "admin"),
            ]
        ),
        public_key=client_key.public_key(),
        issuer=ca_name,
        issuer_key=ca_key,
        usages=[ExtendedKeyUsageOID.CLIENT_AUTH],
    )

    # Service-account tokens are signed with RSA, as in a typical cluster.
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    pem = serialization.Encoding.PEM
    paths["ca_cert"].write_bytes(ca_cert.public_bytes(pem))
    write_private_key(paths["ca_key"], ca_key)
    paths["serving_cert"].write_bytes(serving_cert.public_bytes(pem))
    write_private_key(paths["serving_key"], serving_key)
    paths["client_cert"].write_bytes(client_cert.public_bytes(pem))
    write_private_key(paths["client_key"], client_key)
    write_private_key(paths["sa_key"], sa_key)
    paths["sa_pub"].write_bytes(sa_key.public_key().public_bytes(pem, serialization.PublicFormat.SubjectPublicKeyInfo))
    return paths


def issue_user(cert_dir: Path, name: str, groups: tuple[str, ...] | list[str] = ()) -> tuple[Path, Path]:
    """A client certificate and key of a user (CN=name, O=groups), signed by the control plane's CA."""
    ca_key = serialization.load_pem_private_key((cert_dir / "ca.key").read_bytes(), password=None)
    ca_cert = x509.load_pem_x509_certificate((cert_dir / "ca.crt").read_bytes())
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in groups]
    subject.append(x509.NameAttribute(NameOID.COMMON_NAME, name))
    cert = issue_cert(
        subject=x509.Name(subject),
        public_key=key.public_key(),
        issuer=ca_cert.subject,
        issuer_key=ca_key,
        usages=[ExtendedKeyUsageOID.CLIENT_AUTH],
    )
    users = cert_dir.parent / "users"
    users.mkdir(exist_ok=True)
    cert_file, key_file = users / f"{name}.crt", users / f"{name}.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    write_private_key(key_file, key)
    return cert_file, key_file
