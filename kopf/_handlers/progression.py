"""
Progression: where each handler of a cause stands, and how an outcome moves it on.

A :class:`HandlerState` is one handler's progress within one cause (started,
retried, sleeping until a time, succeeded, failed); a :class:`State` is all of
them by handler id. Both are immutable: each outcome gives a new state, and
the cycle writes back only the records that differ from what it has read, so
an idle cycle writes nothing.

Time is read from an injected :class:`Clock`, never from the system directly,
so that delays, timeouts and ``runtime`` can be checked exactly in tests.
"""
from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Iterator, Mapping

from kopf import errors
from kopf._handlers.execution import HandlerOutcome
from kopf._storage import records
from kopf._storage.records import ProgressRecord
from kopf._structs.clocks import SYSTEM_CLOCK, Clock
from kopf._structs.ids import HandlerId

# Error messages end up in annotations, which are limited per object in total.
MAX_MESSAGE_LENGTH = 1024




@dataclasses.dataclass(frozen=True)
class HandlerState:
    """One handler's progress within the handling of one cause."""

    started: datetime.datetime
    stopped: datetime.datetime | None = None
    delayed: datetime.datetime | None = None
    scheduled: datetime.datetime | None = None  # when ``delayed`` was set
    retries: int = 0
    success: bool = False
    failure: bool = False
    message: str | None = None
    # Ids of the sub-handlers this handler has run, to purge their records with it.
    subrefs: frozenset[HandlerId] = frozenset()
    # What was loaded from the storage, to write back only real changes.
    origin: ProgressRecord | None = dataclasses.field(default=None, compare=False, repr=False)
    clock: Clock = dataclasses.field(default=SYSTEM_CLOCK, compare=False, repr=False)

    @classmethod
    def from_scratch(cls, *, clock: Clock = SYSTEM_CLOCK) -> HandlerState:
        return cls(started=clock.now(), clock=clock)

    @classmethod
    def from_record(cls, record: ProgressRecord, *, clock: Clock = SYSTEM_CLOCK) -> HandlerState:
        """Restore a state from a (decoded, validated) record; a record without a start time starts now."""
        started = record.get('started')
        stopped = record.get('stopped')
        delayed = record.get('delayed')
        scheduled = record.get('scheduled')
        return cls(
            started=records.parse_time(started) if started else clock.now(),
            stopped=records.parse_time(stopped) if stopped else None,
            delayed=records.parse_time(delayed) if delayed else None,
            scheduled=records.parse_time(scheduled) if scheduled and delayed else None,
            retries=record.get('retries') or 0,
            success=bool(record.get('success')),
            failure=bool(record.get('failure')),
            message=record.get('message'),
            subrefs=frozenset(HandlerId(ref) for ref in record.get('subrefs') or ()),
            origin=record,
            clock=clock,
        )

    def as_record(self) -> ProgressRecord:
        return ProgressRecord(
            started=records.format_time(self.started),
            stopped=records.format_time(self.stopped) if self.stopped else None,
            delayed=records.format_time(self.delayed) if self.delayed else None,
            scheduled=records.format_time(self.scheduled) if self.scheduled and self.delayed else None,
            retries=self.retries or None,
            success=self.success or None,
            failure=self.failure or None,
            message=self.message,
            subrefs=sorted(self.subrefs) or None,
        )

    @property
    def changed(self) -> bool:
        """Whether the storage must be updated to reflect this state."""
        if self.origin is None:
            return True
        stored = {k: v for k, v in self.origin.items() if v is not None}
        current = {k: v for k, v in self.as_record().items() if v is not None}
        return stored != current

    @property
    def finished(self) -> bool:
        return self.success or self.failure

    @property
    def sleeping(self) -> bool:
        return not self.finished and self.delayed is not None and self.delayed > self.clock.now()

    @property
    def awakened(self) -> bool:
        return not self.finished and not self.sleeping

    @property
    def runtime(self) -> datetime.timedelta:
        """For how long the handler has been handled, across all retries."""
        return (self.stopped or self.clock.now()) - self.started

    def with_outcome(self, outcome: HandlerOutcome) -> HandlerState:
        """
        The state after one attempt: a final outcome finishes the handler, any other asks for a retry.

        Every attempt counts, successful or not: ``retries`` is the number of
        attempts made so far (handlers receive it as ``retry`` on their next one).
        """
        now = self.clock.now()
        message = _message(outcome.exception)
        subrefs = self.subrefs | outcome.subrefs
        if outcome.final:
            return dataclasses.replace(
                self, stopped=now, delayed=None, scheduled=None, retries=self.retries + 1,
                success=outcome.exception is None, failure=outcome.exception is not None,
                message=message, subrefs=subrefs)
        delayed = now + datetime.timedelta(seconds=outcome.delay) if outcome.delay else None
        return dataclasses.replace(self, delayed=delayed, scheduled=now if delayed else None,
                                   retries=self.retries + 1, message=message, subrefs=subrefs)

    def with_clock_set_back(self) -> HandlerState | None:
        """
        If the wall clock is now before the moment the retry was scheduled, the retry as it was asked, from now.

        A clock set back (by an hour, say) would otherwise keep the retry
        waiting for that hour on top of its delay. ``None`` if the clock has
        not gone back (or the record does not say when it was scheduled).
        """
        if self.finished or self.delayed is None or self.scheduled is None:
            return None
        now = self.clock.now()
        if now >= self.scheduled:
            return None
        return dataclasses.replace(self, delayed=now + (self.delayed - self.scheduled), scheduled=now)


def _message(exception: BaseException | None) -> str | None:
    if exception is None:
        return None
    text = errors.message(exception)
    if len(text) > MAX_MESSAGE_LENGTH:
        text = text[:MAX_MESSAGE_LENGTH - 1] + '…'
    return text


class State(Mapping[HandlerId, HandlerState]):
    """The states of all handlers of one cause, by handler id; immutable."""

    def __init__(
            self,
            states: Mapping[HandlerId, HandlerState] | None = None,
            *,
            clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._states: dict[HandlerId, HandlerState] = dict(states or {})
        self.clock = clock

    @classmethod
    def from_scratch(cls, *, clock: Clock = SYSTEM_CLOCK) -> State:
        return cls(clock=clock)

    @classmethod
    def from_records(
            cls,
            records: Mapping[HandlerId, ProgressRecord | None],
            *,
            clock: Clock = SYSTEM_CLOCK,
    ) -> State:
        """The states of these handlers as stored; those without a record start fresh now."""
        return cls({
            handler_id: (HandlerState.from_record(record, clock=clock) if record else
                         HandlerState.from_scratch(clock=clock))
            for handler_id, record in records.items()
        }, clock=clock)

    def __getitem__(self, key: HandlerId) -> HandlerState:
        return self._states[key]

    def __iter__(self) -> Iterator[HandlerId]:
        return iter(self._states)

    def __len__(self) -> int:
        return len(self._states)

    def __repr__(self) -> str:
        return f"State({self._states!r})"

    def with_handlers(self, handler_ids: Iterable[HandlerId]) -> State:
        """Add fresh states for handlers not yet known (e.g. sub-handlers just registered)."""
        states = dict(self._states)
        for handler_id in handler_ids:
            if handler_id not in states:
                states[handler_id] = HandlerState.from_scratch(clock=self.clock)
        return State(states, clock=self.clock)

    def with_outcomes(self, outcomes: Mapping[HandlerId, HandlerOutcome]) -> State:
        unknown = set(outcomes) - set(self._states)
        if unknown:
            raise KeyError(f"Outcomes for handlers without a state: {sorted(unknown)!r}")
        states = dict(self._states)
        for handler_id, outcome in outcomes.items():
            states[handler_id] = states[handler_id].with_outcome(outcome)
        return State(states, clock=self.clock)

    @property
    def changes(self) -> dict[HandlerId, ProgressRecord]:
        """The records to write back: those that differ from what was loaded."""
        return {handler_id: state.as_record() for handler_id, state in self._states.items() if state.changed}

    @property
    def done(self) -> bool:
        """Whether every handler has finished, successfully or not."""
        return all(state.finished for state in self._states.values())

    @property
    def delay(self) -> float | None:
        """
        Seconds until the soonest unfinished handler wants to run again.

        Zero if any is due now; ``None`` if all handlers are finished.
        """
        now = self.clock.now()
        delays = [
            max(0.0, (state.delayed - now).total_seconds()) if state.delayed else 0.0
            for state in self._states.values() if not state.finished
        ]
        return min(delays) if delays else None


def subrefs(record: ProgressRecord | None) -> frozenset[HandlerId]:
    """The sub-handlers that a stored record says its handler has run."""
    return frozenset(HandlerId(ref) for ref in (record or {}).get('subrefs') or ())
