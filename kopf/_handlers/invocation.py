"""
Invocation: calling a user's function with the standard keyword arguments.

``async def`` functions are awaited directly; plain functions run in the
operator's executor, so that a blocking handler does not stop the event
loop. Context variables are copied into the executor's thread, so that
:func:`kopf.register` works in synchronous handlers too.

A :class:`Stopwatch` measures the time spent in the function itself: inside
the executor's thread for plain functions, so that waiting for a free thread
does not count.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from kopf._structs import hierarchies
from kopf._structs.bodies import Body


class Stopwatch:
    """Accumulates the time a function spends running; it can be paused (e.g. while others run inside it)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.elapsed = 0.0
        self._since: float | None = None

    def start(self) -> None:
        if self._since is None:
            self._since = self.clock()

    def stop(self) -> bool:
        """Stop counting; return whether it was counting."""
        if self._since is None:
            return False
        self.elapsed += self.clock() - self._since
        self._since = None
        return True


def body_kwargs(body: Body) -> dict[str, Any]:
    """The keyword arguments that describe the object itself."""
    meta = body.metadata
    return {
        'body': body,
        'spec': body.spec,
        'meta': meta,
        'status': body.status,
        'name': meta.name,
        'namespace': meta.namespace,
        'uid': meta.uid,
        'labels': meta.labels,
        'annotations': meta.annotations,
    }


def is_async(fn: Callable[..., Any]) -> bool:
    """Whether calling the function gives a coroutine (also for partials and callable objects)."""
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, '__call__', None)  # noqa: B004 -- looking for an async __call__
    return call is not None and inspect.iscoroutinefunction(call)


async def invoke(
        fn: Callable[..., Any],
        *,
        kwargs: Mapping[str, Any],
        executor: concurrent.futures.Executor | None = None,
        stopwatch: Stopwatch | None = None,
) -> Any:
    """
    Call the function with these keyword arguments and return its result.

    The object being handled is the default owner for :func:`kopf.adopt` & co.
    during the call, and only during it: the caller's context does not keep
    the object alive afterwards.
    """
    body = kwargs.get('body')
    token = hierarchies.owner_var.set(body) if isinstance(body, Mapping) else None
    try:
        if is_async(fn):
            return await _timed(fn(**kwargs), stopwatch)
        loop = asyncio.get_running_loop()
        context = contextvars.copy_context()
        call = functools.partial(_timed_call, fn, stopwatch) if stopwatch is not None else fn
        result = await loop.run_in_executor(executor, functools.partial(context.run, call, **kwargs))
        del context, call  # they hold the object too
        if inspect.isawaitable(result):  # e.g. a lambda returning a coroutine
            return await _timed(result, stopwatch)
        return result
    finally:
        if token is not None:
            hierarchies.owner_var.reset(token)


async def _timed(awaitable: Any, stopwatch: Stopwatch | None) -> Any:
    if stopwatch is not None:
        stopwatch.start()
    try:
        return await awaitable
    finally:
        if stopwatch is not None:
            stopwatch.stop()


def _timed_call(fn: Callable[..., Any], stopwatch: Stopwatch, /, **kwargs: Any) -> Any:
    """Call the function in the executor's thread, counting only its own time."""
    stopwatch.start()
    try:
        return fn(**kwargs)
    finally:
        stopwatch.stop()
