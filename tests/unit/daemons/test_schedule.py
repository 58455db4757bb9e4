"""When daemons and timers are due, as tables: the options, the timer's past, the object's last event, now -> next."""
import pytest

from kopf._daemons.schedule import Act, Next, Timeline, TimerOptions, after_call, initial_delay_left, next_tick
from kopf._handlers.execution import HandlerOutcome
from kopf._handlers.registries import TimerHandler

CALL, SLEEP, AWAIT_CHANGE, AWAIT_STOP = Act.CALL, Act.SLEEP, Act.AWAIT_CHANGE, Act.AWAIT_STOP


@pytest.mark.parametrize('delay, first_seen, now, left', [
    (None, 0, 5, -5),
    (0, 0, 0, 0),
    (10, 0, 3, 7),
    (10, 0, 10, 0),
    (10, 5, 20, -5),  # counted from the object's first sight, not from the daemon's start
])
def test_the_initial_delay_left(delay, first_seen, now, left):
    assert initial_delay_left(delay, first_seen=first_seen, now=now) == left


@pytest.mark.parametrize('options, timeline, changed_at, generation, now, step', [
    # The first call: at once.
    (TimerOptions(interval=1), Timeline(), 0, 0, 0, Next(CALL)),
    (TimerOptions(), Timeline(), 0, 0, 0, Next(CALL)),
    # The interval (or a back-off) since the last call.
    (TimerOptions(interval=1), Timeline(due=5, ticked=0), 0, 0, 4, Next(SLEEP, until=5)),
    (TimerOptions(interval=1), Timeline(due=5, ticked=0), 0, 0, 5, Next(CALL)),
    (TimerOptions(interval=1), Timeline(due=5, ticked=0), 0, 0, 7, Next(CALL)),
    (TimerOptions(), Timeline(due=0.5), 0, 0, 0.2, Next(SLEEP, until=0.5)),  # a retry of a once-timer
    # Idling: no event for so long; every event counts.
    (TimerOptions(idle=3), Timeline(), 0, 0, 1, Next(SLEEP, until=3)),
    (TimerOptions(idle=3), Timeline(), 0, 0, 3, Next(CALL)),
    (TimerOptions(idle=3), Timeline(), 2, 4, 3, Next(SLEEP, until=5)),
    # Idling and an interval: both must be over; the idling is looked at first.
    (TimerOptions(interval=5, idle=3), Timeline(due=5, ticked=0), 4, 1, 5, Next(SLEEP, until=7)),
    (TimerOptions(interval=5, idle=3), Timeline(due=10, ticked=0), 0, 0, 5, Next(SLEEP, until=10)),
    (TimerOptions(interval=5, idle=3), Timeline(due=10, ticked=0), 0, 0, 10, Next(CALL)),
    # Without an interval: once per object, or once per change with idling.
    (TimerOptions(), Timeline(ticked=1), 0, 1, 10, Next(AWAIT_STOP)),
    (TimerOptions(), Timeline(ticked=1), 0, 2, 10, Next(AWAIT_STOP)),
    (TimerOptions(idle=3), Timeline(ticked=1), 0, 1, 10, Next(AWAIT_CHANGE)),
    (TimerOptions(idle=3), Timeline(ticked=1), 9, 2, 10, Next(SLEEP, until=12)),
    (TimerOptions(idle=3), Timeline(ticked=1), 5, 2, 10, Next(CALL)),
])
def test_what_a_timer_does_next(options, timeline, changed_at, generation, now, step):
    assert next_tick(options, timeline, changed_at=changed_at, generation=generation, now=now) == step


SUCCESS = HandlerOutcome(final=True, result=None)
RETRY = HandlerOutcome(final=False, delay=0.5, exception=ValueError())
RETRY_AT_ONCE = HandlerOutcome(final=False, delay=None)
FAILURE = HandlerOutcome(final=True, exception=ValueError())


@pytest.mark.parametrize('options, timeline, outcome, started, ended, timeline_after', [
    # A success: the interval from the end of the call, or from its start if sharp; the retries start anew.
    (TimerOptions(interval=1), Timeline(), SUCCESS, 0, 0.3, Timeline(due=1.3, ticked=7)),
    (TimerOptions(interval=1, sharp=True), Timeline(), SUCCESS, 0, 0.3, Timeline(due=1.0, ticked=7)),
    (TimerOptions(interval=1, sharp=True), Timeline(), SUCCESS, 0, 1.5, Timeline(due=1.0, ticked=7)),  # overdue
    (TimerOptions(interval=1), Timeline(due=0.5, ticked=3), SUCCESS, 0.5, 0.6, Timeline(due=1.6, ticked=7)),
    (TimerOptions(idle=3), Timeline(due=0.5), SUCCESS, 0.5, 0.6, Timeline(due=None, ticked=7)),
    # A failure to retry: its back-off from the end of the call; what was ticked stays.
    (TimerOptions(interval=1), Timeline(due=1.3, ticked=3), RETRY, 2, 2.1, Timeline(due=2.6, ticked=3)),
    (TimerOptions(interval=1), Timeline(), RETRY_AT_ONCE, 2, 2.1, Timeline(due=2.1)),
    # A failure for good: no more calls for this object.
    (TimerOptions(interval=1), Timeline(), FAILURE, 0, 0.1, None),
])
def test_a_timers_timeline_after_a_call(options, timeline, outcome, started, ended, timeline_after):
    assert after_call(options, timeline, outcome, started=started, ended=ended, generation=7) == timeline_after


def test_the_options_of_a_timer_come_from_its_handler():
    handler = TimerHandler(fn=lambda **_: None, id='t', interval=1, idle=2, sharp=True)
    assert TimerOptions.of(handler) == TimerOptions(interval=1, idle=2, sharp=True)
