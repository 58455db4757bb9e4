"""
Execution: one attempt of one handler, judged into an outcome by the retry policy.

The retry policy, in the order it is applied:

* A handler whose ``retries=`` are used up, or whose ``timeout=`` (counted
  from the first attempt of this cause) is over, is not called again: it
  fails for good (:class:`kopf.HandlerRetriesError`,
  :class:`kopf.HandlerTimeoutError`).
* Returning is a success; the result goes to ``status.<handler id>``.
* :class:`kopf.TemporaryError` asks for a retry after its ``delay``;
  :class:`kopf.PermanentError` fails the handler for good.
* Any other exception is treated as the handler's ``errors=`` says: by
  default like a temporary error with the handler's ``backoff=`` as the
  delay; ``PERMANENT`` fails it; ``IGNORED`` counts it as a success without
  a result.
* A retry that would come too late anyway (beyond the retries or the
  timeout) is not waited for: the handler fails right away.

This module only judges; it keeps no state. Where the handler stands in its
retries comes in (as :class:`~kopf.reactor.arguments.Attempts`), the outcome
goes out, and :mod:`kopf.reactor.progression` turns it into the next state.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from kopf.errors import (
    ErrorsMode,
    HandlerChildrenRetry,
    HandlerRetriesError,
    HandlerTimeoutError,
    PermanentError,
    TemporaryError,
)
from kopf.reactor import invocation, subhandling
from kopf.reactor.arguments import Arguments, Attempts, Logger
from kopf.reactor.registries import DEFAULT_BACKOFF, BaseHandler, ChangingHandler, WatchingHandler
from kopf.structs.ids import HandlerId


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


class Past(Attempts, Protocol):
    """What the retry policy needs to know about a handler's earlier attempts."""

    @property
    def message(self) -> str | None: ...


async def attempt(
        handler: BaseHandler,
        past: Past,
        *,
        call: Callable[[], Awaitable[Any]],
        logger: Logger,
) -> HandlerOutcome:
    """Call the handler once (unless its time or retries are over) and judge the outcome."""
    refusal = _exhausted(handler, past, attempts=past.retries, delay=0, last=past.message)
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
    refusal = _exhausted(handler, past, attempts=past.retries + 1, delay=outcome.delay or 0, last=last)
    if refusal is not None:
        logger.error("%s", refusal)
        return HandlerOutcome(final=True, exception=refusal)
    return outcome


async def run_changing(
        handler: ChangingHandler,
        past: Past,
        *,
        arguments: Arguments,
        executor: concurrent.futures.Executor | None,
        logger: Logger,
        children: subhandling.SubRunner,
        stopwatch: invocation.Stopwatch | None = None,
) -> HandlerOutcome:
    """
    One attempt of a handler of a cause, with the sub-handlers it declares.

    The sub-handlers are run by ``children`` (the caller knows their state
    and storage); the outcome names them in ``subrefs``, so that their
    records are purged together with their parent's. The ``stopwatch``, if
    given, counts the handler's own time.
    """
    context = subhandling.SubhandlingContext(parent_id=handler.id, run=children)
    kwargs = arguments.for_handler(handler).with_attempt(past).render()

    async def call() -> Any:
        token = subhandling.subhandling_context.set(context)
        try:
            result = await invocation.invoke(handler.fn, kwargs=kwargs, executor=executor, stopwatch=stopwatch)
        finally:
            subhandling.subhandling_context.reset(token)
        await subhandling.run_pending(context)
        return result

    outcome = await attempt(handler, past, call=call, logger=logger)
    return dataclasses.replace(outcome, subrefs=frozenset(context.executed))


async def run_watching(
        handler: WatchingHandler,
        *,
        arguments: Arguments,
        executor: concurrent.futures.Executor | None,
        logger: Logger,
) -> None:
    """An event handler: one call, no state, no retries; its errors are only logged."""
    try:
        await invocation.invoke(handler.fn, kwargs=arguments.for_handler(handler).render(), executor=executor)
    except Exception:
        logger.exception("%s has failed; event handlers are not retried.", handler)
    else:
        logger.info("%s succeeded.", handler)  # as Kopf logs it, for every event


def _exhausted(
        handler: BaseHandler,
        past: Past,
        *,
        attempts: int,
        delay: float,
        last: str | None,
) -> PermanentError | None:
    """Why the handler may not be attempted (again) in ``delay`` seconds, if it may not."""
    reason = f" The last error: {last}" if last else ""
    if handler.retries is not None and attempts >= handler.retries:
        return HandlerRetriesError(f"{handler} has used up its {handler.retries} attempt(s).{reason}")
    runtime = past.runtime + datetime.timedelta(seconds=delay)
    if handler.timeout is not None and runtime > datetime.timedelta(seconds=handler.timeout):
        return HandlerTimeoutError(f"{handler} has run out of its {handler.timeout} seconds.{reason}")
    return None


def _text(e: BaseException) -> str:
    return str(e) or type(e).__name__
