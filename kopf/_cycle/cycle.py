"""
The handling cycle: one object, one watch event, one patch.

:func:`handle_object` is a small state machine. It detects the cause
(:mod:`~kopf._cycle.causation`), lets the stages that see every event do
their part (:data:`STAGES`), runs the action of the cause (:data:`ACTIONS`),
and returns one patch, with when to come back. It talks to nothing but the
handlers and the storages (through one
:class:`~kopf._storage.persistence.Persistence` per cycle); sending the patch
and sleeping until the next cycle are the caller's job
(:mod:`~kopf._cycle.processing`).

==========================  ===================================================
Cause                       Action
==========================  ===================================================
``GONE``                    Forget: storages that keep data outside of the
                            object are told (``erase``); nothing is patched.
``NOOP``                    Tidy up: progress left over by a cause that is no
                            longer there (e.g. an update reverted before its
                            handlers finished) is purged.
``FINALIZER``               Block the deletion: our finalizer is added alone,
                            so that it is on the server before any handler
                            acts; the patch's own event starts the handling.
``CREATE`` ``UPDATE``       Handle the changes: the due handlers run one after
``RESUME`` ``DELETE``       another (:mod:`~kopf._cycle.scheduling`) within the
                            cycle's budget. Once all have finished, their
                            progress is purged and the diff-base stored (or,
                            for ``DELETE``, our finalizer removed); until then,
                            their progress is stored and the cycle says when
                            the soonest one is due.
==========================  ===================================================

Guarantees
==========

* **Everything is persisted at the end of the cycle, in one patch**: the
  progress of every handler that ran, their results (``status.<id>``), the
  handlers' own changes, the finalizer and the diff-base. Nothing is written
  to the object in the middle of a cycle. (A progress storage outside of the
  object is written earlier: see below. The handlers' transformation
  functions, ``patch.fns``, are applied after that patch, to the object as
  it has left it: they need the freshest body.)
* **Unpersisted work is bounded**: handlers run one after another only while
  the handlers of this cycle have run for less than
  ``config.persistence.max_unpersisted_time`` (1 s by default); then the
  cycle ends, its patch is sent, and the patch's own watch event starts the
  next cycle. A slow handler's outcome is therefore persisted before any
  other handler starts. And when a handler (or a sub-handler) that starts
  after others have finished runs longer than that, what the finished ones
  did is written while it runs (``send_early``, see
  :class:`~kopf._cycle.scheduling.Durability`): the only exception to "one
  patch per cycle", for cycles that take long anyway.
* **A cause is concluded atomically**: the purge of its progress and the new
  diff-base (or the removal of the finalizer) travel in the same patch, so
  there is no moment when the progress is gone but the cause is not marked
  as handled.
* **Progress is never traded for results**: if the server refuses the patch
  for what it holds (422, another 4xx, too large), the essential part
  (:attr:`HandlingResult.essential`: progress, finalizer, diff-base) is
  re-sent alone, and the rejected results and changes are reported once,
  with the server's message.
* **Nothing outlives the cycle**: the body, the patch, the handlers' keyword
  arguments and the logger are referenced only by the cycle's own frames.

What a crash costs
==================

* **Before the patch lands**: the handlers that ran in the cycle run again
  after the restart, with the same ``retry`` -- at most one cycle's budget of
  work (plus the last handler's own duration). Everything else is as the
  previous cycle left it.
* **After the patch lands**: nothing; the next process continues from the
  object.
* **Between the two requests of a patch** (resources with the ``status``
  subresource get ``/status`` first, then the main part): the results in
  ``status`` have landed, the progress in annotations and the diff-base have
  not; the handlers run again after the restart, as before the patch, and
  nothing they returned is lost. (With the progress in the status, it has
  landed with the results: the handlers are not run again, and the cause is
  concluded by the next cycle.)
* **Progress storages outside of the object** get each handler's start
  before it runs and each outcome right after its attempt (they cost no API
  request): a crash costs at most the handler that was running. Their purges
  at the end of a cause come before the object is patched: a crash in
  between loses the handlers' results, and if the concluding diff-base (or
  the finalizer's removal) did not land either, the cause is handled again
  from the start.

Assumptions
===========

* One cycle at a time per object (:mod:`~kopf._cycle.queueing`), on the
  object's latest state, which includes our own last patch.
* Handlers are idempotent: a crash may make them run again (see above).
* Handler ids are stable across restarts: progress is stored by id.
* Stored times are UTC wall-clock times; the budget is measured with a
  monotonic clock (both come from the injected
  :class:`~kopf._structs.clocks.Clock`).

Adding handler kinds
====================

Handlers that react to every event rather than to a cause (event handlers
today; daemons and timers) are **stages**: functions of the shape
:class:`Stage`, listed in :data:`STAGES` or given to :func:`handle_object` as
``stages=`` (for kinds that need per-operator state, e.g. running daemons).
A stage sees the cause (so a daemon can stop on ``GONE`` or deletion) and
the typed arguments of the object, and may ask for a wake-up delay; the
cycle sleeps for the soonest of all delays. A stage that answers
:class:`Holding` also keeps our finalizer on an object being deleted until
it answers otherwise (daemons that are still stopping): the delete handlers
run meanwhile, and their progress is kept, not concluded. Kinds with
persisted progress of their own plug into :data:`ACTIONS` instead.

Indexes are kept in the watch streams, before the events reach the cycle
(:mod:`~kopf._indexing.indexing`): the cycle only waits until the initial
listings have filled them, before it calls any handler or filter.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from kopf._cycle import causation, scheduling, selection
from kopf._cycle.causation import Cause
from kopf._handlers import execution, lifecycles
from kopf._handlers.arguments import (
    Arguments,
    CauseArguments,
    EventArguments,
    Named,
    ObjectArguments,
    OperatorArguments,
)
from kopf._handlers.progression import HandlerState
from kopf._handlers.reasons import Reason
from kopf._handlers.registries import OperatorRegistry, ResourceKey
from kopf._storage import budget, finalizers, persistence
from kopf._storage.persistence import Persistence
from kopf._structs.bodies import Body
from kopf._structs.clocks import SYSTEM_CLOCK, Clock
from kopf._structs.ids import HandlerId
from kopf._structs.patches import Patch
from kopf._structs.resources import Resource
from kopf._structs.typedefs import Logger, PatchFn
from kopf._typed.gate import Gate
from kopf.config import OperatorConfig


@dataclasses.dataclass(frozen=True)
class HandlingResult:
    """
    What the caller must do after a handling cycle.

    ``patch``: send it (it may be empty). ``done``: whether the cause is fully
    handled. ``delay``: if not done, in how many seconds the object needs the
    next cycle even if no event comes (``0``: right away; ``None``: the event
    caused by the patch is enough). ``cause``: the detected cause, for logs.
    ``essential``: if the patch carries more than the progress, the finalizer
    and the diff-base (handlers' results or changes), that part alone, to be
    sent if the whole patch is rejected; ``extras`` names what it lacks.
    ``fns``: the handlers' transformation functions (``patch.fns``), to be
    applied to the object after the patch. ``settled``: the patch concludes
    the cause and leaves nothing to see in the object as it leaves it (see
    :func:`_settles`): the event of exactly that state needs no cycle.
    """

    patch: Patch
    delay: float | None
    cause: str
    done: bool
    essential: Patch | None = None
    extras: tuple[str, ...] = ()
    fns: tuple[PatchFn, ...] = ()
    settled: bool = False


@dataclasses.dataclass(frozen=True)
class Holding:
    """A stage's answer: the object may not be released for deletion yet; come back in ``delay`` seconds."""

    delay: float


class Indexes(Named, Protocol):
    """The operator's indexes as the cycle needs them: by name for the handlers, and ready once listed."""

    async def ready(self) -> None: ...


# Something done on every event of an object, whatever its cause: called with the registry, the resource,
# the cause and the object's arguments; it may ask for a wake-up in N seconds, or hold the object's deletion.
Stage = Callable[[OperatorRegistry, ResourceKey, Cause, Arguments], Awaitable[float | Holding | None]]


async def run_event_handlers(
        registry: OperatorRegistry,
        resource: ResourceKey,
        cause: Cause,
        arguments: Arguments,
) -> float | None:
    """Event handlers: every event, no state, no retries; their errors are only logged."""
    logger, config = arguments.operator.logger, arguments.operator.config
    for handler in selection.watching_handlers(registry, resource, arguments=arguments, logger=logger):
        await execution.run_watching(handler, arguments=arguments, executor=config.execution.executor,
                                     logger=logger)
    return None


STAGES: tuple[Stage, ...] = (run_event_handlers,)


@dataclasses.dataclass(frozen=True)
class _Cycle:
    """What the actions of one cycle share."""

    registry: OperatorRegistry
    resource: ResourceKey
    config: OperatorConfig
    persistence: Persistence
    arguments: Arguments
    lifecycle: lifecycles.LifeCycleFn
    clock: Clock
    results: dict[HandlerId, Any]
    holding: bool = False  # a stage keeps the object from being released for deletion
    send_early: EarlyWrite | None = None  # writes what has finished while a handler runs long


# Sends a patch while the cycle runs on, with its essential part to fall back to; the object after it, if it landed.
EarlyWrite = Callable[[Patch, Patch | None], Awaitable[Mapping[str, Any] | None]]


@dataclasses.dataclass(frozen=True)
class _Verdict:
    done: bool
    delay: float | None = None
    patchable: bool = True


Action = Callable[[_Cycle, Cause], Awaitable[_Verdict]]


async def _forget_object(cycle: _Cycle, cause: Cause) -> _Verdict:
    """The object is gone: nothing can be patched; storages outside of it may forget it."""
    await cycle.persistence.erase()
    return _Verdict(done=True, patchable=False)


async def _tidy_up(cycle: _Cycle, cause: Cause) -> _Verdict:
    """
    Nothing happened: forget the progress of a cause that is no longer there, if any is left.

    Our finalizer goes too when no handler needs it any more (e.g. the
    object stopped matching the filters of the delete handlers and daemons),
    as in Kopf: it must not hold the object's deletion for nothing.
    """
    if not cause.deleting:
        stale = await cycle.persistence.stored(selection.all_ids(cycle.registry, cycle.resource))
        if stale:
            await scheduling.forget(cycle.persistence, stale)
            cycle.persistence.remove_touch()
        body, finalizer = cycle.persistence.body, cycle.config.persistence.finalizer
        if cause.essences is not None and finalizers.is_deletion_blocked(body, finalizer):
            logger = cycle.arguments.operator.logger
            if not selection.requires_finalizer(cycle.registry, cycle.resource, cause.essences,
                                                arguments=cycle.arguments, logger=logger):
                logger.debug("Removing the finalizer, as there are no handlers requiring it.")
                finalizers.allow_deletion(body=body, patch=cycle.persistence.patch, finalizer=finalizer)
    return _Verdict(done=True)


async def _block_deletion(cycle: _Cycle, cause: Cause) -> _Verdict:
    """Add our finalizer; the handlers run in the next cycle, caused by this very patch."""
    finalizers.block_deletion(body=cycle.persistence.body, patch=cycle.persistence.patch,
                              finalizer=cycle.config.persistence.finalizer)
    if cause.resuming:
        # The first sight is over after this cycle: leave a trace that resuming is due.
        ids = selection.resume_ids(cycle.registry, cycle.resource)
        for handler_id, record in (await cycle.persistence.fetch(ids)).items():
            if record is None:
                await cycle.persistence.keep(handler_id, HandlerState.from_scratch(clock=cycle.clock).as_record())
    return _Verdict(done=False)


async def _handle_changes(cycle: _Cycle, cause: Cause) -> _Verdict:
    """Run the due handlers of the cause; once all are finished, conclude the cause."""
    logger = cycle.arguments.operator.logger
    handlers = selection.changing_handlers(cycle.registry, cycle.resource, cause,
                                           arguments=cycle.arguments, logger=logger)
    limit = cycle.config.persistence.max_unpersisted_time
    durability = scheduling.Durability(limit=limit, clock=cycle.clock,
                                       checkpoint=_checkpoint(cycle) if cycle.send_early is not None else None)
    batch = scheduling.Batch(
        persistence=cycle.persistence, arguments=cycle.arguments, lifecycle=cycle.lifecycle,
        budget=scheduling.Budget(limit=limit), executor=cycle.config.execution.executor, logger=logger,
        clock=cycle.clock, results=cycle.results, durability=durability)
    try:
        outcome = await scheduling.run_cause(handlers, batch=batch)
    finally:
        await durability.close()
    state = outcome.state
    if not state.done or (cause.reason == Reason.DELETE and cycle.holding):
        for handler_id, record in state.changes.items():
            await cycle.persistence.keep(handler_id, record)
        return _Verdict(done=False, delay=scheduling.STALL_DELAY if outcome.stalled else state.delay)

    # Forget the progress -- of all this resource's handlers, in case some are left over.
    subrefs = sorted({ref for handler_state in state.values() for ref in handler_state.subrefs})
    await scheduling.forget(cycle.persistence, [*selection.all_ids(cycle.registry, cycle.resource), *subrefs])
    cycle.persistence.remove_touch()
    if cause.reason == Reason.DELETE:
        finalizers.allow_deletion(body=cycle.persistence.body, patch=cycle.persistence.patch,
                                  finalizer=cycle.config.persistence.finalizer)
    else:
        cycle.persistence.keep_essence(cause.new)
    return _Verdict(done=True)


def _checkpoint(cycle: _Cycle) -> scheduling.Checkpoint:
    """What the cycle would write now, as taken when a handler starts: the finished handlers' work only."""
    send = cycle.send_early
    assert send is not None and cycle.arguments.object is not None
    changes = cycle.arguments.object.patch

    def snapshot() -> scheduling.Sender | None:
        progress = cycle.persistence.snapshot()
        results = dict(cycle.results)
        done = copy.deepcopy(changes) if changes else Patch()  # the running handler may change it meanwhile

        async def sending() -> bool:
            essential = await progress()
            patch = _merged(done, Patch({'status': results}) if results else Patch(), essential)
            if not patch:
                return True
            cycle.arguments.operator.logger.debug("A handler runs long: storing what the others have done so far.")
            patched = await send(patch, essential if results or done else None)
            if patched is not None:
                cycle.persistence.rebase(Body(patched))
            return patched is not None
        return sending
    return snapshot


# The state machine: what each cause leads to.
ACTIONS: Mapping[Reason, Action] = {
    Reason.GONE: _forget_object,
    Reason.NOOP: _tidy_up,
    Reason.FINALIZER: _block_deletion,
    Reason.CREATE: _handle_changes,
    Reason.UPDATE: _handle_changes,
    Reason.RESUME: _handle_changes,
    Reason.DELETE: _handle_changes,
}

# How Kopf's logs name the causes (at DEBUG; Kopf adds the object's whole body, which is costly).
_IN_PROGRESS: Mapping[Reason, str] = {
    Reason.CREATE: 'Creation',
    Reason.UPDATE: 'Updating',
    Reason.DELETE: 'Deletion',
    Reason.RESUME: 'Resuming',
}


async def handle_object(
        *,
        registry: OperatorRegistry,
        config: OperatorConfig,
        resource: ResourceKey,
        event_type: str | None,
        body: Body,
        first_seen: bool,
        memo: Any,
        logger: Logger,
        lifecycle: lifecycles.LifeCycleFn | None = None,
        clock: Clock = SYSTEM_CLOCK,
        stages: Sequence[Stage] = STAGES,
        indexes: Indexes | None = None,
        resolved: Resource | None = None,
        send_early: EarlyWrite | None = None,
        gate: Gate | None = None,
        restless: bool = False,
) -> HandlingResult:
    """
    Handle one event of one object and say what to patch and when to come back.

    ``first_seen`` must be true only for the first event of the object since
    the operator started: it makes a handled object resume. ``indexes`` are
    given to the handlers, once the initial listings have filled them.
    ``resolved`` is the resource as served (the handlers' ``resource``).
    ``send_early`` writes the finished handlers' work while another handler
    runs long (without it, everything waits for the returned patch).
    ``gate`` is a typed resource's: an invalid spec stops the handling here
    (it is reported, once); a valid one is what the handlers get as ``spec``.
    ``restless``: the caller has just found this body not at rest
    (:func:`at_rest`), so it is not asked again.
    """
    storage = _persistence(registry, config, resource, body)
    if not restless and await at_rest(registry=registry, config=config, resource=resource, event_type=event_type,
                                      body=body, stages=stages, gate=gate, persistence=storage):
        logger.debug("Handling cycle for %s: %s.", body.describe(), Reason.NOOP.value)
        return HandlingResult(patch=Patch(), delay=None, cause=Reason.NOOP.value, done=True)
    if indexes is not None:
        await indexes.ready()
    admission = gate.admit(body, gone=event_type == 'DELETED', logger=logger) if gate is not None else None
    if admission is not None and not admission.admitted:
        return HandlingResult(patch=admission.patch, delay=None, cause='invalid', done=True)
    arguments = Arguments(operator=OperatorArguments(logger=logger, memo=memo, config=config, indexes=indexes or {}),
                          object=ObjectArguments(body=body, patch=Patch(admission.patch if admission else {}),
                                                 resource=resolved or resource,
                                                 spec=admission.spec if admission else None))
    handled = registry.has_changing_handlers(resource)
    cause = await causation.detect(
        event_type=event_type, body=body, finalizer=config.persistence.finalizer, first_seen=first_seen,
        handled=handled, guarded=registry.has_spawning_handlers(resource),
        resume_ids=selection.resume_ids(registry, resource),
        resume_deleted_ids=selection.resume_ids(registry, resource, deleted=True),
        requires_finalizer=functools.partial(selection.requires_finalizer, registry, resource,
                                             arguments=arguments, logger=logger),
        selected=functools.partial(selection.selects, registry, resource, arguments=arguments),
        persistence=storage)

    delays: list[float] = []
    holding = False
    # Event handlers are attempted once per event: as in Kopf, they are told it is their first attempt.
    observed = arguments.with_event(EventArguments(type=event_type, raw=body.raw)).with_attempt(
        HandlerState.from_scratch(clock=clock))
    for stage in stages:
        answer = await stage(registry, resource, cause, observed)
        if isinstance(answer, Holding):
            holding = True
            delays.append(answer.delay)
        elif answer is not None:
            delays.append(answer)

    if cause.reason != Reason.GONE and (handled or cause.reason == Reason.DELETE):
        logger.debug("Handling cycle for %s: %s.", body.describe(), cause.reason.value)
        if cause.reason in _IN_PROGRESS:  # Kopf's words, which tests written for Kopf look for in the logs
            logger.debug("%s is in progress: %s.", _IN_PROGRESS[cause.reason], body.describe())
    if cause.essences is not None:
        arguments = arguments.with_cause(CauseArguments(reason=cause.reason, old=cause.old, new=cause.new,
                                                        diff=cause.diff))
    cycle = _Cycle(registry=registry, resource=resource, config=config, persistence=storage,
                   arguments=arguments, lifecycle=lifecycle or lifecycles.get_default_lifecycle(),
                   clock=clock, results={}, holding=holding, send_early=send_early)
    verdict = await ACTIONS[cause.reason](cycle, cause)
    essential = await storage.commit()
    if verdict.delay is not None:
        delays.append(verdict.delay)
    delay = min(delays) if delays else None
    if not verdict.patchable:
        return HandlingResult(patch=Patch(), delay=delay, cause=cause.reason.value, done=verdict.done)

    assert arguments.object is not None
    changes, results = arguments.object.patch, cycle.results
    patch = _merged(changes, Patch({'status': results}) if results else Patch(), essential)
    extras = tuple([*(f"status.{handler_id}" for handler_id in results), *_leaves(changes)])
    fitted = budget.fit(body=body, patch=patch, essential=essential if extras else None, extras=extras,
                        diffbase=config.persistence.diffbase_storage, logger=logger)
    settled = (verdict.done and delay is None and not changes and not changes.fns
               and fitted.patch is patch  # nothing was left out or postponed to fit the annotations' budget
               and _settles(cycle, cause, results=bool(results)))
    return HandlingResult(patch=fitted.patch, delay=delay, cause=cause.reason.value, done=verdict.done,
                          essential=fitted.essential, extras=fitted.extras, fns=tuple(changes.fns), settled=settled)


async def at_rest(
        *,
        registry: OperatorRegistry,
        config: OperatorConfig,
        resource: ResourceKey,
        event_type: str | None,
        body: Body,
        stages: Sequence[Stage] = STAGES,
        gate: Gate | None = None,
        persistence: Persistence | None = None,
) -> bool:
    """
    Whether a cycle of this event would be a ``NOOP`` with nothing to tidy up: known before any of it is made.

    So it is when the object is exactly as last handled and holds no
    progress (:meth:`~kopf._storage.persistence.Persistence.at_rest`), is not
    being deleted, and has our finalizer if and only if every object of the
    resource needs it -- for resources where nothing else can act: no event
    handlers, daemons or timers (they see every event), no resume handlers
    (a first sight resumes), no typed spec to check, and a handler of changes
    without filters (so that no filter decides per object). A restart over
    many handled objects costs this much per object, and so does an event
    that changes only what no handler looks at (e.g. another controller's
    status). ``persistence``: the cycle's, to share its reads (else one is made).
    """
    if event_type == 'DELETED' or gate is not None or any(stage is not run_event_handlers for stage in stages):
        return False
    if (registry.get_watching_handlers(resource) or selection.resume_ids(registry, resource)
            or not selection.selects_every_object(registry, resource)):
        return False
    need = selection.finalizer_need(registry, resource)  # None with daemons or timers, too
    finalizer = config.persistence.finalizer
    if need is None or finalizers.is_deletion_ongoing(body) or finalizers.is_deletion_blocked(body, finalizer) != need:
        return False
    persistence = persistence if persistence is not None else _persistence(registry, config, resource, body)
    return await persistence.at_rest()


def _persistence(registry: OperatorRegistry, config: OperatorConfig, resource: ResourceKey, body: Body) -> Persistence:
    """The cycle's view of the storages for the object."""
    return Persistence(progress=config.persistence.progress_storage, diffbase=config.persistence.diffbase_storage,
                       body=body, extra_fields=registry.get_extra_fields(resource),
                       handler_ids=selection.all_ids(registry, resource))


def _settles(cycle: _Cycle, cause: Cause, *, results: bool) -> bool:
    """
    Whether the next cycle, on the object exactly as our patch leaves it, would find nothing to do.

    Only after a concluded change: its essence becomes the diff-base, so the
    next cycle is a ``NOOP``. That one would still act if our finalizer is
    on the object but no handler needs it any more (it is removed), or if a
    field handler watches a status field that the results may have changed;
    and handlers that see every event or body (event handlers, daemons and
    timers) must see that state too.
    """
    registry, resource = cycle.registry, cycle.resource
    if cause.reason not in (Reason.CREATE, Reason.UPDATE, Reason.RESUME) or cause.essences is None:
        return False
    if registry.get_watching_handlers(resource) or registry.has_spawning_handlers(resource):
        return False
    if results and registry.get_extra_fields(resource):
        return False
    body, finalizer = cycle.persistence.body, cycle.config.persistence.finalizer
    if finalizers.is_deletion_blocked(body, finalizer):
        logger = cycle.arguments.operator.logger
        return selection.requires_finalizer(registry, resource, cause.essences, arguments=cycle.arguments,
                                            logger=logger)
    return True


async def touch(*, config: OperatorConfig, body: Body, clock: Clock = SYSTEM_CLOCK) -> Patch:
    """A patch with a dummy change, so that the server sends a new event for the object (if the storage can)."""
    return await persistence.touch(config.persistence.progress_storage, body=body, value=clock.now().isoformat())


def _merged(*patches: Mapping[str, Any]) -> Patch:
    """One merge-patch with all of these; where they overlap, the later ones win."""
    result = Patch()
    for patch in patches:
        _merge_into(result, patch)
    return result


def _merge_into(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    for key, value in patch.items():
        if type(value) is dict or isinstance(value, Mapping):  # a plain dict spares the abstract-class check
            into = target.get(key)
            if not isinstance(into, dict):
                into = target[key] = {}
            _merge_into(into, value)
        else:
            target[key] = value


def _leaves(patch: Mapping[str, Any], prefix: str = '') -> Iterator[str]:
    """The dotted paths of what a patch sets or deletes, for messages."""
    for key, value in patch.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from _leaves(value, f"{path}.")
        else:
            yield path
