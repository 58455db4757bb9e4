"""
Progression: each handler's state within a cause, and how outcomes move it on.

States are immutable and read the time only from the injected clock.
"""
import datetime

import pytest

from kopf._handlers import progression
from kopf._handlers.execution import HandlerOutcome
from kopf._handlers.progression import HandlerState, State
from kopf._structs.ids import HandlerId
from tests.unit.conftest import T0

A, B, C = HandlerId('a'), HandlerId('b'), HandlerId('c')


def success():
    return HandlerOutcome(final=True, result='ok')


def retry(delay):
    return HandlerOutcome(final=False, delay=delay, exception=Exception('later'))


def failure():
    return HandlerOutcome(final=True, exception=Exception('broken'))


# HandlerState

def test_fresh_state_is_started_and_awakened(clock):
    state = HandlerState.from_scratch(clock=clock)
    assert state.started == T0
    assert state.retries == 0
    assert not state.finished
    assert not state.sleeping
    assert state.awakened
    assert state.changed


def test_success_finishes(clock):
    state = HandlerState.from_scratch(clock=clock)
    clock.advance(3)
    state = state.with_outcome(success())
    assert state.success and not state.failure and state.finished
    assert state.stopped == T0 + datetime.timedelta(seconds=3)
    assert state.retries == 1
    assert state.message is None
    assert state.runtime == datetime.timedelta(seconds=3)


def test_runtime_grows_with_the_clock_until_stopped(clock):
    state = HandlerState.from_scratch(clock=clock)
    clock.advance(7)
    assert state.runtime == datetime.timedelta(seconds=7)
    stopped = state.with_outcome(success())
    clock.advance(100)
    assert stopped.runtime == datetime.timedelta(seconds=7)


def test_retry_with_delay_sleeps_until_the_delay_is_over(clock):
    state = HandlerState.from_scratch(clock=clock).with_outcome(retry(10))
    assert state.retries == 1
    assert state.message == 'later'
    assert state.delayed == T0 + datetime.timedelta(seconds=10)
    assert state.sleeping and not state.awakened and not state.finished
    clock.advance(10)
    assert not state.sleeping and state.awakened


def test_retry_without_delay_is_due_right_away(clock):
    state = HandlerState.from_scratch(clock=clock).with_outcome(retry(0))
    assert state.delayed is None
    assert state.awakened and state.retries == 1


def test_permanent_failure_finishes_with_the_message(clock):
    state = HandlerState.from_scratch(clock=clock).with_outcome(failure())
    assert state.failure and not state.success and state.finished
    assert state.message == 'broken'


def test_long_messages_are_cut(clock):
    outcome = HandlerOutcome(final=True, exception=Exception('x' * 5000))
    message = HandlerState.from_scratch(clock=clock).with_outcome(outcome).message
    assert len(message) == progression.MAX_MESSAGE_LENGTH
    assert message.endswith('…')


def test_message_of_an_exception_without_text_is_its_type(clock):
    outcome = HandlerOutcome(final=False, delay=1, exception=ValueError())
    assert HandlerState.from_scratch(clock=clock).with_outcome(outcome).message == 'ValueError'


def test_record_round_trip(clock):
    state = HandlerState.from_scratch(clock=clock).with_outcome(retry(5))
    record = state.as_record()
    assert record == {
        'started': '2020-01-01T00:00:00+00:00', 'stopped': None, 'delayed': '2020-01-01T00:00:05+00:00',
        'scheduled': '2020-01-01T00:00:00+00:00',
        'retries': 1, 'success': None, 'failure': None, 'message': 'later', 'subrefs': None,
    }
    restored = HandlerState.from_record(record, clock=clock)
    assert restored == state
    assert not restored.changed


def test_legacy_naive_times_are_read_as_utc(clock):
    state = HandlerState.from_record({'started': '2020-01-01T00:00:00', 'delayed': '2020-01-01T00:01:00.5'},
                                     clock=clock)
    assert state.started == T0
    assert state.delayed == T0 + datetime.timedelta(seconds=60.5)
    assert state.delayed.tzinfo is not None


def test_a_record_without_start_time_starts_now(clock):
    clock.advance(5)
    assert HandlerState.from_record({'retries': 2}, clock=clock).started == T0 + datetime.timedelta(seconds=5)


def test_the_system_clock_is_the_default():
    before = datetime.datetime.now(datetime.timezone.utc)
    state = HandlerState.from_scratch()
    assert before <= state.started <= datetime.datetime.now(datetime.timezone.utc)
    assert state.started.tzinfo is not None


def test_subrefs_accumulate_and_persist(clock):
    state = HandlerState.from_scratch(clock=clock)
    state = state.with_outcome(HandlerOutcome(final=False, delay=1, subrefs=frozenset({HandlerId('p/a')})))
    state = state.with_outcome(HandlerOutcome(final=True, subrefs=frozenset({HandlerId('p/b')})))
    assert state.subrefs == {'p/a', 'p/b'}
    assert state.as_record()['subrefs'] == ['p/a', 'p/b']
    assert HandlerState.from_record(state.as_record(), clock=clock).subrefs == {'p/a', 'p/b'}
    assert progression.subrefs(state.as_record()) == {'p/a', 'p/b'}
    assert progression.subrefs(None) == frozenset()


# State

def test_from_records_restores_stored_and_starts_the_others(clock):
    stored = HandlerState.from_scratch(clock=clock).with_outcome(success()).as_record()
    clock.advance(60)
    state = State.from_records({A: stored, B: None}, clock=clock)
    assert set(state) == {A, B}
    assert state[A].success and not state[A].changed
    assert state[A].started == T0
    assert not state[B].finished and state[B].changed
    assert state[B].started == T0 + datetime.timedelta(seconds=60)


def test_changes_are_only_the_records_that_differ_from_the_loaded_ones(clock):
    stored = HandlerState.from_scratch(clock=clock).with_outcome(retry(10)).as_record()
    state = State.from_records({A: stored, B: stored, C: None}, clock=clock)
    assert set(state.changes) == {C}
    state = state.with_outcomes({A: success()})
    assert set(state.changes) == {A, C}
    assert state.changes[A]['success'] is True
    assert state.changes[A]['retries'] == 2


def test_delay_is_the_soonest_among_unfinished(clock):
    state = State({
        A: HandlerState.from_scratch(clock=clock).with_outcome(retry(30)),
        B: HandlerState.from_scratch(clock=clock).with_outcome(retry(10)),
        C: HandlerState.from_scratch(clock=clock).with_outcome(success()),
    }, clock=clock)
    assert state.delay == 10
    clock.advance(4)
    assert state.delay == 6
    clock.advance(100)
    assert state.delay == 0


def test_done_only_when_all_finished(clock):
    assert State().done
    assert State.from_scratch().delay is None
    assert not State({A: HandlerState.from_scratch(clock=clock)}).done
    assert State({A: HandlerState.from_scratch(clock=clock).with_outcome(failure())}).done


def test_states_are_immutable_and_outcomes_need_known_handlers(clock):
    state = State({A: HandlerState.from_scratch(clock=clock)}, clock=clock)
    newer = state.with_outcomes({A: success()})
    assert not state[A].finished and newer[A].finished
    with pytest.raises(KeyError, match='b'):
        state.with_outcomes({B: success()})
    with pytest.raises(TypeError):
        state[A] = HandlerState.from_scratch()  # type: ignore[index]


def test_with_handlers_adds_only_unknown(clock):
    state = State({A: HandlerState.from_scratch(clock=clock).with_outcome(success())}, clock=clock)
    clock.advance(1)
    extended = state.with_handlers([A, B])
    assert extended[A].success
    assert not extended[B].finished
    assert extended[B].started == T0 + datetime.timedelta(seconds=1)
    assert set(state) == {A}
