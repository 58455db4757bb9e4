"""
Everything needed to connect to a Kubernetes API server, and nothing else.

Login functions produce it (from a kubeconfig, from a pod's service account,
from an exec credential plugin, or from a user's ``@kopf.on.login`` handler);
the API client consumes it. It is plain data, so that the source of
credentials and the HTTP machinery stay independent. Secrets are kept out of
``repr()`` so that they never reach logs.
"""
from __future__ import annotations

import base64
import dataclasses
import datetime
import os
import shutil
import ssl
import tempfile
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import aiohttp


@dataclasses.dataclass(frozen=True)
class ConnectionInfo:
    """
    Where the API server is and how to authenticate to it.

    Files (``*_path``) and in-memory PEM data (``*_data``) are alternatives;
    when both are given, the client loads both where that makes sense (CA) or
    prefers the data (client certificate and key).

    ``token_path`` names a file with the token that is re-read whenever it
    changes (projected service-account tokens are rotated in place); while
    the file is readable, its content wins over ``token``. ``expiration`` is
    when the credentials stop working: the client logs in again shortly
    before that moment. A naive ``datetime`` is taken as UTC. ``scheme`` is
    the ``Authorization`` scheme of the token (``Bearer`` by default).
    ``priority`` is kept for compatibility: one set of credentials is used
    at a time, the one that the login produced. ``proxy_url`` sends the
    requests through an HTTP proxy; ``trust_env`` takes the proxies from the
    environment (``HTTPS_PROXY``, ``NO_PROXY``, ...) and ``~/.netrc``.

    :meth:`as_http_headers`, :meth:`as_aiohttp_basic_auth` and
    :meth:`as_ssl_context` give what an HTTP session needs, e.g. to build
    one's own :class:`AiohttpSession`.
    """

    server: str
    ca_path: str | None = None
    ca_data: bytes | None = dataclasses.field(default=None, repr=False)
    insecure: bool = False
    username: str | None = None
    password: str | None = dataclasses.field(default=None, repr=False)
    scheme: str | None = None
    token: str | None = dataclasses.field(default=None, repr=False)
    certificate_path: str | None = None
    private_key_path: str | None = None
    certificate_data: bytes | None = dataclasses.field(default=None, repr=False)
    private_key_data: bytes | None = dataclasses.field(default=None, repr=False)
    default_namespace: str | None = None
    priority: int = 0
    expiration: datetime.datetime | None = None
    token_path: str | None = None
    proxy_url: str | None = None
    trust_env: bool = False

    @property
    def expires_at(self) -> datetime.datetime | None:
        """The expiration as an aware UTC datetime (naive values are UTC), or ``None``."""
        return _aware(self.expiration)

    def as_http_headers(self) -> dict[str, str]:
        """The ``Authorization`` header of these credentials (a token, the token file's, or basic auth)."""
        token = self.token
        if self.token_path:
            try:
                with open(self.token_path, encoding='utf-8') as f:
                    token = f.read().strip() or token
            except OSError:
                pass  # the token given beside it, if any, is used
        return self.authorization(token)

    def as_aiohttp_basic_auth(self) -> aiohttp.BasicAuth | None:
        """
        The ``auth=`` of an ``aiohttp`` session: ``None``, as in Kopf 1.45.2.

        :meth:`as_http_headers` carries the user and password already (as
        it carries a token), so a session made with both, as Kopf's docs
        show, authenticates once: aiohttp refuses an ``auth=`` beside an
        ``Authorization`` header.
        """
        return None

    def authorization(self, token: str | None) -> dict[str, str]:
        """The ``Authorization`` header with this token, else with the user and password, if any."""
        if token:
            return {'Authorization': f'{self.scheme or "Bearer"} {token}'}
        if self.username is not None:
            pair = f'{self.username}:{self.password or ""}'.encode()
            return {'Authorization': f'Basic {base64.b64encode(pair).decode("ascii")}'}
        return {}

    def as_ssl_context(self) -> ssl.SSLContext:
        """
        A TLS context that verifies the server (unless ``insecure``), with the client certificate if any.

        Certificates given as data are written to a private temporary
        directory only for the moment of loading them: the context keeps
        them in memory, the files are removed at once.
        """
        cadata: str | bytes | None = None
        if self.ca_data is not None:
            cadata = self.ca_data.decode('ascii') if b'-----BEGIN' in self.ca_data else self.ca_data
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ca_path, cadata=cadata)
        if self.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.certificate_path or self.certificate_data:
            tmpdir = tempfile.mkdtemp(prefix='kopf-tls-')  # created with 0700 permissions
            try:
                certfile = _materialize(tmpdir, 'client.crt', self.certificate_data, self.certificate_path)
                keyfile = _materialize(tmpdir, 'client.key', self.private_key_data, self.private_key_path)
                assert certfile is not None
                context.load_cert_chain(certfile=certfile, keyfile=keyfile)
            finally:
                shutil.rmtree(tmpdir, ignore_errors=True)
        return context


@dataclasses.dataclass(frozen=True, kw_only=True)
class AiohttpSession:
    """
    A login handler's own ``aiohttp.ClientSession`` for the API server (Kopf's advanced credentials).

    The session must carry its authentication (headers, TLS client
    certificates) itself: the framework adds nothing but a ``User-Agent``
    if the session has none, owns the session from then on, and closes it
    at exit or when a later login replaces it. ``server`` is the API
    server's URL, the rest as in :class:`ConnectionInfo`.
    """

    server: str
    aiohttp_session: Any = dataclasses.field(repr=False)  # an aiohttp.ClientSession
    priority: int = 0
    default_namespace: str | None = None
    expiration: datetime.datetime | None = None

    @property
    def expires_at(self) -> datetime.datetime | None:
        return _aware(self.expiration)


def _aware(moment: datetime.datetime | None) -> datetime.datetime | None:
    if moment is None:
        return None
    if moment.tzinfo is None:
        return moment.replace(tzinfo=datetime.timezone.utc)
    return moment.astimezone(datetime.timezone.utc)


def _materialize(tmpdir: str, filename: str, data: bytes | None, path: str | None) -> str | None:
    if data is None:
        return path
    target = os.path.join(tmpdir, filename)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, 'wb') as f:
        f.write(data)
    return target
