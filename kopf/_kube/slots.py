"""
How many ordinary requests one API context has in flight at once.

Beyond the API server's own parallelism, more requests only queue there,
while every extra TLS connection costs the operator a handshake and ~300 KB
of buffers that stay with the process afterwards. So the requests of a burst
(e.g. thousands of objects handled after a start) take turns for a limited
number of slots, in the order they came. Streams (watches) hold their
connection for as long as they last, and take no slot: they would starve the
requests.
"""
from __future__ import annotations

import asyncio

MAX_CONCURRENT_REQUESTS = 32


class RequestSlots:
    """At most ``limit`` requests at once (``async with slots: ...``); the others wait in order."""

    def __init__(self, limit: int = MAX_CONCURRENT_REQUESTS) -> None:
        self.limit = limit
        self.waiting = 0  # requests waiting for a slot now
        self._semaphore = asyncio.Semaphore(limit)

    async def __aenter__(self) -> None:
        self.waiting += 1
        try:
            await self._semaphore.acquire()
        finally:
            self.waiting -= 1

    async def __aexit__(self, *exc_info: object) -> None:
        self._semaphore.release()
