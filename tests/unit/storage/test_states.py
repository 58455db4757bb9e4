import datetime
import json

import pytest

from kopf.storage import states
from kopf.storage.progress import AnnotationsProgressStorage, ProgressStorage, SmartProgressStorage
from kopf.storage.states import HandlerOutcome, HandlerState, State
from kopf.structs.bodies import Body
from kopf.structs.ids import HandlerId
from kopf.structs.patches import Patch

from .conftest import applied

UTC = datetime.timezone.utc
T0 = datetime.datetime(2020, 1, 1, 0, 0, 0, tzinfo=UTC)
A, B, C = HandlerId('a'), HandlerId('b'), HandlerId('c')


@pytest.fixture()
def clock(monkeypatch):
    """A controllable clock for the states module."""
    class Clock:
        now = T0

        def advance(self, seconds):
            self.now += datetime.timedelta(seconds=seconds)

    clock = Clock()
    monkeypatch.setattr(states, 'utcnow', lambda: clock.now)
    return clock


def success():
    return HandlerOutcome(final=True, result='ok')


def retry(delay):
    return HandlerOutcome(final=False, delay=delay, exception=Exception('later'))


def failure():
    return HandlerOutcome(final=True, exception=Exception('broken'))


# HandlerState

def test_fresh_state_is_started_and_awakened(clock):
    state = HandlerState.from_scratch()
    assert state.started == T0
    assert state.retries == 0
    assert not state.finished
    assert not state.sleeping
    assert state.awakened
    assert state.changed


def test_success_finishes(clock):
    state = HandlerState.from_scratch()
    clock.advance(3)
    state = state.with_outcome(success())
    assert state.success and not state.failure and state.finished
    assert state.stopped == T0 + datetime.timedelta(seconds=3)
    assert state.retries == 1
    assert state.message is None
    assert state.runtime == datetime.timedelta(seconds=3)


def test_retry_with_delay_sleeps_until_the_delay_is_over(clock):
    state = HandlerState.from_scratch().with_outcome(retry(10))
    assert state.retries == 1
    assert state.message == 'later'
    assert state.delayed == T0 + datetime.timedelta(seconds=10)
    assert state.sleeping and not state.awakened and not state.finished
    clock.advance(10)
    assert not state.sleeping and state.awakened


def test_permanent_failure_finishes_with_the_message(clock):
    state = HandlerState.from_scratch().with_outcome(failure())
    assert state.failure and not state.success and state.finished
    assert state.message == 'broken'


def test_long_messages_are_cut(clock):
    outcome = HandlerOutcome(final=True, exception=Exception('x' * 5000))
    message = HandlerState.from_scratch().with_outcome(outcome).message
    assert len(message) == states.MAX_MESSAGE_LENGTH
    assert message.endswith('…')


def test_message_of_an_exception_without_text_is_its_type(clock):
    outcome = HandlerOutcome(final=False, delay=1, exception=ValueError())
    assert HandlerState.from_scratch().with_outcome(outcome).message == 'ValueError'


def test_record_round_trip(clock):
    state = HandlerState.from_scratch().with_outcome(retry(5))
    record = state.as_record()
    assert record == {
        'started': '2020-01-01T00:00:00+00:00', 'stopped': None, 'delayed': '2020-01-01T00:00:05+00:00',
        'retries': 1, 'success': None, 'failure': None, 'message': 'later', 'subrefs': None,
    }
    restored = HandlerState.from_record(record)
    assert restored == state
    assert not restored.changed


def test_legacy_naive_times_are_read_as_utc(clock):
    state = HandlerState.from_record({'started': '2020-01-01T00:00:00', 'delayed': '2020-01-01T00:01:00.5'})
    assert state.started == T0
    assert state.delayed == T0 + datetime.timedelta(seconds=60.5)
    assert state.delayed.tzinfo is not None


def test_a_record_without_start_time_starts_now(clock):
    assert HandlerState.from_record({'retries': 2}).started == T0


# State

async def test_from_storage_loads_stored_and_starts_unseen_handlers(clock):
    storage = AnnotationsProgressStorage()
    record = HandlerState.from_scratch().with_outcome(success()).as_record()
    raw = {'metadata': {'annotations': {'kopf.zalando.org/a': json.dumps(record)}}}
    state = await State.from_storage(body=Body(raw), storage=storage, handler_ids=[A, B])
    assert set(state) == {A, B}
    assert state[A].success and not state[A].changed
    assert not state[B].finished and state[B].changed


async def test_store_writes_only_changed_records_then_flushes(clock):
    class Recording(ProgressStorage):
        def __init__(self):
            self.stored, self.flushes = [], 0

        def fetch(self, *, key, body):
            return {'started': '2020-01-01T00:00:00+00:00', 'success': True} if key == 'a' else None

        def store(self, *, key, record, body, patch):
            self.stored.append(key)

        def purge(self, *, key, body, patch):
            pass

        def flush(self):
            self.flushes += 1

    storage = Recording()
    state = await State.from_storage(body=Body({}), storage=storage, handler_ids=[A, B])
    await state.store(body=Body({}), patch=Patch(), storage=storage)
    assert storage.stored == [B]
    assert storage.flushes == 1


async def test_an_unchanged_state_produces_an_empty_patch(clock):
    storage = SmartProgressStorage()
    body = Body({'metadata': {'name': 'n'}})
    state = await State.from_storage(body=body, storage=storage, handler_ids=[A])
    patch = Patch()
    await state.with_outcomes({A: retry(10)}).store(body=body, patch=patch, storage=storage)
    body = applied(body, patch)
    reloaded = await State.from_storage(body=body, storage=storage, handler_ids=[A])
    patch = Patch()
    await reloaded.store(body=body, patch=patch, storage=storage)
    assert patch == {}


async def test_a_multi_cycle_handling_through_a_real_storage(clock):
    """First cycle: a succeeds, b asks for a retry; second: b succeeds; then all is purged."""
    storage = SmartProgressStorage()
    body = Body({'metadata': {'name': 'n'}})

    state = await State.from_storage(body=body, storage=storage, handler_ids=[A, B])
    state = state.with_outcomes({A: success(), B: retry(5)})
    assert not state.done
    assert state.delay == 5
    patch = Patch()
    await state.store(body=body, patch=patch, storage=storage)
    body = applied(body, patch)
    assert {'kopf.zalando.org/a', 'kopf.zalando.org/b'} <= set(body.metadata.annotations)

    clock.advance(5)
    state = await State.from_storage(body=body, storage=storage, handler_ids=[A, B])
    assert state[A].success
    assert state[B].awakened and state[B].retries == 1
    assert state.delay == 0
    state = state.with_outcomes({B: success()})
    assert state.done
    assert state.delay is None
    assert state[B].retries == 2

    patch = Patch()
    await state.store(body=body, patch=patch, storage=storage)
    await state.purge(body=body, patch=patch, storage=storage)
    body = applied(body, patch)
    assert not any(key.startswith('kopf.zalando.org/') for key in body.metadata.annotations)


async def test_purge_covers_extra_handler_ids(clock):
    storage = AnnotationsProgressStorage()
    raw = {'metadata': {'annotations': {'kopf.zalando.org/c': '{"started":"2020-01-01T00:00:00"}'}}}
    patch = Patch()
    await State({A: HandlerState.from_scratch()}).purge(body=Body(raw), patch=patch, storage=storage,
                                                        handler_ids=[C])
    assert patch == {'metadata': {'annotations': {'kopf.zalando.org/c': None}}}


def test_delay_is_the_soonest_among_unfinished(clock):
    state = State({
        A: HandlerState.from_scratch().with_outcome(retry(30)),
        B: HandlerState.from_scratch().with_outcome(retry(10)),
        C: HandlerState.from_scratch().with_outcome(success()),
    })
    assert state.delay == 10
    clock.advance(4)
    assert state.delay == 6
    clock.advance(100)
    assert state.delay == 0


def test_done_only_when_all_finished(clock):
    assert State().done
    assert State.from_scratch().delay is None
    assert not State({A: HandlerState.from_scratch()}).done
    assert State({A: HandlerState.from_scratch().with_outcome(failure())}).done


def test_states_are_immutable_and_outcomes_need_known_handlers(clock):
    state = State({A: HandlerState.from_scratch()})
    newer = state.with_outcomes({A: success()})
    assert not state[A].finished and newer[A].finished
    with pytest.raises(KeyError, match='b'):
        state.with_outcomes({B: success()})
    with pytest.raises(TypeError):
        state[A] = HandlerState.from_scratch()  # type: ignore[index]


def test_with_handlers_adds_only_unknown(clock):
    state = State({A: HandlerState.from_scratch().with_outcome(success())})
    extended = state.with_handlers([A, B])
    assert extended[A].success
    assert not extended[B].finished
    assert set(state) == {A}


def test_subrefs_accumulate_and_persist(clock):
    state = HandlerState.from_scratch()
    state = state.with_outcome(HandlerOutcome(final=False, delay=1, subrefs=frozenset({HandlerId('p/a')})))
    state = state.with_outcome(HandlerOutcome(final=True, subrefs=frozenset({HandlerId('p/b')})))
    assert state.subrefs == {'p/a', 'p/b'}
    assert state.as_record()['subrefs'] == ['p/a', 'p/b']
    assert HandlerState.from_record(state.as_record()).subrefs == {'p/a', 'p/b'}


async def test_purge_follows_subrefs_recursively_through_the_storage(clock):
    storage = AnnotationsProgressStorage()
    parent = HandlerState.from_scratch().with_outcome(HandlerOutcome(final=True, subrefs=frozenset({'p/c'})))
    child = HandlerState.from_scratch().with_outcome(HandlerOutcome(final=True, subrefs=frozenset({'p/c/g'})))
    grandchild = HandlerState.from_scratch().with_outcome(HandlerOutcome(final=True))
    body = Body({'metadata': {'name': 'n'}})
    patch = Patch()
    for key, state in {'p': parent, 'p/c': child, 'p/c/g': grandchild}.items():
        storage.store(key=HandlerId(key), record=state.as_record(), body=body, patch=patch)
    body = applied(body, patch)
    assert len(body.metadata.annotations) == 3

    # Only the parent is known to the state (e.g. the children were not re-registered this time).
    loaded = await State.from_storage(body=body, storage=storage, handler_ids=[HandlerId('p')])
    patch = Patch()
    await loaded.purge(body=body, patch=patch, storage=storage)
    assert applied(body, patch).metadata.annotations == {}


async def test_purge_removes_the_touch_marker(clock):
    storage = AnnotationsProgressStorage()
    raw = {'metadata': {'annotations': {'kopf.zalando.org/touch-dummy': 'x', 'user': 'u'}}}
    patch = Patch()
    await State({A: HandlerState.from_scratch()}).purge(body=Body(raw), patch=patch, storage=storage)
    assert applied(Body(raw), patch).metadata.annotations == {'user': 'u'}
