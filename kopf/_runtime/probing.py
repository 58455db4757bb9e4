"""
The liveness endpoint: ``kopf run --liveness http://0.0.0.0:8080/healthz``.

A GET of the endpoint answers 200 with the results of the ``@kopf.on.probe``
handlers as a JSON object (``{"probe-id": result, ...}``, ``{}`` without
probes) while the operator is healthy, and 500 with ``{"error": "..."}``
when it is not. Healthy means: the operator has started watching its
resources, none of its watchers has stopped, it is not stopping, and the
last run of the probe handlers did not fail. Probe results (a failure too)
are reused for ``settings.probing.cache_period`` seconds, so that frequent
or concurrent requests do not run the probes each time; one run at a time.

The server is bound before the operator starts: a port in use stops the
operator at once with an error naming the endpoint.
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import urllib.parse
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

from aiohttp import web

from kopf._observability import serving
from kopf._structs.clocks import SYSTEM_CLOCK, Clock

logger = logging.getLogger('kopf._runtime.probing')

ProbeRunner = Callable[[], Awaitable[Mapping[str, Any]]]


class LivenessError(Exception):
    """The liveness endpoint cannot be served; the message names it and says why."""


class ProbeError(Exception):
    """Some probe handlers have failed; the message names them and their errors."""


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """Where to listen: ``http://host:port/path``."""

    host: str
    port: int
    path: str

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme != 'http':
            raise LivenessError(f"The liveness endpoint {url!r} is not served: only http:// URLs are supported, "
                                f"e.g. http://0.0.0.0:8080/healthz.")
        try:
            port = parsed.port if parsed.port is not None else 80
        except ValueError as e:
            raise LivenessError(f"The liveness endpoint {url!r} has an invalid port: {e}.") from None
        return cls(host=parsed.hostname or '0.0.0.0', port=port, path=parsed.path or '/')


class Health:
    """What the operator tells the endpoint about itself; :meth:`problem` is ``None`` while healthy."""

    def __init__(self) -> None:
        self._problem: str | None = "The operator is starting."
        self._watchers: Collection[asyncio.Task[Any]] = ()

    def watching(self, watchers: Collection[asyncio.Task[Any]]) -> None:
        """The operator watches its resources with these tasks (a live collection): healthy while they run."""
        self._watchers = watchers
        self._problem = None

    def stopping(self) -> None:
        self._problem = "The operator is stopping."

    def problem(self) -> str | None:
        if self._problem is not None:
            return self._problem
        for task in self._watchers:
            if task.done():
                return f"The watcher {task.get_name()!r} has stopped."
        return None


@dataclasses.dataclass(frozen=True)
class ProbeOutcome:
    results: Mapping[str, Any]
    error: str | None = None


class ProbeCache:
    """Runs the probe handlers when the last results are older than the period; one run at a time."""

    def __init__(self, run: ProbeRunner, *, period: Callable[[], float], clock: Clock = SYSTEM_CLOCK) -> None:
        self._run = run
        self._period = period
        self._clock = clock
        self._lock = asyncio.Lock()
        self._outcome: ProbeOutcome | None = None
        self._when: float = 0.0

    async def get(self) -> ProbeOutcome:
        async with self._lock:
            if self._outcome is None or self._clock.monotonic() - self._when >= self._period():
                self._outcome = await self._fresh()
                self._when = self._clock.monotonic()
            return self._outcome

    async def _fresh(self) -> ProbeOutcome:
        try:
            return ProbeOutcome(results=dict(await self._run()))
        except asyncio.CancelledError:
            raise
        except ProbeError as e:
            return ProbeOutcome(results={}, error=f"The probe handlers have failed: {e}")
        except Exception as e:
            return ProbeOutcome(results={}, error=f"The probes have failed: {type(e).__name__}: {e}")


class LivenessServer(serving.EndpointServer):
    """The HTTP server of the endpoint; ``start()`` binds (or fails clearly), ``stop()`` closes; it may serve more."""

    def __init__(self, url: str, *, health: Health, probes: ProbeCache) -> None:
        self.endpoint = Endpoint.parse(url)
        super().__init__(self.endpoint.host, self.endpoint.port, what=f"the liveness endpoint {url}",
                         option='--liveness')
        self._health = health
        self._probes = probes
        self.route(self.endpoint.path, self._handle)

    @property
    def url(self) -> str:
        """The URL as bound (with the actual port if the given one was 0)."""
        return self.url_of(self.endpoint.path)

    async def start(self) -> None:
        try:
            await super().start()
        except serving.EndpointError as e:
            raise LivenessError(str(e)) from e
        logger.info("Serving the liveness endpoint at %s.", self.url)

    async def _handle(self, request: web.Request) -> web.Response:
        problem = self._health.problem()
        if problem is None:
            outcome = await self._probes.get()
            problem = outcome.error
        if problem is not None:
            logger.debug("Liveness probe: unhealthy: %s", problem)
            return _json({'error': problem}, status=500)
        logger.debug("Liveness probe: healthy.")
        return _json(outcome.results, status=200)


def _json(data: Mapping[str, Any], *, status: int) -> web.Response:
    text = json.dumps(data, default=str)
    return web.Response(text=text, status=status, content_type='application/json')
