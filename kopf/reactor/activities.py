"""
Activities: the operator's own handlers -- startup, cleanup, login -- not related to any object.

They follow the same retry policy as the handlers of objects
(:mod:`~kopf.reactor.execution`), but their progress is kept in memory only:
retries sleep in place, and an operator that is restarted starts them anew.
"""
from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from kopf.config import OperatorConfig
from kopf.errors import ActivityError
from kopf.reactor import execution, invocation
from kopf.reactor.arguments import Arguments, Logger, OperatorArguments
from kopf.reactor.execution import HandlerOutcome
from kopf.reactor.progression import SYSTEM_CLOCK, Clock, HandlerState, State
from kopf.reactor.registries import Activity, ActivityHandler, OperatorRegistry
from kopf.structs.ids import HandlerId


async def run_activity(
        *,
        registry: OperatorRegistry,
        activity: Activity | str,
        config: OperatorConfig,
        memo: Any,
        logger: Logger,
        clock: Clock = SYSTEM_CLOCK,
        indexes: Mapping[str, Any] | None = None,
) -> dict[HandlerId, Any]:
    """
    Run all handlers of an activity (startup, cleanup, login) until each has finished.

    Returns the results by handler id; raises :class:`kopf.ActivityError` if
    any handler has failed permanently (after all others have finished).
    The handlers get the ``indexes`` as they are (maybe not filled yet).
    """
    activity = Activity(activity)
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
                elif outcome.final:
                    results[handler.id] = outcome.result
        state = state.with_outcomes(outcomes)
        if not state.done:
            await asyncio.sleep(state.delay or 0)
    if errors:
        raise ActivityError(f"{activity.value.capitalize()} handlers have failed: "
                            f"{', '.join(sorted(errors))}.", errors=errors)
    return results


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
        return await invocation.invoke(handler.fn, kwargs=kwargs, executor=config.execution.executor)

    return await execution.attempt(handler, past, call=call, logger=logger)
