"""
The authenticated HTTP session to one Kubernetes API server, used by every client module.

:class:`APIContext` turns a :class:`~kopf._structs.credentials.ConnectionInfo`
into one ``aiohttp`` session with TLS verification, authentication, timeouts,
TCP keepalive, and retries of transient failures, so that every other client
module only says *what* to request.

Credentials change while an operator runs: token files are rotated, exec
plugins hand out short-lived tokens, a cluster revokes a token. The context
follows a token file as it changes, logs in again shortly before the
credentials expire, and on a ``401 Unauthorized`` logs in again (with the
``relogin`` it is given) and repeats the request once -- without restarting
the operator.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json as jsonlib
import logging
import os
import socket
import ssl
import time
import types
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sized
from pathlib import Path
from typing import Any, TypeAlias

import aiohttp

from kopf import errors
from kopf._kube.errors import (
    APIConnectionError,
    APIError,
    APIServerError,
    APITooManyRequestsError,
    APIUnauthorizedError,
    LoginError,
    check_response,
    too_large,
)
from kopf._structs.credentials import AiohttpSession, ConnectionInfo
from kopf._structs.resources import ParamValue, build_query
from kopf._structs.typedefs import Logger

logger = logging.getLogger(__name__)

Relogin: TypeAlias = Callable[[], Awaitable['ConnectionInfo | AiohttpSession']]

TOKEN_FILE_CHECK_INTERVAL = 1.0  # seconds between checks whether a token file has changed

# Ordinary requests in flight at once (streams are not counted). Beyond the API server's own
# parallelism more of them only queue there, while every extra TLS connection costs the
# operator a handshake and ~300 KB of buffers that stay with the process afterwards.
MAX_CONCURRENT_REQUESTS = 32
# Pooled connections unused for so long are closed, and their buffers freed: after a burst of work, the
# operator's memory returns to what it needs when idle. A new connection costs one TLS handshake.
IDLE_CONNECTION_TIMEOUT = 5.0


def make_ssl_context(info: ConnectionInfo) -> ssl.SSLContext:
    """A TLS context that verifies the server, unless the user explicitly disabled it (see ConnectionInfo)."""
    return info.as_ssl_context()


def keepalive_socket_factory(idle: float) -> Callable[[Any], socket.socket]:
    """
    Sockets with TCP keepalive, so that a peer that silently vanished is noticed by the kernel.

    Probes start after ``idle`` seconds without traffic and repeat three
    times at a third of that interval; an unanswered series resets the
    connection. Without it, a dead NAT entry or load balancer keeps an idle
    connection "open" for hours.
    """
    def factory(addr_info: Any) -> socket.socket:
        family, type_, proto, _, _ = addr_info
        sock = socket.socket(family=family, type=type_, proto=proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        options = [('TCP_KEEPIDLE', max(1, int(idle))), ('TCP_KEEPINTVL', max(1, int(idle / 3))),
                   ('TCP_KEEPCNT', 3)]
        for name, value in options:
            if hasattr(socket, name):  # not on every platform
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
        return sock
    return factory


@dataclasses.dataclass
class _TokenFile:
    """A token kept in a file that may be replaced at any time; re-read when it changes."""

    path: str
    token: str | None
    signature: tuple[int, int, int] | None = None
    checked: float | None = None

    def current(self, *, force: bool = False) -> str | None:
        now = time.monotonic()
        if not force and self.checked is not None and now - self.checked < TOKEN_FILE_CHECK_INTERVAL:
            return self.token
        self.checked = now
        try:
            stat = os.stat(self.path)
            signature = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
            if force or signature != self.signature:
                token = Path(self.path).read_text(encoding='utf-8').strip()
                if token:
                    self.token = token
                self.signature = signature
        except (OSError, UnicodeDecodeError) as e:
            logger.warning("Cannot re-read the token file %s: %s; using the last token.",
                           self.path, type(e).__name__)
        return self.token


class APIContext:
    """
    One authenticated session to one API server, used by all client functions.

    Use it as ``async with APIContext(info) as context: ...``.

    Every attempt of a request is limited by ``timeout`` (seconds), and
    connecting by ``connect_timeout``; connections use TCP keepalive after
    ``keepalive`` idle seconds. Transient failures — connection errors,
    timeouts, and 5xx — are retried after each delay of ``backoffs`` (by
    default ``retries`` delays growing from ``backoff``, doubling, capped at
    ``max_backoff``), each logged as a warning. ``429 Too Many Requests``
    is waited out as the server asks (its ``Retry-After``, at most
    ``max_retry_after`` seconds), up to ``throttle_retries`` times. Other
    4xx errors are raised at once: repeating the same request cannot fix
    them — except ``401 Unauthorized``, after which the context logs in
    again with ``relogin`` (e.g. the operator's login handlers) and repeats
    the request once. At most ``max_concurrent_requests`` requests are in
    flight at once (the others wait for a slot); streams are not limited.

    The credentials may also be a login handler's own session
    (:class:`~kopf._structs.credentials.AiohttpSession`): it is used as it
    is, and closed with the context.

    Pooled connections that have carried no request for ``idle_timeout``
    seconds are closed (``None``: kept open): each holds buffers of a few
    hundred KiB, and after a burst of work they are not needed.
    """

    def __init__(
            self,
            info: ConnectionInfo | AiohttpSession,
            *,
            retries: int = 4,
            backoff: float = 0.5,
            max_backoff: float = 10.0,
            backoffs: Iterable[float] | None = None,
            timeout: float | None = 60.0,
            connect_timeout: float | None = 10.0,
            keepalive: float | None = 30.0,
            throttle_retries: int = 20,
            max_retry_after: float = 60.0,
            relogin: Relogin | None = None,
            max_concurrent_requests: int = MAX_CONCURRENT_REQUESTS,
            idle_timeout: float | None = IDLE_CONNECTION_TIMEOUT,
            logger: Logger | None = None,
    ) -> None:
        self._provided: aiohttp.ClientSession | None = None  # a login handler's own session, if any
        info = self._accept(info)
        self.info = info
        self.server = info.server.rstrip('/')
        if backoffs is None:
            backoffs = [min(backoff * 2 ** i, max_backoff) for i in range(retries)]
        self.backoffs: Iterable[float] = backoffs  # re-iterated per request: may be endless, e.g. with jitter
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.keepalive = keepalive
        self.idle_timeout = idle_timeout
        self.throttle_retries = throttle_retries
        self.max_retry_after = max_retry_after
        self.relogin = relogin
        self.logger: Logger = logger if logger is not None else logging.getLogger(__name__)
        self._session: aiohttp.ClientSession | None = None
        self._retired: list[aiohttp.ClientSession] = []  # sessions of earlier credentials, closed at exit
        self._token_file = _TokenFile(info.token_path, info.token) if info.token_path else None
        self._version = 0  # increments with every change of credentials
        self._refresh_at: float | None = None  # wall-clock time to log in again before expiration
        self._login_lock = asyncio.Lock()
        self._request_slots = asyncio.Semaphore(max_concurrent_requests)
        self._schedule_refresh(info)

    @property
    def retries(self) -> int | None:
        """How many retries transient failures get (``None``: as many as the backoffs yield)."""
        return len(self.backoffs) if isinstance(self.backoffs, Sized) else None

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
        self._session = self._make_session(self.info)

    @property
    def custom_session(self) -> bool:
        """Whether the session is a login handler's own (it cannot be recreated from the credentials)."""
        return self._provided is not None

    def _accept(self, credentials: ConnectionInfo | AiohttpSession) -> ConnectionInfo:
        """Remember a provided session, if it is one; the credentials as far as they are known."""
        if isinstance(credentials, AiohttpSession):
            if not isinstance(credentials.aiohttp_session, aiohttp.ClientSession):
                raise LoginError(f"kopf.AiohttpSession(aiohttp_session=...) must be an aiohttp.ClientSession, "
                                 f"got {type(credentials.aiohttp_session).__name__}.")
            self._provided = credentials.aiohttp_session
            return ConnectionInfo(server=credentials.server, default_namespace=credentials.default_namespace,
                                  priority=credentials.priority, expiration=credentials.expiration)
        self._provided = None
        return credentials

    def _make_session(self, info: ConnectionInfo) -> aiohttp.ClientSession:
        if self._provided is not None:
            if 'User-Agent' not in self._provided.headers:
                self._provided.headers['User-Agent'] = 'kopf'
            return self._provided
        try:
            ssl_context = make_ssl_context(info)
        except (ssl.SSLError, OSError) as e:
            raise LoginError(f"Cannot use the TLS certificates or keys of the credentials for {info.server}: "
                             f"{type(e).__name__}: {e.strerror or e}") from None
        if info.insecure:
            self.logger.warning("TLS verification of %s is disabled (insecure-skip-tls-verify).", self.server)
        factory = keepalive_socket_factory(self.keepalive) if self.keepalive else None
        connector = aiohttp.TCPConnector(ssl=ssl_context, limit=0, socket_factory=factory,
                                         keepalive_timeout=self.idle_timeout or None)
        headers = {'User-Agent': 'kopf', 'Accept': 'application/json'}
        return aiohttp.ClientSession(connector=connector, headers=headers, trust_env=info.trust_env)

    async def close(self) -> None:
        sessions = [self._session] if self._session is not None else []
        sessions.extend(self._retired)
        self._session = None
        self._retired = []
        for session in sessions:
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

    # -- credentials -------------------------------------------------------------------------------

    def auth_headers(self) -> dict[str, str]:
        """The ``Authorization`` header of the current credentials (re-reading a changed token file)."""
        info = self.info
        token = self._token_file.current() if self._token_file is not None else info.token
        return info.authorization(token)

    def _schedule_refresh(self, info: ConnectionInfo) -> None:
        """Log in again a bit before the credentials expire: 1/5 of their lifetime, at most a minute early."""
        expires_at = info.expires_at
        if expires_at is None:
            self._refresh_at = None
            return
        now = time.time()
        lifetime = expires_at.timestamp() - now
        self._refresh_at = expires_at.timestamp() - min(60.0, max(0.0, lifetime / 5))
        if self._refresh_at <= now and self._version > 0:
            self.logger.warning("The new credentials have expired already (at %s); using them anyway.",
                                expires_at.isoformat())
            self._refresh_at = now + 5.0  # not a busy loop of logins

    async def _refresh_if_expiring(self) -> None:
        if self._refresh_at is None or self.relogin is None or time.time() < self._refresh_at:
            return
        expires_at = self.info.expires_at
        when = expires_at.isoformat() if expires_at is not None else 'soon'
        await self.reauthenticate(self._version, reason=f"the credentials expire at {when}")

    async def reauthenticate(self, version: int, *, reason: str) -> bool:
        """
        Get new credentials, unless someone has done so since ``version``; ``True`` if there are new ones.

        A changed token file is enough; otherwise the ``relogin`` callback
        runs (once for all concurrent requests that need it).
        """
        async with self._login_lock:
            if self._version != version:
                return True
            if self._token_file is not None:
                old_token = self._token_file.token
                if self._token_file.current(force=True) != old_token:
                    self._version += 1
                    self.logger.info("Using the new token from %s (%s).", self._token_file.path, reason)
                    return True
            if self.relogin is None:
                return False
            self.logger.info("Re-authenticating to the Kubernetes API: %s.", reason)
            try:
                info = await self.relogin()
            except Exception as e:
                self.logger.error("Re-authentication has failed: %s", e)
                return False
            self._install(info)
            return True

    def _install(self, credentials: ConnectionInfo | AiohttpSession) -> None:
        old, old_provided = self.info, self._provided
        info = self._accept(credentials)
        tls_fields = ('server', 'ca_path', 'ca_data', 'insecure', 'certificate_path', 'private_key_path',
                      'certificate_data', 'private_key_data', 'trust_env')
        renewed = self._provided is not None and self._provided is not old_provided
        if self._session is not None and (renewed or any(getattr(old, f) != getattr(info, f) for f in tls_fields)):
            self._retired.append(self._session)  # streams in flight finish on it; closed at exit
            self._session = self._make_session(info)
        self.info = info
        self.server = info.server.rstrip('/')
        self._token_file = _TokenFile(info.token_path, info.token) if info.token_path else None
        self._version += 1
        self._schedule_refresh(info)

    # -- requests ----------------------------------------------------------------------------------

    def _client_timeout(self, timeout: float | None) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(total=timeout if timeout is not None else self.timeout,
                                     sock_connect=self.connect_timeout)

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

        Raises the typed :mod:`kopf._kube.errors` for error responses and
        :class:`~kopf._kube.errors.APIConnectionError` if the server stays
        unreachable. An empty body gives ``None``.
        """
        url = self.url(url_or_path, params)
        data = jsonlib.dumps(json).encode('utf-8') if json is not None else None
        extra_headers = {'Content-Type': 'application/json'} if data is not None else {}
        extra_headers.update(headers or {})
        client_timeout = self._client_timeout(timeout)
        failures = 0
        throttled = 0
        relogged = False
        backoffs = iter(self.backoffs)
        while True:
            await self._refresh_if_expiring()
            version = self._version
            try:
                async with self._request_slots, self.session.request(
                        method, url, data=data, headers={**self.auth_headers(), **extra_headers},
                        timeout=client_timeout, proxy=self.info.proxy_url,
                ) as response:
                    await check_response(response)
                    text = await response.text()
                    return jsonlib.loads(text) if text.strip() else None
            except APIUnauthorizedError as e:
                if relogged or not await self.reauthenticate(version, reason=f"{method} {url} got {e.status}"):
                    raise
                relogged = True
                continue
            except APITooManyRequestsError as e:
                throttled += 1
                if throttled > self.throttle_retries:
                    raise
                pause = self._throttle_delay(e, throttled)
                self.logger.warning("%s %s: the server is overloaded (429 Too Many Requests); "
                                    "retrying in %.2fs as asked (%d of %d).",
                                    method, url, pause, throttled, self.throttle_retries)
                await asyncio.sleep(pause)
                continue
            except APIError as e:
                if not isinstance(e, APIServerError) or too_large(e):  # too large is too large the next time, too
                    raise
                delay = next(backoffs, None)
                if delay is None:
                    raise
                problem = str(e)
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, asyncio.TimeoutError) as e:
                problem = self._describe(e, client_timeout)
                delay = next(backoffs, None)
                if delay is None:
                    raise APIConnectionError(f"{method} {url} failed after {failures + 1} attempts: {problem}") from e
            failures += 1
            total = self.retries
            self.logger.warning("%s %s failed: %s; retrying in %.2fs (retry %d of %s).",
                                method, url, problem, delay, failures, total if total is not None else 'many')
            await asyncio.sleep(delay)

    def _throttle_delay(self, error: APITooManyRequestsError, attempt: int) -> float:
        if error.retry_after is not None:
            return min(error.retry_after, self.max_retry_after)
        return min(2.0 ** min(attempt - 1, 6), self.max_retry_after)  # 1, 2, 4, ... 64 seconds

    @staticmethod
    def _describe(error: BaseException, timeout: aiohttp.ClientTimeout | None = None) -> str:
        if isinstance(error, asyncio.TimeoutError) and not isinstance(error, aiohttp.ClientConnectionError):
            limit = f" within {timeout.total:g}s" if timeout is not None and timeout.total else ""
            return f"no response{limit} (timed out)"
        return errors.describe(error)

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
            read_timeout: float | None = None,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """
        Open a streaming response (for watches), without retries: the caller reconnects.

        ``timeout`` limits the whole response (``None``: unlimited, as a watch
        ends when the server says so); ``connect_timeout`` limits connecting;
        ``read_timeout`` limits silence: a read that gets no data for so long
        raises ``aiohttp.SocketTimeoutError``;
        the response headers must arrive within the context's request
        timeout (a server that accepts a connection but never answers is not
        waited for forever). Error statuses are raised as typed errors (after
        one re-login on ``401``), unreachable servers as
        :class:`~kopf._kube.errors.APIConnectionError`; timeouts are raised
        as ``asyncio.TimeoutError``.
        """
        url = self.url(url_or_path, params)
        client_timeout = aiohttp.ClientTimeout(total=timeout, sock_connect=connect_timeout or self.connect_timeout,
                                               sock_read=read_timeout)
        relogged = False
        while True:
            await self._refresh_if_expiring()
            version = self._version
            try:
                opening = self.session.request(method, url, headers={**self.auth_headers(), **(headers or {})},
                                               timeout=client_timeout, proxy=self.info.proxy_url)
                response = await asyncio.wait_for(opening, timeout=self.timeout)
            except asyncio.TimeoutError:
                raise
            except aiohttp.ClientConnectionError as e:
                raise APIConnectionError(f"{method} {url} failed: {errors.describe(e)}") from e
            try:
                await check_response(response)
            except APIUnauthorizedError as e:
                response.release()
                if relogged or not await self.reauthenticate(version, reason=f"{method} {url} got {e.status}"):
                    raise
                relogged = True
                continue
            except BaseException:
                response.release()
                raise
            break
        try:
            yield response
        finally:
            response.release()


