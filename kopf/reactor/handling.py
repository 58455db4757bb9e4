"""
The handling cycle: one object, one watch event, one patch.

:func:`handle_object` works out what happened to the object, calls the due
handlers with their retry policy, and accumulates everything that must
change on the object -- the handlers' progress, their results, the finalizer,
the diff-base -- into one patch. It talks to nothing but the handlers and the
storages; sending the patch and sleeping until the next cycle is the
caller's job, as the returned :class:`HandlingResult` says.

Everything the cycle needs to continue is kept in the object (via the
storages), never in memory: a restarted operator continues where it left,
and a handler that has succeeded is not called again for the same cause.

Rules worth knowing:

* A handler's non-``None`` result goes to ``status[<handler id>]``, the id
  as one key (``status['parent/child']``, ``status['fn/spec.field']``).
* Field handlers join the create and update causes when their field changed.
* Resume handlers run on the first sight of an object handled before: alone
  if it did not change meanwhile, together with the update handlers if it did.
* Adding the finalizer is a cycle of its own, so that it is on the server
  before any handler acts.
* The diff-base is stored only when a create/update/resume cause is fully
  handled (even if some handlers failed for good); a cycle without a cause
  stores nothing but forgets the leftover progress of a vanished cause.
"""
from __future__ import annotations

import asyncio
import copy
import dataclasses
import datetime
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any, TypeAlias

from kopf.config import OperatorConfig
from kopf.errors import (
    ActivityError,
    ErrorsMode,
    HandlerChildrenRetry,
    HandlerRetriesError,
    HandlerTimeoutError,
    PermanentError,
    TemporaryError,
)
from kopf.reactor import invocation, lifecycles, registries, subhandling
from kopf.reactor.causation import Reason, detect_reason
from kopf.reactor.registries import (
    DEFAULT_BACKOFF,
    Activity,
    ActivityHandler,
    BaseHandler,
    ChangingHandler,
    OperatorRegistry,
    ResourceHandler,
    ResourceKey,
)
from kopf.storage import calls, finalizers, states
from kopf.storage.progress import ProgressStorage
from kopf.storage.states import HandlerOutcome, HandlerState, State
from kopf.structs import dicts, diffs
from kopf.structs.bodies import Body
from kopf.structs.ids import HandlerId
from kopf.structs.patches import Patch

Logger: TypeAlias = logging.Logger | logging.LoggerAdapter  # type: ignore[type-arg]
Essence: TypeAlias = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class HandlingResult:
    """
    What the caller must do after a handling cycle.

    ``patch``: send it (it may be empty). ``done``: whether the cause is fully
    handled. ``delay``: if not done, in how many seconds the object needs the
    next cycle even if no event comes (``0``: right away; ``None``: the event
    caused by the patch is enough). ``cause``: the detected cause, for logs.
    """

    patch: Patch
    delay: float | None
    cause: str
    done: bool


@dataclasses.dataclass(frozen=True)
class _Cycle:
    """What all the handler invocations of one cycle share."""

    config: OperatorConfig
    body: Body
    patch: Patch
    logger: Logger
    lifecycle: lifecycles.LifeCycleFn

    @property
    def storage(self) -> ProgressStorage:
        return self.config.persistence.progress_storage


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
) -> HandlingResult:
    """
    Handle one event of one object and say what to patch and when to come back.

    ``first_seen`` must be true only for the first event of the object since
    the operator started: it triggers the resume handlers (the storages then
    remember that resuming is in progress).
    """
    patch = Patch()
    base: dict[str, Any] = {
        **invocation.body_kwargs(body),
        'patch': patch, 'logger': logger, 'memo': memo,
        'config': config, 'settings': config, 'resource': resource,
    }
    await _run_watching_handlers(registry, resource, event_type=event_type, body=body, base=base,
                                 config=config, logger=logger)

    if event_type == 'DELETED':
        await _erase(config, body)
        # Nothing can be patched on an object that is gone.
        return HandlingResult(patch=Patch(), delay=None, cause=Reason.GONE.value, done=True)

    ours_to_release = (finalizers.is_deletion_ongoing(body) and
                       finalizers.is_deletion_blocked(body, config.persistence.finalizer))
    if not registry.has_changing_handlers(resource) and not ours_to_release:
        # Event handlers only: no diff-base, no finalizer, no progress on the object.
        return HandlingResult(patch=patch, delay=None, cause=Reason.NOOP.value, done=True)

    cause = await _detect_cause(registry, resource, config=config, event_type=event_type, body=body,
                                first_seen=first_seen, base=base, logger=logger)
    base.update(old=cause.old, new=cause.new, diff=cause.diff, reason=cause.reason)
    logger.debug("Handling cycle for %s: %s.", body.describe(), cause.reason.value)
    if cause.reason == Reason.FINALIZER:
        await _add_finalizer(registry, resource, cause, config=config, body=body, patch=patch)
        return HandlingResult(patch=patch, delay=None, cause=cause.reason.value, done=False)
    if cause.reason == Reason.NOOP:
        if not finalizers.is_deletion_ongoing(body):
            await _purge_stale(registry, resource, config=config, body=body, patch=patch)
        return HandlingResult(patch=patch, delay=None, cause=cause.reason.value, done=True)

    cycle = _Cycle(config=config, body=body, patch=patch, logger=logger,
                   lifecycle=lifecycle or lifecycles.get_default_lifecycle())
    handlers = _select_handlers(registry, resource, cause, body=body, base=base, logger=logger)
    return await _handle_cause(registry, resource, cause, handlers=handlers, cycle=cycle, base=base)


async def touch(*, config: OperatorConfig, body: Body, patch: Patch) -> None:
    """Put a dummy change into the patch, so that the server sends a new event for the object."""
    value = states.utcnow().isoformat()
    await calls.call(config.persistence.progress_storage.touch, body=body, patch=patch, value=value)


# The cycle's parts.

@dataclasses.dataclass(frozen=True)
class _Cause:
    """What happened to the object, and the essences it was judged by."""

    reason: Reason
    old: Essence | None
    new: Essence
    diff: diffs.Diff
    resuming: bool


async def _detect_cause(
        registry: OperatorRegistry,
        resource: ResourceKey,
        *,
        config: OperatorConfig,
        event_type: str | None,
        body: Body,
        first_seen: bool,
        base: Mapping[str, Any],
        logger: Logger,
) -> _Cause:
    """
    Judge the cause by the object, its diff-base, and the stored progress.

    Resuming lasts beyond the first sight: as long as any resume handler has
    progress stored, it is still going on.
    """
    old, new, diff = await _essences(registry, resource, config=config, body=body)
    deleting = finalizers.is_deletion_ongoing(body)
    resume_ids = [h.id for h in registry.get_changing_handlers(resource, Reason.RESUME)]
    storage = config.persistence.progress_storage
    resuming = (old is not None and not deleting and
                (first_seen or bool(await _stored_ids(resume_ids, body=body, storage=storage))))
    kwargs = {**base, 'old': old, 'new': new, 'diff': diff, 'reason': Reason.DELETE}
    requires_finalizer = not deleting and _requires_finalizer(registry, resource, body=body, kwargs=kwargs,
                                                               logger=logger)
    reason = detect_reason(
        event_type=event_type, body=body, finalizer=config.persistence.finalizer,
        requires_finalizer=requires_finalizer, old_exists=old is not None, diff=diff, resuming=resuming)
    return _Cause(reason=reason, old=old, new=new, diff=diff, resuming=resuming)


async def _add_finalizer(
        registry: OperatorRegistry,
        resource: ResourceKey,
        cause: _Cause,
        *,
        config: OperatorConfig,
        body: Body,
        patch: Patch,
) -> None:
    """Block the deletion first; the handlers run in the next cycle, caused by this very patch."""
    finalizers.block_deletion(body=body, patch=patch, finalizer=config.persistence.finalizer)
    if cause.resuming:
        # The first sight is over after this cycle: leave a trace that resuming is due.
        storage = config.persistence.progress_storage
        resume_ids = [h.id for h in registry.get_changing_handlers(resource, Reason.RESUME)]
        state = await State.from_storage(body=body, storage=storage, handler_ids=resume_ids)
        await state.store(body=body, patch=patch, storage=storage)


async def _handle_cause(
        registry: OperatorRegistry,
        resource: ResourceKey,
        cause: _Cause,
        *,
        handlers: Sequence[ChangingHandler],
        cycle: _Cycle,
        base: Mapping[str, Any],
) -> HandlingResult:
    """Run the due handlers of the cause; once all are finished, conclude the cause."""
    body, patch, storage = cycle.body, cycle.patch, cycle.storage
    state = await State.from_storage(body=body, storage=storage, handler_ids=[h.id for h in handlers])
    state = await _run_handlers(handlers, state=state, cycle=cycle, base=base)
    await state.store(body=body, patch=patch, storage=storage)
    if not state.done:
        return HandlingResult(patch=patch, delay=state.delay, cause=cause.reason.value, done=False)

    # Forget the progress -- of all this resource's handlers, in case some are left over.
    all_ids = [h.id for h in registry.get_all_changing_handlers(resource)]
    await state.purge(body=body, patch=patch, storage=storage, handler_ids=all_ids)
    if cause.reason == Reason.DELETE:
        finalizers.allow_deletion(body=body, patch=patch, finalizer=cycle.config.persistence.finalizer)
    else:
        diffbase = cycle.config.persistence.diffbase_storage
        await calls.call(diffbase.store, body=body, patch=patch, essence=cause.new)
    return HandlingResult(patch=patch, delay=None, cause=cause.reason.value, done=True)


async def _essences(
        registry: OperatorRegistry,
        resource: ResourceKey,
        *,
        config: OperatorConfig,
        body: Body,
) -> tuple[Essence | None, Essence, diffs.Diff]:
    """The last handled and the current essences, without the progress storage's traces, and their diff."""
    diffbase = config.persistence.diffbase_storage
    progress = config.persistence.progress_storage
    extra_fields = registry.get_extra_fields(resource)
    new: Essence = await calls.call(diffbase.build, body=body, extra_fields=extra_fields or None)
    new = await calls.call(progress.clear, essence=new)
    old: Essence | None = await calls.call(diffbase.fetch, body=body)
    if old is not None:
        old = await calls.call(progress.clear, essence=copy.deepcopy(old))
    return old, new, diffs.diff(old, new)


async def _stored_ids(ids: Collection[HandlerId], *, body: Body, storage: ProgressStorage) -> set[HandlerId]:
    """Which of these handlers have any progress stored for the object."""
    stored: set[HandlerId] = set()
    for handler_id in ids:
        if await calls.call(storage.fetch, key=handler_id, body=body):
            stored.add(handler_id)
    return stored


async def _purge_stale(
        registry: OperatorRegistry,
        resource: ResourceKey,
        *,
        config: OperatorConfig,
        body: Body,
        patch: Patch,
) -> None:
    """
    Forget the progress of a cause that is no longer there.

    E.g. an update that was reverted before its handlers finished: its records
    must not make the handlers skip the next real update.
    """
    storage = config.persistence.progress_storage
    ids = [h.id for h in registry.get_all_changing_handlers(resource)]
    stale = await _stored_ids(ids, body=body, storage=storage)
    if stale:
        await State().purge(body=body, patch=patch, storage=storage, handler_ids=[i for i in ids if i in stale])


async def _erase(config: OperatorConfig, body: Body) -> None:
    """Let storages that keep data outside of the object forget it: the object is gone."""
    for storage in (config.persistence.progress_storage, config.persistence.diffbase_storage):
        erase = getattr(storage, 'erase', None)
        if callable(erase):
            await calls.call(erase, body=body)


def _requires_finalizer(
        registry: OperatorRegistry,
        resource: ResourceKey,
        *,
        body: Body,
        kwargs: Mapping[str, Any],
        logger: Logger,
) -> bool:
    try:
        return registry.requires_finalizer(resource, body, kwargs=kwargs)
    except Exception:
        # Better an unneeded finalizer than delete handlers that cannot run.
        logger.exception("A filter of the delete handlers has failed; assuming the finalizer is needed.")
        return True


def _select_handlers(
        registry: OperatorRegistry,
        resource: ResourceKey,
        cause: _Cause,
        *,
        body: Body,
        base: Mapping[str, Any],
        logger: Logger,
) -> list[ChangingHandler]:
    """
    The handlers of the cause that are interested in this object.

    Field handlers join the create and update causes when their field has
    changed. On the first sight of an object that changed while the operator
    was down, the resume handlers join the update handlers.
    """
    candidates = registry.get_changing_handlers(resource, cause.reason)
    if cause.reason in (Reason.CREATE, Reason.UPDATE):
        candidates += [h for h in registry.get_field_handlers(resource) if _field_kwargs(h, base)['diff']]
    if cause.reason == Reason.UPDATE and cause.resuming:
        candidates += registry.get_changing_handlers(resource, Reason.RESUME)
    selected: dict[HandlerId, ChangingHandler] = {}
    for handler in candidates:
        if handler.id not in selected and _matches(handler, body=body, kwargs={**base, **_field_kwargs(handler, base)},
                                                   logger=logger):
            selected[handler.id] = handler
    return list(selected.values())


def _matches(handler: ResourceHandler, *, body: Body, kwargs: Mapping[str, Any], logger: Logger) -> bool:
    try:
        return registries.matches(handler, body=body, kwargs=kwargs)
    except Exception:
        logger.exception("The filters of %s have failed; the handler is skipped.", handler)
        return False


def _field_kwargs(handler: ChangingHandler, base: Mapping[str, Any]) -> dict[str, Any]:
    """A field handler sees only its field: the old and new values and the diff within it."""
    if not handler.field:
        return {}
    return {
        'old': dicts.resolve(base.get('old'), handler.field, None),
        'new': dicts.resolve(base.get('new'), handler.field, None),
        'diff': diffs.reduce(base.get('diff') or diffs.Diff(), handler.field),
    }


async def _run_watching_handlers(
        registry: OperatorRegistry,
        resource: ResourceKey,
        *,
        event_type: str | None,
        body: Body,
        base: Mapping[str, Any],
        config: OperatorConfig,
        logger: Logger,
) -> None:
    """Event handlers: every event, no state, no retries; their errors are only logged."""
    kwargs = {**base, 'type': event_type, 'event': {'type': event_type, 'object': body.raw}}
    for handler in registry.get_watching_handlers(resource):
        if not _matches(handler, body=body, kwargs=kwargs, logger=logger):
            continue
        try:
            await invocation.invoke(handler.fn, kwargs={**kwargs, 'param': handler.param},
                                    executor=config.execution.executor)
        except Exception:
            logger.exception("%s has failed; event handlers are not retried.", handler)


async def _run_handlers(
        handlers: Sequence[ChangingHandler],
        *,
        state: State,
        cycle: _Cycle,
        base: Mapping[str, Any],
        lifecycle: lifecycles.LifeCycleFn | None = None,
) -> State:
    """Run the handlers that the lifecycle picks among the due ones; return the state with their outcomes."""
    lifecycle = lifecycle or cycle.lifecycle
    awakened = [handler for handler in handlers if state[handler.id].awakened]
    chosen = lifecycle(awakened, state=state, **base) if awakened else []
    outcomes: dict[HandlerId, HandlerOutcome] = {}
    for handler in chosen:
        outcomes[handler.id] = await _run_changing_handler(handler, state=state[handler.id], cycle=cycle, base=base)
    return state.with_outcomes(outcomes)


async def _run_changing_handler(
        handler: ChangingHandler,
        *,
        state: HandlerState,
        cycle: _Cycle,
        base: Mapping[str, Any],
) -> HandlerOutcome:
    """One attempt of one handler, with its sub-handlers; its result goes into the status."""
    kwargs = {**base, **_field_kwargs(handler, base)}

    async def run_children(children: Sequence[ChangingHandler], lifecycle: lifecycles.LifeCycleFn | None) -> None:
        await _run_children(children, cycle=cycle, base=kwargs, lifecycle=lifecycle)

    context = subhandling.SubhandlingContext(parent_id=handler.id, run=run_children)

    async def call() -> Any:
        token = subhandling.subhandling_context.set(context)
        try:
            result = await invocation.invoke(
                handler.fn, kwargs={**kwargs, **_state_kwargs(handler, state)},
                executor=cycle.config.execution.executor)
        finally:
            subhandling.subhandling_context.reset(token)
        await subhandling.run_pending(context)
        return result

    outcome = await _attempt(handler, state, call=call, logger=cycle.logger)
    if outcome.final and outcome.exception is None and outcome.result is not None:
        cycle.patch.status[handler.id] = outcome.result
    if outcome.final and context.executed:
        # The parent will not run again: its sub-handlers' progress is of no use any more.
        await State().purge(body=cycle.body, patch=cycle.patch, storage=cycle.storage,
                            handler_ids=sorted(context.executed))
    return dataclasses.replace(outcome, subrefs=frozenset(context.executed))


async def _run_children(
        children: Sequence[ChangingHandler],
        *,
        cycle: _Cycle,
        base: Mapping[str, Any],
        lifecycle: lifecycles.LifeCycleFn | None,
) -> None:
    """Run sub-handlers once; raise unless all of them have finished successfully."""
    ids = [child.id for child in children]
    state = await State.from_storage(body=cycle.body, storage=cycle.storage, handler_ids=ids)
    state = await _run_handlers(children, state=state, cycle=cycle, base=base, lifecycle=lifecycle)
    await state.store(body=cycle.body, patch=cycle.patch, storage=cycle.storage)
    if not state.done:
        raise HandlerChildrenRetry("Sub-handlers are not finished yet.", delay=state.delay)
    failed = [handler_id for handler_id in ids if state[handler_id].failure]
    if failed:
        raise PermanentError(f"Sub-handlers have failed: {', '.join(failed)}.")


def _state_kwargs(handler: BaseHandler, state: HandlerState) -> dict[str, Any]:
    return {'retry': state.retries, 'started': state.started, 'runtime': state.runtime, 'param': handler.param}


# The retry policy.

async def _attempt(
        handler: BaseHandler,
        state: HandlerState,
        *,
        call: Callable[[], Awaitable[Any]],
        logger: Logger,
) -> HandlerOutcome:
    """Call the handler once (unless its time or retries are over) and judge the outcome."""
    refusal = _exhausted(handler, state, attempts=state.retries, delay=0, last=state.message)
    if refusal is not None:
        logger.error("%s", refusal)
        return HandlerOutcome(final=True, exception=refusal)
    try:
        result = await call()
    except HandlerChildrenRetry as e:
        logger.debug("%s waits for its sub-handlers.", handler)
        outcome = HandlerOutcome(final=False, delay=e.delay)
    except TemporaryError as e:
        logger.error("%s failed temporarily: %s", handler, _text(e))
        outcome = HandlerOutcome(final=False, delay=e.delay, exception=e)
    except PermanentError as e:
        logger.error("%s failed permanently: %s", handler, _text(e))
        return HandlerOutcome(final=True, exception=e)
    except Exception as e:
        mode = handler.errors or ErrorsMode.TEMPORARY
        if mode == ErrorsMode.IGNORED:
            logger.exception("%s failed with an exception; it is ignored.", handler)
            return HandlerOutcome(final=True)
        if mode == ErrorsMode.PERMANENT:
            logger.exception("%s failed with an exception; it will not be retried.", handler)
            return HandlerOutcome(final=True, exception=e)
        backoff = handler.backoff if handler.backoff is not None else DEFAULT_BACKOFF
        logger.exception("%s failed with an exception; it will be retried.", handler)
        outcome = HandlerOutcome(final=False, delay=backoff, exception=e)
    else:
        logger.info("%s succeeded.", handler)
        return HandlerOutcome(final=True, result=result)

    # Do not wait for a retry that would be refused anyway.
    last = _text(outcome.exception) if outcome.exception is not None else None
    refusal = _exhausted(handler, state, attempts=state.retries + 1, delay=outcome.delay or 0, last=last)
    if refusal is not None:
        logger.error("%s", refusal)
        return HandlerOutcome(final=True, exception=refusal)
    return outcome


def _exhausted(
        handler: BaseHandler,
        state: HandlerState,
        *,
        attempts: int,
        delay: float,
        last: str | None,
) -> PermanentError | None:
    """Why the handler may not be attempted (again) in ``delay`` seconds, if it may not."""
    reason = f" The last error: {last}" if last else ""
    if handler.retries is not None and attempts >= handler.retries:
        return HandlerRetriesError(f"{handler} has used up its {handler.retries} attempt(s).{reason}")
    runtime = state.runtime + datetime.timedelta(seconds=delay)
    if handler.timeout is not None and runtime > datetime.timedelta(seconds=handler.timeout):
        return HandlerTimeoutError(f"{handler} has run out of its {handler.timeout} seconds.{reason}")
    return None


def _text(e: BaseException) -> str:
    return str(e) or type(e).__name__


# Activities.

async def run_activity(
        *,
        registry: OperatorRegistry,
        activity: Activity | str,
        config: OperatorConfig,
        memo: Any,
        logger: Logger,
) -> dict[HandlerId, Any]:
    """
    Run all handlers of an activity (startup, cleanup, login) until each has finished.

    Their progress is kept in memory only; retries sleep in place. Returns the
    results by handler id; raises :class:`kopf.ActivityError` if any handler
    has failed permanently (after all others have finished).
    """
    handlers = registry.get_activity_handlers(Activity(activity))
    state = State().with_handlers(handler.id for handler in handlers)
    results: dict[HandlerId, Any] = {}
    errors: dict[str, BaseException] = {}
    while not state.done:
        outcomes: dict[HandlerId, HandlerOutcome] = {}
        for handler in handlers:
            if state[handler.id].awakened:
                outcome = await _run_activity_handler(handler, state=state[handler.id], config=config,
                                                      memo=memo, logger=logger)
                outcomes[handler.id] = outcome
                if outcome.final and outcome.exception is not None:
                    errors[handler.id] = outcome.exception
                elif outcome.final:
                    results[handler.id] = outcome.result
        state = state.with_outcomes(outcomes)
        if not state.done:
            await asyncio.sleep(state.delay or 0)
    if errors:
        raise ActivityError(f"{Activity(activity).value.capitalize()} handlers have failed: "
                            f"{', '.join(sorted(errors))}.", errors=errors)
    return results


async def _run_activity_handler(
        handler: ActivityHandler,
        *,
        state: HandlerState,
        config: OperatorConfig,
        memo: Any,
        logger: Logger,
) -> HandlerOutcome:
    kwargs = {
        'logger': logger, 'memo': memo, 'config': config, 'settings': config,
        'activity': handler.activity, **_state_kwargs(handler, state),
    }

    async def call() -> Any:
        return await invocation.invoke(handler.fn, kwargs=kwargs, executor=config.execution.executor)

    return await _attempt(handler, state, call=call, logger=logger)
