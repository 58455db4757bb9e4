"""The escalation of a stop, as tables: the options, when it was asked (at 0), what happened since, now -> the step."""
import pytest

from kopf._daemons.escalation import ABANDON_MARGIN, MIN_RECHECK, Act, StopOptions, StopStep, next_step, recheck_delay
from kopf._handlers.registries import DaemonHandler, TimerHandler

WAIT, CANCEL, ABANDON, REPORT = Act.WAIT, Act.CANCEL, Act.ABANDON, Act.REPORT


def fn(**_):
    pass


@pytest.mark.parametrize('options, now, cancelled_at, reported_at, step', [
    # Without a timeout: waited for as long as it takes, reported every polling period.
    (StopOptions(polling=60), 0, None, None, StopStep(WAIT, until=60)),
    (StopOptions(polling=60), 59.9, None, None, StopStep(WAIT, until=60)),
    (StopOptions(polling=60), 60, None, None, StopStep(REPORT)),
    (StopOptions(polling=60), 60, None, 60, StopStep(WAIT, until=120)),
    (StopOptions(polling=60), 130, None, 60, StopStep(REPORT)),
    (StopOptions(polling=60, cancellable=False), 60, None, None, StopStep(REPORT)),
    # A back-off first, then the polling counts from its end; a zero back-off is none.
    (StopOptions(backoff=5, polling=60), 0, None, None, StopStep(WAIT, until=5)),
    (StopOptions(backoff=5, polling=60), 5, None, None, StopStep(WAIT, until=65)),
    (StopOptions(backoff=5, polling=60), 65, None, None, StopStep(REPORT)),
    (StopOptions(backoff=0, polling=60), 0, None, None, StopStep(WAIT, until=60)),
    # A timeout: cancelled at once (no back-off), abandoned that long after the cancellation.
    (StopOptions(timeout=3), 0, None, None, StopStep(CANCEL)),
    (StopOptions(timeout=3), 0, 0, None, StopStep(WAIT, until=3)),
    (StopOptions(timeout=3), 0.5, 0.5, None, StopStep(WAIT, until=3.5)),
    (StopOptions(timeout=3), 3.5, 0.5, None, StopStep(ABANDON)),
    (StopOptions(timeout=0), 0, None, None, StopStep(CANCEL)),
    (StopOptions(timeout=0), 0, 0, None, StopStep(ABANDON)),
    # A back-off and a timeout: the cancellation after the back-off.
    (StopOptions(backoff=2, timeout=3), 1, None, None, StopStep(WAIT, until=2)),
    (StopOptions(backoff=2, timeout=3), 2, None, None, StopStep(CANCEL)),
    (StopOptions(backoff=2, timeout=3), 2, 2, None, StopStep(WAIT, until=5)),
    (StopOptions(backoff=2, timeout=3), 5, 2, None, StopStep(ABANDON)),
    # A thread cannot be cancelled: abandoned after the back-off and the timeout.
    (StopOptions(backoff=2, timeout=3, cancellable=False), 2, None, None, StopStep(WAIT, until=5)),
    (StopOptions(backoff=2, timeout=3, cancellable=False), 5, None, None, StopStep(ABANDON)),
    (StopOptions(timeout=0.2, cancellable=False), 0, None, None, StopStep(WAIT, until=0.2)),
])
def test_the_next_step_of_a_stop(options, now, cancelled_at, reported_at, step):
    assert next_step(options, asked_at=0, now=now, cancelled_at=cancelled_at, reported_at=reported_at) == step


@pytest.mark.parametrize('options, asked_at, now, delay', [
    # Soon at first, then as long as it has been stopping, at most every polling period.
    (StopOptions(polling=60), 0, 0, MIN_RECHECK),
    (StopOptions(polling=60), 0, 10, 10),
    (StopOptions(polling=60), 0, 100, 60),
    (StopOptions(polling=0.2), 0, 0, 0.2),
    (StopOptions(polling=60), None, 5, MIN_RECHECK),  # not asked yet: as if just now
    # Just after it is due to be abandoned, if it ever is.
    (StopOptions(timeout=0.3), 0, 0, 0.3 + ABANDON_MARGIN),
    (StopOptions(timeout=0.3), 0, 0.2, pytest.approx(0.1 + ABANDON_MARGIN)),
    (StopOptions(timeout=0.3), 0, 1, ABANDON_MARGIN),
    (StopOptions(backoff=0.3, timeout=2), 0, 0, MIN_RECHECK),
    (StopOptions(backoff=0.3, timeout=0.5), 0, 0, 0.8 + ABANDON_MARGIN),
])
def test_when_the_cycle_looks_again_at_a_deletion_held_by_a_stopping_daemon(options, asked_at, now, delay):
    assert recheck_delay(options, asked_at=asked_at, now=now) == delay


@pytest.mark.parametrize('handler, threaded, options', [
    (DaemonHandler(fn=fn, id='d'), False, StopOptions(polling=60)),
    (DaemonHandler(fn=fn, id='d', cancellation_backoff=1, cancellation_timeout=2, cancellation_polling=3), False,
     StopOptions(backoff=1, timeout=2, polling=3)),
    (DaemonHandler(fn=fn, id='d', cancellation_timeout=2), True, StopOptions(timeout=2, polling=60, cancellable=False)),
    (TimerHandler(fn=fn, id='t', interval=1), False, StopOptions(polling=60)),  # timers have no options of their own
])
def test_the_options_of_a_stop_come_from_the_handler_and_the_settings(handler, threaded, options):
    assert StopOptions.of(handler, polling=60, threaded=threaded) == options
