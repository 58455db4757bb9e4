"""
The reconciliation queue of one object as pure decisions: coalescing, never concurrent, back-off, requeue, resync.

Times are plain numbers of a monotonic clock: every decision is a function
of the slot and the time, so the tests walk the time as they like.
"""
import itertools

import pytest

from kopf._reconciliation import planning
from kopf._reconciliation.planning import Outcome, Policy, Requeue, Slot, Trigger, Verdict
from kopf.errors import ErrorsMode, PermanentError, TemporaryError

POLICY = Policy(coalesce=0.25, backoff=1.0, max_backoff=8.0)
SUCCESS = Outcome(Verdict.SUCCESS)
RETRY = Outcome(Verdict.RETRY)


def run(slot: Slot, *, at: float, outcome: Outcome = SUCCESS, ends: float | None = None,
        policy: Policy = POLICY) -> tuple[Slot, frozenset[Trigger]]:
    """A whole call: started at ``at``, ended at ``ends`` (at once by default)."""
    started, triggers = planning.start(slot, now=at)
    return planning.finish(started, outcome, now=ends if ends is not None else at, policy=policy), triggers


def calls(events: list[float], *, policy: Policy = POLICY, duration: float = 0.0) -> list[float]:
    """When the calls begin for triggers at these times, each call taking ``duration``."""
    slot, began, pending = Slot(), [], sorted(events)
    now = 0.0
    while pending or planning.due(slot, policy) is not None:
        due = planning.due(slot, policy)
        if pending and (due is None or pending[0] < due):
            now = pending.pop(0)
            slot = planning.trigger(slot, Trigger.CHILDREN, now=now)
            continue
        assert due is not None
        now = max(now, due)
        began.append(now)
        slot, _ = planning.start(slot, now=now)
        while pending and pending[0] < now + duration:  # they come while the call runs
            slot = planning.trigger(slot, Trigger.CHILDREN, now=pending.pop(0))
        now += duration
        slot = planning.finish(slot, SUCCESS, now=now, policy=policy)
    return began


# Coalescing.

def test_a_first_trigger_calls_at_once():
    slot = planning.trigger(Slot(), Trigger.OBJECT, now=10.0)
    assert planning.due(slot, POLICY) == 10.0


def test_a_trigger_after_a_quiet_time_calls_at_once():
    slot, _ = run(Slot(), at=10.0)
    slot = planning.trigger(slot, Trigger.CHILDREN, now=10.3)
    assert planning.due(slot, POLICY) == 10.3


def test_a_trigger_soon_after_a_call_waits_for_a_quiet_window():
    slot, _ = run(Slot(), at=10.0)
    slot = planning.trigger(slot, Trigger.CHILDREN, now=10.1)
    assert planning.due(slot, POLICY) == pytest.approx(10.35)
    slot = planning.trigger(slot, Trigger.CHILDREN, now=10.3)
    assert planning.due(slot, POLICY) == pytest.approx(10.55)


def test_a_burst_of_a_hundred_triggers_in_a_second_is_a_call_at_its_start_and_one_after_it():
    burst = [i * 0.01 for i in range(100)]  # 0.00 ... 0.99
    assert calls(burst) == [0.0, pytest.approx(0.99 + 0.25)]


def test_a_steady_stream_of_triggers_is_called_at_least_every_max_coalesce():
    steady = [i * 0.1 for i in range(50)]  # every 0.1s for 5s: never quiet for 0.25s
    began = calls(steady)
    assert all(later - earlier <= POLICY.max_coalesce + 0.1 + 1e-9 for earlier, later in itertools.pairwise(began))
    assert began == [0.0, pytest.approx(2.1), pytest.approx(4.1), pytest.approx(4.9 + 0.25)]


def test_separate_triggers_are_separate_calls():
    assert calls([0.0, 1.0, 2.0]) == [0.0, 1.0, 2.0]


def test_the_longest_hold_grows_with_the_window():
    assert Policy(coalesce=0.1).max_coalesce == planning.MIN_MAX_COALESCE
    assert Policy(coalesce=1.0).max_coalesce == 8.0


def test_zero_coalescing_calls_at_once():
    slot, _ = run(Slot(), at=3.0)
    slot = planning.trigger(slot, Trigger.OBJECT, now=3.0)
    assert planning.due(slot, Policy(coalesce=0)) == 3.0


# Never concurrent.

def test_nothing_is_due_while_a_call_runs_and_what_came_meanwhile_is_called_once_after_it():
    slot, _ = planning.start(planning.trigger(Slot(), Trigger.OBJECT, now=0.0), now=0.25)
    for i in range(10):
        slot = planning.trigger(slot, Trigger.CHILDREN, now=0.3 + i * 0.01)
        assert planning.due(slot, POLICY) is None
    slot = planning.finish(slot, SUCCESS, now=5.0, policy=POLICY)
    assert planning.due(slot, POLICY) == pytest.approx(0.39 + 0.25)  # overdue: at once
    slot, triggers = planning.start(slot, now=5.0)
    assert triggers == {Trigger.CHILDREN}


def test_long_calls_with_triggers_meanwhile_never_overlap():
    began = calls([i * 0.05 for i in range(60)], duration=1.0)
    assert all(later - earlier >= 1.0 for earlier, later in itertools.pairwise(began))


def test_a_call_answers_every_trigger_that_waited():
    slot = planning.trigger(planning.trigger(Slot(), Trigger.OBJECT, now=0), Trigger.CHILDREN, now=0.1)
    slot, triggers = planning.start(slot, now=1.0)
    assert triggers == {Trigger.OBJECT, Trigger.CHILDREN}
    assert not slot.triggers and slot.running


# Back-off.

def test_failures_back_off_exponentially_up_to_the_cap():
    slot = Slot()
    delays = []
    now = 0.0
    for _ in range(7):
        slot, _ = run(slot, at=now, outcome=RETRY)
        due = planning.due(slot, POLICY)
        assert due is not None
        delays.append(due - now)
        now = due
    assert delays == [1, 2, 4, 8, 8, 8, 8]
    assert slot.failures == 7


def test_a_success_forgets_the_failures():
    slot, _ = run(Slot(), at=0, outcome=RETRY)
    slot, _ = run(slot, at=1, outcome=RETRY)
    slot, triggers = run(slot, at=3)
    assert triggers == {Trigger.RETRY}
    assert slot.failures == 0 and slot.retry_at is None and planning.due(slot, POLICY) is None


def test_a_temporary_errors_own_delay_wins_over_the_back_off():
    slot, _ = run(Slot(), at=0, outcome=Outcome(Verdict.RETRY, delay=30))
    assert planning.due(slot, POLICY) == 30


def test_childrens_triggers_wait_for_the_back_off():
    slot, _ = run(Slot(), at=0, outcome=RETRY)
    slot, _ = run(slot, at=1, outcome=RETRY)  # the next retry at 3
    slot = planning.trigger(slot, Trigger.CHILDREN, now=1.1)
    assert planning.due(slot, POLICY) == 3.0


def test_a_change_of_the_object_does_not_wait_for_the_back_off():
    slot, _ = run(Slot(), at=0, outcome=RETRY)
    slot, _ = run(slot, at=1, outcome=RETRY)  # the next retry at 3
    slot = planning.trigger(slot, Trigger.OBJECT, now=1.5, urgent=True)
    assert planning.due(slot, POLICY) == pytest.approx(1.5)
    slot, triggers = planning.start(slot, now=1.5)
    assert triggers == {Trigger.OBJECT}
    slot = planning.finish(slot, RETRY, now=1.5, policy=POLICY)
    assert slot.failures == 3 and planning.due(slot, POLICY) == pytest.approx(1.5 + 4)  # and counts on


def test_a_permanent_failure_is_not_retried_but_the_next_trigger_calls():
    slot, _ = run(Slot(), at=0, outcome=Outcome(Verdict.FAILED))
    assert planning.due(slot, POLICY) is None
    slot = planning.trigger(slot, Trigger.CHILDREN, now=5)
    assert planning.due(slot, POLICY) == 5


def test_a_restored_back_off_holds_the_first_call():
    slot = planning.restore(failures=3, retry_in=4.0, now=100.0)
    slot = planning.trigger(slot, Trigger.OBJECT, now=100.0)
    assert planning.due(slot, POLICY) == 104.0
    slot, triggers = planning.start(slot, now=104.0)
    assert triggers == {Trigger.OBJECT, Trigger.RETRY}
    assert planning.finish(slot, RETRY, now=104.0, policy=POLICY).failures == 4


def test_a_back_off_that_expired_meanwhile_is_due_at_once():
    slot = planning.restore(failures=2, retry_in=-50.0, now=100.0)
    assert planning.due(slot, POLICY) == 100.0


# Requeue and resync.

def test_a_requeue_calls_again_after_its_delay():
    slot, _ = run(Slot(), at=10, outcome=Outcome(Verdict.REQUEUE, delay=5))
    assert planning.due(slot, POLICY) == 15
    slot, triggers = planning.start(slot, now=15)
    assert triggers == {Trigger.REQUEUE}


def test_a_trigger_before_the_requeue_answers_it():
    slot, _ = run(Slot(), at=10, outcome=Outcome(Verdict.REQUEUE, delay=5))
    slot = planning.trigger(slot, Trigger.CHILDREN, now=11)
    slot, _ = run(slot, at=11)
    assert planning.due(slot, POLICY) is None


def test_resync_is_due_a_period_after_the_end_of_every_call():
    policy = Policy(resync=60)
    slot, _ = run(planning.trigger(Slot(), Trigger.OBJECT, now=0), at=0.25, ends=1.0, policy=policy)
    assert planning.due(slot, policy) == 61.0
    slot, triggers = run(slot, at=61.0, ends=61.5, policy=policy)
    assert triggers == {Trigger.RESYNC}
    assert planning.due(slot, policy) == 121.5


def test_an_idle_slot_holds_nothing():
    assert Slot().idle
    assert not planning.trigger(Slot(), Trigger.OBJECT, now=0).idle
    assert run(Slot(), at=0)[0].idle
    assert not run(Slot(), at=0, policy=Policy(resync=1))[0].idle


# What a call's end means.

@pytest.mark.parametrize('result, error, mode, verdict, delay', [
    (None, None, None, Verdict.SUCCESS, None),
    ({'x': 1}, None, None, Verdict.SUCCESS, None),
    (Requeue(after=7), None, None, Verdict.REQUEUE, 7.0),
    (None, TemporaryError('x', delay=3), None, Verdict.RETRY, 3),
    (None, TemporaryError('x', delay=None), None, Verdict.RETRY, None),
    (None, PermanentError('x'), None, Verdict.FAILED, None),
    (None, ValueError('x'), None, Verdict.RETRY, None),
    (None, ValueError('x'), ErrorsMode.TEMPORARY, Verdict.RETRY, None),
    (None, ValueError('x'), ErrorsMode.PERMANENT, Verdict.FAILED, None),
    (None, ValueError('x'), ErrorsMode.IGNORED, Verdict.SUCCESS, None),
])
def test_judging_a_call(result, error, mode, verdict, delay):
    outcome = planning.judge(result, error, mode=mode)
    assert outcome.verdict == verdict
    assert outcome.delay == delay


@pytest.mark.parametrize('after', [-1, 'soon', None, float('nan'), True])
def test_a_requeue_needs_a_number_of_seconds(after):
    with pytest.raises(ValueError, match=r"kopf.Requeue\(after=...\) is a number of seconds"):
        Requeue(after=after)
