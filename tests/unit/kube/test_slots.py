"""The limit of requests in flight: the others wait for a slot, in order; streams take none."""
import asyncio

from aiohttp import web

from kopf._kube.session import APIContext
from kopf._kube.slots import RequestSlots
from tests.unit.kube.conftest import GUARD, until


async def test_slots_let_in_at_most_the_limit_and_the_others_in_order():
    slots = RequestSlots(2)
    inside: list[int] = []
    leave = {n: asyncio.Event() for n in range(4)}

    async def user(n: int) -> None:
        async with slots:
            inside.append(n)
            await leave[n].wait()
            inside.remove(n)

    tasks = [asyncio.create_task(user(n)) for n in range(4)]
    await until(lambda: slots.waiting == 2)
    assert inside == [0, 1]
    leave[1].set()
    await until(lambda: slots.waiting == 1)
    assert inside == [0, 2]
    leave[0].set()
    await until(lambda: slots.waiting == 0)
    assert inside == [2, 3]
    leave[2].set()
    leave[3].set()
    await asyncio.gather(*tasks)
    assert inside == []


def held_handler(active: list[int], peak: list[int], gate: asyncio.Event):
    async def handler(request: web.BaseRequest) -> web.Response:
        active.append(1)
        peak.append(len(active))
        await gate.wait()
        active.pop()
        return web.json_response({'ok': True})
    return handler


async def test_requests_in_flight_are_limited(aresponses, host, info):
    active: list[int] = []
    peak: list[int] = []
    gate = asyncio.Event()
    aresponses.add(host, '/x', 'GET', held_handler(active, peak, gate), repeat=6)
    async with APIContext(info, max_concurrent_requests=2) as context:
        requests = asyncio.gather(*(context.request('GET', '/x') for _ in range(6)))
        await until(lambda: len(active) + context.slots.waiting == 6)  # every request at the server or waiting
        assert max(peak) == 2
        gate.set()
        results = await asyncio.wait_for(requests, timeout=GUARD)
    assert results == [{'ok': True}] * 6
    assert max(peak) == 2


async def test_open_streams_do_not_take_request_slots(aresponses, host, info, stream_response):
    aresponses.add(host, '/watch', 'GET', stream_response({'type': 'ADDED'}, hang=True), repeat=2)
    aresponses.add(host, '/x', 'GET', {'ok': True})

    async def two_watches_and_a_request() -> object:
        async with APIContext(info, max_concurrent_requests=1) as context:
            async with context.stream('GET', '/watch'), context.stream('GET', '/watch'):
                return await context.request('GET', '/x')

    assert await asyncio.wait_for(two_watches_and_a_request(), timeout=GUARD) == {'ok': True}
