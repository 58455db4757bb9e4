"""
A fault-injecting HTTPS proxy in front of the local control plane.

It terminates TLS with a certificate of its own (its CA goes into the
kubeconfig it writes), forwards every request to the real kube-apiserver with
the admin's client certificate, and — as its policy decides per request —
answers 500/409/429 itself, resets the connection before or after forwarding,
cuts watch streams in the middle, or black-holes connections (keeps them open
and forwards nothing). It runs in a thread with its own event loop, so that
the operators under test (separate processes) and the test's own blocking
calls do not disturb it. It counts what it has injected, by kind.
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import datetime
import ipaddress
import json
import random
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kopf.testing import ControlPlane

# Headers that belong to one hop and must not be forwarded as they are. The content's encoding is
# end-to-end: the bodies are passed on as they come (gzip-compressed lists stay compressed).
HOP_HEADERS = {'connection', 'keep-alive', 'transfer-encoding', 'content-length',
               'upgrade', 'proxy-connection', 'te', 'trailer', 'host'}


@dataclasses.dataclass(frozen=True)
class Fault:
    """What to do with one request instead of (or in addition to) forwarding it."""

    kind: str  # 'status', 'reset', 'reset-after', 'cut', 'blackhole'
    status: int = 0
    retry_after: float | None = None
    after: float = 0.0  # for 'cut': seconds of streaming before the cut

    @property
    def label(self) -> str:
        return f"{self.status}" if self.kind == 'status' else self.kind


@dataclasses.dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]

    @property
    def is_watch(self) -> bool:
        return self.query.get('watch') in ('true', '1')


Policy = Callable[[Request], Fault | None]


@dataclasses.dataclass(frozen=True)
class Forwarded:
    """A request that has reached the server: when its answer came (wall-clock time), and what it was."""

    time: float
    method: str
    path: str
    status: int


async def _call(fn: Callable[[], None]) -> None:
    fn()


def no_faults(request: Request) -> Fault | None:
    return None


class RandomFaults:
    """A seeded random policy: per kind of request, the probability of each fault."""

    def __init__(self, *, seed: int, patch: dict[Fault, float], listing: dict[Fault, float],
                 watch: dict[Fault, float], cut_after: tuple[float, float] = (1.0, 4.0)) -> None:
        self.random = random.Random(seed)
        self.patch = patch
        self.listing = listing
        self.watch = watch
        self.cut_after = cut_after
        self.enabled = True

    def __call__(self, request: Request) -> Fault | None:
        if not self.enabled:
            return None
        if request.is_watch:
            table = self.watch
        elif request.method == 'PATCH':
            table = self.patch
        elif request.method == 'GET':
            table = self.listing
        else:
            return None
        roll = self.random.random()
        for fault, probability in table.items():
            if roll < probability:
                if fault.kind == 'cut':
                    return dataclasses.replace(fault, after=self.random.uniform(*self.cut_after))
                return fault
            roll -= probability
        return None


class FaultProxy:
    """Start with ``start()``, stop with ``stop()``; ``kubeconfig`` points kopf at the proxy."""

    def __init__(self, plane: ControlPlane, workdir: Path, *, policy: Policy = no_faults) -> None:
        self.plane = plane
        self.workdir = workdir
        self.policy = policy
        self.injected: collections.Counter[str] = collections.Counter()
        self.requests: collections.Counter[str] = collections.Counter()
        self.forwarded: list[Forwarded] = []  # every request that has reached the server, when it got its answer
        self.port = 0
        self.kubeconfig = workdir / 'proxy-kubeconfig'
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name='fault-proxy', daemon=True)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._blackhole_until = 0.0
        self._frozen: set[asyncio.Task[Any]] = set()
        self._streams: set[_Stream] = set()
        self._lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        self.workdir.mkdir(parents=True, exist_ok=True)
        ca_path, cert_path, key_path = _make_certificates(self.workdir)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(cert_path, key_path), self._loop).result(30)
        self._write_kubeconfig(ca_path)
        return self

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _start(self, cert_path: Path, key_path: Path) -> None:
        upstream_ssl = self.plane.ssl_context()
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=upstream_ssl, limit=0),
                                              auto_decompress=False)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route('*', '/{tail:.*}', self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_ssl.load_cert_chain(str(cert_path), str(key_path))
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(('127.0.0.1', 0))
        self.port = sock.getsockname()[1]
        site = web.SockSite(self._runner, sock, ssl_context=server_ssl)
        await site.start()

    async def _stop(self) -> None:
        for task in list(self._frozen):
            task.cancel()
        for stream in list(self._streams):
            stream.abort()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def _write_kubeconfig(self, ca_path: Path) -> None:
        q = json.dumps
        self.kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\n"
            "clusters:\n- name: proxy\n  cluster:\n"
            f"    server: {q(f'https://127.0.0.1:{self.port}')}\n"
            f"    certificate-authority: {q(str(ca_path))}\n"
            "users:\n- name: anyone\n  user:\n    token: the-proxy-authenticates-upstream\n"
            "contexts:\n- name: proxy\n  context:\n    cluster: proxy\n    user: anyone\n"
            "current-context: proxy\n")

    # -- faults on demand ------------------------------------------------------------------------

    def blackhole(self, duration: float) -> None:
        """From now on for ``duration`` seconds: every open and new connection goes silent for good."""
        def start() -> None:
            self._blackhole_until = time.monotonic() + duration
            for stream in list(self._streams):
                stream.freeze()
                self._count('blackhole')
        self._loop.call_soon_threadsafe(start)

    def heal(self) -> None:
        """End a black hole now: new connections are forwarded again (those already frozen stay so)."""
        def end() -> None:
            self._blackhole_until = 0.0
        asyncio.run_coroutine_threadsafe(_call(end), self._loop).result(10)

    def writes(self) -> list[Forwarded]:
        """The requests that changed something (not GET/watch) and reached the server, in their order."""
        with self._lock:
            return [entry for entry in self.forwarded if entry.method not in ('GET', 'HEAD', 'OPTIONS')]

    @property
    def open_streams(self) -> int:
        """How many responses are being forwarded right now (watch streams, mostly)."""
        return len(self._streams)

    def _count(self, kind: str) -> None:
        with self._lock:
            self.injected[kind] += 1

    def figures(self) -> dict[str, int]:
        with self._lock:
            return dict(self.injected)

    # -- forwarding ------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        described = Request(method=request.method, path=request.path, query=dict(request.query))
        kind = 'watch' if described.is_watch else request.method
        with self._lock:
            self.requests[kind] += 1
        if time.monotonic() < self._blackhole_until:
            self._count('blackhole')
            return await self._freeze()
        fault = self.policy(described)
        if fault is not None and fault.kind != 'cut':
            self._count(f"{kind} {fault.label}")
        if fault is not None and fault.kind == 'status':
            return _status_response(fault)
        if fault is not None and fault.kind == 'reset':
            _reset(request)
            return web.Response(status=500)  # never sent: the connection is gone
        if fault is not None and fault.kind == 'blackhole':
            return await self._freeze()

        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        headers.pop('Authorization', None)  # the proxy authenticates upstream with its own certificate
        assert self._session is not None
        url = f"{self.plane.server}{request.rel_url}"
        try:
            upstream = await self._session.request(request.method, url, data=body or None, headers=headers,
                                                   timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
        except (aiohttp.ClientError, OSError):
            return web.Response(status=502, text='upstream unreachable')
        with self._lock:
            self.forwarded.append(Forwarded(time.time(), request.method, request.path, upstream.status))
        try:
            if fault is not None and fault.kind == 'reset-after':
                await upstream.read()  # the server has done it; the client never hears so
                _reset(request)
                return web.Response(status=500)
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for key, value in upstream.headers.items():
                if key.lower() not in HOP_HEADERS:
                    response.headers[key] = value
            await response.prepare(request)
            stream = _Stream(request)
            self._streams.add(stream)
            try:
                cut_at = time.monotonic() + fault.after if fault is not None and fault.kind == 'cut' else None
                await self._pump(upstream, response, stream, cut_at, kind)
            finally:
                self._streams.discard(stream)
            if stream.frozen:
                return await self._freeze()
            if stream.cut:
                return response
            with contextlib.suppress(ConnectionError, RuntimeError):
                await response.write_eof()
            return response
        finally:
            upstream.release()

    async def _pump(self, upstream: aiohttp.ClientResponse, response: web.StreamResponse, stream: _Stream,
                    cut_at: float | None, kind: str) -> None:
        while True:
            timeout = None if cut_at is None else max(0.0, cut_at - time.monotonic())
            try:
                chunk = await asyncio.wait_for(upstream.content.readany(), timeout=timeout)
            except asyncio.TimeoutError:
                self._count(f"{kind} cut")
                stream.cut = True
                _reset(stream.request)
                return
            except (aiohttp.ClientError, OSError):
                _reset(stream.request)
                stream.cut = True
                return
            if stream.frozen:
                return
            if not chunk:
                return
            try:
                await response.write(chunk)
            except (ConnectionError, RuntimeError):
                stream.cut = True
                return

    async def _freeze(self) -> web.StreamResponse:
        """Answer nothing, ever (until the proxy stops): the connection stays open and silent."""
        task = asyncio.current_task()
        assert task is not None
        self._frozen.add(task)
        try:
            await asyncio.Event().wait()
        finally:
            self._frozen.discard(task)
        raise AssertionError("unreachable")


class _Stream:
    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.frozen = False
        self.cut = False

    def freeze(self) -> None:
        self.frozen = True

    def abort(self) -> None:
        _reset(self.request)


def _status_response(fault: Fault) -> web.Response:
    reasons = {500: 'InternalError', 409: 'Conflict', 429: 'TooManyRequests', 503: 'ServiceUnavailable'}
    reason = reasons.get(fault.status, 'Injected')
    status: dict[str, Any] = {'kind': 'Status', 'apiVersion': 'v1', 'status': 'Failure',
                              'message': f'injected by the fault proxy: {reason}', 'reason': reason,
                              'code': fault.status}
    headers = {}
    if fault.retry_after is not None:
        headers['Retry-After'] = f"{fault.retry_after:g}"
        status['details'] = {'retryAfterSeconds': int(fault.retry_after)}
    return web.json_response(status, status=fault.status, headers=headers)


def _reset(request: web.Request) -> None:
    """Close the client's connection with a TCP reset, not a polite FIN."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info('socket')
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
    transport.abort()


def _make_certificates(workdir: Path) -> tuple[Path, Path, Path]:
    """A CA of the proxy's own and a serving certificate for 127.0.0.1 signed by it."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, 'kopf-fault-proxy-ca')])
    ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
               .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, 'kopf-fault-proxy')]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address('127.0.0.1')),
                                                        x509.DNSName('localhost')]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    ca_path, cert_path, key_path = workdir / 'proxy-ca.crt', workdir / 'proxy.crt', workdir / 'proxy.key'
    ca_path.write_bytes(ca_cert.public_bytes(pem))
    cert_path.write_bytes(cert.public_bytes(pem))
    key_path.write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    key_path.chmod(0o600)
    return ca_path, cert_path, key_path
