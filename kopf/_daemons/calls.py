"""
One call of a daemon or a timer: its arguments, the call itself, and what becomes of its outcome.

Daemons and timers follow the retry policy of all handlers
(:mod:`~kopf._handlers.execution` judges each outcome): an exception is
retried after the handler's ``backoff`` (or the :class:`kopf.TemporaryError`'s
``delay``) per ``errors=``, ``retries=``, ``timeout=``, with ``retry``,
``started``, ``runtime`` as usual. Their progress is kept in memory only: a
restarted operator starts them anew. Whatever a call writes into ``patch``,
and its result as ``status.<id>``, is applied to the object when the call
ends.

The keyword arguments are live views of the object (see :mod:`.objects`)
and the ``stopped`` flag. A plain (``def``) daemon runs in a thread of its
own -- a daemon thread, not one of the executor's -- since it may never
return: an abandoned one blocks no handler and does not hold up the
operator's exit.
"""
from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kopf._daemons.objects import Runner
from kopf._handlers import execution, invocation
from kopf._handlers.arguments import Arguments, ObjectArguments
from kopf._handlers.execution import HandlerOutcome
from kopf._handlers.progression import HandlerState
from kopf._handlers.registries import TimerHandler
from kopf._kube import patching
from kopf._kube.auth import APIContext
from kopf._observability import recording
from kopf._structs import hierarchies
from kopf._structs.bodies import Body
from kopf._structs.patches import Patch
from kopf._structs.resources import Resource
from kopf._structs.typedefs import Logger

# Applies the patch (and the result) of a call to its object.
Patcher = Callable[[Body, Patch, Logger], Awaitable[None]]


async def patch_object(body: Body, patch: Patch, logger: Logger, *, context: APIContext, resource: Resource) -> None:
    """Apply a daemon's or timer's patch (and its ``patch.fns``) to its object (nothing if the object is gone)."""
    await patching.patch_obj(context=context, resource=resource, namespace=body.metadata.namespace,
                             name=body.metadata.name or '', patch=patch, logger=logger, fns=patch.fns, body=body)


async def attempt(runner: Runner, state: HandlerState, *, patcher: Patcher) -> HandlerOutcome:
    """One call with the retry policy; its patch and result are applied to the object right after it."""
    handler, obj = runner.handler, runner.obj
    patch = Patch()
    arguments = kwargs(runner, patch, state)
    kind = 'timer' if isinstance(handler, TimerHandler) else 'daemon'
    with recording.current().handler(obj.resource, kind, handler.id) as call_scope:
        outcome = await execution.attempt(handler, state, call=functools.partial(invoke, runner, arguments),
                                          logger=obj.logger,
                                          default_backoff=obj.operator.config.execution.default_backoff)
        call_scope.ended(final=outcome.final, error=outcome.exception)
    del arguments
    if outcome.final and outcome.exception is None and outcome.result is not None:
        patch.status[handler.id] = outcome.result
    if patch:
        try:
            await patcher(Body(obj.raw), patch, obj.logger)
        except Exception as e:
            obj.logger.error("The patch of %s could not be applied to the object, and is lost: %s", handler, e)
    return outcome


async def invoke(runner: Runner, arguments: Mapping[str, Any]) -> Any:
    """One call; its result is checked as every handler's is: a result that cannot be stored fails it."""
    if runner.threaded:
        result = await call_in_thread(runner.handler.fn, arguments,
                                      name=f"kopf {runner.handler} of {runner.obj.describe()}")
    else:
        executor = runner.obj.operator.config.execution.executor
        result = await invocation.invoke(runner.handler.fn, kwargs=arguments, executor=executor)
    return execution.storable(runner.handler, result)


def kwargs(runner: Runner, patch: Patch, state: HandlerState | None) -> dict[str, Any]:
    """The handler's keyword arguments: live views of the object, its patch, its stop flag, its retries."""
    obj = runner.obj
    arguments = Arguments(operator=obj.operator, param=runner.handler.param,
                          object=ObjectArguments(body=obj.body, patch=patch, resource=obj.resource))
    if state is not None:
        arguments = arguments.with_attempt(state)
    rendered = arguments.render()
    rendered.update(obj.live_kwargs())
    is_async = invocation.is_async(runner.handler.fn)
    rendered['stopped'] = runner.stopper.async_checker if is_async else runner.stopper.sync_checker
    return rendered


async def call_in_thread(fn: Callable[..., Any], kwargs: Mapping[str, Any], *, name: str) -> Any:
    """
    Call a plain function in a daemon thread of its own, and wait for its result.

    If the waiting is cancelled, the thread runs on: threads cannot be stopped.
    Being a daemon thread, it does not keep the process alive at exit.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()
    body = kwargs.get('body')
    if isinstance(body, Mapping):
        context.run(hierarchies.owner_var.set, body)  # kopf.adopt() & co. know the object in the thread too

    def target() -> None:
        try:
            result = context.run(fn, **kwargs)
        except BaseException as e:
            settle = functools.partial(_settle, future, None, e)
        else:
            settle = functools.partial(_settle, future, result, None)
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(settle)

    threading.Thread(target=target, name=name, daemon=True).start()
    result = await future
    if inspect.isawaitable(result):
        return await result
    return result


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
