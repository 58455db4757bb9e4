"""
How many ordinary requests one API context has in flight at once, and how
many handling cycles may head for them.

Beyond the API server's own parallelism, more requests only queue there,
while every extra TLS connection costs the operator a handshake and ~300 KB
of buffers that stay with the process afterwards. So the requests of a burst
(e.g. thousands of objects handled after a start) take turns for a limited
number of slots, in the order they came. Streams (watches) hold their
connection for as long as they last, and take no slot: they would starve the
requests.

The same burst would otherwise start a cycle for every object at once, and
each cycle would wait for its slot holding all it has built (the object, its
handlers' outcomes, the patch: ~12 KB). So a cycle starts only with an
admission (:meth:`RequestSlots.admitted`), of which there are a few per slot;
it gives the admission back as soon as its first request gets a slot, or as
it ends. The objects beyond that wait as the plain events they came as. A
cycle that has not asked for a slot after ``ADMISSION_PATIENCE`` seconds (its
handlers take long) gives its admission back too: slow handlers are not
limited by the API's slots.
"""
from __future__ import annotations

import asyncio
import contextvars
from contextlib import AbstractAsyncContextManager

from kopf._structs.clocks import SYSTEM_CLOCK, Clock, Timer

MAX_CONCURRENT_REQUESTS = 32
# How many cycles per request slot may have started and not yet got a slot for their first request.
ADMISSIONS_PER_SLOT = 8
# After how many seconds a cycle that has not asked for a slot yet (its handlers are slow) lets the next in.
ADMISSION_PATIENCE = 1.0


class _Admission:
    """
    One cycle's admission (``async with``), given back once: at its first slot, at its end, or when it has taken long.

    A plain class rather than a generator-based context manager: one is
    entered for every cycle, also the many quick ones of a restart.
    """

    __slots__ = ('_clock', '_semaphore', '_timer', '_token', 'queued', 'returned')

    def __init__(self, semaphore: asyncio.Semaphore, clock: Clock) -> None:
        self._semaphore = semaphore
        self._clock = clock
        self._timer: Timer | None = None
        self._token: contextvars.Token[_Admission | None] | None = None
        self.queued = False  # its cycle waits for a slot: it is given back when the slot is got
        self.returned = False

    async def __aenter__(self) -> None:
        await self._semaphore.acquire()
        self._timer = self._clock.call_later(ADMISSION_PATIENCE, self.expire)
        self._token = _CURRENT.set(self)

    async def __aexit__(self, *exc_info: object) -> None:
        if self._token is not None:
            _CURRENT.reset(self._token)
        if self._timer is not None:
            self._timer.cancel()
        self.give_back()

    def give_back(self) -> None:
        if not self.returned:
            self.returned = True
            self._semaphore.release()

    def expire(self) -> None:
        if not self.queued:
            self.give_back()


_CURRENT: contextvars.ContextVar[_Admission | None] = contextvars.ContextVar('kopf_admission', default=None)


class RequestSlots:
    """At most ``limit`` requests at once (``async with slots: ...``); the others wait in order."""

    def __init__(self, limit: int = MAX_CONCURRENT_REQUESTS) -> None:
        self.limit = limit
        self.waiting = 0  # requests waiting for a slot now
        self._semaphore = asyncio.Semaphore(limit)
        self._admissions = asyncio.Semaphore(limit * ADMISSIONS_PER_SLOT)

    async def __aenter__(self) -> None:
        admission = _CURRENT.get()
        if admission is not None:
            admission.queued = True
        self.waiting += 1
        try:
            await self._semaphore.acquire()
        finally:
            self.waiting -= 1
        if admission is not None:
            admission.give_back()

    async def __aexit__(self, *exc_info: object) -> None:
        self._semaphore.release()

    def admitted(self, clock: Clock = SYSTEM_CLOCK) -> AbstractAsyncContextManager[None]:
        """Run one cycle (in this task) with an admission: the cycles before it go first."""
        return _Admission(self._admissions, clock)
