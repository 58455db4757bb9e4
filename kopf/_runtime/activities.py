"""
Activities: the operator's own handlers -- startup, cleanup, login -- not related to any object.

They follow the same retry policy as the handlers of objects
(:mod:`~kopf._handlers.execution`), but their progress is kept in memory only:
retries sleep in place, and an operator that is restarted starts them anew.

Two things end an activity early:

* **A configuration error**: a ``TypeError`` or ``ValueError`` that kopf's
  own code raises when a handler calls it -- an invalid setting (e.g. a
  string assigned to ``config.persistence.progress_storage``), an invalid
  storage or other argument. Retrying cannot fix it: the handler fails at
  once, naming the line of the handler that made the call, and the activity
  fails with it (:class:`kopf.ActivityError`).
* **A stop request** (``stop``, e.g. set by SIGTERM): the running handler is
  cancelled (a synchronous one is left to finish in its thread), and the
  activity ends with :class:`ActivityInterrupted` -- also while it sleeps
  until a retry.
"""
from __future__ import annotations

import asyncio
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kopf._handlers import execution, invocation
from kopf._handlers.arguments import Arguments, OperatorArguments
from kopf._handlers.execution import HandlerOutcome
from kopf._handlers.progression import HandlerState, State
from kopf._handlers.registries import Activity, ActivityHandler, OperatorRegistry
from kopf._structs.clocks import SYSTEM_CLOCK, Clock
from kopf._structs.ids import HandlerId
from kopf._structs.typedefs import Logger
from kopf.config import OperatorConfig
from kopf.errors import ActivityError, PermanentError

# Where kopf's own code is: an error raised there on a handler's call is about what the handler passed.
_KOPF = Path(__file__).resolve().parents[1]


class ActivityInterrupted(Exception):
    """The operator was asked to stop while an activity's handlers were running or waiting for a retry."""


class ConfigurationError(PermanentError):
    """A handler has passed kopf something invalid (a setting, an argument): retrying cannot help."""


async def run_activity(
        *,
        registry: OperatorRegistry,
        activity: Activity | str,
        config: OperatorConfig,
        memo: Any,
        logger: Logger,
        clock: Clock = SYSTEM_CLOCK,
        indexes: Mapping[str, Any] | None = None,
        stop: asyncio.Event | None = None,
) -> dict[HandlerId, Any]:
    """
    Run all handlers of an activity (startup, cleanup, login) until each has finished.

    Returns the results by handler id; raises :class:`kopf.ActivityError` if
    any handler has failed permanently (after all others have finished), or
    at once on a configuration error; raises :class:`ActivityInterrupted` if
    ``stop`` is set before the handlers have finished. The handlers get the
    ``indexes`` as they are (maybe not filled yet).
    """
    activity = Activity(activity)
    work = _run_all(registry=registry, activity=activity, config=config, memo=memo, logger=logger, clock=clock,
                    indexes=indexes)
    if stop is None:
        return await work
    task = asyncio.create_task(work, name=f"kopf {activity} handlers")
    stopped = asyncio.create_task(stop.wait(), name=f"kopf stop of the {activity} handlers")
    try:
        await asyncio.wait([task, stopped], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not task.done():
            task.cancel()
        await asyncio.gather(task, stopped, return_exceptions=True)
    if task.cancelled():
        raise ActivityInterrupted(f"The operator was stopped while its {activity} handlers were running "
                                  f"or waiting for a retry; they are not run any further.")
    return task.result()


async def _run_all(
        *,
        registry: OperatorRegistry,
        activity: Activity,
        config: OperatorConfig,
        memo: Any,
        logger: Logger,
        clock: Clock,
        indexes: Mapping[str, Any] | None,
) -> dict[HandlerId, Any]:
    handlers = registry.get_activity_handlers(activity)
    arguments = Arguments(operator=OperatorArguments(logger=logger, memo=memo, config=config, indexes=indexes or {}),
                          activity=activity)
    state = State(clock=clock).with_handlers(handler.id for handler in handlers)
    results: dict[HandlerId, Any] = {}
    errors: dict[str, BaseException] = {}
    while not state.done:
        outcomes: dict[HandlerId, HandlerOutcome] = {}
        for handler in handlers:
            if state[handler.id].awakened:
                outcome = await _run_one(handler, state[handler.id], arguments=arguments, config=config,
                                         logger=logger)
                outcomes[handler.id] = outcome
                if outcome.final and outcome.exception is not None:
                    errors[handler.id] = outcome.exception
                    if isinstance(outcome.exception, ConfigurationError):
                        raise _failure(activity, errors)  # the others would only delay what must be fixed
                elif outcome.final:
                    results[handler.id] = outcome.result
        state = state.with_outcomes(outcomes)
        if not state.done:
            await clock.sleep(state.delay or 0)
    if errors:
        raise _failure(activity, errors)
    return results


def _failure(activity: Activity, errors: dict[str, BaseException]) -> ActivityError:
    """The activity's failure, with what each failed handler has said, on one line."""
    reasons = '; '.join(f"{handler_id}: {str(error) or type(error).__name__}" for handler_id, error in errors.items())
    return ActivityError(f"{activity.value.capitalize()} handlers have failed: {reasons}", errors=errors)


async def _run_one(
        handler: ActivityHandler,
        past: HandlerState,
        *,
        arguments: Arguments,
        config: OperatorConfig,
        logger: Logger,
) -> HandlerOutcome:
    kwargs = arguments.for_handler(handler).with_attempt(past).render()

    async def call() -> Any:
        try:
            return await invocation.invoke(handler.fn, kwargs=kwargs, executor=config.execution.executor)
        except (TypeError, ValueError) as e:
            caller = _misused_by(e)
            if caller is None:
                raise
            raise ConfigurationError(f"{e} ({caller}) This is a configuration error, not retried: "
                                     f"fix it and start the operator again.") from e

    return await execution.attempt(handler, past, call=call, logger=logger,
                                   default_backoff=config.execution.default_backoff)


def _misused_by(error: BaseException) -> str | None:
    """
    Where the handler called kopf with what kopf has refused, if it did: ``file, line N, in fn``.

    That is: the error was raised in kopf's own code, and the last frame
    before it is outside of kopf (the handler, or code it has called).
    """
    frames = traceback.extract_tb(error.__traceback__)
    if not frames or not _is_kopf(frames[-1].filename):
        return None
    callers = [frame for frame in frames if not _is_kopf(frame.filename)]
    if not callers or callers[-1].filename.startswith('<'):
        return None
    frame = callers[-1]
    return f"{Path(frame.filename).name}, line {frame.lineno}, in {frame.name}"


def _is_kopf(filename: str) -> bool:
    try:
        return Path(filename).resolve().is_relative_to(_KOPF)
    except (OSError, ValueError):
        return False
