"""
The fences that follow every renewal, struck on the fake clock.
"""
import asyncio
import logging

from kopf._replicas.deadlines import Fences
from kopf._replicas.fencing import Gate, everything
from tests.unit.replicas.conftest import RENEW, RETRY, settings, settle, until


async def cycle(gate, key, clock, *, write=False):
    async with gate.handling(key) as admitted:
        assert admitted
        if write:
            gate.check_write()
        await clock.sleep(1000)


async def test_the_soft_fence_then_the_hard_fence_strike_after_the_last_renewal(clock, caplog):
    caplog.set_level(logging.WARNING)
    gate = Gate(clock=clock)
    gate.permit(everything, resync=True)
    fences = Fences(gate, settings('ha', 'a'), clock=clock)
    renewed = clock.monotonic()
    fences.renewed(renewed)
    handling = asyncio.create_task(cycle(gate, 'a', clock))
    committing = asyncio.create_task(cycle(gate, 'b', clock, write=True))
    await settle()
    soft = await until(clock, lambda: handling.done(), within=RENEW)
    assert soft - renewed == RENEW - RETRY and not gate.active and not fences.lost
    assert handling.cancelled() and not committing.done()  # a patch being sent may be finished
    assert "The lease has not been renewed for 8.0s; no new handling (1 cycle(s) cancelled)." in caplog.text
    hard = await until(clock, lambda: committing.done(), within=RENEW)
    assert hard - renewed == RENEW and fences.lost and not gate.writable
    assert committing.cancelled()
    assert "within the renew deadline of 10.0s: stopped handling before it can expire (in 5.0s)" in caplog.text


async def test_every_renewal_moves_the_fences_on(clock):
    gate = Gate(clock=clock)
    gate.permit(everything, resync=True)
    fences = Fences(gate, settings('ha', 'a'), clock=clock)
    running = asyncio.create_task(cycle(gate, 'a', clock))
    for _ in range(10):  # far beyond the first renewal's deadlines
        fences.renewed(clock.monotonic())
        clock.advance(RENEW - RETRY - 1)  # just before this renewal's soft fence
        await settle()
        assert gate.active and not fences.lost and not running.done()
    fences.cancel()
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)


async def test_cancelled_fences_strike_no_more_but_the_gate_still_closes_by_the_clock(clock):
    gate = Gate(clock=clock)
    gate.permit(everything, resync=True)
    fences = Fences(gate, settings('ha', 'a'), clock=clock)
    fences.renewed(clock.monotonic())
    running = asyncio.create_task(cycle(gate, 'a', clock))
    await settle()
    fences.cancel()
    clock.advance(RENEW)
    await settle()
    assert not running.done()  # nobody cancels it ...
    assert not gate.active and not gate.writable  # ... but nothing new is admitted or written
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
