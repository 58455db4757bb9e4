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
    check_response,
    error_class,
    error_from_status,
)


@pytest.mark.parametrize('status, cls', [
    (400, APIError),
    (401, APIUnauthorizedError),
    (403, APIForbiddenError),
    (404, APINotFoundError),
    (409, APIConflictError),
    (410, APIGoneError),
    (422, APIUnprocessableError),
    (429, APITooManyRequestsError),
    (500, APIServerError),
    (503, APIServerError),
    (504, APIServerError),
])
def test_error_class_by_status(status, cls):
    assert error_class(status) is cls


def test_all_typed_errors_are_api_errors():
    for cls in [APIUnauthorizedError, APIForbiddenError, APINotFoundError, APIConflictError,
                APIGoneError, APIUnprocessableError, APIServerError]:
        assert issubclass(cls, APIError)


def test_connection_errors_are_not_api_errors_but_connection_errors():
    assert not issubclass(APIConnectionError, APIError)
    assert issubclass(APIConnectionError, ConnectionError)


def test_error_from_a_status_object():
    status = {'kind': 'Status', 'apiVersion': 'v1', 'status': 'Failure', 'code': 409, 'reason': 'Conflict',
              'message': 'the object has been modified', 'details': {'name': 'kex1', 'kind': 'kopfexamples'}}
    error = error_from_status(status)
    assert isinstance(error, APIConflictError)
    assert error.status == 409
    assert error.reason == 'Conflict'
    assert error.details == {'name': 'kex1', 'kind': 'kopfexamples'}
    assert error.body == status
    assert 'the object has been modified' in str(error)


def test_error_from_a_watch_error_event_uses_the_code_inside():
    error = error_from_status({'kind': 'Status', 'code': 410, 'reason': 'Expired', 'message': 'too old'})
    assert isinstance(error, APIGoneError)
    assert 'too old' in str(error)


def test_http_status_wins_over_the_body_code():
    error = error_from_status({'code': 200, 'message': 'odd'}, status=503)
    assert isinstance(error, APIServerError)
    assert error.status == 503


def test_error_from_a_non_json_body_keeps_the_text():
    error = error_from_status('<html>bad gateway</html>', status=502)
    assert isinstance(error, APIServerError)
    assert 'bad gateway' in str(error)


async def test_check_response_raises_typed_error_with_the_servers_message(aresponses, host):
    aresponses.add(host, '/api/v1/namespaces/ns1/pods/p1', 'GET', aresponses.Response(
        status=404, content_type='application/json',
        text='{"kind": "Status", "code": 404, "reason": "NotFound", "message": "pods \\"p1\\" not found"}'))
    async with aiohttp.ClientSession() as session:
        async with session.get(f'http://{host}/api/v1/namespaces/ns1/pods/p1') as response:
            with pytest.raises(APINotFoundError) as excinfo:
                await check_response(response)
    assert excinfo.value.status == 404
    assert excinfo.value.reason == 'NotFound'
    assert 'pods "p1" not found' in str(excinfo.value)
    assert 'GET /api/v1/namespaces/ns1/pods/p1' in str(excinfo.value)


async def test_check_response_passes_successes(aresponses, host):
    aresponses.add(host, '/ok', 'GET', aresponses.Response(status=201, text='{}'))
    async with aiohttp.ClientSession() as session:
        async with session.get(f'http://{host}/ok') as response:
            await check_response(response)


def test_too_many_requests_is_transient_like_a_server_error():
    assert issubclass(APITooManyRequestsError, APIServerError)


def test_retry_after_from_the_status_details():
    error = error_from_status({'kind': 'Status', 'code': 429, 'reason': 'TooManyRequests',
                               'details': {'retryAfterSeconds': 3}})
    assert isinstance(error, APITooManyRequestsError)
    assert error.retry_after == 3.0


def test_no_retry_after_if_the_server_has_not_said_it():
    error = error_from_status({'kind': 'Status', 'code': 429})
    assert isinstance(error, APITooManyRequestsError)
    assert error.retry_after is None
