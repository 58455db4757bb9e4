import asyncio
import dataclasses

import pytest

from kopf._cycle.queueing import ProcessingOutcome, watch_objects
from kopf._replicas.fencing import FencedAPIContext, FencedError, Gate, everything, gated_stream, nothing
from tests.unit.replicas.conftest import settle, until


@dataclasses.dataclass
class Settings:
    batch_window: float = 0.01
    idle_timeout: float = 0.5
    exit_timeout: float = 1.0
    worker_limit: int | None = None


def open_gate(clock, permit=everything):
    """A gate as a replica holding its Lease has it: the deadlines far ahead."""
    gate = Gate(clock=clock)
    gate.permit(permit, resync=True)
    gate.extend(admit_until=clock.monotonic() + 100, write_until=clock.monotonic() + 100)
    return gate


def event(uid, rv=1):
    return {'type': 'MODIFIED', 'object': {'metadata': {'uid': uid, 'name': uid, 'resourceVersion': str(rv)}}}


async def feed(events, *, until):
    """A watch stream: these events, then open until the condition is met (an event set by the test)."""
    for e in events:
        yield e
    await asyncio.wait_for(until.wait(), timeout=5)


async def cycle(gate, key, clock, *, write=False, duration=1000):
    """One handling cycle as a worker runs it: inside the gate; optionally starting to send its patch."""
    async with gate.handling(key) as admitted:
        assert admitted
        if write:
            gate.check_write()
        await clock.sleep(duration)


# What queueing sees.

async def test_nothing_is_admitted_until_permitted_and_in_time(clock):
    gate = Gate(clock=clock)
    assert not gate.admits('a') and not gate.active
    gate.permit(everything, resync=True)
    assert not gate.admits('a') and not gate.active  # no lease yet
    gate.extend(admit_until=clock.monotonic() + 100, write_until=clock.monotonic() + 100)
    assert gate.admits('a') and gate.active


async def test_the_deadlines_hold_by_the_clock_even_without_the_timers(clock):
    gate = open_gate(clock)
    gate.extend(admit_until=clock.monotonic() + 5, write_until=clock.monotonic() + 10)
    async with gate.handling('a') as admitted:
        assert admitted
        clock.advance(6)
        gate.check_write()  # a cycle admitted in time may still write...
        clock.advance(4)
        with pytest.raises(FencedError):
            gate.check_write()  # ...but not after the renew deadline
    async with gate.handling('b') as admitted:
        assert not admitted


async def test_a_renewal_after_a_lapse_lists_anew(clock):
    gate = open_gate(clock)
    epoch = gate.epoch
    gate.extend(admit_until=clock.monotonic() + 100, write_until=clock.monotonic() + 100)
    assert gate.epoch == epoch  # renewed in time: nothing was dropped
    gate.extend(admit_until=clock.monotonic() - 1, write_until=clock.monotonic() - 1)
    gate.extend(admit_until=clock.monotonic() + 100, write_until=clock.monotonic() + 100)
    assert gate.epoch > epoch  # events were dropped meanwhile


async def test_only_events_of_permitted_objects_reach_the_processor(clock):
    gate = open_gate(clock, lambda key: key != 'theirs')
    seen = []
    handled = asyncio.Event()

    async def processor(raw_event, woken_up):
        seen.append(raw_event['object']['metadata']['uid'])
        handled.set()
        return ProcessingOutcome()

    await watch_objects(stream=feed([event('ours'), event('theirs')], until=handled), processor=processor,
                        settings=Settings(), gate=gate)
    assert seen == ['ours']


async def test_a_worker_whose_object_moved_away_stops_before_its_next_cycle(clock):
    calls = []
    refused = asyncio.Event()

    class RecordingGate(Gate):
        def handling(self, key):
            admitted = self.admits(key)
            if not admitted:
                refused.set()
            return super().handling(key)

    gate = RecordingGate(clock=clock)
    gate.permit(everything, resync=True)
    gate.extend(admit_until=clock.monotonic() + 100, write_until=clock.monotonic() + 100)

    async def processor(raw_event, woken_up):
        calls.append(woken_up)
        gate.permit(nothing, resync=False)  # moved away while it was being handled
        return ProcessingOutcome(delay=0.01)  # come back soon, even without events

    await watch_objects(stream=feed([event('a')], until=refused), processor=processor, settings=Settings(),
                        gate=gate)
    assert calls == [False]  # the wake-up after the delay did not run a cycle


async def test_cycles_are_counted_while_they_run(clock):
    gate = open_gate(clock)
    task = asyncio.create_task(cycle(gate, 'a', clock))
    await settle()
    assert gate.cycles == 1
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert gate.cycles == 0


# What the replicas do with it.

async def test_draining_waits_for_the_cycles_of_objects_outside_what_is_kept(clock):
    gate = open_gate(clock)
    ours = asyncio.create_task(cycle(gate, 'ours', clock, duration=10))
    moving = asyncio.create_task(cycle(gate, 'moving', clock, duration=1))
    await settle()
    started = clock.monotonic()
    draining = asyncio.create_task(gate.drain(lambda key: key == 'ours', timeout=5))
    drained = await until(clock, draining.done, within=5)
    assert draining.result() is True and drained - started == 1  # at the very moment the moving one ended
    assert moving.done() and not ours.done()
    started = clock.monotonic()
    draining = asyncio.create_task(gate.drain(nothing, timeout=2))
    given_up = await until(clock, draining.done, within=5)
    assert draining.result() is False and given_up - started == 2  # by the clock
    ours.cancel()
    await asyncio.gather(ours, return_exceptions=True)


async def test_the_soft_fence_cancels_cycles_that_have_not_started_to_write(clock):
    gate = open_gate(clock)
    handling = asyncio.create_task(cycle(gate, 'a', clock))
    committing = asyncio.create_task(cycle(gate, 'b', clock, write=True, duration=2))
    await settle()
    assert gate.soften() == 1
    assert not gate.active and not gate.admits('c')
    await settle()
    assert handling.cancelled()
    assert not committing.done()
    await until(clock, committing.done, within=2)  # a patch being sent is finished, not cut in the middle
    assert not committing.cancelled()


async def test_the_hard_fence_cancels_everything_and_refuses_writes(clock):
    gate = open_gate(clock)
    committing = asyncio.create_task(cycle(gate, 'b', clock, write=True))
    await settle()
    gate.harden()
    await asyncio.gather(committing, return_exceptions=True)
    assert committing.cancelled()
    with pytest.raises(FencedError):
        gate.check_write()


async def test_a_renewal_allows_writes_again(clock):
    gate = open_gate(clock)
    gate.harden()
    gate.extend(admit_until=clock.monotonic() + 100, write_until=clock.monotonic() + 100)
    gate.check_write()  # no error


async def test_a_cancelled_cycle_cannot_write_even_if_it_catches_the_cancellation(clock):
    gate = open_gate(clock)
    outcome = []

    async def stubborn():
        async with gate.handling('a'):
            try:
                await clock.sleep(1000)
            except asyncio.CancelledError:
                pass
            try:
                gate.check_write()
            except FencedError:
                outcome.append('refused')

    task = asyncio.create_task(stubborn())
    await settle()
    gate.soften()
    await task
    assert outcome == ['refused']


def test_a_refused_write_ends_a_cycle_like_a_cancellation():
    assert issubclass(FencedError, asyncio.CancelledError)
    assert not issubclass(FencedError, Exception)


# Writes through the fenced API context.

class RecordingContext:
    def __init__(self):
        self.requests = []
        self.server = 'https://example.invalid'

    async def request(self, method, url, **kwargs):
        self.requests.append(method)
        return {}


async def test_the_fenced_context_checks_writes_but_not_reads(clock):
    inner = RecordingContext()
    gate = open_gate(clock)
    context = FencedAPIContext(inner, gate)  # type: ignore[arg-type]
    await context.request('PATCH', '/x')
    gate.harden()
    await context.request('GET', '/x')
    with pytest.raises(FencedError):
        await context.request('PATCH', '/x')
    assert inner.requests == ['PATCH', 'GET']
    assert context.server == inner.server


# The watch streams.

async def test_streams_run_only_while_active_and_restart_when_objects_may_have_become_ours(clock):
    gate = Gate(clock=clock)
    gate.extend(admit_until=clock.monotonic() + 100, write_until=clock.monotonic() + 100)
    stop = asyncio.Event()
    opened = []

    def open_stream(until):
        async def stream():
            opened.append(gate.epoch)
            yield event(f'listed-{len(opened)}')
            await until.wait()
        return stream()

    received = []

    async def consume():
        async for e in gated_stream(gate, open_stream, stop=stop):
            received.append(e['object']['metadata']['uid'])

    consumer = asyncio.create_task(consume())
    await settle()
    assert opened == []  # inactive: nothing is watched
    gate.permit(everything, resync=True)
    await settle()
    gate.permit(lambda key: True, resync=False)  # narrowing: no relisting
    await settle()
    gate.permit(everything, resync=True)  # objects may have become ours: list anew
    await settle()
    assert len(opened) == 2 and opened[0] < opened[1]  # one listing per epoch in which objects came
    assert received == ['listed-1', 'listed-2']
    gate.permit(nothing, resync=False)
    await settle()
    stop.set()
    await asyncio.wait_for(consumer, timeout=1)
    assert len(opened) == 2


# Daemons and timers: residents of their objects.

async def test_a_hand_over_waits_for_the_daemons_of_the_objects_that_move_and_times_out_by_the_clock(clock):
    gate = open_gate(clock)
    staying, moving = gate.reside('stays'), gate.reside('moves')
    assert gate.residents == 2
    assert await gate.drain(lambda key: key != 'gone', timeout=0)  # neither of them is outside what is kept
    draining = asyncio.create_task(gate.drain(lambda key: key == 'stays', timeout=5))
    await settle()
    assert not draining.done()  # the clock stands: no timeout yet, however long it takes
    clock.advance(5)
    assert await draining is False
    draining = asyncio.create_task(gate.drain(lambda key: key == 'stays', timeout=5))
    await settle()
    gate.depart(moving)
    gate.depart(moving)  # idempotent
    assert await asyncio.wait_for(draining, timeout=1) is True  # at once, with the clock standing
    gate.depart(staying)
    assert gate.residents == 0


async def test_the_keepers_learn_of_every_change_of_the_permit_and_the_deadlines(clock):
    gate = Gate(clock=clock)
    revision = gate.revision
    waiting = asyncio.create_task(gate.revised(revision))
    await asyncio.sleep(0)
    assert not waiting.done()
    gate.extend(admit_until=clock.monotonic() + 10, write_until=clock.monotonic() + 20)
    await asyncio.wait_for(waiting, timeout=1)
    assert gate.writable
    revision = gate.revision
    waiting = asyncio.create_task(gate.revised(revision))
    clock.advance(20)
    assert not gate.writable  # by the clock, even before anyone is told
    gate.harden()
    await asyncio.wait_for(waiting, timeout=1)
