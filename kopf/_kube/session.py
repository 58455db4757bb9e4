"""
The authenticated HTTP session to one Kubernetes API server, used by every client module.

:class:`APIContext` turns a :class:`~kopf._structs.credentials.ConnectionInfo`
into one ``aiohttp`` session with TLS verification, authentication, timeouts,
TCP keepalive, and retries of transient failures, so that every other client
module only says *what* to request.

It is a thin executor of what is decided elsewhere in this package: which
credentials to send and when to log in again (:mod:`~kopf._kube.credentials`),
whether and when to repeat a failed request (:mod:`~kopf._kube.retrying`),
how many requests may be in flight (:mod:`~kopf._kube.slots`), and how
connections are made (:mod:`~kopf._kube.connections`). It owns the session
for its lifetime, sends, streams, calls the ``relogin`` it is given, logs,
and waits on its :class:`~kopf._structs.clocks.Clock`. Network limits
(connecting, an attempt's timeout, a stream's silence, idle pooled
connections) stay aiohttp's own timers: they measure the network, not the
operator's time.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json as jsonlib
import logging
import types
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeAlias

import aiohttp

from kopf import errors
from kopf._kube import connections, retrying
from kopf._kube.connections import IDLE_CONNECTION_TIMEOUT
from kopf._kube.credentials import Accepted, Credentials, accept, needs_new_connections
from kopf._kube.errors import APIConnectionError, APIError, APIUnauthorizedError, check_response
from kopf._kube.retrying import RetryPolicy
from kopf._kube.slots import MAX_CONCURRENT_REQUESTS, RequestSlots
from kopf._observability import recording
from kopf._structs.clocks import SYSTEM_CLOCK, Clock
from kopf._structs.credentials import AiohttpSession, ConnectionInfo
from kopf._structs.resources import ParamValue, build_query
from kopf._structs.typedefs import Logger

Relogin: TypeAlias = Callable[[], Awaitable['ConnectionInfo | AiohttpSession']]


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
    The waits between attempts are on the ``clock`` (the real one by default).

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
            clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.logger: Logger = logger if logger is not None else logging.getLogger(__name__)
        self.clock = clock
        self.credentials = Credentials(info, clock=clock, logger=self.logger)
        if backoffs is None:
            backoffs = retrying.growing_backoffs(retries, backoff, max_backoff)
        self.policy = RetryPolicy(backoffs=backoffs, throttle_retries=throttle_retries,
                                  max_retry_after=max_retry_after)
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.keepalive = keepalive
        self.idle_timeout = idle_timeout
        self.relogin = relogin
        self.slots = RequestSlots(max_concurrent_requests)
        self._session: aiohttp.ClientSession | None = None
        self._retired: list[aiohttp.ClientSession] = []  # sessions of earlier credentials, closed at exit
        self._login_lock = asyncio.Lock()

    @property
    def info(self) -> ConnectionInfo:
        """The current credentials (as far as they are known, if they are a login handler's session)."""
        return self.credentials.info

    @property
    def server(self) -> str:
        return self.credentials.info.server.rstrip('/')

    @property
    def custom_session(self) -> bool:
        """Whether the session is a login handler's own (it cannot be recreated from the credentials)."""
        return self.credentials.provided is not None

    @property
    def backoffs(self) -> Iterable[float]:
        """The delays before the retries of a failing request: re-iterated per request, may be endless."""
        return self.policy.backoffs

    @property
    def retries(self) -> int | None:
        """How many retries transient failures get (``None``: as many as the backoffs yield)."""
        return self.policy.retries

    @property
    def max_retry_after(self) -> float:
        return self.policy.max_retry_after

    @property
    def throttle_retries(self) -> int:
        """How many times a throttled request (429) is waited out before it fails."""
        return self.policy.throttle_retries

    @throttle_retries.setter
    def throttle_retries(self, value: int) -> None:
        self.policy = dataclasses.replace(self.policy, throttle_retries=value)

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
        self._session = self._make_session(self.credentials.current)

    def _make_session(self, accepted: Accepted) -> aiohttp.ClientSession:
        return connections.make_session(accepted, keepalive=self.keepalive, idle_timeout=self.idle_timeout,
                                        logger=self.logger)

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
        return self.credentials.headers()

    async def _renew_if_expiring(self) -> None:
        if self.relogin is None or not self.credentials.login_due():
            return
        expires_at = self.info.expires_at
        when = expires_at.isoformat() if expires_at is not None else 'soon'
        await self.reauthenticate(self.credentials.version, reason=f"the credentials expire at {when}")

    async def reauthenticate(self, version: int, *, reason: str) -> bool:
        """
        Get new credentials, unless someone has done so since ``version``; ``True`` if there are new ones.

        A changed token file is enough; otherwise the ``relogin`` callback
        runs (once for all concurrent requests that need it).
        """
        async with self._login_lock:
            if self.credentials.version != version:
                return True
            path = self.credentials.rotated_token()
            if path is not None:
                self.logger.info("Using the new token from %s (%s).", path, reason)
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
        """Use new credentials; new connections if the old ones cannot serve them (streams finish on the old)."""
        accepted = accept(credentials)
        if self._session is not None and needs_new_connections(self.credentials.current, accepted):
            session = self._make_session(accepted)
            self._retired.append(self._session)  # streams in flight finish on it; closed at exit
            self._session = session
        self.credentials.install(accepted)
        expires_at = accepted.info.expires_at
        if self.credentials.refresh.expired and expires_at is not None:
            self.logger.warning("The new credentials have expired already (at %s); using them anyway.",
                                expires_at.isoformat())

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
        attempts = self.policy.start()
        while True:
            await self._renew_if_expiring()
            version = self.credentials.version
            try:
                async with self.slots:
                    with recording.current().api_request(method, url) as call:
                        async with self.session.request(
                                method, url, data=data, headers={**self.auth_headers(), **extra_headers},
                                timeout=client_timeout, proxy=self.info.proxy_url,
                        ) as response:
                            call.answered(response.status)
                            await check_response(response)
                            text = await response.text()
                            return jsonlib.loads(text) if text.strip() else None
            except (APIError, *retrying.TRANSIENT_ERRORS) as e:
                decision = retrying.decide(self.policy, attempts, e, what=f"{method} {url}",
                                           timeout=client_timeout.total)
                if isinstance(decision, retrying.GiveUp):
                    if decision.error is e:
                        raise
                    raise decision.error from e
                if isinstance(decision, retrying.LogInAgain):
                    if not await self.reauthenticate(version, reason=decision.reason):
                        raise
                else:
                    self._log_retry(decision, method=method, url=url)
                    await self.clock.sleep(decision.delay)
                attempts = decision.attempts

    def _log_retry(self, retry: retrying.Retry, *, method: str, url: str) -> None:
        recording.current().api_retry(method, url, throttled=retry.throttled, delay=retry.delay)
        if retry.throttled:
            self.logger.warning("%s %s: the server is overloaded (429 Too Many Requests); "
                                "retrying in %.2fs as asked (%d of %d).",
                                method, url, retry.delay, retry.attempts.throttled, self.policy.throttle_retries)
        else:
            total = self.policy.retries
            self.logger.warning("%s %s failed: %s; retrying in %.2fs (retry %d of %s).",
                                method, url, retry.problem, retry.delay, retry.attempts.failures,
                                total if total is not None else 'many')

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
            await self._renew_if_expiring()
            version = self.credentials.version
            try:
                with recording.current().api_request(method, url) as call:
                    opening = self.session.request(method, url, headers={**self.auth_headers(), **(headers or {})},
                                                   timeout=client_timeout, proxy=self.info.proxy_url)
                    response = await asyncio.wait_for(opening, timeout=self.timeout)
                    call.answered(response.status)
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
