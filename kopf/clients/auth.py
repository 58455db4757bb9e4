"""
Credentials and the authenticated HTTP session to the Kubernetes API.

Login functions turn a kubeconfig or a pod's service account into a
:class:`~kopf.structs.credentials.ConnectionInfo`; :class:`APIContext` turns
that into one ``aiohttp`` session with TLS verification, authentication, and
retries of transient failures, so that every other client module only says
*what* to request.
"""
from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json as jsonlib
import logging
import os
import shutil
import ssl
import tempfile
import types
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, TypeAlias

import aiohttp
import pykube
import pykube.exceptions
import yaml

from kopf.clients.errors import APIConnectionError, APIError, APIServerError, check_response
from kopf.structs.credentials import ConnectionInfo
from kopf.structs.resources import ParamValue, build_query

logger = logging.getLogger(__name__)

SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount'
DEFAULT_KUBECONFIG = '~/.kube/config'

Logger: TypeAlias = 'logging.Logger | logging.LoggerAdapter[Any]'

# Ordinary requests in flight at once (streams are not counted). Beyond the API server's own
# parallelism more of them only queue there, while every extra TLS connection costs the
# operator a handshake and ~300 KB of buffers that stay with the process afterwards.
MAX_CONCURRENT_REQUESTS = 32


class LoginError(Exception):
    """No usable credentials were found; the message says what was tried and why it failed."""


# --- Credentials --------------------------------------------------------------------------------


def login_default() -> ConnectionInfo:
    """
    The credentials an operator uses when the user provides none.

    Inside a pod (the service host variable and the token file are present),
    the pod's service account is tried first; then the kubeconfig. Trying the
    kubeconfig even inside a pod helps setups that mount one explicitly.
    """
    failures: list[str] = []
    if _looks_like_incluster():
        try:
            return login_via_incluster()
        except LoginError as e:
            failures.append(f"in-cluster service account: {e}")
    else:
        failures.append("in-cluster service account: not running in a pod "
                        f"(no KUBERNETES_SERVICE_HOST or no {SERVICE_ACCOUNT_DIR}/token)")
    try:
        return login_via_kubeconfig()
    except LoginError as e:
        failures.append(f"kubeconfig: {e}")
    tried = ''.join(f"\n  - {failure}" for failure in failures)
    raise LoginError(f"Cannot log in to any Kubernetes cluster. Tried:{tried}")


def _looks_like_incluster() -> bool:
    return bool(os.environ.get('KUBERNETES_SERVICE_HOST')) and Path(SERVICE_ACCOUNT_DIR, 'token').is_file()


def login_via_incluster(path: str | None = None) -> ConnectionInfo:
    """Credentials of the pod's service account: its token, the cluster CA, its namespace."""
    path = path if path is not None else SERVICE_ACCOUNT_DIR
    host = os.environ.get('KUBERNETES_SERVICE_HOST')
    port = os.environ.get('KUBERNETES_SERVICE_PORT', '443')
    if not host:
        raise LoginError("KUBERNETES_SERVICE_HOST is not set: not running in a pod.")
    directory = Path(path)
    try:
        token = (directory / 'token').read_text(encoding='utf-8').strip()
    except OSError as e:
        raise LoginError(f"Cannot read the service account token: {e}") from e
    if not token:
        raise LoginError(f"The service account token {directory / 'token'} is empty.")
    ca_file = directory / 'ca.crt'
    namespace_file = directory / 'namespace'
    namespace = namespace_file.read_text(encoding='utf-8').strip() if namespace_file.is_file() else None
    host = f'[{host}]' if ':' in host else host  # IPv6 addresses need brackets in URLs
    return ConnectionInfo(
        server=f'https://{host}:{port}',
        ca_path=str(ca_file) if ca_file.is_file() else None,
        token=token,
        default_namespace=namespace or None,
    )


def login_via_kubeconfig(path: str | os.PathLike[str] | None = None, context: str | None = None) -> ConnectionInfo:
    """
    Credentials from a kubeconfig file, as ``kubectl`` would use them.

    The file is the given path, else the first file of ``$KUBECONFIG``, else
    ``~/.kube/config``; the context is the given one, else the file's current
    context. Certificates and CAs may be files (relative to the kubeconfig) or
    inline ``*-data`` fields. Exec plugins are not supported: they need to run
    commands, which an operator should not do implicitly.
    """
    filepath = _kubeconfig_path(path)
    if not filepath.is_file():
        raise LoginError(f"The kubeconfig {filepath} does not exist.")
    try:
        config = pykube.KubeConfig.from_file(str(filepath), current_context=context)
        if context is None and not (config.doc or {}).get('current-context'):
            raise LoginError("No context is given, and the kubeconfig has no current-context.")
        return _info_from_kubeconfig(config)
    except LoginError as e:
        raise LoginError(f"{e} (in the kubeconfig {filepath})") from e
    except (pykube.exceptions.PyKubeError, KeyError, TypeError, ValueError, OSError, yaml.YAMLError) as e:
        raise LoginError(f"Cannot use the kubeconfig {filepath}: {type(e).__name__}: {e}") from e


def _kubeconfig_path(path: str | os.PathLike[str] | None) -> Path:
    if path is not None:
        return Path(path).expanduser()
    env = os.environ.get('KUBECONFIG', '')
    first = next((item for item in env.split(os.pathsep) if item), None)
    return Path(first or DEFAULT_KUBECONFIG).expanduser()


def _info_from_kubeconfig(config: Any) -> ConnectionInfo:
    context_name = config.current_context
    if context_name not in config.contexts:
        raise LoginError(f"The context {context_name!r} is not defined; known: {sorted(config.contexts)}.")
    context = config.contexts[context_name] or {}
    cluster_name = context.get('cluster')
    user_name = context.get('user')
    raw_cluster = _named_section(config.doc, 'clusters', 'cluster', cluster_name)
    raw_user = _named_section(config.doc, 'users', 'user', user_name) if user_name else {}
    if raw_cluster is None:
        raise LoginError(f"The cluster {cluster_name!r} of the context {context_name!r} is not defined.")
    if raw_user is None:
        raise LoginError(f"The user {user_name!r} of the context {context_name!r} is not defined.")
    if not raw_cluster.get('server'):
        raise LoginError(f"The cluster {cluster_name!r} has no server URL.")
    cluster = config.clusters[cluster_name]
    user = config.users.get(user_name, {}) if user_name else {}

    ca_path, ca_data = _file_or_data(raw_cluster, cluster, 'certificate-authority')
    cert_path, cert_data = _file_or_data(raw_user, user, 'client-certificate')
    key_path, key_data = _file_or_data(raw_user, user, 'client-key')
    token = _token(user, base=Path(config.filepath).parent if config.filepath else None)
    username = user.get('username')
    password = user.get('password')
    has_credentials = token or cert_path or cert_data or username
    if not has_credentials and user.get('exec'):
        raise LoginError(f"The user {user_name!r} uses an exec plugin, which is not supported; "
                         "use a token or client certificates, or an @kopf.on.login handler.")
    return ConnectionInfo(
        server=str(raw_cluster['server']),
        ca_path=ca_path,
        ca_data=ca_data,
        insecure=bool(raw_cluster.get('insecure-skip-tls-verify', False)),
        username=str(username) if username is not None else None,
        password=str(password) if password is not None else None,
        token=token,
        certificate_path=cert_path,
        private_key_path=key_path,
        certificate_data=cert_data,
        private_key_data=key_data,
        default_namespace=context.get('namespace') or None,
    )


def _named_section(doc: Any, listing: str, field: str, name: Any) -> Mapping[str, Any] | None:
    """The raw ``cluster:``/``user:`` dict of a named kubeconfig entry, as written in the file."""
    for entry in (doc or {}).get(listing) or []:
        if isinstance(entry, Mapping) and entry.get('name') == name:
            section = entry.get(field)
            return section if isinstance(section, Mapping) else {}
    return None


def _file_or_data(raw: Mapping[str, Any], parsed: Mapping[str, Any], key: str) -> tuple[str | None, bytes | None]:
    """
    A certificate or key as a path or as data, exactly as the kubeconfig gives it.

    The parser resolves relative paths and decodes base64; the raw section
    tells which form was used, so that files stay files (and are re-read on
    every connection) and inline data never touches the disk here.
    """
    value = parsed.get(key)
    if value is None:
        return None, None
    if f'{key}-data' in raw:
        return None, bytes(value.bytes())
    return str(value.filename()), None


def _token(user: Mapping[str, Any], *, base: Path | None) -> str | None:
    if user.get('token'):
        return str(user['token']).strip()
    token_file = user.get('tokenFile')
    if token_file:
        path = Path(token_file) if base is None else base / Path(token_file).expanduser()
        try:
            return path.read_text(encoding='utf-8').strip()
        except OSError as e:
            raise LoginError(f"Cannot read the token file {path}: {e}") from e
    provider_config = (user.get('auth-provider') or {}).get('config') or {}
    for field in ('id-token', 'access-token'):  # OIDC and GCP providers cache the last token here
        if provider_config.get(field):
            return str(provider_config[field])
    return None


# --- Session ------------------------------------------------------------------------------------


def make_ssl_context(info: ConnectionInfo) -> ssl.SSLContext:
    """
    A TLS context that verifies the server, unless the user explicitly disabled it.

    Client certificates given as data are written to a private temporary
    directory only for the moment of loading them, then removed: the context
    keeps them in memory.
    """
    cadata: str | bytes | None = None
    if info.ca_data is not None:
        cadata = info.ca_data.decode('ascii') if b'-----BEGIN' in info.ca_data else info.ca_data
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=info.ca_path, cadata=cadata)
    if info.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if info.certificate_path or info.certificate_data:
        tmpdir = tempfile.mkdtemp(prefix='kopf-tls-')  # created with 0700 permissions
        try:
            certfile = _materialize(tmpdir, 'client.crt', info.certificate_data, info.certificate_path)
            keyfile = _materialize(tmpdir, 'client.key', info.private_key_data, info.private_key_path)
            assert certfile is not None
            context.load_cert_chain(certfile=certfile, keyfile=keyfile)
        finally:
            shutil.rmtree(tmpdir, ignore_errors=True)
    return context


def _materialize(tmpdir: str, filename: str, data: bytes | None, path: str | None) -> str | None:
    if data is None:
        return path
    target = os.path.join(tmpdir, filename)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, 'wb') as f:
        f.write(data)
    return target


class APIContext:
    """
    One authenticated session to one API server, used by all client functions.

    Use it as ``async with APIContext(info) as context: ...``. Transient
    failures — connection errors, timeouts, 5xx, and 429 "too many requests",
    which the server sends when it sheds load and which is explicitly meant to
    be retried — are retried ``retries`` times with an exponential back-off
    (``backoff``, doubling, capped at ``max_backoff``), each logged as a
    warning. Other 4xx errors are raised at once: repeating the same request
    cannot fix them. At most ``max_concurrent_requests`` requests are in
    flight at once (the others wait for a slot); streams are not limited.
    """

    def __init__(
            self,
            info: ConnectionInfo,
            *,
            retries: int = 4,
            backoff: float = 0.5,
            max_backoff: float = 10.0,
            timeout: float | None = 60.0,
            max_concurrent_requests: int = MAX_CONCURRENT_REQUESTS,
            logger: Logger | None = None,
    ) -> None:
        self.info = info
        self.server = info.server.rstrip('/')
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.timeout = timeout
        self.logger: Logger = logger if logger is not None else logging.getLogger(__name__)
        self._session: aiohttp.ClientSession | None = None
        self._request_slots = asyncio.Semaphore(max_concurrent_requests)

    async def __aenter__(self) -> APIContext:
        await self.open()
        return self

    async def __aexit__(
            self,
            exc_type: type[BaseException] | None,
            exc_val: BaseException | None,
            exc_tb: types.TracebackType | None,
    ) -> None:
        await self.close()

    async def open(self) -> None:
        """Create the session; done by ``async with``, available for long-lived owners."""
        if self._session is not None:
            return
        ssl_context = make_ssl_context(self.info)
        if self.info.insecure:
            self.logger.warning("TLS verification of %s is disabled (insecure-skip-tls-verify).", self.server)
        headers = {'User-Agent': 'kopf', 'Accept': 'application/json'}
        if self.info.token:
            headers['Authorization'] = f'Bearer {self.info.token}'
        elif self.info.username is not None:
            pair = f'{self.info.username}:{self.info.password or ""}'.encode()
            headers['Authorization'] = f'Basic {base64.b64encode(pair).decode("ascii")}'
        connector = aiohttp.TCPConnector(ssl=ssl_context, limit=0)
        self._session = aiohttp.ClientSession(connector=connector, headers=headers)

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("The API context is not open; use it as `async with APIContext(...)`.")
        return self._session

    def url(self, url_or_path: str, params: Mapping[str, ParamValue] | None = None) -> str:
        """A full URL from a path on the server (``/api/v1/...``) or a full URL, plus query parameters."""
        url = self.server + url_or_path if url_or_path.startswith('/') else url_or_path
        query = build_query(params or {})
        if query:
            url = f"{url}{'&' if '?' in url else '?'}{query}"
        return url

    async def request(
            self,
            method: str,
            url_or_path: str,
            *,
            json: Any = None,
            params: Mapping[str, ParamValue] | None = None,
            headers: Mapping[str, str] | None = None,
            timeout: float | None = None,
    ) -> Any:
        """
        Send one request (retrying transient failures) and return the parsed JSON body.

        Raises the typed :mod:`kopf.clients.errors` for error responses and
        :class:`~kopf.clients.errors.APIConnectionError` if the server stays
        unreachable. An empty body gives ``None``.
        """
        url = self.url(url_or_path, params)
        data = jsonlib.dumps(json).encode('utf-8') if json is not None else None
        all_headers = {'Content-Type': 'application/json'} if data is not None else {}
        all_headers.update(headers or {})
        client_timeout = aiohttp.ClientTimeout(total=timeout if timeout is not None else self.timeout)
        for attempt in itertools.count(1):
            try:
                async with self._request_slots, self.session.request(
                        method, url, data=data, headers=all_headers, timeout=client_timeout,
                ) as response:
                    await check_response(response)
                    text = await response.text()
                    return jsonlib.loads(text) if text.strip() else None
            except APIError as e:
                if not _is_transient(e) or attempt > self.retries:
                    raise
                problem = str(e)
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, asyncio.TimeoutError) as e:
                if attempt > self.retries:
                    raise APIConnectionError(
                        f"{method} {url} failed after {attempt} attempts: {_describe(e)}") from e
                problem = _describe(e)
            delay = min(self.backoff * 2 ** (attempt - 1), self.max_backoff)
            self.logger.warning("%s %s failed: %s; retrying in %.2fs (retry %d of %d).",
                                method, url, problem, delay, attempt, self.retries)
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    @contextlib.asynccontextmanager
    async def stream(
            self,
            method: str,
            url_or_path: str,
            *,
            params: Mapping[str, ParamValue] | None = None,
            headers: Mapping[str, str] | None = None,
            timeout: float | None = None,
            connect_timeout: float | None = None,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """
        Open a streaming response (for watches), without retries: the caller reconnects.

        ``timeout`` limits the whole response (``None``: unlimited, as a watch
        ends when the server says so); ``connect_timeout`` limits connecting.
        Error statuses are raised as typed errors, unreachable servers as
        :class:`~kopf.clients.errors.APIConnectionError`; timeouts are raised
        as ``asyncio.TimeoutError``, which a watcher treats as a normal end.
        """
        url = self.url(url_or_path, params)
        client_timeout = aiohttp.ClientTimeout(total=timeout, sock_connect=connect_timeout)
        try:
            response = await self.session.request(method, url, headers=headers, timeout=client_timeout)
        except asyncio.TimeoutError:
            raise
        except aiohttp.ClientConnectionError as e:
            raise APIConnectionError(f"{method} {url} failed: {_describe(e)}") from e
        try:
            await check_response(response)
            yield response
        finally:
            response.release()


def _is_transient(error: APIError) -> bool:
    return isinstance(error, APIServerError) or error.status == 429


def _describe(error: BaseException) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
