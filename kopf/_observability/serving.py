"""
The operator's own HTTP endpoints: one server per host and port, with a handler per path.

Liveness (``--liveness``), readiness (``--readiness``, else ``/readyz``
beside liveness or metrics) and metrics (``--metrics``) share a server when
their URLs name the same host and port, so that one container port serves
the probes and the scrapes alike. A server is bound when its first endpoint
is asked for; a port in use or an invalid URL is an :class:`EndpointError`
naming the URL and the option, before the operator goes on.

The handlers answer at once, from what is in memory: a scrape or a probe
during the exit gets an answer or, once the server is closed, a refused
connection -- never a hang (requests still in flight get a second).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

logger = logging.getLogger('kopf._observability.serving')

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

READINESS_PATH = '/readyz'
SHUTDOWN_TIMEOUT = 1.0  # seconds that requests in flight get when a server closes


class EndpointError(Exception):
    """An endpoint cannot be served; the message names its URL, the option, and why."""


@dataclasses.dataclass(frozen=True)
class Address:
    """Where an endpoint is served: ``http://host:port/path``."""

    host: str
    port: int
    path: str

    @classmethod
    def parse(cls, url: str, *, what: str, option: str, example: str) -> Address:
        try:
            parsed = urllib.parse.urlsplit(url)
            port = parsed.port if parsed.port is not None else 80
        except ValueError as e:
            raise EndpointError(f"The {what} {url!r} ({option}) is invalid: {e}; e.g. {example}.") from None
        if parsed.scheme != 'http':
            raise EndpointError(f"The {what} {url!r} ({option}) is not served: only http:// URLs are supported, "
                                f"e.g. {example}.")
        return cls(host=parsed.hostname or '0.0.0.0', port=port, path=parsed.path or '/')


class EndpointServer:
    """One HTTP server on one host and port; paths are added with :meth:`route`, also after it has started."""

    def __init__(self, host: str, port: int, *, what: str, option: str) -> None:
        self.host = host
        self.port = port
        self.what = what  # for the messages: what it was started for, e.g. "the metrics endpoint http://..."
        self.option = option
        self.routes: dict[str, Handler] = {}
        self._runner: web.AppRunner | None = None

    def route(self, path: str, handler: Handler) -> None:
        self.routes[path] = handler

    @property
    def bound_port(self) -> int:
        """The port as bound (the actual one if the given one was 0)."""
        if self._runner is not None:
            for address in self._runner.addresses:
                if isinstance(address, tuple) and len(address) >= 2:
                    return int(address[1])
        return self.port

    def url_of(self, path: str) -> str:
        return f"http://{self.host}:{self.bound_port}{path}"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route('GET', '/{path:.*}', self._dispatch)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=SHUTDOWN_TIMEOUT)
        await runner.setup()
        try:
            await web.TCPSite(runner, self.host, self.port, reuse_address=True).start()
        except OSError as e:
            await runner.cleanup()
            raise EndpointError(f"Cannot serve {self.what}: {e.strerror or e}. Is the port {self.port} used by "
                                f"another process? Choose another one with {self.option}.") from e
        self._runner = runner

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        handler = self.routes.get(request.path)
        if handler is None:
            return web.Response(status=404, text=f"Not found: {request.path}. Served: "
                                                 f"{', '.join(sorted(self.routes))}.\n")
        return await handler(request)


class Servers:
    """The endpoint servers of one operator, by host and port; closed together."""

    def __init__(self) -> None:
        self._servers: dict[tuple[str, int], EndpointServer] = {}
        self._adopted: set[EndpointServer] = set()
        self._lent: list[tuple[EndpointServer, str]] = []  # the paths added to the adopted servers

    def adopt(self, server: EndpointServer) -> None:
        """A server started elsewhere (the liveness endpoint's), to share its port; its owner stops it."""
        self._adopted.add(server)
        self._add(server)

    def _add(self, server: EndpointServer) -> None:
        """Known by the port asked for and by the port bound (they differ when 0 was asked for)."""
        self._servers[server.host, server.port] = server
        self._servers[server.host, server.bound_port] = server

    def find(self, address: Address) -> EndpointServer | None:
        return self._servers.get((address.host, address.port))

    async def serve(self, address: Address, handler: Handler, *, what: str, option: str) -> str:
        """Serve the handler at the address (on a server there, or a new one); the URL as bound."""
        server = self.find(address)
        if server is None:
            server = EndpointServer(address.host, address.port, what=what, option=option)
            await server.start()
            self._add(server)
        elif address.path in server.routes:
            raise EndpointError(f"Cannot serve {what}: the path {address.path} of the port {address.port} serves "
                                f"another endpoint already. Choose another path with {option}.")
        server.route(address.path, handler)
        if server in self._adopted:
            self._lent.append((server, address.path))
        return server.url_of(address.path)

    async def stop(self) -> None:
        """Close the servers that were started here; from the adopted ones (their owners'), remove our paths."""
        for server, path in self._lent:
            server.routes.pop(path, None)
        for server in set(self._servers.values()) - self._adopted:
            await server.stop()
        self._lent.clear()
        self._servers.clear()
        self._adopted.clear()


def readiness_handler(problem: Callable[[], str | None]) -> Handler:
    """``/readyz``: 200 with ``{"ready": true}``, or 503 with the reason (Kubernetes probes read the code)."""
    async def handle(request: web.Request) -> web.StreamResponse:
        reason = problem()
        if reason is None:
            return _json({'ready': True}, status=200)
        return _json({'ready': False, 'reason': reason}, status=503)
    return handle


def metrics_handler(render: Callable[[str], tuple[bytes, str]]) -> Handler:
    """``/metrics``: the exposition as the scraper asks for it (``Accept``: text or OpenMetrics)."""
    async def handle(request: web.Request) -> web.StreamResponse:
        body, content_type = render(request.headers.get('Accept', ''))
        response = web.Response(body=body)
        response.headers['Content-Type'] = content_type
        return response
    return handle


def _json(data: Mapping[str, Any], *, status: int) -> web.Response:
    return web.Response(text=json.dumps(data), status=status, content_type='application/json')
