"""
Webhook servers: where the API server sends admission reviews to.

A server is a callable that gets the framework's :class:`~kopf._structs.reviews.WebhookFn`,
starts listening, and yields the client config (URL and CA bundle) that the
webhook configurations must carry -- again whenever its endpoint changes.
:class:`WebhookServer` listens on a local HTTPS port with a self-signed CA
(or with the given certificates); the others choose the host that a
particular kind of cluster reaches this machine by.

Tunnels through external services need the internet, which kopf does not
use: :class:`WebhookNgrokTunnel` refuses to start with an explanation, and
:class:`WebhookAutoTunnel` serves through :class:`WebhookAutoServer` instead.
"""
from __future__ import annotations

import asyncio
import base64
import contextvars
import dataclasses
import errno
import functools
import importlib
import ipaddress
import logging
import os
import socket
import ssl
import types
import urllib.parse
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from kopf._kube import kubeconfig
from kopf._structs.reviews import InvalidReviewError, WebhookClientConfig, WebhookFn

if TYPE_CHECKING:  # the web server is imported when webhooks are served: operators without them do not pay for it
    import aiohttp.web

logger = logging.getLogger('kopf._admission.servers')

# The URL of the API server that the operator works with; set by the framework for the auto-servers.
api_server_var: contextvars.ContextVar[str | None] = contextvars.ContextVar('api_server_var', default=None)

WILDCARD_ADDRESSES = frozenset({'', '0.0.0.0', '::'})
PathLike = str | os.PathLike[str]


class WebhookServerError(Exception):
    """The webhook server cannot start; the message says why and what to do."""


def _certificates() -> types.ModuleType:
    """
    The self-signed certificates' machinery, imported only when it is needed.

    It costs memory that operators without webhooks never need, and the
    ``cryptography`` package, which is an extra: ``pip install 'kopf[webhooks]'``.
    """
    try:
        return importlib.import_module('kopf._admission.certificates')
    except ImportError as e:
        raise WebhookServerError(
            f"Self-signed certificates for the webhook server need the 'cryptography' package, which is not "
            f"installed ({e}): pip install 'kopf[webhooks]' -- or give the server certfile= and pkeyfile=.") from None


@dataclasses.dataclass(frozen=True)
class WebhookServer:
    """
    A local HTTPS server for admission reviews.

    ``addr`` is where it listens (``None``: all IPv4 interfaces), ``port`` is
    the port (``None``: a free one), ``path`` the URL prefix. ``host`` is the
    host name the API server connects to; by default the listening address if
    it is a specific one, else ``localhost``.

    Without ``certfile``/``pkeyfile`` (or an SSL ``context``), a new CA and a
    certificate for ``host``, ``127.0.0.1``, ``localhost``, this machine's
    names and ``extra_sans`` are made at every start; ``cadump`` saves the CA
    (public) for tools like ``curl --cacert``. ``cafile``/``cadata`` give the
    CA bundle for the configuration when the certificates are provided.
    ``verify_*`` ask clients for certificates (mutual TLS); handlers get the
    peer's certificate as ``sslpeer``. ``insecure=True`` serves plain HTTP,
    which the API server never accepts, for local experiments only.

    As in Kopf, the ``certfile``, ``pkeyfile`` and ``cafile`` are checked
    every ``file_check_interval`` seconds (``None`` or 0: never), so that
    certificates renewed in place (cert-manager, mounted secrets) are served
    without a restart: new connections get the new certificate, and a new
    CA goes into the webhook configurations.
    """

    DEFAULT_HOST: ClassVar[str | None] = None

    addr: str | None = None
    port: int | None = None
    path: str | None = None
    host: str | None = None
    cadata: bytes | None = dataclasses.field(default=None, repr=False)
    cafile: PathLike | None = None
    cadump: PathLike | None = None
    context: ssl.SSLContext | None = None
    insecure: bool = False
    certfile: PathLike | None = None
    pkeyfile: PathLike | None = None
    password: str | None = dataclasses.field(default=None, repr=False)
    extra_sans: Iterable[str] = ()
    verify_mode: ssl.VerifyMode | None = None
    verify_cafile: PathLike | None = None
    verify_capath: PathLike | None = None
    verify_cadata: str | bytes | None = dataclasses.field(default=None, repr=False)
    file_check_interval: float | None = 60.0

    async def __call__(self, fn: WebhookFn) -> AsyncIterator[WebhookClientConfig]:
        stamps = _stamps(self._files)  # before reading them: a change meanwhile is seen at the first check
        context, cadata = self._ssl()
        import aiohttp.web

        app = aiohttp.web.Application()
        app.router.add_post('/{tail:.*}', functools.partial(_serve, fn=fn, prefix=self._prefix))
        runner = aiohttp.web.AppRunner(app, access_log=None, handle_signals=False)
        with self._listen() as sock:
            port = int(sock.getsockname()[1])
            await runner.setup()
            try:
                await aiohttp.web.SockSite(runner, sock, ssl_context=context).start()
                config = self._client_config(port=port, cadata=cadata)
                logger.debug("The webhook server listens on %s:%d for %s.", self._addr, port, config.get('url'))
                yield config
                async for config in self._follow_files(context, port=port, cadata=cadata, stamps=stamps):
                    yield config  # until cancelled
            finally:
                await runner.cleanup()

    async def _follow_files(
            self,
            context: ssl.SSLContext | None,
            *,
            port: int,
            cadata: bytes | None,
            stamps: tuple[tuple[int, int, int] | None, ...],
    ) -> AsyncIterator[WebhookClientConfig]:
        """
        Use the certificate files anew whenever they change; a new client config if the CA has changed.

        The new certificate and key go into the live TLS context, which every
        new connection uses (the open ones finish as they are): nothing stops
        listening. A pair that does not load yet (e.g. the certificate is
        renewed, the key is not written yet) is reported and tried again at
        the next check; meanwhile the previous one is served.
        """
        interval = self.file_check_interval
        if context is None or not self._files or not interval or interval <= 0:
            await asyncio.Event().wait()
            return
        while True:
            await asyncio.sleep(interval)
            current = _stamps(self._files)
            if current == stamps:
                continue
            try:
                fresh_cadata = self._read(self.cafile, 'cafile') if self.cafile is not None else cadata
                if self.certfile is not None and self.context is None:
                    self._load_certificates()  # a trial: a pair that does not load must not spoil the live context
                    context.load_cert_chain(certfile=self.certfile, keyfile=self.pkeyfile, password=self.password)
            except (WebhookServerError, OSError, ssl.SSLError) as e:
                logger.warning("The webhook server's certificate files have changed, but cannot be used yet: %s. "
                               "The previous certificate is served; trying again in %gs.", e, interval)
                continue
            stamps = current
            logger.info("The webhook server's certificate files have changed: new connections get the new ones.")
            if fresh_cadata != cadata:
                cadata = fresh_cadata
                yield self._client_config(port=port, cadata=cadata)

    @property
    def _files(self) -> list[PathLike]:
        """The files that are followed for changes."""
        return [path for path in (self.certfile, self.pkeyfile, self.cafile) if path is not None]

    @property
    def _addr(self) -> str:
        return self.addr if self.addr is not None else '0.0.0.0'

    @property
    def _prefix(self) -> str:
        return '/' + (self.path or '').strip('/')

    @property
    def _host(self) -> str:
        if self.host:
            return self.host
        if self.DEFAULT_HOST:
            return self.DEFAULT_HOST
        if self.addr and self.addr not in WILDCARD_ADDRESSES:
            return self.addr
        return 'localhost'

    def _client_config(self, *, port: int, cadata: bytes | None) -> WebhookClientConfig:
        host = f'[{self._host}]' if ':' in self._host else self._host
        scheme = 'http' if self.insecure else 'https'
        config = WebhookClientConfig(url=f'{scheme}://{host}:{port}{self._prefix.rstrip("/")}')
        if cadata is not None:
            config['caBundle'] = base64.b64encode(cadata).decode('ascii')
        return config

    def _listen(self) -> socket.socket:
        """Bind the listening socket now, so that a busy port fails the start with a clear error."""
        addr, port = self._addr, self.port or 0
        try:
            family = socket.AF_INET6 if ':' in addr else socket.AF_INET
            return socket.create_server((addr, port), family=family, backlog=128)
        except OSError as e:
            where = f"{addr}:{port}" if port else addr
            if e.errno == errno.EADDRINUSE:
                raise WebhookServerError(
                    f"Cannot serve admission webhooks on {where}: the address is already in use. "
                    f"Pass another port= to the server in settings.admission.server, "
                    f"or none to use a free port.") from e
            raise WebhookServerError(f"Cannot serve admission webhooks on {where}: {e.strerror or e}.") from e

    def _ssl(self) -> tuple[ssl.SSLContext | None, bytes | None]:
        """The server's TLS context and the CA bundle for the configurations (``None``: system trust)."""
        if self.insecure:
            return None, None
        cadata = self._read(self.cafile, 'cafile') if self.cafile is not None else self.cadata
        if self.context is not None:
            context = self.context
        elif self.certfile is not None or self.pkeyfile is not None:
            context = self._load_certificates()
        else:
            certificates = _certificates()
            bundle = certificates.generate(self._sans())
            context = certificates.server_context(bundle)
            cadata = cadata if cadata is not None else bundle.ca_pem
        self._verify_clients(context)
        if self.cadump is not None and cadata is not None:
            Path(self.cadump).write_bytes(cadata)
        return context, cadata

    def _sans(self) -> list[str]:
        certificates = _certificates()
        names = [self._host]
        if self.addr and self.addr not in WILDCARD_ADDRESSES:
            names.append(self.addr)
        return list(dict.fromkeys([*names, *certificates.local_hostnames(), *self.extra_sans]))

    def _load_certificates(self) -> ssl.SSLContext:
        if self.certfile is None or self.pkeyfile is None:
            raise WebhookServerError("A webhook server needs both certfile= and pkeyfile=, or neither "
                                     "(then a self-signed certificate is made).")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(certfile=self.certfile, keyfile=self.pkeyfile, password=self.password)
        except (OSError, ssl.SSLError) as e:
            raise WebhookServerError(f"Cannot load the webhook server's certificate {self.certfile} "
                                     f"with the key {self.pkeyfile}: {e}") from e
        return context

    def _verify_clients(self, context: ssl.SSLContext) -> None:
        if self.verify_cafile is not None or self.verify_capath is not None or self.verify_cadata is not None:
            try:
                context.load_verify_locations(cafile=self.verify_cafile, capath=self.verify_capath,
                                              cadata=self.verify_cadata)
            except (OSError, ssl.SSLError) as e:
                raise WebhookServerError(f"Cannot load the CA to verify webhook clients: {e}") from e
            context.verify_mode = self.verify_mode if self.verify_mode is not None else ssl.CERT_OPTIONAL
        elif self.verify_mode is not None:
            context.verify_mode = self.verify_mode

    @staticmethod
    def _read(path: PathLike, option: str) -> bytes:
        try:
            return Path(path).read_bytes()
        except OSError as e:
            raise WebhookServerError(f"Cannot read {option}={str(path)!r} of the webhook server: {e}") from e


def _stamps(paths: Iterable[PathLike]) -> tuple[tuple[int, int, int] | None, ...]:
    """What tells a file's change without reading it (a renamed-over file or symlink too); ``None``: missing."""
    stamps: list[tuple[int, int, int] | None] = []
    for path in paths:
        try:
            stat = os.stat(path)
        except OSError:
            stamps.append(None)
        else:
            stamps.append((stat.st_ino, stat.st_size, stat.st_mtime_ns))
    return tuple(stamps)


async def _serve(request: aiohttp.web.Request, *, fn: WebhookFn, prefix: str) -> aiohttp.web.StreamResponse:
    """One HTTP request: an admission review in, an admission review out; bad requests get a 4xx."""
    import aiohttp.web

    path = request.path
    if path != prefix and not path.startswith(prefix.rstrip('/') + '/'):
        return aiohttp.web.Response(status=404, text=f"No webhooks at {path}; they are under {prefix}.\n")
    webhook = path[len(prefix):].strip('/') or None
    try:
        payload = await request.json()
    except (ValueError, UnicodeDecodeError):
        return aiohttp.web.Response(status=400, text="The request body is not JSON; expected an AdmissionReview.\n")
    headers = dict(request.headers)
    sslpeer = request.transport.get_extra_info('peercert') if request.transport is not None else None
    try:
        review = await fn(payload, webhook=webhook, headers=headers, sslpeer=sslpeer or {})  # {} as in Kopf
    except InvalidReviewError as e:
        return aiohttp.web.Response(status=400, text=f"{e}\n")
    except Exception:
        logger.exception("An admission request to the webhook %r could not be answered.", webhook)
        return aiohttp.web.Response(status=500, text="The admission request could not be answered; "
                                                     "see the operator's log.\n")
    return aiohttp.web.json_response(review)


@dataclasses.dataclass(frozen=True)
class WebhookK3dServer(WebhookServer):
    """A server for K3d/K3s clusters, which reach the host machine as ``host.k3d.internal``."""

    DEFAULT_HOST: ClassVar[str | None] = 'host.k3d.internal'


@dataclasses.dataclass(frozen=True)
class WebhookMinikubeServer(WebhookServer):
    """A server for Minikube clusters, which reach the host machine as ``host.minikube.internal``."""

    DEFAULT_HOST: ClassVar[str | None] = 'host.minikube.internal'


@dataclasses.dataclass(frozen=True)
class WebhookDockerDesktopServer(WebhookServer):
    """A server for Docker Desktop's cluster, which reaches the host machine as ``host.docker.internal``."""

    DEFAULT_HOST: ClassVar[str | None] = 'host.docker.internal'


@dataclasses.dataclass(frozen=True)
class HostChoice:
    """Where an auto-server listens, the host name in its URL, and why."""

    addr: str | None
    host: str
    reason: str


# Kubeconfig contexts of local clusters that reach the host machine by a special name.
MAGIC_HOSTS: tuple[tuple[Callable[[str], bool], str, str], ...] = (
    (lambda name: name.startswith('k3d-'), 'host.k3d.internal', 'a K3d cluster'),
    (lambda name: name == 'minikube', 'host.minikube.internal', 'a Minikube cluster'),
    (lambda name: name in ('docker-desktop', 'docker-for-desktop'), 'host.docker.internal',
     "Docker Desktop's cluster"),
)


def choose_host(
        *,
        server: str | None,
        context: str | None,
        route: Callable[[str, int], str | None] | None = None,
) -> HostChoice:
    """
    Which host name a cluster can reach this machine by, for :class:`WebhookAutoServer`.

    1. A kubeconfig context of K3d (``k3d-*``), Minikube (``minikube``) or
       Docker Desktop (``docker-desktop``): their special host names, listening
       on all interfaces.
    2. An API server on this machine (a loopback address): the loopback
       address, listening on it only.
    3. Another API server: the local address that routes to it (the API
       server most likely reaches this machine by the same address),
       listening on all interfaces.
    4. An unknown or unresolvable API server: ``localhost`` on all interfaces.
    """
    name = (context or '').lower()
    for matches, host, what in MAGIC_HOSTS:
        if matches(name):
            return HostChoice(addr=None, host=host, reason=f"the kubeconfig context {context!r} is {what}")
    if not server:
        return HostChoice(addr=None, host='localhost', reason="the API server's address is unknown")
    parsed = urllib.parse.urlsplit(server)
    if not parsed.hostname:
        return HostChoice(addr=None, host='localhost', reason=f"the API server's URL {server!r} has no host")
    local = (route or route_address)(parsed.hostname, parsed.port or 443)
    if local is None:
        return HostChoice(addr=None, host='localhost',
                          reason=f"no route to the API server's host {parsed.hostname!r} is known")
    if ipaddress.ip_address(local).is_loopback:
        return HostChoice(addr=local, host=local, reason=f"the API server {server} runs on this machine")
    return HostChoice(addr=None, host=local,
                      reason=f"this machine reaches the API server {server} from the address {local}")


def route_address(host: str, port: int) -> str | None:
    """The local address that connections to the host go out from; ``None`` if it cannot be resolved."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except OSError:
        return None
    for family, kind, proto, _, sockaddr in infos:
        try:
            with socket.socket(family, kind, proto) as sock:
                sock.connect(sockaddr)  # a UDP "connection" only picks the route; nothing is sent
                return str(sock.getsockname()[0])
        except OSError:
            continue
    return None


@dataclasses.dataclass(frozen=True)
class WebhookAutoServer(WebhookServer):
    """
    A :class:`WebhookServer` on the host that the cluster can reach, chosen by :func:`choose_host`.

    An explicit ``addr=`` or ``host=`` wins over the choice. The auto-server
    never tunnels.
    """

    async def __call__(self, fn: WebhookFn) -> AsyncIterator[WebhookClientConfig]:
        choice = choose_host(server=api_server_var.get(), context=kubeconfig.current_context())
        server = WebhookServer(**{
            **{field.name: getattr(self, field.name) for field in dataclasses.fields(WebhookServer)},
            'addr': self.addr if self.addr is not None else choice.addr,
            'host': self.host or choice.host,
        })
        logger.info("%s serves on the host %r: %s.", type(self).__name__, server._host, choice.reason)
        async for config in server(fn):
            yield config


@dataclasses.dataclass(frozen=True)
class WebhookAutoTunnel(WebhookAutoServer):
    """
    A tunnel where one is possible, else a :class:`WebhookAutoServer`.

    kopf reaches no external tunnel service (such as ngrok): it works without
    the internet. So this always serves through :class:`WebhookAutoServer`,
    which suits clusters that can reach this machine (local clusters, or a
    cluster in the same network); it says so in the log.
    """

    async def __call__(self, fn: WebhookFn) -> AsyncIterator[WebhookClientConfig]:
        logger.info("WebhookAutoTunnel: no tunnel service is available to kopf; "
                    "falling back to a WebhookAutoServer.")
        async for config in super().__call__(fn):
            yield config


@dataclasses.dataclass(frozen=True)
class WebhookNgrokTunnel:
    """
    An ngrok tunnel: not supported; it fails at startup with an explanation.

    The options are accepted so that operators that mention it still import.
    """

    addr: str | None = None
    port: int | None = None
    path: str | None = None
    token: str | None = dataclasses.field(default=None, repr=False)
    region: str | None = None
    binary: PathLike | None = None

    async def __call__(self, fn: WebhookFn) -> AsyncIterator[WebhookClientConfig]:
        raise WebhookServerError(
            "kopf.WebhookNgrokTunnel is not supported: kopf does not reach external tunnel services. "
            "Use kopf.WebhookServer with a host the cluster can reach, kopf.WebhookAutoServer, "
            "or a server of your own (see the Admission documentation).")
        yield  # an async generator, as the server protocol requires
