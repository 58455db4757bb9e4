"""
Scheduling: the due handlers of a cause, run one after another within one cycle's budget.

Each round asks the lifecycle which of the due handlers (not finished, not
sleeping) run now, runs them in that order, and asks again with what is
still due. The cycle's run ends when:

* nothing is due any more (every handler has finished or sleeps until later);
* the lifecycle chooses only handlers that have already run in this cycle:
  their next attempt is a retry and belongs to the next cycle (so
  ``one_by_one`` stops at a failing handler, as it must);
* the budget is spent: once the handlers of this cycle have run for
  ``config.persistence.max_unpersisted_time`` seconds together, no further
  handler starts before the outcomes so far are persisted. What counts is
  the handlers' own time (a plain function's time in its thread, not its
  wait for a free thread of the executor; a sub-handler's time once, not
  again in its parent's). The first handler of a run always starts, so that
  every cycle makes progress;
* the lifecycle fails: it raises, chooses nothing although handlers are
  due, or chooses handlers that are not due. It is reported by name, and
  the handlers wait for :data:`STALL_DELAY` (or for the next event).

Each handler runs at most once per cycle. Sub-handlers are scheduled the same
way inside their parent's run, with the cycle's budget and the parent's (or
``kopf.execute()``'s) lifecycle; their progress is kept with the cycle's
other writes, and purged as soon as their parent has finished.

Every outcome is handed to the cycle's persistence right after its attempt,
and the start of handlers never seen before right before they run: a
storage in the object collects them for the cycle's one patch, a storage
outside of it writes them at once.

**Finished work is persisted before another handler runs long**
(:class:`Durability`): quick handlers share the cycle's one patch, but when a
handler or sub-handler starts after others have finished in this cycle and
runs for longer than the budget, what the finished ones did -- their
progress, results and changes, as they were when it started -- is written
while it runs, so that a crash during the long run does not run them again.
The same holds while a parent runs on after some of its sub-handlers have
finished.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import datetime
from collections.abc import Callable, Coroutine, Iterable, Iterator, Sequence
from typing import Any

from kopf._handlers import execution, invocation, lifecycles, progression
from kopf._handlers.arguments import Arguments
from kopf._handlers.execution import HandlerOutcome
from kopf._handlers.lifecycles import LifeCycleFn
from kopf._handlers.progression import HandlerState, State
from kopf._handlers.registries import DEFAULT_BACKOFF, ChangingHandler
from kopf._storage.persistence import Persistence
from kopf._structs.clocks import Clock
from kopf._structs.ids import HandlerId
from kopf._structs.typedefs import Logger
from kopf.errors import HandlerChildrenRetry, PermanentError

# When the lifecycle fails, the handlers wait this long for it to be fixed (unless an event comes first).
STALL_DELAY = DEFAULT_BACKOFF
# Stored retry times may be this much further ahead than the maximum delay (other replicas' clocks).
IMPLAUSIBLE_SLACK = datetime.timedelta(minutes=5)


@dataclasses.dataclass
class Budget:
    """How long the handlers of one cycle may run, together, before their outcomes must be persisted."""

    limit: float
    spent: float = 0.0

    def charge(self, seconds: float) -> None:
        self.spent += seconds

    @property
    def exhausted(self) -> bool:
        return self.spent >= self.limit


# Sends what was finished when a snapshot was taken; says whether it has landed.
Sender = Callable[[], Coroutine[Any, Any, bool]]
# Takes a snapshot of what the cycle would persist now (cheaply); ``None`` if there is nothing to send.
Checkpoint = Callable[[], Sender | None]


class Durability:
    """
    Finished outcomes are written early when the next handler runs long (see the module's docstring).

    :meth:`arm` is called whenever a handler is about to run with finished
    outcomes not yet written: a snapshot is taken, and if the handler is
    still running ``limit`` seconds later (on the cycle's clock), the
    snapshot is sent. A snapshot supersedes the previous one. Sends run to
    their end even if the handler finishes meanwhile; :meth:`close` waits for
    them, so that the cycle's own patch comes after.
    """

    def __init__(self, *, limit: float, clock: Clock, checkpoint: Checkpoint | None = None) -> None:
        self._limit = limit
        self._clock = clock
        self._checkpoint = checkpoint
        self._pending = False  # finished outcomes that were not written yet
        self._timer: asyncio.Task[None] | None = None
        self._sends: set[asyncio.Task[bool]] = set()

    def recorded(self) -> None:
        """An outcome is kept: it goes with the cycle's patch, or with the next snapshot."""
        self._pending = True

    def arm(self) -> None:
        """A handler runs now: if it runs long, what has finished before it is written."""
        self.disarm()
        if self._checkpoint is None or not self._pending:
            return
        send = self._checkpoint()
        if send is not None:
            self._timer = asyncio.create_task(self._send_later(send), name='kopf: persisting finished handlers')

    def disarm(self) -> None:
        """No handler runs any more (for now): the cycle's own patch is near."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def close(self) -> None:
        """Stop waiting, and let the sends that have begun land first."""
        self.disarm()
        if self._sends:
            await asyncio.gather(*self._sends, return_exceptions=True)

    async def _send_later(self, send: Sender) -> None:
        await self._clock.sleep(self._limit)
        self._pending = False  # unless the send fails, or other outcomes come meanwhile
        task = asyncio.create_task(send(), name='kopf: persisting finished handlers')
        self._sends.add(task)
        task.add_done_callback(self._sent)

    def _sent(self, task: asyncio.Task[bool]) -> None:
        self._sends.discard(task)
        if task.cancelled() or task.exception() is not None or not task.result():
            self._pending = True


@dataclasses.dataclass(frozen=True)
class Batch:
    """What all the handler runs of one cycle share."""

    persistence: Persistence
    arguments: Arguments
    lifecycle: LifeCycleFn
    budget: Budget
    executor: concurrent.futures.Executor | None
    logger: Logger
    clock: Clock
    results: dict[HandlerId, Any] = dataclasses.field(default_factory=dict)  # successful handlers' results
    durability: Durability | None = None  # writes finished outcomes early when the next handler runs long
    nested: bool = False  # the handlers are sub-handlers: their parent runs on after them


@dataclasses.dataclass(frozen=True)
class Round:
    """The handlers' state after this cycle's runs; ``stalled`` if the lifecycle has failed."""

    state: State
    stalled: bool = False


async def run_cause(handlers: Sequence[ChangingHandler], *, batch: Batch) -> Round:
    """Load the handlers' progress and run the due ones; the caller persists the resulting state."""
    state = await _load(handlers, batch=batch)
    return await _run_due(handlers, state=state, lifecycle=batch.lifecycle, batch=batch)


async def _load(handlers: Sequence[ChangingHandler], *, batch: Batch) -> State:
    """The handlers' state as stored; the start of those never seen before is noted before any of them runs."""
    records = await batch.persistence.fetch(handler.id for handler in handlers)
    state = _plausible(State.from_records(records, clock=batch.clock), handlers, batch=batch)
    for handler_id, record in state.changes.items():
        await batch.persistence.keep(handler_id, record)
    await batch.persistence.sync()
    return state


def _plausible(state: State, handlers: Sequence[ChangingHandler], *, batch: Batch) -> State:
    """
    Retry times further ahead than kopf ever schedules are not trusted: the back-off applies instead.

    Retry times scheduled at a moment the clock has not reached yet (it has
    been set back since) are moved to the delay asked for, from now.
    """
    now = batch.clock.now()
    limit = now + datetime.timedelta(seconds=execution.MAX_DELAY) + IMPLAUSIBLE_SLACK
    fixed: dict[HandlerId, HandlerState] = {}
    for handler in handlers:
        rebased = state[handler.id].with_clock_set_back()
        scheduled = state[handler.id].scheduled
        if rebased is not None and rebased.delayed is not None and scheduled is not None:
            behind = (scheduled - now).total_seconds()
            batch.logger.warning("The clock is %.0fs behind the moment %s was scheduled for a retry: it has been set "
                                 "back. Retrying in %gs, as asked then.", behind, handler,
                                 (rebased.delayed - now).total_seconds())
            fixed[handler.id] = rebased
            continue
        delayed = state[handler.id].delayed
        if delayed is not None and delayed > limit and not state[handler.id].finished:
            delay = execution.backoff(handler, default=batch.arguments.operator.config.execution.default_backoff,
                                      logger=batch.logger)
            batch.logger.warning("%s was to be retried at %s, more than a day ahead, which kopf never schedules: "
                                 "its progress record is not plausible. Retrying in %gs (its back-off) instead.",
                                 handler, delayed.isoformat(), delay)
            fixed[handler.id] = dataclasses.replace(state[handler.id], delayed=now + datetime.timedelta(seconds=delay))
    return State({**state, **fixed}, clock=state.clock) if fixed else state


async def forget(persistence: Persistence, ids: Iterable[HandlerId]) -> None:
    """Purge these handlers' records at commit, and their sub-handlers' records, recursively."""
    pending = list(ids)
    seen: set[HandlerId] = set()
    while pending:
        handler_id = pending.pop(0)
        if handler_id in seen:
            continue
        seen.add(handler_id)
        record = (await persistence.fetch([handler_id]))[handler_id]
        pending.extend(sorted(progression.subrefs(record)))
        persistence.forget(handler_id)


async def _run_due(
        handlers: Sequence[ChangingHandler],
        *,
        state: State,
        lifecycle: LifeCycleFn,
        batch: Batch,
) -> Round:
    attempted: set[HandlerId] = set()
    while not (attempted and batch.budget.exhausted):
        due = [handler for handler in handlers if state[handler.id].awakened]
        if not due:
            break
        chosen = _choose(lifecycle, due, state=state, batch=batch)
        if chosen is None:
            return Round(state=state, stalled=True)
        fresh = [handler for handler in chosen if handler.id not in attempted]
        if not fresh:
            break
        for handler in fresh:
            if attempted and batch.budget.exhausted:
                break
            attempted.add(handler.id)
            with _guarded(batch):
                outcome = await _run_one(handler, state[handler.id], batch=batch)
            state = state.with_outcomes({handler.id: outcome})
            await batch.persistence.keep(handler.id, state[handler.id].as_record())
            await batch.persistence.sync()
            if batch.durability is not None:
                batch.durability.recorded()
    if batch.durability is not None and batch.nested:
        batch.durability.arm()  # the parent runs on after its sub-handlers: if long, they are written
    return Round(state=state)


@contextlib.contextmanager
def _guarded(batch: Batch) -> Iterator[None]:
    """While a handler runs, the finished ones are written if it runs long; not once it has returned."""
    if batch.durability is None:
        yield
        return
    batch.durability.arm()
    try:
        yield
    finally:
        batch.durability.disarm()


def _choose(
        lifecycle: LifeCycleFn,
        due: Sequence[ChangingHandler],
        *,
        state: State,
        batch: Batch,
) -> list[ChangingHandler] | None:
    """The lifecycle's choice among the due handlers; ``None`` if it has failed (reported)."""
    name = _name(lifecycle)
    try:
        kwargs = {} if lifecycle in lifecycles.BUILTIN else batch.arguments.render()
        chosen = list(lifecycle(due, state=state, **kwargs))
    except Exception as e:
        batch.logger.exception("The lifecycle %s has failed: %s. No handlers run until it is fixed; "
                               "retrying in %ss.", name, e, STALL_DELAY)
        return None
    offered = {handler.id: handler for handler in due}
    valid = [offered[handler.id] for handler in chosen if getattr(handler, 'id', None) in offered]
    strays = [getattr(handler, 'id', handler) for handler in chosen if getattr(handler, 'id', None) not in offered]
    if strays:
        batch.logger.error("The lifecycle %s has chosen handlers that are not due: %s; they are skipped. "
                           "A lifecycle must choose among the handlers it is given.",
                           name, ', '.join(repr(stray) for stray in strays))
    if not valid:
        batch.logger.error("The lifecycle %s has chosen no handler, but %d are due (%s). No handlers run "
                           "until it chooses some; retrying in %ss.",
                           name, len(due), ', '.join(repr(handler.id) for handler in due), STALL_DELAY)
        return None
    return list({handler.id: handler for handler in valid}.values())


async def _run_one(handler: ChangingHandler, past: HandlerState, *, batch: Batch) -> HandlerOutcome:
    """One attempt of one handler; its sub-handlers run inside it, with the parent's view of the object."""
    stopwatch = invocation.Stopwatch(batch.clock.monotonic)

    async def children(subhandlers: Sequence[ChangingHandler], lifecycle: LifeCycleFn | None) -> None:
        counting = stopwatch.stop()  # the sub-handlers' time is counted by themselves
        children_batch = dataclasses.replace(batch, arguments=batch.arguments.for_handler(handler), nested=True)
        try:
            await _run_children(subhandlers, lifecycle=lifecycle, batch=children_batch)
        finally:
            if counting:
                stopwatch.start()

    outcome = await execution.run_changing(handler, past, arguments=batch.arguments, executor=batch.executor,
                                           logger=batch.logger, children=children, stopwatch=stopwatch)
    batch.budget.charge(stopwatch.elapsed)
    if outcome.final and outcome.exception is None and outcome.result is not None:
        batch.results[handler.id] = outcome.result
    if outcome.final and outcome.subrefs:
        # The parent will not run again: its sub-handlers' progress is of no use any more.
        await forget(batch.persistence, sorted(outcome.subrefs))
    return outcome


async def _run_children(
        children: Sequence[ChangingHandler],
        *,
        lifecycle: LifeCycleFn | None,
        batch: Batch,
) -> None:
    """Run the due sub-handlers once; raise unless all of them have finished successfully."""
    ids = [child.id for child in children]
    state = await _load(children, batch=batch)
    outcome = await _run_due(children, state=state, lifecycle=lifecycle or batch.lifecycle, batch=batch)
    if outcome.stalled:
        raise HandlerChildrenRetry("The sub-handlers' lifecycle has failed.", delay=STALL_DELAY)
    if not outcome.state.done:
        raise HandlerChildrenRetry("Sub-handlers are not finished yet.", delay=outcome.state.delay)
    failed = [child_id for child_id in ids if outcome.state[child_id].failure]
    if failed:
        raise PermanentError(f"Sub-handlers have failed: {', '.join(failed)}.")


def _name(fn: Any) -> str:
    module = getattr(fn, '__module__', None)
    qualname = getattr(fn, '__qualname__', None)
    if qualname is None:
        return repr(fn)
    return f"{module}.{qualname}" if module else str(qualname)
