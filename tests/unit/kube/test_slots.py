"""
The limit of requests in flight: the others wait for a slot, in order; streams take none.
And the admissions of cycles: only so many start before they have got their slots.
"""
import asyncio

from aiohttp import web

from kopf._kube.session import APIContext
from kopf._kube.slots import ADMISSION_PATIENCE, ADMISSIONS_PER_SLOT, RequestSlots
from tests.unit.conftest import idle
from tests.unit.kube.conftest import GUARD, Clock, until


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


# Admissions: a cycle starts only when few are heading for the slots (ADMISSIONS_PER_SLOT per slot).

class Cycle:
    """One handling cycle under test: admitted, then told to request a slot or to end, step by step."""

    def __init__(self, slots: RequestSlots, clock: Clock) -> None:
        self.admitted = asyncio.Event()
        self.request = asyncio.Event()
        self.in_slot = asyncio.Event()
        self.leave_slot = asyncio.Event()
        self.end = asyncio.Event()
        self.task = asyncio.create_task(self._run(slots, clock))

    async def _run(self, slots: RequestSlots, clock: Clock) -> None:
        async with slots.admitted(clock):
            self.admitted.set()
            await self.request.wait()
            async with slots:
                self.in_slot.set()
                await self.leave_slot.wait()
            await self.end.wait()


def started(cycles: list[Cycle]) -> list[int]:
    return [n for n, cycle in enumerate(cycles) if cycle.admitted.is_set()]


async def test_only_so_many_cycles_start_before_any_has_asked_for_a_slot(clock):
    slots = RequestSlots(1)  # 1 slot: ADMISSIONS_PER_SLOT cycles at once
    cycles = [Cycle(slots, clock) for _ in range(ADMISSIONS_PER_SLOT + 2)]
    await idle()
    assert started(cycles) == list(range(ADMISSIONS_PER_SLOT))


async def test_a_cycle_lets_the_next_start_when_its_first_request_gets_a_slot(clock):
    slots = RequestSlots(1)
    cycles = [Cycle(slots, clock) for _ in range(ADMISSIONS_PER_SLOT + 2)]
    await idle()
    cycles[3].request.set()
    await idle()
    assert cycles[3].in_slot.is_set()
    assert started(cycles) == list(range(ADMISSIONS_PER_SLOT + 1))  # the first waiting one, in order


async def test_a_cycle_queued_for_a_slot_keeps_its_admission_until_it_gets_the_slot(clock):
    slots = RequestSlots(1)
    cycles = [Cycle(slots, clock) for _ in range(ADMISSIONS_PER_SLOT + 2)]
    await idle()
    for cycle in cycles[:ADMISSIONS_PER_SLOT]:
        cycle.request.set()  # the first gets the slot, the others wait for it
    await idle()
    assert started(cycles) == list(range(ADMISSIONS_PER_SLOT + 1))  # the first's admission is back
    cycles[ADMISSIONS_PER_SLOT].request.set()  # it waits for the slot too
    await idle()
    clock.advance(ADMISSION_PATIENCE * 2)
    await idle()
    assert not cycles[1].in_slot.is_set()
    assert started(cycles) == list(range(ADMISSIONS_PER_SLOT + 1))  # those waiting for the slot keep theirs
    cycles[0].leave_slot.set()
    await idle()
    assert cycles[1].in_slot.is_set()
    assert started(cycles) == list(range(ADMISSIONS_PER_SLOT + 2))


async def test_a_cycle_that_asks_for_no_slot_for_long_lets_the_next_start(clock):
    slots = RequestSlots(1)
    cycles = [Cycle(slots, clock) for _ in range(ADMISSIONS_PER_SLOT + 2)]
    await idle()
    clock.advance(ADMISSION_PATIENCE - 0.1)
    await idle()
    assert started(cycles) == list(range(ADMISSIONS_PER_SLOT))
    clock.advance(0.1)  # slow handlers, say: every started cycle gives its admission back
    await idle()
    assert started(cycles) == list(range(ADMISSIONS_PER_SLOT + 2))


async def test_an_admission_is_given_back_once_however_the_cycle_goes(clock):
    slots = RequestSlots(1)
    cycles = [Cycle(slots, clock) for _ in range(ADMISSIONS_PER_SLOT)]
    await idle()
    for cycle in cycles:
        cycle.request.set()
        cycle.leave_slot.set()
    await idle()
    clock.advance(ADMISSION_PATIENCE)  # the timers of the cycles still running fire: nothing more is given back
    for cycle in cycles:
        cycle.end.set()
    await asyncio.gather(*(cycle.task for cycle in cycles))
    later = [Cycle(slots, clock) for _ in range(ADMISSIONS_PER_SLOT + 1)]
    await idle()
    assert started(later) == list(range(ADMISSIONS_PER_SLOT))  # as many as at first, not more
    for cycle in later:
        cycle.task.cancel()
    await asyncio.gather(*(cycle.task for cycle in later), return_exceptions=True)
