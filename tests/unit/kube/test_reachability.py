"""The API server's outages in two lines: one when it stops answering, one when it answers again."""
import asyncio
import logging

import aiohttp
import pytest

from kopf._kube.errors import APIConnectionError, APIServerError, APITooManyRequestsError
from kopf._kube.reachability import Reachability, is_unreachable


def server_error(status):
    cls = APITooManyRequestsError if status == 429 else APIServerError
    return cls(f'status {status}', status=status)


@pytest.mark.parametrize('error', [
    APIConnectionError("GET /x failed: Cannot connect"),
    aiohttp.ClientConnectionError("Connection refused"),
    asyncio.TimeoutError(),
    server_error(502), server_error(503), server_error(504),
])
def test_failures_without_a_server_are_unreachability(error):
    assert is_unreachable(error)


@pytest.mark.parametrize('error', [server_error(500), server_error(429), ValueError("not JSON")])
def test_failures_of_one_request_are_not(error):
    assert not is_unreachable(error)


def test_an_outage_of_many_requests_is_two_lines(clock, caplog):
    reachability = Reachability(logger=logging.getLogger('test-reachability'), clock=clock)
    with caplog.at_level(logging.DEBUG, logger='test-reachability'):
        first = reachability.covers(APIConnectionError("Connection refused"), what="PATCH /obj-1")
        clock.advance(10)
        others = [reachability.covers(server_error(503)) for _ in range(100)]
        clock.advance(20)
        reachability.answered()
        reachability.answered()
    assert first and all(others)
    messages = [record.getMessage() for record in caplog.records]
    assert messages == [
        "The Kubernetes API is unreachable: PATCH /obj-1: APIConnectionError: Connection refused. "
        "Requests are retried quietly until it answers again.",
        "The Kubernetes API is reachable again after 30.0s (101 failed attempts meanwhile).",
    ]
    assert not reachability.down


def test_a_failure_of_one_request_is_left_to_its_caller(clock, caplog):
    reachability = Reachability(logger=logging.getLogger('test-reachability'), clock=clock)
    with caplog.at_level(logging.DEBUG, logger='test-reachability'):
        assert not reachability.covers(server_error(500))
        reachability.answered()
    assert caplog.records == []
    assert not reachability.down


def test_the_next_outage_is_said_again(clock, caplog):
    reachability = Reachability(logger=logging.getLogger('test-reachability'), clock=clock)
    with caplog.at_level(logging.DEBUG, logger='test-reachability'):
        for _ in range(2):
            reachability.covers(server_error(503))
            clock.advance(1)
            reachability.answered()
    assert [record.getMessage()[:35] for record in caplog.records] == [
        "The Kubernetes API is unreachable: ", "The Kubernetes API is reachable aga"] * 2
