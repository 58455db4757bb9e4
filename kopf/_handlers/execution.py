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
* Retries are never scheduled more than :data:`MAX_DELAY` (a day) ahead; a
  delay that is not a number of seconds is replaced by the back-off. Both
  are reported.
* A result must be storable in ``status.<handler id>``: JSON values only
  (read-only views of the object, such as ``spec``, are copied as dicts),
  at most :data:`MAX_RESULT_SIZE`. A result that is not is the handler's
  failure (:class:`ResultError`), treated as its ``errors=`` says, and it is
  never sent: the server would refuse it, after the handler's success was
  reported.

This module only judges; it keeps no state. Where the handler stands in its
retries comes in (as :class:`~kopf._handlers.arguments.Attempts`), the outcome
goes out, and :mod:`kopf._handlers.progression` turns it into the next state.
"""
from __future__ import annotations

import concurrent.futures
import contextvars
import dataclasses
import datetime
import json
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from kopf import errors
from kopf._handlers import filters, invocation, subhandling
from kopf._handlers.arguments import Arguments, Attempts
from kopf._handlers.registries import DEFAULT_BACKOFF, BaseHandler, ChangingHandler, WatchingHandler
from kopf._observability import recording
from kopf._structs.ids import HandlerId
from kopf._structs.typedefs import Logger
from kopf.errors import (
    ErrorsMode,
    HandlerChildrenRetry,
    HandlerRetriesError,
    HandlerTimeoutError,
    PermanentError,
    TemporaryError,
)

# Retries are never scheduled further ahead than this; a stored time beyond it is not plausible.
MAX_DELAY = 24 * 60 * 60.0
# The largest result stored in ``status.<handler id>``: the whole object is limited to about 1.5 MiB (etcd).
MAX_RESULT_SIZE = 512 * 1024
# Results nested deeper than this are refused (they are also how a circular structure shows).
MAX_RESULT_DEPTH = 100

# The handlers attempted in the current handling cycle, in order, if the caller keeps count (for its messages).
attempted: contextvars.ContextVar[list[HandlerId] | None] = contextvars.ContextVar('kopf.attempted', default=None)


class Observer(Protocol):
    """Who watches the handlers of a cycle run in memory (the test kit): every call, and every outcome."""

    def called(self, handler: BaseHandler, kwargs: Mapping[str, Any]) -> None: ...

    def judged(self, handler: BaseHandler, outcome: HandlerOutcome) -> None: ...


# Set only by the test kit around a cycle it runs; nobody observes a running operator.
observer: contextvars.ContextVar[Observer | None] = contextvars.ContextVar('kopf.observer', default=None)


class ResultError(Exception):
    """A handler's result cannot be stored: not a JSON value, or too large. Its message says why."""


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
        default_backoff: float = DEFAULT_BACKOFF,
) -> HandlerOutcome:
    """
    Call the handler once (unless its time or retries are over) and judge the outcome.

    ``default_backoff`` is the retry delay of a handler without ``backoff=``
    (``settings.execution.default_backoff``).
    """
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
        logger.error("%s failed temporarily: %s", handler, errors.message(e))
        delay = sane_delay(handler, e.delay, default=default_backoff, logger=logger)
        outcome = HandlerOutcome(final=False, delay=delay, exception=e)
    except PermanentError as e:
        logger.error("%s failed permanently: %s", handler, errors.message(e))
        return HandlerOutcome(final=True, exception=e)
    except Exception as e:
        mode = handler.errors or ErrorsMode.TEMPORARY
        if mode == ErrorsMode.IGNORED:
            _report(logger, handler, e, "it is ignored.")
            return HandlerOutcome(final=True)
        if mode == ErrorsMode.PERMANENT:
            _report(logger, handler, e, "it will not be retried.")
            return HandlerOutcome(final=True, exception=e)
        delay = backoff(handler, default=default_backoff, logger=logger)
        limit = _limit(handler, past, attempts=past.retries + 1, delay=delay)
        if limit is not None:  # one line says both: the error (with its traceback) and why it is the last
            error, words = limit
            _report(logger, handler, e, f"it will not be retried: it {words}.")
            text = errors.message(e)
            return HandlerOutcome(final=True, exception=error(f"{handler} {words}. The last error: {text}"))
        _report(logger, handler, e, f"it will be retried in {delay:g}s.")
        outcome = HandlerOutcome(final=False, delay=delay, exception=e)
    else:
        logger.info("%s succeeded.", handler)
        return HandlerOutcome(final=True, result=result)

    # Do not wait for a retry that would be refused anyway.
    last = errors.message(outcome.exception) if outcome.exception is not None else None
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
    context = subhandling.SubhandlingContext(parent_id=handler.id, run=children,
                                             selects=_sub_selector(arguments.for_handler(handler), logger=logger))
    kwargs = arguments.for_handler(handler).with_attempt(past).render()
    trail = attempted.get()
    if trail is not None:
        trail.append(handler.id)

    watcher = observer.get()

    async def call() -> Any:
        if watcher is not None:
            watcher.called(handler, kwargs)
        token = subhandling.subhandling_context.set(context)
        try:
            result = await invocation.invoke(handler.fn, kwargs=kwargs, executor=executor, stopwatch=stopwatch)
        finally:
            subhandling.subhandling_context.reset(token)
        await subhandling.run_pending(context)
        return storable(handler, result)

    default_backoff = arguments.operator.config.execution.default_backoff
    resource, cause = arguments.object.resource if arguments.object else None, arguments.cause
    with recording.current().handler(resource, cause.reason.value if cause else '', handler.id) as call_scope:
        outcome = await attempt(handler, past, call=call, logger=logger, default_backoff=default_backoff)
        call_scope.ended(final=outcome.final, error=outcome.exception)
    if context.executed or outcome.subrefs:
        outcome = dataclasses.replace(outcome, subrefs=frozenset(context.executed))
    if watcher is not None:
        watcher.judged(handler, outcome)
    return outcome


def _sub_selector(parent: Arguments, *, logger: Logger) -> subhandling.SubSelector:
    """
    Whether a sub-handler's filters accept the object, as its parent sees it; a failing filter skips it.

    ``field=``/``value=`` check the field's current value; ``old=``/``new=``
    how the parent's cause has changed it (as for the handlers of changes).
    """
    def selects(child: ChangingHandler) -> bool:
        if not (child.labels or child.annotations or child.when is not None or child.field):
            return True  # no filters: nothing to render and ask
        assert parent.object is not None, "Only handlers of objects have sub-handlers."
        view = parent.for_handler(child)
        transition: filters.Transition | None = None
        if child.field and (child.old is not None or child.new is not None) and view.cause is not None:
            transition = filters.Transition(before=view.cause.old, after=view.cause.new,
                                            changed=bool(view.cause.diff), old=child.old, new=child.new)
        try:
            return filters.match(child, body=parent.object.body, kwargs=view.render(), transition=transition)
        except Exception:
            logger.exception("The filters of %s have failed; the sub-handler is skipped.", child)
            return False
    return selects


async def run_watching(
        handler: WatchingHandler,
        *,
        arguments: Arguments,
        executor: concurrent.futures.Executor | None,
        logger: Logger,
) -> None:
    """An event handler: one call, no state, no retries; its errors are only logged."""
    kwargs = arguments.for_handler(handler).render()
    watcher = observer.get()
    if watcher is not None:
        watcher.called(handler, kwargs)
    try:
        await invocation.invoke(handler.fn, kwargs=kwargs, executor=executor)
    except Exception as e:
        logger.exception("%s has failed; event handlers are not retried.", handler)
        if watcher is not None:
            watcher.judged(handler, HandlerOutcome(final=True, exception=e))
    else:
        logger.info("%s succeeded.", handler)  # as Kopf logs it, for every event
        if watcher is not None:
            watcher.judged(handler, HandlerOutcome(final=True))


def _exhausted(
        handler: BaseHandler,
        past: Past,
        *,
        attempts: int,
        delay: float,
        last: str | None,
) -> PermanentError | None:
    """Why the handler may not be attempted (again) in ``delay`` seconds, if it may not."""
    limit = _limit(handler, past, attempts=attempts, delay=delay)
    if limit is None:
        return None
    error, words = limit
    reason = f" The last error: {last}" if last else ""
    return error(f"{handler} {words}.{reason}")


def _limit(
        handler: BaseHandler,
        past: Past,
        *,
        attempts: int,
        delay: float,
) -> tuple[type[PermanentError], str] | None:
    """Which limit forbids the attempt after ``attempts`` attempts and ``delay`` seconds, in words."""
    if handler.retries is not None and attempts >= handler.retries:
        return HandlerRetriesError, f"has used up its {handler.retries} attempt(s)"
    runtime = past.runtime + datetime.timedelta(seconds=delay)
    if handler.timeout is not None and runtime > datetime.timedelta(seconds=handler.timeout):
        return HandlerTimeoutError, f"has run out of its {handler.timeout} seconds"
    return None


def _report(logger: Logger, handler: BaseHandler, e: Exception, consequence: str) -> None:
    """A handler's unexpected exception, with its traceback -- unless the framework explains it itself."""
    if isinstance(e, ResultError):
        logger.error("%s %s", e, consequence[:1].upper() + consequence[1:])  # the message names the handler
    else:
        logger.exception("%s failed with an exception; %s", handler, consequence)


def backoff(handler: BaseHandler, *, default: float = DEFAULT_BACKOFF, logger: Logger) -> float:
    """
    The pause before a handler's retry after an unexpected exception, within limits.

    It is the handler's ``backoff=``, else the ``default``
    (``settings.execution.default_backoff``, as in Kopf).
    """
    if handler.backoff is None and not _is_seconds(default):
        logger.warning("settings.execution.default_backoff must be a number of seconds, got %.100r; "
                       "retrying %s in %gs instead.", default, handler, DEFAULT_BACKOFF)
        return DEFAULT_BACKOFF
    given = handler.backoff if handler.backoff is not None else default
    delay = sane_delay(handler, given, default=default, logger=logger)
    return delay if delay is not None else DEFAULT_BACKOFF


def _is_seconds(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and not math.isnan(value)


def sane_delay(handler: BaseHandler, delay: Any, *, default: float = DEFAULT_BACKOFF, logger: Logger) -> float | None:
    """
    A retry delay that the handling can live with: a number of seconds from 0 to :data:`MAX_DELAY`.

    ``None`` stays (as soon as possible), negative numbers mean now. Longer
    delays are cut to the maximum, anything else becomes the back-off (the
    handler's, else the ``default``); both are reported.
    """
    if delay is None:
        return None
    if not _is_seconds(delay):
        fallback = handler.backoff if handler.backoff is not None else default
        fallback = min(max(float(fallback if _is_seconds(fallback) else DEFAULT_BACKOFF), 0.0), MAX_DELAY)
        logger.warning("%s asked for a retry in %.100r seconds, which is not a number of seconds; "
                       "retrying in %gs (the back-off) instead.", handler, delay, fallback)
        return fallback
    if delay > MAX_DELAY:
        logger.warning("%s asked for a retry in %gs, more than the maximum of %gs (a day); "
                       "retrying in %gs instead.", handler, delay, MAX_DELAY, MAX_DELAY)
        return MAX_DELAY
    return max(float(delay), 0.0)


def storable(handler: BaseHandler, result: Any) -> Any:
    """
    The result as it is stored in ``status.<handler id>``: plain JSON values, within the size limit.

    Raises :class:`ResultError`, naming what cannot be stored and where, if
    it cannot be stored at all.
    """
    if result is None:
        return None
    where = f"status.{handler.id}"
    try:
        value = _plain(result, path='', depth=0)
    except _Unstorable as e:
        place = f" at {e.path}" if e.path else ''
        raise ResultError(
            f"{handler} has returned a value that cannot be stored in {where}: {e.what}{place}. "
            f"Return only dicts, lists, strings, numbers, booleans and None (e.g. a list instead of "
            f"a set, an ISO-8601 string instead of a datetime).") from None
    size = len(json.dumps(value, separators=(',', ':'), ensure_ascii=False).encode('utf-8'))
    if size > MAX_RESULT_SIZE:
        raise ResultError(
            f"{handler} has returned {size:,} bytes of JSON ({_size(size)}), more than the "
            f"{_size(MAX_RESULT_SIZE)} that a result may have in {where}; it is not stored. Return less "
            f"(e.g. a summary), and keep large data elsewhere (e.g. in a ConfigMap).")
    return value


class _Unstorable(Exception):
    def __init__(self, what: str, path: str) -> None:
        super().__init__(what)
        self.what = what
        self.path = path


def _plain(value: Any, *, path: str, depth: int) -> Any:
    """A copy of the value made of JSON values only; mappings become dicts, tuples lists."""
    if depth > MAX_RESULT_DEPTH:
        raise _Unstorable(f"it is nested more than {MAX_RESULT_DEPTH} levels deep (or refers to itself)", path)
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Unstorable(f"{value!r} is not a JSON number", path)
        return value
    if isinstance(value, Mapping):
        result: dict[str, Any] = {}
        for key, item in value.items():
            if isinstance(key, int) and not isinstance(key, bool):
                key = str(key)
            if not isinstance(key, str):
                raise _Unstorable(f"a key of type {type(key).__name__} ({key!r:.50}), not a string", path)
            result[key] = _plain(item, path=f"{path}[{key!r}]", depth=depth + 1)
        return result
    if isinstance(value, (list, tuple)):
        return [_plain(item, path=f"{path}[{index}]", depth=depth + 1) for index, item in enumerate(value)]
    raise _Unstorable(f"a value of type {_type_name(value)}", path)


def _type_name(value: Any) -> str:
    cls = type(value)
    return cls.__qualname__ if cls.__module__ == 'builtins' else f"{cls.__module__}.{cls.__qualname__}"


def _size(size: int) -> str:
    return f"{size / 1024 / 1024:.1f} MiB" if size >= 1024 * 1024 else f"{size / 1024:.1f} KiB"
