import asyncio

from aiohttp import web

from kopf.clients.session import APIContext


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
