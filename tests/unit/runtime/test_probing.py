"""The liveness endpoint: a real HTTP server on a free local port, asked with a real HTTP client."""
import asyncio
import datetime
import socket

import aiohttp
import pytest

from kopf._runtime import probing


@pytest.fixture()
def calls():
    return []


@pytest.fixture()
def results():
    return {'now': 'then', 'answer': 42}


@pytest.fixture()
def cache(clock, calls, results):
    async def run():
        calls.append(clock.monotonic())
        if isinstance(results, Exception):
            raise results
        return dict(results)

    return probing.ProbeCache(run, period=lambda: 10.0, clock=clock)


@pytest.fixture()
def health():
    return probing.Health()


@pytest.fixture()
async def server(health, cache):
    server = probing.LivenessServer('http://127.0.0.1:0/healthz', health=health, probes=cache)
    await server.start()
    yield server
    await server.stop()


async def get(url):
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.json(content_type=None)


async def test_not_healthy_while_starting(server, calls):
    status, data = await get(server.url)
    assert status == 500
    assert 'starting' in data['error']
    assert calls == []  # probes run only for a running operator


async def test_healthy_with_the_probe_results_while_watching(server, health):
    watcher = asyncio.create_task(asyncio.Event().wait(), name='watcher of pods')
    health.watching([watcher])
    try:
        assert await get(server.url) == (200, {'now': 'then', 'answer': 42})
    finally:
        watcher.cancel()


async def test_not_healthy_when_a_watcher_has_stopped(server, health):
    watcher = asyncio.create_task(asyncio.sleep(0), name='watcher of pods')
    health.watching([watcher])
    await watcher
    status, data = await get(server.url)
    assert status == 500
    assert "'watcher of pods' has stopped" in data['error']


async def test_not_healthy_when_stopping(server, health):
    health.watching([])
    health.stopping()
    status, data = await get(server.url)
    assert (status, data) == (500, {'error': 'The operator is stopping.'})


async def test_probe_results_are_cached_for_the_period(server, health, clock, calls, results):
    health.watching([])
    await get(server.url)
    results['answer'] = 43
    clock.advance(9.75)
    assert (await get(server.url))[1]['answer'] == 42
    clock.advance(0.25)
    assert (await get(server.url))[1]['answer'] == 43
    assert calls == [1000.0, 1010.0]


async def test_concurrent_requests_share_one_probe_run(health, clock, calls):
    started = asyncio.Event()
    release = asyncio.Event()

    async def slow():
        calls.append(clock.monotonic())
        started.set()
        await release.wait()
        return {'slow': True}

    health.watching([])
    server = probing.LivenessServer('http://127.0.0.1:0/healthz', health=health,
                                    probes=probing.ProbeCache(slow, period=lambda: 10.0, clock=clock))
    await server.start()
    try:
        requests = [asyncio.create_task(get(server.url)) for _ in range(3)]
        await started.wait()
        release.set()
        assert await asyncio.gather(*requests) == [(200, {'slow': True})] * 3
        assert len(calls) == 1
    finally:
        await server.stop()


@pytest.mark.parametrize('results', [probing.ProbeError("now: ValueError: boom")])
async def test_failed_probes_make_the_operator_unhealthy_with_their_errors(server, health, results):
    health.watching([])
    status, data = await get(server.url)
    assert status == 500
    assert data['error'] == 'The probe handlers have failed: now: ValueError: boom'


@pytest.mark.parametrize('results', [RuntimeError("unexpected")])
async def test_unexpected_failures_of_the_probes_are_reported_too(server, health, results):
    health.watching([])
    status, data = await get(server.url)
    assert status == 500
    assert 'RuntimeError: unexpected' in data['error']


async def test_other_paths_are_not_found(server, health):
    health.watching([])
    async with aiohttp.ClientSession() as session, session.get(server.url.replace('/healthz', '/other')) as response:
        assert response.status == 404


async def test_results_are_json_even_if_not_json_types(health, clock):
    when = datetime.datetime(2020, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)

    async def run():
        return {'when': when}

    health.watching([])
    server = probing.LivenessServer('http://127.0.0.1:0/', health=health,
                                    probes=probing.ProbeCache(run, period=lambda: 10.0, clock=clock))
    await server.start()
    try:
        assert await get(server.url) == (200, {'when': str(when)})
    finally:
        await server.stop()


async def test_a_port_in_use_fails_at_start_with_the_endpoint_named(health, cache):
    with socket.socket() as busy:
        busy.bind(('127.0.0.1', 0))
        busy.listen()
        port = busy.getsockname()[1]
        server = probing.LivenessServer(f'http://127.0.0.1:{port}/healthz', health=health, probes=cache)
        with pytest.raises(probing.LivenessError) as e:
            await server.start()
    assert f'http://127.0.0.1:{port}/healthz' in str(e.value)
    assert f'port {port}' in str(e.value)
    assert '--liveness' in str(e.value)


async def test_stopping_frees_the_port(server, health, cache):
    url = server.url
    await server.stop()
    again = probing.LivenessServer(url, health=health, probes=cache)
    await again.start()
    await again.stop()


@pytest.mark.parametrize('url, expected', [
    ('http://0.0.0.0:8080/healthz', probing.Endpoint('0.0.0.0', 8080, '/healthz')),
    ('http://localhost/', probing.Endpoint('localhost', 80, '/')),
    ('http://:9000', probing.Endpoint('0.0.0.0', 9000, '/')),
])
def test_endpoints(url, expected):
    assert probing.Endpoint.parse(url) == expected


@pytest.mark.parametrize('url, message', [
    ('https://0.0.0.0:8080/healthz', 'only http://'),
    ('0.0.0.0:8080', 'only http://'),
    ('http://0.0.0.0:99999/', 'invalid port'),
])
def test_bad_endpoints_are_explained(url, message):
    with pytest.raises(probing.LivenessError, match=message):
        probing.Endpoint.parse(url)
