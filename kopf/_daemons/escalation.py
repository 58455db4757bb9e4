"""
How the stop of a daemon is escalated: a pure decision, by the clock.

A daemon asked to stop gets ``cancellation_backoff`` seconds to exit on its
own; with a ``cancellation_timeout``, an ``async`` daemon is then cancelled,
and one still running that many seconds later is abandoned; without one, it
is waited for as long as it takes and reported every ``polling`` seconds.
The steps are decided here from the times alone (when the stop was asked,
when it was cancelled or last reported, and now), so that the rules can be
read and tested as a table; :mod:`.stopping` carries them out.
"""
from __future__ import annotations

import dataclasses
import enum

from kopf._handlers.registries import DaemonHandler, SpawningHandler

# While daemons of an object being deleted are stopping, the cycle checks again this soon at first,
# then less and less often (as long as they have been stopping), at most every cancellation_polling.
MIN_RECHECK = 1.0

# The cycle comes back this long after a daemon is due to be abandoned, so that it has been by then.
ABANDON_MARGIN = 0.1


@dataclasses.dataclass(frozen=True)
class StopOptions:
    """What decides how a stop is escalated: the handler's options, and whether it can be cancelled."""

    backoff: float | None = None  # cancellation_backoff: seconds to exit on its own before anything else
    timeout: float | None = None  # cancellation_timeout: seconds after the cancellation until it is abandoned
    polling: float = 60.0  # how often one waited for without a timeout is reported
    cancellable: bool = True  # an async task can be cancelled; a thread cannot

    @classmethod
    def of(cls, handler: SpawningHandler, *, polling: float, threaded: bool) -> StopOptions:
        """The options of a daemon or timer (timers have no cancellation options of their own)."""
        if not isinstance(handler, DaemonHandler):
            return cls(polling=polling, cancellable=not threaded)
        return cls(backoff=handler.cancellation_backoff, timeout=handler.cancellation_timeout,
                   polling=handler.cancellation_polling or polling, cancellable=not threaded)


class Act(enum.Enum):
    """The next step of a stop."""

    WAIT = 'wait'  # let it exit on its own until ``until``, then decide again
    CANCEL = 'cancel'  # cancel its task (once), then decide again
    ABANDON = 'abandon'  # give up on it: it no longer holds the object
    REPORT = 'report'  # warn that it still runs, then decide again


@dataclasses.dataclass(frozen=True)
class StopStep:
    act: Act
    until: float | None = None  # for WAIT: when to decide again (on the monotonic clock)


def next_step(
        options: StopOptions,
        *,
        asked_at: float,
        now: float,
        cancelled_at: float | None = None,
        reported_at: float | None = None,
) -> StopStep:
    """
    The next step of a daemon's stop that has not exited yet.

    ``asked_at`` is when its ``stopped`` flag was set; ``cancelled_at``,
    when its task was cancelled (if it was); ``reported_at``, when it was
    last reported as still running (if it was).
    """
    exit_by = asked_at + (options.backoff or 0.0)
    if now < exit_by:
        return StopStep(Act.WAIT, until=exit_by)
    if options.timeout is None:
        report_at = (reported_at if reported_at is not None else exit_by) + options.polling
        return StopStep(Act.REPORT) if now >= report_at else StopStep(Act.WAIT, until=report_at)
    if options.cancellable and cancelled_at is None:
        return StopStep(Act.CANCEL)
    abandon_at = (cancelled_at if cancelled_at is not None else exit_by) + options.timeout
    return StopStep(Act.ABANDON) if now >= abandon_at else StopStep(Act.WAIT, until=abandon_at)


def recheck_delay(options: StopOptions, *, asked_at: float | None, now: float) -> float:
    """
    When the cycle should look again whether a stopping daemon holding a deletion has exited.

    Soon at first, then as long as it has been stopping already, at most every
    ``polling`` seconds; and just after it is due to be abandoned, if it ever is.
    """
    elapsed = now - asked_at if asked_at is not None else 0.0
    delay = max(MIN_RECHECK, elapsed)
    if options.timeout is not None:  # it is abandoned then, and the deletion may proceed
        delay = min(delay, max(0.0, (options.backoff or 0.0) + options.timeout - elapsed) + ABANDON_MARGIN)
    return min(delay, options.polling)
