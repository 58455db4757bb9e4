"""
When a daemon or a timer is due: pure decisions, by the clock.

A daemon or timer starts ``initial_delay`` seconds after its object was
first seen. A timer is then called every ``interval`` seconds after the end
of its previous call (``sharp``: after its start), so that its calls never
overlap; with ``idle``, only once the object has had no event for that many
seconds (every event counts: also our own patches); without an interval,
once per object -- or once per change, with ``idle``. A failed call is
retried after its back-off instead of the interval, and a success starts
the retries anew.

These rules are decided here from the times and the object's generation
alone, so that they can be read and tested as a table; :mod:`.loops` waits
and calls as they say.
"""
from __future__ import annotations

import dataclasses
import enum

from kopf._handlers.execution import HandlerOutcome
from kopf._handlers.registries import TimerHandler


def initial_delay_left(delay: float | None, *, first_seen: float, now: float) -> float:
    """How much of the initial delay (counted from the object's first sight) is left; 0 or less: none."""
    return (delay or 0.0) - (now - first_seen)


@dataclasses.dataclass(frozen=True)
class TimerOptions:
    interval: float | None = None
    idle: float | None = None
    sharp: bool = False

    @classmethod
    def of(cls, handler: TimerHandler) -> TimerOptions:
        return cls(interval=handler.interval, idle=handler.idle, sharp=handler.sharp)


@dataclasses.dataclass(frozen=True)
class Timeline:
    """What a timer's loop remembers of its past calls."""

    due: float | None = None  # not called before this time: the interval or the back-off since the last call
    ticked: int | None = None  # the object's generation when the last successful call began


class Act(enum.Enum):
    """What a timer's loop does next."""

    CALL = 'call'
    SLEEP = 'sleep'  # until ``until``, then decide again
    AWAIT_CHANGE = 'await-change'  # until the object's next event, then decide again
    AWAIT_STOP = 'await-stop'  # nothing more to call for this object: until it is stopped


@dataclasses.dataclass(frozen=True)
class Next:
    act: Act
    until: float | None = None  # for SLEEP (on the monotonic clock)


def next_tick(options: TimerOptions, timeline: Timeline, *, changed_at: float, generation: int, now: float) -> Next:
    """
    What a timer does next, given its past, the object's last event, and now.

    ``changed_at`` is when the object had its latest event, ``generation``
    counts its events.
    """
    if options.idle is not None and now < changed_at + options.idle:
        return Next(Act.SLEEP, until=changed_at + options.idle)
    if timeline.due is not None and now < timeline.due:
        return Next(Act.SLEEP, until=timeline.due)
    if options.interval is None and timeline.ticked is not None:  # once per object, or once per change
        if options.idle is None:
            return Next(Act.AWAIT_STOP)
        if generation == timeline.ticked:
            return Next(Act.AWAIT_CHANGE)
    return Next(Act.CALL)


def after_call(
        options: TimerOptions,
        timeline: Timeline,
        outcome: HandlerOutcome,
        *,
        started: float,
        ended: float,
        generation: int,
) -> Timeline | None:
    """
    The timer's timeline after a call that began at ``started`` (at the object's ``generation``); ``None``: done.

    ``ended`` is when the call's outcome (and its patch) was done with.
    """
    if outcome.final and outcome.exception is not None:
        return None  # failed for good: not called again for this object
    if not outcome.final:
        return dataclasses.replace(timeline, due=ended + (outcome.delay or 0.0))
    if options.interval is None:
        return Timeline(due=None, ticked=generation)
    return Timeline(due=(started if options.sharp else ended) + options.interval, ticked=generation)
