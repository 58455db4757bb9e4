import asyncio

from aiohttp import web

from kopf._kube.session import APIContext


def slow_handler(active: list[int], peak: list[int]):
    async def handler(request: web.BaseRequest) -> web.Response:
        active.append(1)
        peak.append(len(active))
        await asyncio.sleep(0.05)
        active.pop()
        return web.json_response({'ok': True})
    return handler


async def test_requests_in_flight_are_limited(aresponses, host, info):
    active: list[int] = []
    peak: list[int] = []
    aresponses.add(host, '/x', 'GET', slow_handler(active, peak), repeat=6)
    async with APIContext(info, max_concurrent_requests=2) as context:
        results = await asyncio.gather(*(context.request('GET', '/x') for _ in range(6)))
    assert results == [{'ok': True}] * 6
    assert max(peak) == 2


async def test_open_streams_do_not_take_request_slots(aresponses, host, info, stream_response):
    aresponses.add(host, '/watch', 'GET', stream_response({'type': 'ADDED'}, hang=True), repeat=2)
    aresponses.add(host, '/x', 'GET', {'ok': True})

    async def two_watches_and_a_request() -> object:
        async with APIContext(info, max_concurrent_requests=1) as context:
            async with context.stream('GET', '/watch'), context.stream('GET', '/watch'):
                return await context.request('GET', '/x')

    assert await asyncio.wait_for(two_watches_and_a_request(), timeout=2) == {'ok': True}


def port_recorder(ports: list[int]):
    async def handler(request: web.BaseRequest) -> web.Response:
        assert request.transport is not None
        ports.append(request.transport.get_extra_info('peername')[1])
        return web.json_response({'ok': True})
    return handler


async def test_idle_pooled_connections_are_closed(aresponses, host, info):
    ports: list[int] = []
    aresponses.add(host, '/x', 'GET', port_recorder(ports), repeat=3)
    async with APIContext(info, idle_timeout=0.1) as context:
        await context.request('GET', '/x')
        await context.request('GET', '/x')  # at once: the pooled connection is reused
        await asyncio.sleep(0.5)
        await context.request('GET', '/x')  # after a pause: the idle connection is gone
    assert ports[0] == ports[1]
    assert ports[2] != ports[0]


async def test_pooled_connections_are_kept_without_an_idle_timeout(aresponses, host, info):
    ports: list[int] = []
    aresponses.add(host, '/x', 'GET', port_recorder(ports), repeat=2)
    async with APIContext(info, idle_timeout=None) as context:
        await context.request('GET', '/x')
        await asyncio.sleep(0.5)
        await context.request('GET', '/x')
    assert ports[0] == ports[1]
