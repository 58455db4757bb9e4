"""
Which failures of a request are worth another attempt, and after how long.

A request may fail in many ways, and only some are worth repeating: a
dropped connection or a 5xx may be gone a moment later, a ``429 Too Many
Requests`` says when to come back, a ``401 Unauthorized`` may pass with new
credentials, while any other 4xx -- or a request too large for etcd -- fails
the same way every time. :func:`decide` holds that judgement alone, as a
pure function of the request's past attempts, its latest failure, and the
:class:`RetryPolicy`: retry after so many seconds, log in again, or give up
with this error. The session (:mod:`kopf._kube.session`) sends, sleeps on its
clock, and logs around it, so that the whole table of cases is tested without
a server or a clock.
"""
from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Iterator, Sized
from typing import TypeAlias

import aiohttp

from kopf import errors
from kopf._kube.errors import (
    APIConnectionError,
    APIError,
    APIServerError,
    APITooManyRequestsError,
    APIUnauthorizedError,
    too_large,
)

# Failures without a response: the server may be there again in a moment.
TRANSIENT_ERRORS = (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, asyncio.TimeoutError)

# A 429 without a Retry-After waits 1, 2, 4, ... seconds, doubling at most so many times (64 s).
MAX_THROTTLE_DOUBLINGS = 6


def growing_backoffs(retries: int, backoff: float, max_backoff: float) -> list[float]:
    """``retries`` delays: ``backoff`` doubling after each, at most ``max_backoff``."""
    return [min(backoff * 2 ** i, max_backoff) for i in range(retries)]


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """
    How long a request is repeated, as configured for one API context.

    ``backoffs`` are the delays before the retries of transient failures
    (connection errors, timeouts, 5xx); they are walked anew for every
    request, and may be endless (e.g. a generator with jitter). A ``429`` is
    waited out as the server asks, at most ``max_retry_after`` seconds, and
    at most ``throttle_retries`` times; those waits do not use up the
    back-offs.
    """

    backoffs: Iterable[float] = ()
    throttle_retries: int = 20
    max_retry_after: float = 60.0

    @property
    def retries(self) -> int | None:
        """How many retries transient failures get (``None``: as many as the back-offs yield)."""
        return len(self.backoffs) if isinstance(self.backoffs, Sized) else None

    def start(self) -> Attempts:
        """The history of a request not sent yet."""
        return Attempts(delays=iter(self.backoffs))


@dataclasses.dataclass(frozen=True)
class Attempts:
    """
    What has happened to one request so far.

    ``delays`` are the back-offs not used yet; they are taken one by one as
    failures need them, since they may be endless.
    """

    delays: Iterator[float]
    failures: int = 0  # transient failures retried
    throttled: int = 0  # 429s waited out
    relogged: bool = False  # whether the credentials were renewed after a 401


@dataclasses.dataclass(frozen=True)
class Retry:
    """Send the request again after ``delay`` seconds, with ``attempts`` as its history then."""

    delay: float
    attempts: Attempts
    problem: str  # what has failed, for the log
    throttled: bool = False  # a 429 waited out as asked, not a failure


@dataclasses.dataclass(frozen=True)
class LogInAgain:
    """Renew the credentials, then send the request again (or raise the 401 if there are no new ones)."""

    attempts: Attempts
    reason: str  # for the log


@dataclasses.dataclass(frozen=True)
class GiveUp:
    """Raise this error: the failure itself, or what it means after all the retries."""

    error: BaseException


Decision: TypeAlias = Retry | LogInAgain | GiveUp


def decide(
        policy: RetryPolicy,
        attempts: Attempts,
        error: BaseException,
        *,
        what: str,
        timeout: float | None = None,
) -> Decision:
    """
    What to do after the latest attempt of a request has failed with ``error``.

    ``what`` names the request in errors (``GET https://...``); ``timeout``
    is the limit of an attempt, named when an attempt got no response.
    Errors that are not the API's or the network's are given up at once.
    """
    if isinstance(error, APIUnauthorizedError):
        if attempts.relogged:
            return GiveUp(error)
        return LogInAgain(dataclasses.replace(attempts, relogged=True), reason=f"{what} got {error.status}")
    if isinstance(error, APITooManyRequestsError):
        throttled = attempts.throttled + 1
        if throttled > policy.throttle_retries:
            return GiveUp(error)  # a transient APIServerError: callers re-send it later
        delay = throttle_delay(error.retry_after, throttled, max_retry_after=policy.max_retry_after)
        return Retry(delay, dataclasses.replace(attempts, throttled=throttled), problem=str(error), throttled=True)
    if isinstance(error, APIError):
        if not isinstance(error, APIServerError) or too_large(error):  # too large is too large the next time, too
            return GiveUp(error)
        return _back_off(attempts, problem=str(error)) or GiveUp(error)
    if isinstance(error, TRANSIENT_ERRORS):
        problem = describe(error, timeout)
        return _back_off(attempts, problem=problem) or GiveUp(
            APIConnectionError(f"{what} failed after {attempts.failures + 1} attempts: {problem}"))
    return GiveUp(error)


def _back_off(attempts: Attempts, *, problem: str) -> Retry | None:
    """A retry after the next back-off, if there is one left."""
    delay = next(attempts.delays, None)
    if delay is None:
        return None
    return Retry(delay, dataclasses.replace(attempts, failures=attempts.failures + 1), problem=problem)


def throttle_delay(retry_after: float | None, attempt: int, *, max_retry_after: float) -> float:
    """How long to wait before the ``attempt``-th repetition of a throttled request."""
    if retry_after is not None:
        return min(retry_after, max_retry_after)
    return min(2.0 ** min(attempt - 1, MAX_THROTTLE_DOUBLINGS), max_retry_after)


def describe(error: BaseException, timeout: float | None = None) -> str:
    """A failure without a response in one line; a timeout names the limit that has passed."""
    if isinstance(error, asyncio.TimeoutError) and not isinstance(error, aiohttp.ClientConnectionError):
        limit = f" within {timeout:g}s" if timeout else ""
        return f"no response{limit} (timed out)"
    return errors.describe(error)
