"""
Users of the local control plane other than its admin: client certificates signed by its CA.

The API server trusts any client certificate signed by its client CA and
takes the user name from the certificate's common name (and the groups from
its organisations). Such a user has no permissions but discovery's until
RBAC grants them.
"""
from __future__ import annotations

import datetime
import json
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.e2e.controlplane import ControlPlane


def user_kubeconfig(control_plane: ControlPlane, user: str, directory: Path) -> Path:
    """A kubeconfig for a user of this name, authenticated by a fresh client certificate."""
    assert control_plane.ca_file is not None, "The control plane is not started."
    ca_cert = x509.load_pem_x509_certificate(control_plane.ca_file.read_bytes())
    ca_key = serialization.load_pem_private_key((control_plane.ca_file.parent / 'ca.key').read_bytes(),
                                                password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, user)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / f'{user}.crt', directory / f'{user}.key'
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    q = json.dumps  # JSON strings are valid YAML
    path = directory / f'{user}.kubeconfig'
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: local\n  cluster:\n    server: {q(control_plane.server)}\n"
        f"    certificate-authority: {q(str(control_plane.ca_file))}\n"
        f"users:\n- name: {q(user)}\n  user:\n    client-certificate: {q(str(cert_path))}\n"
        f"    client-key: {q(str(key_path))}\n"
        f"contexts:\n- name: local\n  context:\n    cluster: local\n    user: {q(user)}\n"
        "current-context: local\n")
    return path
