"""The retry policy as a table: the past attempts and the latest failure in, the decision out."""
import asyncio
import itertools

import aiohttp
import pytest

from kopf._kube.errors import (
    APIConflictError,
    APIConnectionError,
    APIError,
    APIForbiddenError,
    APIGoneError,
    APINotFoundError,
    APIServerError,
    APITooManyRequestsError,
    APIUnauthorizedError,
    APIUnprocessableError,
)
from kopf._kube.retrying import (
    Attempts,
    GiveUp,
    LogInAgain,
    Retry,
    RetryPolicy,
    decide,
    describe,
    growing_backoffs,
    throttle_delay,
)

WHAT = 'GET https://k8s/api/v1/pods'
POLICY = RetryPolicy(backoffs=[1.0, 2.0], throttle_retries=2, max_retry_after=30.0)


def api_error(cls, status, message='the message'):
    return cls(f"{status} Error: {message}", status=status)


def throttled(retry_after=None):
    details = {'retryAfterSeconds': retry_after} if retry_after is not None else None
    return APITooManyRequestsError("429 TooManyRequests: slow down", status=429, details=details)


def attempts(*, used=0, failures=0, throttled=0, relogged=False, backoffs=POLICY.backoffs):
    """The history of a request, with ``used`` back-offs taken already."""
    delays = iter(backoffs)
    for _ in range(used):
        next(delays)
    return Attempts(delays=delays, failures=failures, throttled=throttled, relogged=relogged)


# --- The table ------------------------------------------------------------------------------------

@pytest.mark.parametrize('error, past, expected', [
    # Errors of the request itself: the same the next time.
    (api_error(APIError, 400), attempts(), 'give up'),
    (api_error(APIForbiddenError, 403), attempts(), 'give up'),
    (api_error(APINotFoundError, 404), attempts(), 'give up'),
    (api_error(APIConflictError, 409), attempts(), 'give up'),
    (api_error(APIGoneError, 410), attempts(), 'give up'),
    (api_error(APIUnprocessableError, 422), attempts(), 'give up'),
    (api_error(APIError, 413, 'the request is too large'), attempts(), 'give up'),
    (api_error(APIServerError, 500, 'etcdserver: request is too large'), attempts(), 'give up'),
    (api_error(APIServerError, 500, 'rpc error: ResourceExhausted'), attempts(), 'give up'),
    (ValueError("not JSON"), attempts(), 'give up'),
    # 401: new credentials, once.
    (api_error(APIUnauthorizedError, 401), attempts(), 'log in'),
    (api_error(APIUnauthorizedError, 401), attempts(used=2, failures=2, throttled=2), 'log in'),
    (api_error(APIUnauthorizedError, 401), attempts(relogged=True), 'give up'),
    # 5xx and failures without a response: the back-offs, one by one.
    (api_error(APIServerError, 500), attempts(), Retry(1.0, attempts(used=1, failures=1), '')),
    (api_error(APIServerError, 503), attempts(used=1, failures=1), Retry(2.0, attempts(used=2, failures=2), '')),
    (api_error(APIServerError, 503), attempts(used=2, failures=2), 'give up'),
    (api_error(APIServerError, 500), attempts(relogged=True), Retry(1.0, attempts(used=1, failures=1), '')),
    (aiohttp.ServerDisconnectedError(), attempts(), Retry(1.0, attempts(used=1, failures=1), '')),
    (aiohttp.ClientOSError(111, 'Connection refused'), attempts(), Retry(1.0, attempts(used=1, failures=1), '')),
    (aiohttp.ClientPayloadError("cut"), attempts(), Retry(1.0, attempts(used=1, failures=1), '')),
    (asyncio.TimeoutError(), attempts(used=1, failures=1), Retry(2.0, attempts(used=2, failures=2), '')),
    (aiohttp.ServerDisconnectedError(), attempts(used=2, failures=2), 'connection error'),
    (asyncio.TimeoutError(), attempts(used=2, failures=2), 'connection error'),
    # 429: as the server asks, capped, without using up the back-offs; then the 429 itself.
    (throttled(7), attempts(), Retry(7.0, attempts(throttled=1), '', throttled=True)),
    (throttled(3600), attempts(), Retry(30.0, attempts(throttled=1), '', throttled=True)),
    (throttled(0), attempts(used=2, failures=2), Retry(0.0, attempts(used=2, failures=2, throttled=1), '',
                                                      throttled=True)),
    (throttled(), attempts(), Retry(1.0, attempts(throttled=1), '', throttled=True)),
    (throttled(), attempts(throttled=1), Retry(2.0, attempts(throttled=2), '', throttled=True)),
    (throttled(1), attempts(throttled=2), 'give up'),
], ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else None)
def test_decisions(error, past, expected):
    decision = decide(POLICY, past, error, what=WHAT, timeout=60.0)
    if expected == 'give up':
        assert decision == GiveUp(error)
    elif expected == 'log in':
        assert isinstance(decision, LogInAgain)
        assert decision.reason == f"{WHAT} got 401"
        assert (decision.attempts.failures, decision.attempts.throttled) == (past.failures, past.throttled)
        assert decision.attempts.relogged
    elif expected == 'connection error':
        assert isinstance(decision, GiveUp)
        assert isinstance(decision.error, APIConnectionError)
        assert str(decision.error).startswith(f"{WHAT} failed after 3 attempts: ")
    else:
        assert isinstance(decision, Retry)
        assert decision.delay == expected.delay
        assert decision.throttled == expected.throttled
        assert (decision.attempts.failures, decision.attempts.throttled, decision.attempts.relogged) == (
            expected.attempts.failures, expected.attempts.throttled, past.relogged)
        assert list(decision.attempts.delays) == list(expected.attempts.delays)  # the back-offs left


# --- The parts of the decisions -----------------------------------------------------------------

def test_a_retry_says_what_has_failed():
    decision = decide(POLICY, attempts(), api_error(APIServerError, 503, 'etcd is busy'), what=WHAT)
    assert isinstance(decision, Retry)
    assert decision.problem == "503 Error: etcd is busy"


def test_giving_up_on_the_network_says_how_often_it_was_tried_and_the_limit_of_an_attempt():
    decision = decide(POLICY, attempts(used=2, failures=2), asyncio.TimeoutError(), what=WHAT, timeout=0.2)
    assert isinstance(decision, GiveUp)
    assert str(decision.error) == f"{WHAT} failed after 3 attempts: no response within 0.2s (timed out)"


def test_without_backoffs_the_first_failure_is_final():
    policy = RetryPolicy(backoffs=())
    decision = decide(policy, policy.start(), aiohttp.ServerDisconnectedError(), what=WHAT)
    assert isinstance(decision, GiveUp)
    assert str(decision.error).startswith(f"{WHAT} failed after 1 attempts: ServerDisconnectedError")


def test_endless_backoffs_are_taken_one_at_a_time():
    policy = RetryPolicy(backoffs=itertools.count(1.0))
    assert policy.retries is None
    past = policy.start()
    delays = []
    for _ in range(100):
        decision = decide(policy, past, api_error(APIServerError, 500), what=WHAT)
        assert isinstance(decision, Retry)
        delays.append(decision.delay)
        past = decision.attempts
    assert delays == [float(n) for n in range(1, 101)]
    assert past.failures == 100


def test_every_request_starts_the_backoffs_anew():
    policy = RetryPolicy(backoffs=[1.0])
    first = decide(policy, policy.start(), api_error(APIServerError, 500), what=WHAT)
    second = decide(policy, policy.start(), api_error(APIServerError, 500), what=WHAT)
    assert isinstance(first, Retry) and first.delay == 1.0
    assert isinstance(second, Retry) and second.delay == 1.0


def test_the_number_of_retries_is_known_for_finite_backoffs():
    assert RetryPolicy(backoffs=[1, 2, 3]).retries == 3
    assert RetryPolicy(backoffs=()).retries == 0


@pytest.mark.parametrize('retries, backoff, max_backoff, expected', [
    (0, 0.5, 10, []),
    (4, 0.5, 10, [0.5, 1.0, 2.0, 4.0]),
    (5, 1.0, 5.0, [1.0, 2.0, 4.0, 5.0, 5.0]),
    (2, 0, 0, [0, 0]),
])
def test_growing_backoffs(retries, backoff, max_backoff, expected):
    assert growing_backoffs(retries, backoff, max_backoff) == expected


@pytest.mark.parametrize('retry_after, attempt, expected', [
    (7.0, 1, 7.0),
    (7.0, 20, 7.0),  # as the server asks, however often
    (0.0, 1, 0.0),
    (3600.0, 1, 60.0),  # capped
    (None, 1, 1.0),
    (None, 2, 2.0),
    (None, 3, 4.0),
    (None, 7, 60.0),  # 64 seconds, capped
    (None, 50, 60.0),  # doubling stops at 64 seconds
])
def test_throttle_delays(retry_after, attempt, expected):
    assert throttle_delay(retry_after, attempt, max_retry_after=60.0) == expected


def test_throttle_delays_without_a_cap_stop_doubling():
    assert throttle_delay(None, 50, max_retry_after=1000.0) == 64.0


@pytest.mark.parametrize('error, timeout, expected', [
    (asyncio.TimeoutError(), 0.2, "no response within 0.2s (timed out)"),
    (asyncio.TimeoutError(), None, "no response (timed out)"),
    (aiohttp.ServerDisconnectedError(), 60.0, "ServerDisconnectedError: Server disconnected"),
    (aiohttp.ServerTimeoutError("read timeout"), 60.0, "ServerTimeoutError: read timeout"),
])
def test_describing_failures_without_a_response(error, timeout, expected):
    assert describe(error, timeout) == expected
