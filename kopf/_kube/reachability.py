"""
Whether the API server answers at all, as one context's requests find it: one line when it stops, one when it is back.

When the API server (or etcd behind it) is away, every request of every
object fails the same way: logged per request, a 30-second outage of an
operator with a hundred objects is thousands of warnings saying one thing.
:class:`Reachability` turns them into two lines: the first failure that
says "nobody answers" (no connection, no response in time, 502/503/504)
is logged as the outage with its cause, and the first answer after it as
the recovery with its duration. Meanwhile, the failures that it covers are
only worth a debug line to their callers (:meth:`Reachability.covers`).
Other failures (a 500 of one request, a 429, a 4xx) are the request's own
and are logged by their callers as before.
"""
from __future__ import annotations

import asyncio
import logging

import aiohttp

from kopf import errors
from kopf._kube.errors import APIConnectionError, APIError, APITooManyRequestsError
from kopf._structs.clocks import SYSTEM_CLOCK, Clock
from kopf._structs.typedefs import Logger

# Statuses that mean "the server is not there (yet)", not "this request has failed".
UNAVAILABLE_STATUSES = frozenset({502, 503, 504})


def is_unreachable(error: BaseException) -> bool:
    """Whether the failure says that nobody answers, rather than that this one request has failed."""
    if isinstance(error, APITooManyRequestsError):
        return False
    if isinstance(error, APIError):
        return error.status in UNAVAILABLE_STATUSES
    return isinstance(error, (APIConnectionError, aiohttp.ClientConnectionError, asyncio.TimeoutError))


class Reachability:
    """The state of the API server as the requests have found it, logged only when it changes."""

    def __init__(self, *, logger: Logger | None = None, clock: Clock = SYSTEM_CLOCK) -> None:
        self.logger: Logger = logger if logger is not None else logging.getLogger('kopf._kube.session')
        self.clock = clock
        self.down_since: float | None = None  # monotonic
        self.failures = 0  # since it went away

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def covers(self, error: BaseException, *, what: str = '') -> bool:
        """
        Note a failure; whether it is part of an outage (logged here, now or before): callers log it as debug.

        ``what`` names the request that has failed, for the first line.
        """
        if not is_unreachable(error):
            return False
        self.failures += 1
        if self.down_since is None:
            self.down_since = self.clock.monotonic()
            problem = errors.describe(error) if not isinstance(error, APIError) else str(error)
            self.logger.warning("The Kubernetes API is unreachable: %s%s. Requests are retried quietly until it "
                                "answers again.", f"{what}: " if what else '', problem)
        return True

    def answered(self) -> None:
        """A request has got an answer (any but 502/503/504): the server is there."""
        if self.down_since is None:
            return
        duration = self.clock.monotonic() - self.down_since
        self.logger.warning("The Kubernetes API is reachable again after %.1fs (%d failed attempts meanwhile).",
                            duration, self.failures)
        self.down_since = None
        self.failures = 0
