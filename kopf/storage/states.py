"""
Handler states: the in-memory view of all handlers' progress for one cause.

States are immutable: each handling step produces a new state from outcomes,
and only records that differ from what was loaded are written back, so an
idle cycle costs no API calls.
"""
from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from kopf.storage import calls, records
from kopf.storage.progress import ProgressStorage
from kopf.storage.records import ProgressRecord
from kopf.structs.bodies import Body
from kopf.structs.ids import HandlerId
from kopf.structs.patches import Patch

# Error messages end up in annotations, which are limited per object in total.
MAX_MESSAGE_LENGTH = 1024


def utcnow() -> datetime.datetime:
    """The current time, timezone-aware; the single clock of this module."""
    return datetime.datetime.now(datetime.timezone.utc)


@dataclasses.dataclass(frozen=True)
class HandlerOutcome:
    """
    What one invocation of a handler ended with.

    A final outcome is a success (no exception) or a permanent failure; a
    non-final one asks for a retry after ``delay`` seconds.
    """

    final: bool
    delay: float | None = None
    result: Any = None
    exception: BaseException | None = None
    subrefs: frozenset[HandlerId] = frozenset()


@dataclasses.dataclass(frozen=True)
class HandlerState:
    """One handler's progress within the handling of one cause."""

    started: datetime.datetime
    stopped: datetime.datetime | None = None
    delayed: datetime.datetime | None = None
    retries: int = 0
    success: bool = False
    failure: bool = False
    message: str | None = None
    # Ids of the sub-handlers this handler has run, to purge their records with it.
    subrefs: frozenset[HandlerId] = frozenset()
    # What was loaded from the storage, to write back only real changes.
    origin: ProgressRecord | None = dataclasses.field(default=None, compare=False, repr=False)

    @classmethod
    def from_scratch(cls, *, now: datetime.datetime | None = None) -> HandlerState:
        return cls(started=now or utcnow())

    @classmethod
    def from_record(cls, record: ProgressRecord, *, now: datetime.datetime | None = None) -> HandlerState:
        """Restore a state from a (decoded, validated) record."""
        started = record.get('started')
        stopped = record.get('stopped')
        delayed = record.get('delayed')
        return cls(
            started=records.parse_time(started) if started else (now or utcnow()),
            stopped=records.parse_time(stopped) if stopped else None,
            delayed=records.parse_time(delayed) if delayed else None,
            retries=record.get('retries') or 0,
            success=bool(record.get('success')),
            failure=bool(record.get('failure')),
            message=record.get('message'),
            subrefs=frozenset(HandlerId(ref) for ref in record.get('subrefs') or ()),
            origin=record,
        )

    def as_record(self) -> ProgressRecord:
        return ProgressRecord(
            started=records.format_time(self.started),
            stopped=records.format_time(self.stopped) if self.stopped else None,
            delayed=records.format_time(self.delayed) if self.delayed else None,
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
        return not self.finished and self.delayed is not None and self.delayed > utcnow()

    @property
    def awakened(self) -> bool:
        return not self.finished and not self.sleeping

    @property
    def runtime(self) -> datetime.timedelta:
        """For how long the handler has been handled, across all retries."""
        return (self.stopped or utcnow()) - self.started

    def with_outcome(self, outcome: HandlerOutcome, *, now: datetime.datetime | None = None) -> HandlerState:
        now = now or utcnow()
        message = _message(outcome.exception)
        subrefs = self.subrefs | outcome.subrefs
        if outcome.final:
            return dataclasses.replace(
                self, stopped=now, delayed=None, retries=self.retries + 1,
                success=outcome.exception is None, failure=outcome.exception is not None,
                message=message, subrefs=subrefs)
        delayed = now + datetime.timedelta(seconds=outcome.delay) if outcome.delay else None
        return dataclasses.replace(self, delayed=delayed, retries=self.retries + 1, message=message,
                                   subrefs=subrefs)


def _message(exception: BaseException | None) -> str | None:
    if exception is None:
        return None
    text = str(exception) or type(exception).__name__
    if len(text) > MAX_MESSAGE_LENGTH:
        text = text[:MAX_MESSAGE_LENGTH - 1] + '…'
    return text


class State(Mapping[HandlerId, HandlerState]):
    """The states of all handlers of one cause, by handler id; immutable."""

    def __init__(self, states: Mapping[HandlerId, HandlerState] | None = None) -> None:
        self._states: dict[HandlerId, HandlerState] = dict(states or {})

    @classmethod
    def from_scratch(cls) -> State:
        return cls()

    @classmethod
    async def from_storage(
            cls,
            *,
            body: Body,
            storage: ProgressStorage,
            handler_ids: Iterable[HandlerId],
    ) -> State:
        """Load the stored states of these handlers; unseen ones start fresh now."""
        now = utcnow()
        states: dict[HandlerId, HandlerState] = {}
        for handler_id in handler_ids:
            record = await calls.call(storage.fetch, key=handler_id, body=body)
            if record:
                states[handler_id] = HandlerState.from_record(record, now=now)
            else:
                states[handler_id] = HandlerState.from_scratch(now=now)
        return cls(states)

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
        now = utcnow()
        states = dict(self._states)
        for handler_id in handler_ids:
            if handler_id not in states:
                states[handler_id] = HandlerState.from_scratch(now=now)
        return State(states)

    def with_outcomes(self, outcomes: Mapping[HandlerId, HandlerOutcome]) -> State:
        now = utcnow()
        unknown = set(outcomes) - set(self._states)
        if unknown:
            raise KeyError(f"Outcomes for handlers without a state: {sorted(unknown)!r}")
        states = dict(self._states)
        for handler_id, outcome in outcomes.items():
            states[handler_id] = states[handler_id].with_outcome(outcome, now=now)
        return State(states)

    async def store(self, *, body: Body, patch: Patch, storage: ProgressStorage) -> None:
        """Write the records that changed since loading, then flush the storage."""
        for handler_id, state in self._states.items():
            if state.changed:
                record = state.as_record()
                await calls.call(storage.store, key=handler_id, record=record, body=body, patch=patch)
        await calls.call(storage.flush)

    async def purge(
            self,
            *,
            body: Body,
            patch: Patch,
            storage: ProgressStorage,
            handler_ids: Iterable[HandlerId] = (),
    ) -> None:
        """
        Forget the records of all known (and the extra named) handlers, then flush.

        Sub-handlers' records go too, recursively, also those of sub-handlers
        that are not loaded in this state: their ids are in their parents' records.
        The storage's touch marker is removed as well.
        """
        pending = [*self._states, *handler_ids]
        purged: set[HandlerId] = set()
        while pending:
            handler_id = pending.pop(0)
            if handler_id in purged:
                continue
            purged.add(handler_id)
            state = self._states.get(handler_id)
            if state is None:
                record = await calls.call(storage.fetch, key=handler_id, body=body)
                state = HandlerState.from_record(record) if record else None
            pending.extend(state.subrefs if state is not None else ())
            await calls.call(storage.purge, key=handler_id, body=body, patch=patch)
        # The wake-up marker has done its job once the cause is handled: leave no litter behind.
        await calls.call(storage.touch, body=body, patch=patch, value=None)
        await calls.call(storage.flush)

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
        now = utcnow()
        delays = [
            max(0.0, (state.delayed - now).total_seconds()) if state.delayed else 0.0
            for state in self._states.values() if not state.finished
        ]
        return min(delays) if delays else None
