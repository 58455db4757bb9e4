"""
Per-object queueing, in the fake time of the clock: it moves whenever everything waits (see ``in_fake_time``).

The pauses in the streams and the handlers' durations are seconds of that
clock, so the timing is exact however busy the machine is, and nothing waits.
"""
import asyncio
import dataclasses
import gc
import weakref

import pytest

from kopf._cycle import queueing
from kopf._cycle.queueing import ProcessingOutcome, event_key
from kopf._kube.slots import ADMISSION_PATIENCE, ADMISSIONS_PER_SLOT, RequestSlots
from kopf._observability.recording import QueueProbe
from tests.unit.conftest import in_fake_time


@dataclasses.dataclass
class Settings:
    batch_window: float = 0.05
    idle_timeout: float = 0.5
    exit_timeout: float = 1.0
    worker_limit: int | None = None


def event(uid, rv, type_='MODIFIED', **spec):
    return {'type': type_, 'object': {'metadata': {'uid': uid, 'name': uid, 'resourceVersion': str(rv)},
                                      'spec': spec}}


async def feed(clock, events, *, pause=0.0, hold=0.0):
    """The events as a stream; numbers among them are pauses (seconds of the clock); ``hold``: before its end."""
    for e in events:
        if isinstance(e, float):
            await clock.sleep(e)
        else:
            yield e
            await clock.sleep(pause)
    await clock.sleep(hold)


async def watch_objects(clock, **kwargs):
    """The stream's events handled to the end of the stream, in the fake time of the clock."""
    await in_fake_time(clock, queueing.watch_objects(**kwargs, clock=clock))


def test_objects_are_keyed_by_uid_or_by_name():
    assert event_key(event('u1', 1)) == 'u1'
    assert event_key({'object': {'metadata': {'namespace': 'ns', 'name': 'n'}}}) == 'ns/n'
    assert event_key({'object': {'metadata': {'name': 'n'}}}) == '/n'  # cluster-scoped, as everywhere


async def test_events_of_one_object_are_batched_and_the_latest_wins(clock):
    seen = []

    async def processor(raw_event, woken_up):
        seen.append(raw_event['object']['metadata']['resourceVersion'])
        return ProcessingOutcome()

    await watch_objects(clock, stream=feed(clock, [event('a', 1), event('a', 2), event('a', 3)], hold=0.2),
                        processor=processor, settings=Settings())
    assert seen == ['3']


async def test_one_object_is_never_handled_concurrently_but_objects_are_in_parallel(clock):
    active = {}
    overlaps = []
    parallel = []

    async def processor(raw_event, woken_up):
        uid = raw_event['object']['metadata']['uid']
        if active.get(uid):
            overlaps.append(uid)
        active[uid] = True
        if any(v for k, v in active.items() if k != uid):
            parallel.append(uid)
        await clock.sleep(0.1)
        active[uid] = False
        return ProcessingOutcome()

    events = [event('a', 1), event('b', 1), 0.12, event('a', 2), event('b', 2)]
    await watch_objects(clock, stream=feed(clock, events, hold=0.5),
                        processor=processor, settings=Settings(batch_window=0.01))
    assert overlaps == []
    assert parallel


async def test_a_delay_wakes_the_worker_up_without_new_events(clock):
    calls = []

    async def processor(raw_event, woken_up):
        calls.append(woken_up)
        return ProcessingOutcome(delay=0.1 if len(calls) == 1 else None)

    await watch_objects(clock, stream=feed(clock, [event('a', 1)], hold=0.4), processor=processor, settings=Settings())
    assert calls == [False, True]


async def test_a_new_event_interrupts_the_delay(clock):
    calls = []

    async def processor(raw_event, woken_up):
        calls.append((raw_event['object']['metadata']['resourceVersion'], woken_up))
        return ProcessingOutcome(delay=10)

    await watch_objects(clock, stream=feed(clock, [event('a', 1), 0.1, event('a', 2)], hold=0.2),
                        processor=processor, settings=Settings(exit_timeout=0.1))
    assert calls == [('1', False), ('2', False)]


async def test_stale_events_before_our_own_patch_are_skipped(clock):
    seen = []

    async def processor(raw_event, woken_up):
        rv = raw_event['object']['metadata']['resourceVersion']
        seen.append(rv)
        return ProcessingOutcome(resource_version='5' if rv == '1' else None)

    # Event 2 arrives long after the batch window, still before our patch (rv 5) shows up.
    events = [event('a', 1), 0.2, event('a', 2), 0.1, event('a', 5)]
    await watch_objects(clock, stream=feed(clock, events, hold=0.3), processor=processor, settings=Settings())
    assert seen == ['1', '5']


async def test_deleted_objects_end_their_worker(clock):
    seen = []

    async def processor(raw_event, woken_up):
        seen.append(raw_event['type'])
        return ProcessingOutcome(delay=10)

    started = clock.monotonic()
    await watch_objects(clock, stream=feed(clock, [event('a', 1, 'DELETED')]), processor=processor,
                        settings=Settings(exit_timeout=5))
    assert seen == ['DELETED']
    assert clock.monotonic() - started < 2


async def test_worker_limit_bounds_parallel_handling(clock):
    active = []
    peak = []

    async def processor(raw_event, woken_up):
        active.append(1)
        peak.append(len(active))
        await clock.sleep(0.05)
        active.pop()
        return ProcessingOutcome()

    events = [event(f'o{i}', 1) for i in range(5)]
    await watch_objects(clock, stream=feed(clock, events, hold=0.5), processor=processor,
                        settings=Settings(worker_limit=2, batch_window=0.01))
    assert len(peak) == 5
    assert max(peak) == 2


@pytest.mark.parametrize('duration, expected_peak', [
    (ADMISSION_PATIENCE / 2, ADMISSIONS_PER_SLOT),  # quick cycles: as many as the admissions
    (ADMISSION_PATIENCE * 2, 12),  # slow handlers, say: every object at once
])
async def test_cycles_start_as_the_api_admits_them_and_slow_ones_do_not_hold_the_others_back(
        clock, duration, expected_peak):
    active = []
    peak = []

    async def processor(raw_event, woken_up):
        active.append(1)
        peak.append(len(active))
        await clock.sleep(duration)
        active.pop()
        return ProcessingOutcome()

    events = [event(f'o{i}', 1) for i in range(12)]
    await watch_objects(clock, stream=feed(clock, events, hold=5.0), processor=processor,
                        settings=Settings(batch_window=0.01), admission=RequestSlots(1))
    assert len(peak) == 12
    assert max(peak) == expected_peak


async def test_a_wake_up_after_our_patch_continues_from_the_patched_object(monkeypatch, clock):
    monkeypatch.setattr(queueing, 'CONSISTENCY_TIMEOUT', 0.1)
    seen = []

    async def processor(raw_event, woken_up):
        seen.append((raw_event['object']['spec'].get('step'), woken_up))
        if len(seen) == 1:
            patched = event('a', 2, step='patched')['object']
            return ProcessingOutcome(delay=0, resource_version='2', body=patched)
        return ProcessingOutcome()

    # The patch's own event never arrives (e.g. the watch broke): the worker must not re-use event 1.
    await watch_objects(clock, stream=feed(clock, [event('a', 1, step='original')], hold=0.3), processor=processor,
                        settings=Settings(exit_timeout=0.1))
    assert seen == [('original', False), ('patched', True)]


async def test_after_our_patch_its_own_event_is_awaited_instead_of_waking_up_at_once(clock):
    seen = []

    async def processor(raw_event, woken_up):
        seen.append((raw_event['object']['metadata']['resourceVersion'], woken_up))
        if len(seen) == 1:
            return ProcessingOutcome(delay=0, resource_version='2', body=event('a', 2)['object'])
        return ProcessingOutcome()

    await watch_objects(clock, stream=feed(clock, [event('a', 1), 0.1, event('a', 2)], hold=0.2), processor=processor,
                        settings=Settings())
    assert seen == [('1', False), ('2', False)]


async def test_a_deletion_counts_as_consistent_with_our_last_patch(monkeypatch, clock):
    monkeypatch.setattr(queueing, 'CONSISTENCY_TIMEOUT', 3.0)
    seen = []

    async def processor(raw_event, woken_up):
        seen.append(raw_event['type'])
        return ProcessingOutcome(resource_version='99')  # e.g. our finalizer removal

    started = clock.monotonic()
    await watch_objects(clock, stream=feed(clock, [event('a', 1), 0.1, event('a', 2, 'DELETED')]), processor=processor,
                        settings=Settings(exit_timeout=5))
    assert seen == ['MODIFIED', 'DELETED']
    assert clock.monotonic() - started < 2  # not held back until the timeout


async def test_after_our_patch_found_the_object_gone_older_events_are_not_handled(clock):
    """E.g. our finalizer removal deleted it: an event from before (our finalizer still on it) would re-run handlers."""
    seen = []

    async def processor(raw_event, woken_up):
        seen.append((raw_event['type'], raw_event['object']['metadata']['resourceVersion']))
        await clock.sleep(0.3)  # the other operator's change arrives meanwhile
        return ProcessingOutcome(gone=True) if len(seen) == 1 else ProcessingOutcome()

    events = [event('a', 1), 0.1, event('a', 2), 0.5, event('a', 3, 'DELETED')]
    await watch_objects(clock, stream=feed(clock, events, hold=0.3), processor=processor, settings=Settings())
    assert seen == [('MODIFIED', '1'), ('DELETED', '3')]


async def test_our_patch_seen_while_still_handling_is_not_awaited_again(monkeypatch, clock):
    monkeypatch.setattr(queueing, 'CONSISTENCY_TIMEOUT', 3.0)
    seen = []

    async def processor(raw_event, woken_up):
        rv = raw_event['object']['metadata']['resourceVersion']
        seen.append(rv)
        if rv == '1':
            await clock.sleep(0.2)  # meanwhile, our patch's event (5) and a later one (6) arrive
            return ProcessingOutcome(resource_version='5')
        return ProcessingOutcome()

    started = clock.monotonic()
    events = [event('a', 1), 0.1, event('a', 5), event('a', 6)]
    await watch_objects(clock, stream=feed(clock, events, hold=0.4),
                        processor=processor, settings=Settings(exit_timeout=0.1))
    assert seen == ['1', '6']
    assert clock.monotonic() - started < 2  # not held back until the timeout


class Event(dict):
    """A raw event that can be referenced weakly, to see whether anything still holds it."""


async def test_a_waiting_worker_keeps_nothing_of_the_handled_object(clock):
    handled = asyncio.Event()
    refs = []
    alive = []

    async def stream():
        obj = Event(type='ADDED', object={'metadata': {'uid': 'a', 'resourceVersion': '1'}})
        refs.append(weakref.ref(obj))
        yield obj
        del obj
        await handled.wait()
        await clock.sleep(1)  # the worker is waiting for new events now (for 5 s before it goes idle)
        gc.collect()
        alive.append(refs[0]() is not None)

    async def processor(raw_event, woken_up):
        handled.set()
        return ProcessingOutcome(body={'metadata': {'uid': 'a', 'resourceVersion': '2'}})

    settings = Settings(idle_timeout=5, exit_timeout=0.1)
    await watch_objects(clock, stream=stream(), processor=processor, settings=settings)
    assert alive == [False]


async def test_events_older_than_our_patch_are_skipped_however_late_its_event_comes(monkeypatch, clock):
    monkeypatch.setattr(queueing, 'CONSISTENCY_TIMEOUT', 0.1)
    seen = []

    async def processor(raw_event, woken_up):
        rv = raw_event['object']['metadata']['resourceVersion']
        seen.append(rv)
        return ProcessingOutcome(resource_version='5' if rv == '1' else None)

    # A lagging watch: the stale events 2 and 3 come long after any short timeout, then our patch's event.
    events = [event('a', 1), 0.3, event('a', 2), 0.3, event('a', 3), 0.1, event('a', 5)]
    await watch_objects(clock, stream=feed(clock, events, hold=0.3), processor=processor,
                        settings=Settings(idle_timeout=0.2, exit_timeout=0.1))
    assert seen == ['1', '5']


async def test_a_due_wake_up_continues_from_our_patch_while_older_events_are_held_back(monkeypatch, clock):
    monkeypatch.setattr(queueing, 'CONSISTENCY_TIMEOUT', 0.1)
    seen = []

    async def processor(raw_event, woken_up):
        seen.append((raw_event['object']['metadata']['resourceVersion'], woken_up))
        if len(seen) == 1:
            return ProcessingOutcome(delay=0, resource_version='5', body=event('a', 5)['object'])
        return ProcessingOutcome()

    events = [event('a', 1), 0.05, event('a', 2), 0.3, event('a', 5)]
    await watch_objects(clock, stream=feed(clock, events, hold=0.3),
                        processor=processor, settings=Settings(exit_timeout=0.1))
    assert seen[:2] == [('1', False), ('5', True)]  # never the stale 2
    assert ('2', False) not in seen


async def test_a_patch_that_changed_nothing_is_not_awaited(monkeypatch, clock):
    monkeypatch.setattr(queueing, 'CONSISTENCY_TIMEOUT', 3.0)
    seen = []

    async def processor(raw_event, woken_up):
        seen.append(woken_up)
        if len(seen) == 1:  # the server answers with the version we handled: it has no event to send
            return ProcessingOutcome(delay=0, resource_version='1', body=event('a', 1)['object'])
        return ProcessingOutcome()

    started = clock.monotonic()
    await watch_objects(clock, stream=feed(clock, [event('a', 1)], hold=0.4), processor=processor,
                        settings=Settings(exit_timeout=0.1))
    assert seen == [False, True]
    assert clock.monotonic() - started < 2  # not held back until the timeout


async def test_an_event_that_comes_as_the_worker_goes_idle_is_handled(clock):
    """
    The idle timeout and an event fall due at once: the timer fires first, the event is put before the
    worker resumes. The worker must see the event, not end with it in its mailbox (an object marked for
    deletion then stays with our finalizer forever: nothing else would ever bring it back).
    """
    seen = []

    async def processor(raw_event, woken_up):
        seen.append((raw_event['object']['metadata']['resourceVersion'], woken_up))
        return ProcessingOutcome()

    # The worker's idle timer is set at 1000.25 (after the batch window), due at 1000.75; the stream's
    # second pause is set later (at 1000.5) and falls due at the same instant, so the timer fires first.
    events = [event('a', 1), 0.5, 0.25, event('a', 2)]
    await watch_objects(clock, stream=feed(clock, events, hold=1.0), processor=processor,
                        settings=Settings(batch_window=0.25, idle_timeout=0.5, exit_timeout=0.1))
    assert seen == [('1', False), ('2', False)]


@pytest.mark.parametrize('settled, events, expected', [
    pytest.param(True, [event('a', 1), 0.2, event('a', 5), 0.2, event('a', 6)], ['1', '6'], id='skipped'),
    pytest.param(True, [event('a', 1), 0.2, event('a', 5), event('a', 6)], ['1', '6'], id='batched-with-a-change'),
    pytest.param(False, [event('a', 1), 0.2, event('a', 5)], ['1', '5'], id='not-settling'),
])
async def test_the_event_of_a_settling_patch_is_not_handled_but_changes_after_it_are(clock, settled, events,
                                                                                    expected):
    seen = []

    async def processor(raw_event, woken_up):
        rv = raw_event['object']['metadata']['resourceVersion']
        seen.append(rv)
        return ProcessingOutcome(resource_version='5', settled=settled) if rv == '1' else ProcessingOutcome()

    await watch_objects(clock, stream=feed(clock, events, hold=0.2), processor=processor, settings=Settings())
    assert seen == expected


async def test_a_worker_that_skipped_an_event_keeps_nothing_of_it(clock):
    refs = []
    alive = []

    async def stream():
        for rv in (1, 5):
            obj = Event(event('a', rv))
            refs.append(weakref.ref(obj))
            yield obj
            del obj
            await clock.sleep(0.2)
        await clock.sleep(1)  # the worker has skipped 5 (and ended)
        gc.collect()
        alive.extend(ref() is not None for ref in refs)

    async def processor(raw_event, woken_up):
        return ProcessingOutcome(resource_version='5', settled=True)

    await watch_objects(clock, stream=stream(), processor=processor,
                        settings=Settings(idle_timeout=5, exit_timeout=0.1))
    assert alive == [False, False]


async def test_a_later_state_stands_for_our_patchs_lost_event(clock):
    """E.g. a watch that expired and was listed anew: the listing shows the object after our patch (5) at 7."""
    seen = []

    async def processor(raw_event, woken_up):
        seen.append((raw_event['object']['metadata']['resourceVersion'], woken_up))
        return ProcessingOutcome(resource_version='5') if len(seen) == 1 else ProcessingOutcome()

    started = clock.monotonic()
    events = [event('a', 1), 0.2, event('a', 3), 0.2, listed('a', 7)]  # 3 is older than our patch: held back
    await watch_objects(clock, stream=feed(clock, events, hold=0.2), processor=processor,
                        settings=Settings(exit_timeout=0.1))
    assert seen == [('1', False), ('7', False)]
    assert clock.monotonic() - started < 1  # not after the consistency limit


def test_versions_are_compared_as_numbers_only_when_both_are_numbers():
    assert queueing._not_older('10', '9') and queueing._not_older('9', '9')
    assert not queueing._not_older('9', '10')
    assert queueing._not_older('abc', 'abc') and not queueing._not_older('abd', 'abc')
    assert not queueing._not_older(None, '9')


async def test_a_lost_patch_event_is_given_up_on_with_a_warning(monkeypatch, caplog, clock):
    monkeypatch.setattr(queueing, 'CONSISTENCY_LIMIT', 0.2)
    seen = []

    async def processor(raw_event, woken_up):
        seen.append((raw_event['object']['metadata']['resourceVersion'], woken_up))
        if len(seen) == 1:
            return ProcessingOutcome(resource_version='5', body=event('a', 5)['object'])
        return ProcessingOutcome()

    events = [event('a', 1), 0.05, event('a', 2)]  # the event of our patch (5) never comes
    await watch_objects(clock, stream=feed(clock, events, hold=0.5),
                        processor=processor, settings=Settings(exit_timeout=0.1))
    assert seen == [('1', False), ('5', True)]
    assert "has not arrived" in caplog.text


async def test_a_failed_worker_names_its_object_and_the_same_failure_is_not_repeated(caplog, clock):
    async def processor(raw_event, woken_up):
        raise RuntimeError('boom')

    def named(rv):
        return {'type': 'MODIFIED', 'object': {'kind': 'KopfExample', 'metadata': {
            'uid': 'u1', 'name': 'ex', 'namespace': 'ns', 'resourceVersion': str(rv)}}}

    await watch_objects(clock, stream=feed(clock, [named(1), 0.1, named(2), 0.1, named(3)], hold=0.1),
                        processor=processor, settings=Settings(batch_window=0.01))
    errors = [r.getMessage() for r in caplog.records if r.levelname == 'ERROR']
    assert errors == ["The worker for KopfExample ns/ex (uid u1) has failed: RuntimeError: boom. "
                      "Its next event starts a new one."]


def test_objects_are_described_by_kind_namespace_name_and_uid():
    assert queueing.describe(event('u1', 1)) == 'u1 (uid u1)'
    assert queueing.describe({'object': {'kind': 'Node', 'metadata': {'name': 'n1'}}}) == 'Node n1'


class Probe(QueueProbe):
    """Notes what the queue tells it."""

    def __init__(self):
        self.calls = []

    def arrived(self, key, *, deleted=False):
        self.calls.append(('arrived', key, deleted))

    def taken(self, key, *, woken_up):
        self.calls.append(('taken', key, woken_up))

    def forget(self, key):
        self.calls.append(('forget', key))


async def test_the_queue_tells_its_probe_what_arrives_what_is_taken_and_when_a_worker_ends(clock):
    probe = Probe()
    seen = []

    async def processor(raw_event, woken_up):
        seen.append(raw_event['type'])
        return ProcessingOutcome()

    await watch_objects(clock, stream=feed(clock, [event('a', 1), event('a', 2, type_='DELETED')], hold=0.2),
                        processor=processor, settings=Settings(), probe=probe)
    assert seen == ['DELETED']  # batched: the latest wins
    assert probe.calls == [('arrived', 'a', False), ('arrived', 'a', True), ('taken', 'a', False), ('forget', 'a')]
async def test_a_listing_waits_while_many_listed_objects_wait_for_their_workers(clock, monkeypatch):
    monkeypatch.setattr(queueing, 'LISTING_BACKLOG', 4, raising=False)
    pulled = []  # how many objects had been handled when each listed event was taken from the stream
    handled = []

    async def listing():
        for i in range(12):
            pulled.append(len(handled))
            yield event(f'o{i}', 1, type_=None)
        await clock.sleep(1.0)

    async def processor(raw_event, woken_up):
        await clock.sleep(0.2)
        handled.append(raw_event['object']['metadata']['uid'])
        return ProcessingOutcome()

    await watch_objects(clock, stream=listing(), processor=processor, settings=Settings())
    assert len(handled) == 12
    assert pulled[:5] == [0, 0, 0, 0, 0]  # the first four wait, the fifth is pulled before it waits
    assert max(i - done for i, done in enumerate(pulled)) <= 4  # never more than the backlog ahead


async def test_watch_events_are_never_held_back_by_the_backlog(clock, monkeypatch):
    monkeypatch.setattr(queueing, 'LISTING_BACKLOG', 2, raising=False)
    pulled = []
    handled = []

    async def stream():
        for i in range(6):
            pulled.append(len(handled))
            yield event(f'o{i}', 1, type_='ADDED')
        await clock.sleep(1.0)

    async def processor(raw_event, woken_up):
        await clock.sleep(0.2)
        handled.append(raw_event['object']['metadata']['uid'])
        return ProcessingOutcome()

    await watch_objects(clock, stream=stream(), processor=processor, settings=Settings())
    assert pulled == [0] * 6
    assert len(handled) == 6


class TimedProbe(QueueProbe):
    """Notes when (by the clock) each object's worker has ended."""

    def __init__(self, clock):
        self.clock = clock
        self.started = clock.monotonic()
        self.ended = {}

    def forget(self, key):
        self.ended[key] = self.clock.monotonic() - self.started


def listed(uid, rv):
    return {'type': None, 'object': event(uid, rv)['object']}


async def test_a_listed_object_with_nothing_to_do_ends_its_worker_at_once(clock):
    probe = TimedProbe(clock)

    async def processor(raw_event, woken_up):
        return ProcessingOutcome()

    await watch_objects(clock, stream=feed(clock, [listed('a', 1), event('b', 1)], hold=10), processor=processor,
                        settings=Settings(batch_window=0.25, idle_timeout=5, exit_timeout=0.1), probe=probe)
    # A listed object is taken without a batch window; a watched object's worker waits for its next changes.
    assert probe.ended == {'a': 0, 'b': 5.25}


async def test_a_listed_object_at_rest_gets_no_worker_and_no_cycle(clock):
    probe = TimedProbe(clock)
    seen, asked = [], []

    async def processor(raw_event, woken_up):
        seen.append(event_key(raw_event))
        return ProcessingOutcome()

    async def at_rest(raw_event):
        asked.append(event_key(raw_event))
        return event_key(raw_event) == 'a'

    events = [listed('a', 1), listed('b', 1), event('c', 1)]
    await watch_objects(clock, stream=feed(clock, events, hold=1), processor=processor, at_rest=at_rest,
                        settings=Settings(exit_timeout=0.1), probe=probe)
    assert asked == ['a', 'b']  # listed objects only: a watched event always has a worker
    assert seen == ['b', 'c']
    assert 'a' not in probe.ended  # no worker was started for it


async def test_a_listed_object_with_a_worker_goes_to_its_worker_whatever_it_looks_like(clock):
    seen, asked = [], []

    async def processor(raw_event, woken_up):
        seen.append(raw_event['object']['metadata']['resourceVersion'])
        return ProcessingOutcome(delay=1.0 if len(seen) == 1 else None)

    async def at_rest(raw_event):
        asked.append(raw_event['object']['metadata']['resourceVersion'])
        return True

    # The first event's worker waits for its delay when the object is listed again: the worker takes it.
    events = [event('a', 1), 0.5, listed('a', 2)]
    await watch_objects(clock, stream=feed(clock, events, hold=3), processor=processor, at_rest=at_rest,
                        settings=Settings(exit_timeout=0.1))
    assert asked == []
    assert seen == ['1', '2']


async def test_a_listed_object_keeps_its_worker_while_something_is_due(clock):
    probe = TimedProbe(clock)
    calls = []

    async def processor(raw_event, woken_up):
        calls.append(woken_up)
        return ProcessingOutcome(delay=1.0 if len(calls) == 1 else None)

    await watch_objects(clock, stream=feed(clock, [listed('a', 1)], hold=10), processor=processor,
                        settings=Settings(batch_window=0.25, idle_timeout=5, exit_timeout=0.1), probe=probe)
    assert calls == [False, True]
    assert probe.ended == {'a': 1.0}  # woken up after the delay, and then nothing more was due


async def test_a_worker_ends_right_after_a_settling_patch_and_its_event_starts_none(clock):
    probe = TimedProbe(clock)
    seen = []

    async def processor(raw_event, woken_up):
        seen.append(raw_event['object']['metadata']['resourceVersion'])
        return ProcessingOutcome(resource_version='5', settled=True)

    await watch_objects(clock, stream=feed(clock, [event('a', 1), 0.5, event('a', 5)], hold=10),
                        processor=processor, probe=probe,
                        settings=Settings(batch_window=0.25, idle_timeout=5, exit_timeout=0.1))
    assert seen == ['1']
    assert probe.ended == {'a': 0.25}  # not waiting for the patch's event, which comes at 0.5


@pytest.mark.parametrize('events, expected', [
    pytest.param([listed('a', 1), event('a', 3), event('a', 5), 0.5, event('a', 6)], ['1', '6'],
                 id='older-and-own-dropped'),
    pytest.param([listed('a', 1), event('a', 3), 0.5, event('a', 7)], ['1', '7'], id='own-lost-later-handled'),
    pytest.param([listed('a', 1), event('a', 3), 0.5, event('a', 4, 'DELETED')], ['1', '4'], id='deletion'),
    pytest.param([listed('a', 1), 0.5, listed('a', 5), 0.5, listed('a', 5)], ['1', '5'], id='relisted'),
])
async def test_the_events_up_to_a_settling_patch_are_dropped_after_its_worker_has_ended(clock, events, expected):
    seen = []

    async def processor(raw_event, woken_up):
        rv = raw_event['object']['metadata']['resourceVersion']
        seen.append(rv)
        return ProcessingOutcome(resource_version='5', settled=True) if rv == '1' else ProcessingOutcome()

    await watch_objects(clock, stream=feed(clock, events, hold=1), processor=processor,
                        settings=Settings(batch_window=0.01, idle_timeout=5, exit_timeout=0.1))
    assert seen == expected


@pytest.mark.parametrize('version, outcome', [
    pytest.param('abc', dict(settled=True), id='not-a-number'),
    pytest.param('5', dict(settled=False), id='not-settling'),
    pytest.param('5', dict(settled=True, delay=3.0), id='delayed'),
])
async def test_a_worker_waits_for_its_patchs_event_when_its_version_cannot_be_told_or_more_is_due(
        clock, version, outcome):
    probe = TimedProbe(clock)
    seen = []

    async def processor(raw_event, woken_up):
        seen.append(raw_event['object']['metadata']['resourceVersion'])
        return ProcessingOutcome(resource_version=version, **outcome) if len(seen) == 1 else ProcessingOutcome()

    await watch_objects(clock, stream=feed(clock, [event('a', 1)], hold=10), processor=processor, probe=probe,
                        settings=Settings(batch_window=0.25, idle_timeout=0.5, exit_timeout=0.1))
    assert probe.ended['a'] > 0.25  # it stayed for the patch's event (and then gave up on it or woke up)


async def test_a_listing_is_not_paced_by_the_batch_window(clock, monkeypatch):
    monkeypatch.setattr(queueing, 'LISTING_BACKLOG', 4, raising=False)
    handled = []

    async def processor(raw_event, woken_up):
        handled.append(raw_event['object']['metadata']['uid'])
        return ProcessingOutcome()

    started = clock.monotonic()
    listing = [listed(f'o{i}', 1) for i in range(40)]
    await watch_objects(clock, stream=feed(clock, listing), processor=processor,
                        settings=Settings(batch_window=0.5, exit_timeout=0.1))
    assert len(handled) == 40
    assert clock.monotonic() - started == 0  # ten times the backlog, and no batch window waited for
