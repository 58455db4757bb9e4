"""
Fixtures shared by the tests that talk to an ``aresponses`` mock server (the API client and its users).

The API context points to ``http://fake-k8s`` (plain HTTP: the mock server
does not speak TLS). TLS itself is tested with real certificates generated
on the fly.
"""
from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kopf._kube.auth import APIContext
from kopf._structs.clocks import SYSTEM_CLOCK, Clock
from kopf._structs.credentials import ConnectionInfo

HOST = 'fake-k8s'
SERVER = f'http://{HOST}'


@pytest.fixture()
def host() -> str:
    return HOST


@pytest.fixture()
def info() -> ConnectionInfo:
    return ConnectionInfo(server=SERVER, token='the-token')


@pytest.fixture()
def api_clock() -> Clock:
    """The clock of the ``context`` fixture (a package's tests may give it a fake one)."""
    return SYSTEM_CLOCK


@pytest.fixture()
async def context(aresponses, info, api_clock):
    """An open API context against the mock server; retries are immediate to keep tests fast."""
    async with APIContext(info, retries=2, backoff=0, max_backoff=0, clock=api_clock) as ctx:
        yield ctx


@pytest.fixture()
def stream_response() -> Callable[..., Any]:
    """
    A factory of aresponses handlers that stream the given chunks with pauses in between.

    Items may be bytes (sent as is, e.g. half a line) or dicts (sent as one
    JSON line each). With ``hang=True``, the response stays open after the
    chunks until the client disconnects — like a watch with nothing new.
    """

    def factory(*items: bytes | dict[str, Any], hang: bool = False, status: int = 200) -> Callable[..., Any]:
        async def handler(request: web.BaseRequest) -> web.StreamResponse:
            response = web.StreamResponse(status=status)
            response.content_type = 'application/json'
            await response.prepare(request)
            for item in items:
                chunk = item if isinstance(item, bytes) else json.dumps(item).encode() + b'\n'
                await response.write(chunk)
                await asyncio.sleep(0.01)  # let the client receive it as a separate chunk
            if hang:
                for _ in range(500):  # up to 5 seconds, but stop as soon as the client is gone
                    transport = request.transport
                    if transport is None or transport.is_closing():
                        break
                    await asyncio.sleep(0.01)
            await response.write_eof()
            return response
        return handler

    return factory


@pytest.fixture()
def history(aresponses) -> Callable[..., list[Any]]:
    """
    ``history()`` or ``history('/api/v1/pods')``: the requests received so far, in order.

    ``aresponses.history`` records a request only when its handler returns,
    which for a streaming response (a watch) is after the client has already
    got the data; so requests are recorded here as soon as they arrive.
    """
    received: list[Any] = []
    find_response = aresponses._find_response

    async def recording_find_response(request: Any) -> Any:
        received.append(request)
        return await find_response(request)

    aresponses._find_response = recording_find_response
    return lambda path=None: [request for request in received if path is None or request.path == path]


# --- TLS material --------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class TLSMaterial:
    ca_cert: bytes
    client_cert: bytes
    client_key: bytes


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(subject: str, issuer: str, public_key: Any, signing_key: Any, *, ca: bool,
                 extensions: Iterable[x509.ExtensionType] = ()) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    for extension in extensions:
        builder = builder.add_extension(extension, critical=False)
    return builder.sign(signing_key, hashes.SHA256())


@pytest.fixture(scope='session')
def tls() -> TLSMaterial:
    """A CA, and a client certificate with its private key signed by it (all PEM)."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    client_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _certificate('test-ca', 'test-ca', ca_key.public_key(), ca_key, ca=True)
    client_cert = _certificate('test-user', 'test-ca', client_key.public_key(), ca_key, ca=False)
    return TLSMaterial(
        ca_cert=ca_cert.public_bytes(serialization.Encoding.PEM),
        client_cert=client_cert.public_bytes(serialization.Encoding.PEM),
        client_key=client_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )
