"""
How the connections to the API server are made and kept.

The connections of an operator live for days, through NATs, load balancers
and bursts of work: they verify the server's TLS certificate (unless the
user has disabled it), probe an idle peer with TCP keepalive so that one
that silently vanished is noticed, and give up pooled connections that have
been idle for a while, since each one holds buffers of a few hundred KiB.
:func:`make_session` makes the ``aiohttp`` session of one set of credentials
that way; the API context (:mod:`kopf._kube.session`) owns it.
"""
from __future__ import annotations

import contextlib
import socket
import ssl
from collections.abc import Callable
from typing import Any

import aiohttp

from kopf._kube.credentials import Accepted
from kopf._kube.errors import LoginError
from kopf._structs.credentials import ConnectionInfo
from kopf._structs.typedefs import Logger

USER_AGENT = 'kopf'

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


def make_session(
        accepted: Accepted,
        *,
        keepalive: float | None,
        idle_timeout: float | None,
        logger: Logger,
) -> aiohttp.ClientSession:
    """
    The ``aiohttp`` session of these credentials: a login handler's own, or a new one.

    A new one verifies TLS as the credentials say, uses TCP keepalive after
    ``keepalive`` idle seconds (``None``: not), and closes pooled connections
    idle for ``idle_timeout`` seconds (``None``: keeps them). Unusable
    certificates or keys are a :class:`~kopf._kube.errors.LoginError`.
    """
    if accepted.provided is not None:
        if 'User-Agent' not in accepted.provided.headers:
            accepted.provided.headers['User-Agent'] = USER_AGENT
        return accepted.provided
    info = accepted.info
    try:
        ssl_context = make_ssl_context(info)
    except (ssl.SSLError, OSError) as e:
        raise LoginError(f"Cannot use the TLS certificates or keys of the credentials for {info.server}: "
                         f"{type(e).__name__}: {e.strerror or e}") from None
    if info.insecure:
        logger.warning("TLS verification of %s is disabled (insecure-skip-tls-verify).", info.server.rstrip('/'))
    factory = keepalive_socket_factory(keepalive) if keepalive else None
    connector = aiohttp.TCPConnector(ssl=ssl_context, limit=0, socket_factory=factory,
                                     keepalive_timeout=idle_timeout or None)
    headers = {'User-Agent': USER_AGENT, 'Accept': 'application/json'}
    return aiohttp.ClientSession(connector=connector, headers=headers, trust_env=info.trust_env)
