"""The API session: authentication, timeouts, retries, 429, and re-authentication, as requests see them."""
import asyncio
import base64
import dataclasses
import datetime
import itertools
import logging

import aiohttp
import pytest

from kopf._kube import credentials
from kopf._kube.errors import (
    APIConflictError,
    APIConnectionError,
    APIError,
    APIForbiddenError,
    APINotFoundError,
    APIServerError,
    APITooManyRequestsError,
    APIUnauthorizedError,
    LoginError,
)
from kopf._kube.session import APIContext
from kopf._structs.credentials import AiohttpSession, ConnectionInfo
from tests.unit.kube.conftest import GUARD, until


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode('ascii')

# --- API context ---------------------------------------------------------------------------------

async def test_request_sends_the_bearer_token_and_parses_json(context, aresponses, host, history):
    aresponses.add(host, '/api/v1/namespaces/ns1/pods/p1', 'GET', {'kind': 'Pod', 'metadata': {'name': 'p1'}})
    result = await context.request('GET', '/api/v1/namespaces/ns1/pods/p1')
    assert result == {'kind': 'Pod', 'metadata': {'name': 'p1'}}
    assert history()[0].headers['Authorization'] == 'Bearer the-token'


async def test_request_with_basic_auth(aresponses, host, history):
    aresponses.add(host, '/api', 'GET', {})
    async with APIContext(ConnectionInfo(server=f'http://{host}', username='admin', password='pw')) as context:
        await context.request('GET', '/api')
    assert history()[0].headers['Authorization'] == 'Basic ' + b64(b'admin:pw')


async def test_request_accepts_full_urls_params_and_json_bodies(context, aresponses, host, history):
    aresponses.add(host, '/apis/x/v1/things', 'POST', {'ok': True})
    result = await context.request('POST', f'http://{host}/apis/x/v1/things', json={'a': [1, None]},
                                   params={'dryRun': 'All', 'pretty': True, 'skip': None},
                                   headers={'X-Extra': 'yes'})
    assert result == {'ok': True}
    request = history()[0]
    assert dict(request.query) == {'dryRun': 'All', 'pretty': 'true'}
    assert request.headers['Content-Type'] == 'application/json'
    assert request.headers['X-Extra'] == 'yes'
    assert await request.json() == {'a': [1, None]}


async def test_request_with_empty_body_returns_none(context, aresponses, host):
    aresponses.add(host, '/empty', 'DELETE', aresponses.Response(status=200, text=''))
    assert await context.request('DELETE', '/empty') is None


def status_response(aresponses, code, reason, message):
    return aresponses.Response(status=code, content_type='application/json', text=(
        f'{{"kind": "Status", "code": {code}, "reason": "{reason}", "message": "{message}"}}'))


@pytest.mark.parametrize('code, reason, cls', [
    (403, 'Forbidden', APIForbiddenError),
    (404, 'NotFound', APINotFoundError),
    (409, 'Conflict', APIConflictError),
])
async def test_request_raises_4xx_at_once(context, aresponses, host, history, code, reason, cls):
    aresponses.add(host, '/x', 'GET', status_response(aresponses, code, reason, 'the message'), repeat=5)
    with pytest.raises(cls, match='the message'):
        await context.request('GET', '/x')
    assert len(history()) == 1


async def test_request_retries_5xx_then_succeeds(context, aresponses, host, history, caplog):
    aresponses.add(host, '/x', 'GET', status_response(aresponses, 503, 'ServiceUnavailable', 'busy'))
    aresponses.add(host, '/x', 'GET', {'ok': True})
    with caplog.at_level(logging.WARNING, logger='kopf._kube.session'):
        assert await context.request('GET', '/x') == {'ok': True}
    assert len(history()) == 2
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert 'busy' in warnings[0].getMessage()
    assert 'retry 1 of 2' in warnings[0].getMessage()


async def test_request_retries_429(context, aresponses, host, history):
    aresponses.add(host, '/x', 'GET', status_response(aresponses, 429, 'TooManyRequests', 'slow down'))
    aresponses.add(host, '/x', 'GET', {'ok': True})
    assert await context.request('GET', '/x') == {'ok': True}
    assert len(history()) == 2


async def test_request_gives_up_on_5xx_after_the_bounded_retries(context, aresponses, host, history):
    aresponses.add(host, '/x', 'GET', status_response(aresponses, 500, 'InternalError', 'broken'), repeat=10)
    with pytest.raises(APIServerError, match='broken'):
        await context.request('GET', '/x')
    assert len(history()) == 3  # the first attempt and 2 retries


@pytest.mark.parametrize('code, reason, message', [
    (500, 'InternalError', 'etcdserver: request is too large'),
    (413, 'RequestEntityTooLarge', 'the request is too large'),
])
async def test_a_request_too_large_is_raised_at_once_not_retried(
        context, aresponses, host, history, caplog, code, reason, message):
    aresponses.add(host, '/x', 'PATCH', status_response(aresponses, code, reason, message), repeat=5)
    with caplog.at_level(logging.WARNING, logger='kopf._kube.session'):
        with pytest.raises(APIError, match='request is too large'):
            await context.request('PATCH', '/x', json={'spec': {}})
    assert len(history()) == 1
    assert 'retrying' not in caplog.text


async def test_request_retries_connection_errors_then_succeeds(context, aresponses, host, history):
    aresponses.add(host, '/x', 'GET', aresponses.RawResponse(b''))  # the server closes without answering
    aresponses.add(host, '/x', 'GET', {'ok': True})
    assert await context.request('GET', '/x') == {'ok': True}
    assert len(history()) == 2


async def test_request_gives_up_on_connection_errors_with_a_typed_error(context, aresponses, host, caplog):
    aresponses.add(host, '/x', 'GET', aresponses.RawResponse(b''), repeat=aresponses.INFINITY)
    with caplog.at_level(logging.WARNING, logger='kopf._kube.session'):
        with pytest.raises(APIConnectionError, match=r'/x.*3 attempts'):
            await context.request('GET', '/x')
    # (aiohttp itself may repeat a request once on a dropped keep-alive connection, so count our retries)
    assert [r.getMessage().endswith(f'(retry {n} of 2).') for n, r in enumerate(caplog.records, 1)] == [True, True]


async def test_request_backoff_grows_and_is_capped(aresponses, host, lapse):
    aresponses.add(host, '/x', 'GET', status_response(aresponses, 500, 'InternalError', 'x'), repeat=10)
    info = ConnectionInfo(server=f'http://{host}')
    async with APIContext(info, retries=5, backoff=1.0, max_backoff=5.0, clock=lapse) as context:
        with pytest.raises(APIServerError):
            await context.request('GET', '/x')
    assert lapse.slept == [1.0, 2.0, 4.0, 5.0, 5.0]


async def test_request_waits_on_its_clock_between_attempts(aresponses, host, history, clock):
    aresponses.add(host, '/x', 'GET', status_response(aresponses, 503, 'ServiceUnavailable', 'busy'))
    aresponses.add(host, '/x', 'GET', {'ok': True})
    async with APIContext(ConnectionInfo(server=f'http://{host}'), backoffs=[7.0], clock=clock) as context:
        request = asyncio.create_task(context.request('GET', '/x'))
        await clock.until_sleeping()
        assert clock.pending == [7.0]
        assert len(history()) == 1  # the retry waits for the clock, nothing else
        clock.advance(7.0)
        assert await asyncio.wait_for(request, timeout=GUARD) == {'ok': True}
    assert len(history()) == 2


async def test_stream_yields_the_open_response(context, aresponses, host, stream_response, history):
    aresponses.add(host, '/api/v1/pods', 'GET', stream_response(b'line1\n', b'line2\n'))
    async with context.stream('GET', '/api/v1/pods', params={'watch': True}) as response:
        assert await response.content.read() == b'line1\nline2\n'
    assert dict(history()[0].query) == {'watch': 'true'}
    assert history()[0].headers['Authorization'] == 'Bearer the-token'


async def test_stream_raises_typed_errors(context, aresponses, host):
    aresponses.add(host, '/api/v1/pods', 'GET', status_response(aresponses, 410, 'Expired', 'too old'))
    with pytest.raises(Exception, match='too old') as excinfo:
        async with context.stream('GET', '/api/v1/pods'):
            pass
    assert type(excinfo.value).__name__ == 'APIGoneError'


async def test_context_requires_being_open(info):
    context = APIContext(info)
    with pytest.raises(RuntimeError, match='not open'):
        await context.request('GET', '/api')
    assert context.server == 'http://fake-k8s'


# --- Timeouts and keepalive -------------------------------------------------------------------------

async def test_a_request_without_an_answer_times_out_and_names_the_limit(aresponses, host):
    answer = asyncio.Event()  # the server answers only after the client has given up (aiohttp's timer)

    async def answers_late(request):
        await answer.wait()
        return aresponses.Response(text='{}')

    aresponses.add(host, '/x', 'GET', answers_late)
    info = ConnectionInfo(server=f'http://{host}')
    try:
        async with asyncio.timeout(GUARD), APIContext(info, timeout=0.2, backoffs=()) as context:
            with pytest.raises(APIConnectionError, match=r'GET http://fake-k8s/x failed after 1 attempts: '
                                                         r'no response within 0.2s'):
                await context.request('GET', '/x')
    finally:
        answer.set()


async def test_endless_backoffs_are_used_lazily(aresponses, host, history, lapse):
    aresponses.add(host, '/x', 'GET', status_response(aresponses, 503, 'ServiceUnavailable', 'busy'), repeat=7)
    aresponses.add(host, '/x', 'GET', {'ok': True})
    async with APIContext(ConnectionInfo(server=f'http://{host}'), backoffs=itertools.repeat(0.0),
                          clock=lapse) as context:
        assert context.retries is None
        assert await context.request('GET', '/x') == {'ok': True}
    assert len(history()) == 8


# --- 429 Too Many Requests -------------------------------------------------------------------------

@pytest.fixture()
def sleeps(lapse):
    """The waits of the ``context`` fixture and of the contexts on the ``lapse`` clock, in seconds."""
    return lapse.slept


def throttled(aresponses, retry_after=None):
    headers = {'Retry-After': str(retry_after)} if retry_after is not None else {}
    return aresponses.Response(status=429, headers=headers, content_type='application/json', text=(
        '{"kind": "Status", "code": 429, "reason": "TooManyRequests", "message": "slow down"}'))


async def test_429_waits_as_long_as_the_server_asks(context, aresponses, host, history, sleeps, caplog):
    aresponses.add(host, '/x', 'PATCH', throttled(aresponses, retry_after=7))
    aresponses.add(host, '/x', 'PATCH', throttled(aresponses, retry_after=2))
    aresponses.add(host, '/x', 'PATCH', {'ok': True})
    with caplog.at_level(logging.WARNING, logger='kopf._kube.session'):
        assert await context.request('PATCH', '/x', json={'a': 1}) == {'ok': True}
    assert sleeps == [7.0, 2.0]
    assert [await r.json() for r in history()] == [{'a': 1}] * 3  # the same patch, re-sent
    assert '429 Too Many Requests); retrying in 7.00s as asked (1 of 20)' in caplog.records[0].getMessage()


async def test_429_retry_after_is_capped(aresponses, host, sleeps, lapse):
    aresponses.add(host, '/x', 'GET', throttled(aresponses, retry_after=3600))
    aresponses.add(host, '/x', 'GET', {'ok': True})
    async with APIContext(ConnectionInfo(server=f'http://{host}'), max_retry_after=30, clock=lapse) as context:
        await context.request('GET', '/x')
    assert sleeps == [30.0]


async def test_429_without_retry_after_backs_off(context, aresponses, host, sleeps):
    aresponses.add(host, '/x', 'GET', throttled(aresponses), repeat=3)
    aresponses.add(host, '/x', 'GET', {'ok': True})
    await context.request('GET', '/x')
    assert sleeps == [1.0, 2.0, 4.0]


async def test_429_does_not_use_up_the_retries_of_errors(context, aresponses, host, sleeps):
    aresponses.add(host, '/x', 'GET', throttled(aresponses, retry_after=0), repeat=5)
    aresponses.add(host, '/x', 'GET', status_response(aresponses, 500, 'InternalError', 'x'), repeat=2)
    aresponses.add(host, '/x', 'GET', {'ok': True})
    assert await context.request('GET', '/x') == {'ok': True}  # 2 retries of errors, 5 waits for throttling
    assert sleeps == [0.0] * 7


async def test_429_for_too_long_is_a_typed_transient_error(aresponses, host, history, sleeps, lapse):
    aresponses.add(host, '/x', 'GET', throttled(aresponses, retry_after=1), repeat=10)
    async with APIContext(ConnectionInfo(server=f'http://{host}'), throttle_retries=3, clock=lapse) as context:
        with pytest.raises(APITooManyRequestsError) as excinfo:
            await context.request('GET', '/x')
    assert isinstance(excinfo.value, APIServerError)  # callers re-send it later like a 5xx
    assert excinfo.value.retry_after == 1.0
    assert len(history()) == 4
    assert sleeps == [1.0] * 3


# --- Re-authentication -------------------------------------------------------------------------------

def unauthorized(aresponses):
    return aresponses.Response(status=401, content_type='application/json', text=(
        '{"kind": "Status", "code": 401, "reason": "Unauthorized", "message": "Unauthorized"}'))


class Relogin:
    """A login that hands out new tokens, counting its calls; it finishes only once ``ready()`` is true."""

    def __init__(self, host, *tokens, ready=lambda: True, **extra):
        self.host = host
        self.tokens = list(tokens)
        self.ready = ready
        self.extra = extra
        self.calls = 0

    async def __call__(self):
        self.calls += 1
        await until(self.ready)
        return ConnectionInfo(server=f'http://{self.host}', token=self.tokens.pop(0), **self.extra)


async def test_401_logs_in_again_and_repeats_the_request_once(aresponses, host, history, caplog):
    aresponses.add(host, '/x', 'GET', unauthorized(aresponses))
    aresponses.add(host, '/x', 'GET', {'ok': True})
    relogin = Relogin(host, 'new-token')
    with caplog.at_level(logging.INFO, logger='kopf._kube.session'):
        async with APIContext(ConnectionInfo(server=f'http://{host}', token='old'), relogin=relogin) as context:
            assert await context.request('GET', '/x') == {'ok': True}
    assert relogin.calls == 1
    assert [r.headers['Authorization'] for r in history()] == ['Bearer old', 'Bearer new-token']
    assert any('Re-authenticating to the Kubernetes API: GET http://fake-k8s/x got 401' in r.getMessage()
               for r in caplog.records)


async def test_401_again_after_logging_in_is_raised(aresponses, host, history):
    aresponses.add(host, '/x', 'GET', unauthorized(aresponses), repeat=5)
    relogin = Relogin(host, 'also-wrong')
    async with APIContext(ConnectionInfo(server=f'http://{host}', token='wrong'), relogin=relogin) as context:
        with pytest.raises(APIUnauthorizedError):
            await context.request('GET', '/x')
    assert relogin.calls == 1
    assert len(history()) == 2


async def test_401_without_a_way_to_log_in_is_raised_at_once(context, aresponses, host, history):
    aresponses.add(host, '/x', 'GET', unauthorized(aresponses), repeat=5)
    with pytest.raises(APIUnauthorizedError):
        await context.request('GET', '/x')
    assert len(history()) == 1


async def test_concurrent_401s_log_in_once(aresponses, host, history):
    aresponses.add(host, '/x', 'GET', unauthorized(aresponses), repeat=3)
    aresponses.add(host, '/x', 'GET', {'ok': True}, repeat=3)
    relogin = Relogin(host, 'new-token', 'newer-token', ready=lambda: len(history()) >= 3)  # all refused by then
    async with APIContext(ConnectionInfo(server=f'http://{host}', token='old'), relogin=relogin) as context:
        results = await asyncio.gather(*[context.request('GET', '/x') for _ in range(3)])
    assert results == [{'ok': True}] * 3
    assert relogin.calls == 1


async def test_a_failing_login_keeps_the_401(aresponses, host, caplog):
    aresponses.add(host, '/x', 'GET', unauthorized(aresponses))

    async def broken_login():
        raise LoginError("the identity provider is down")

    async with APIContext(ConnectionInfo(server=f'http://{host}', token='old'), relogin=broken_login) as context:
        with pytest.raises(APIUnauthorizedError):
            await context.request('GET', '/x')
    assert any('Re-authentication has failed: the identity provider is down' in r.getMessage()
               for r in caplog.records)


async def test_401_on_a_watch_logs_in_again_too(aresponses, host, history, stream_response):
    aresponses.add(host, '/w', 'GET', unauthorized(aresponses))
    aresponses.add(host, '/w', 'GET', stream_response(b'line\n'))
    relogin = Relogin(host, 'new-token')
    async with APIContext(ConnectionInfo(server=f'http://{host}', token='old'), relogin=relogin) as context:
        async with context.stream('GET', '/w') as response:
            assert await response.content.read() == b'line\n'
    assert [r.headers['Authorization'] for r in history()] == ['Bearer old', 'Bearer new-token']


async def test_expiring_credentials_are_renewed_before_a_request(aresponses, host, history, clock):
    aresponses.add(host, '/x', 'GET', {'ok': True}, repeat=2)
    soon = clock.now() + datetime.timedelta(seconds=1)
    later = clock.now() + datetime.timedelta(hours=1)
    relogin = Relogin(host, 'fresh-token', expiration=later)
    info = ConnectionInfo(server=f'http://{host}', token='expiring', expiration=soon)
    async with APIContext(info, relogin=relogin, clock=clock) as context:
        await context.request('GET', '/x')  # still valid for 1s, renewed at 4/5 of it: 0.8s
        clock.advance(1.0)
        await context.request('GET', '/x')
    assert relogin.calls == 1
    assert [r.headers['Authorization'] for r in history()] == ['Bearer expiring', 'Bearer fresh-token']


async def test_naive_expiration_times_are_utc(aresponses, host, history, clock):
    aresponses.add(host, '/x', 'GET', {'ok': True})
    past = clock.now().replace(tzinfo=None) - datetime.timedelta(minutes=1)
    relogin = Relogin(host, 'fresh-token')
    async with APIContext(ConnectionInfo(server=f'http://{host}', token='old', expiration=past),
                          relogin=relogin, clock=clock) as context:
        await context.request('GET', '/x')
    assert relogin.calls == 1
    assert history()[0].headers['Authorization'] == 'Bearer fresh-token'


async def test_a_rotated_token_file_is_followed(aresponses, host, history, tmp_path, clock):
    aresponses.add(host, '/x', 'GET', {'ok': True}, repeat=2)
    token_file = tmp_path / 'token'
    token_file.write_text('first\n')
    info = ConnectionInfo(server=f'http://{host}', token='first', token_path=str(token_file))
    async with APIContext(info, clock=clock) as context:
        await context.request('GET', '/x')
        replacement = tmp_path / 'token.new'
        replacement.write_text('second\n')
        replacement.replace(token_file)  # as the kubelet does it: atomically
        clock.advance(credentials.TOKEN_FILE_CHECK_INTERVAL)
        await context.request('GET', '/x')
    assert [r.headers['Authorization'] for r in history()] == ['Bearer first', 'Bearer second']


async def test_401_re_reads_the_token_file_at_once(aresponses, host, history, tmp_path):
    token_file = tmp_path / 'token'
    token_file.write_text('first\n')

    async def rotate_and_refuse(request):
        token_file.write_text('second\n')  # rotated while the old token was on its way
        return unauthorized(aresponses)

    aresponses.add(host, '/x', 'GET', rotate_and_refuse)
    aresponses.add(host, '/x', 'GET', {'ok': True})
    info = ConnectionInfo(server=f'http://{host}', token='first', token_path=str(token_file))
    async with APIContext(info) as context:
        assert await context.request('GET', '/x') == {'ok': True}
    assert [r.headers['Authorization'] for r in history()] == ['Bearer first', 'Bearer second']


async def test_other_token_schemes(aresponses, host, history):
    aresponses.add(host, '/x', 'GET', {})
    async with APIContext(ConnectionInfo(server=f'http://{host}', scheme='Digest', token='abc')) as context:
        await context.request('GET', '/x')
    assert history()[0].headers['Authorization'] == 'Digest abc'


async def test_unusable_certificates_are_a_login_error(tmp_path):
    info = ConnectionInfo(server='https://k8s', ca_path=str(tmp_path / 'missing-ca.crt'))
    with pytest.raises(LoginError, match='TLS certificates'):
        async with APIContext(info):
            pass


# --- a login handler's own session (kopf.AiohttpSession) -----------------------------------------

async def test_a_provided_session_is_used_as_it_is_and_closed_with_the_context(aresponses, host, history):
    aresponses.add(host, '/x', 'GET', {'ok': True})
    own = aiohttp.ClientSession(headers={'Authorization': 'Custom xyz', 'X-Custom-Header': 'helloworld'})
    credentials = AiohttpSession(server=f'http://{host}', aiohttp_session=own, default_namespace='ns')
    async with APIContext(credentials) as context:
        assert await context.request('GET', '/x') == {'ok': True}
        assert context.custom_session
        assert context.info.default_namespace == 'ns'
    request, = history()
    assert request.headers['Authorization'] == 'Custom xyz'
    assert request.headers['X-Custom-Header'] == 'helloworld'
    assert request.headers['User-Agent'] == 'kopf'  # added, since the session had none
    assert own.closed  # the framework owns it


async def test_a_provided_session_keeps_its_own_user_agent(aresponses, host, history):
    aresponses.add(host, '/x', 'GET', {})
    own = aiohttp.ClientSession(headers={'User-Agent': 'my-operator/1.0'})
    async with APIContext(AiohttpSession(server=f'http://{host}', aiohttp_session=own)) as context:
        await context.request('GET', '/x')
    assert history()[0].headers['User-Agent'] == 'my-operator/1.0'


async def test_a_relogin_may_provide_a_new_session(aresponses, host, history):
    aresponses.add(host, '/x', 'GET', unauthorized(aresponses))
    aresponses.add(host, '/x', 'GET', {'ok': True})
    first = aiohttp.ClientSession(headers={'Authorization': 'Custom old'})
    second = aiohttp.ClientSession(headers={'Authorization': 'Custom new'})

    async def relogin():
        return AiohttpSession(server=f'http://{host}', aiohttp_session=second)

    async with APIContext(AiohttpSession(server=f'http://{host}', aiohttp_session=first),
                          relogin=relogin) as context:
        assert await context.request('GET', '/x') == {'ok': True}
    assert [r.headers['Authorization'] for r in history()] == ['Custom old', 'Custom new']
    assert first.closed and second.closed


async def test_a_provided_non_session_is_a_login_error():
    with pytest.raises(LoginError, match=r'must be an aiohttp\.ClientSession, got dict'):
        APIContext(AiohttpSession(server='https://k8s', aiohttp_session={}))


async def test_trust_env_reaches_the_session(info):
    async with APIContext(dataclasses.replace(info, trust_env=True)) as context:
        assert context.session.trust_env
    async with APIContext(info) as context:
        assert not context.session.trust_env


async def test_every_request_and_watch_is_told_to_the_recorder_with_its_status(context, aresponses, host,
                                                                              stream_response):
    from kopf._observability import metrics, recording
    aresponses.add(host, '/api/v1/namespaces/ns1/pods/p1', 'PATCH', status_response(aresponses, 409, 'Conflict', 'no'))
    aresponses.add(host, '/api/v1/pods', 'GET', stream_response(b'line1\n'))
    recorder = metrics.MetricsRecorder(process=False)
    token = recording.install(recorder)
    try:
        with pytest.raises(APIConflictError):
            await context.request('PATCH', '/api/v1/namespaces/ns1/pods/p1', json={})
        async with context.stream('GET', '/api/v1/pods', params={'watch': True}) as response:
            await response.content.read()
    finally:
        recording.uninstall(token)
    value = recorder.registry.get_sample_value
    assert value('kopf_api_requests_total', {'verb': 'PATCH', 'resource': 'pods', 'code': '409'}) == 1
    assert value('kopf_api_requests_total', {'verb': 'WATCH', 'resource': 'pods', 'code': '200'}) == 1
    assert value('kopf_api_request_duration_seconds_count', {'verb': 'WATCH', 'resource': 'pods'}) == 1
