"""
Sub-handlers: handlers that a handler declares at runtime, e.g. one per item of its spec.

Inside a handler, :func:`register` adds a sub-handler, and :func:`execute`
runs sub-handlers right away. Sub-handlers get the ids ``parent/child`` and
keep their progress like any handler; the parent is finished only when all
its sub-handlers are. Sub-handlers that were registered but not executed
explicitly run after the parent returns.

Sub-handlers take the filters of handlers (``labels=``, ``annotations=``,
``when=``, ``field=`` with ``value=``, or ``old=``/``new=``), as in Kopf:
a sub-handler that they do not accept is not run, and its parent does not
wait for it. The filters see the object as the parent does (its cause, its
keyword arguments); ``field=``/``value=`` check the field's current value,
``old=``/``new=`` how the parent's cause has changed it.

Which parent is running is known from a context variable, set by the
handling cycle around each invocation; the handling cycle also provides how
to run the sub-handlers and which of them the filters accept, so that this
module does not depend on it.
"""
from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from kopf._handlers import declaring
from kopf._handlers.filters import MetaFilter, ValueFilter, WhenFilter
from kopf._handlers.lifecycles import LifeCycleFn
from kopf._handlers.registries import ChangingHandler, SubRegistry
from kopf._structs import dicts
from kopf._structs.ids import HandlerId
from kopf.errors import ErrorsMode

# Runs these sub-handlers of the current parent once; raises if they are not all finished successfully.
SubRunner = Callable[[Sequence[ChangingHandler], LifeCycleFn | None], Awaitable[None]]
# Whether a sub-handler's filters accept the object (as the parent sees it).
SubSelector = Callable[[ChangingHandler], bool]


def _everything(handler: ChangingHandler) -> bool:
    return True


@dataclasses.dataclass(frozen=True)
class SubhandlingContext:
    """What the currently running parent handler has declared and executed so far."""

    parent_id: HandlerId
    run: SubRunner
    registry: SubRegistry = dataclasses.field(default_factory=SubRegistry)
    executed: set[HandlerId] = dataclasses.field(default_factory=set)
    selects: SubSelector = _everything

    def child_id(self, id: str) -> HandlerId:
        return HandlerId(f"{self.parent_id}/{id}")

    @property
    def pending(self) -> list[ChangingHandler]:
        """Registered, but not yet executed sub-handlers."""
        return [handler for handler in self.registry if handler.id not in self.executed]


subhandling_context: contextvars.ContextVar[SubhandlingContext] = contextvars.ContextVar('kopf.subhandling')


def _current() -> SubhandlingContext:
    try:
        return subhandling_context.get()
    except LookupError:
        raise RuntimeError(
            "Sub-handlers can be registered and executed only from inside "
            "a create/update/delete/resume/field handler.") from None


def make_subhandler(
        fn: Callable[..., Any],
        *,
        context: SubhandlingContext,
        id: str | None = None,
        **options: Any,
) -> ChangingHandler:
    """A sub-handler of the running parent, with the options of :func:`register`; its id is ``parent/child``."""
    declaration = declaring.prepare(ChangingHandler, id=id, parent=context.parent_id, named_by_field=False, **options)
    return declaration.handler(fn)


def register(
        fn: Callable[..., Any],
        *,
        id: str | None = None,
        errors: ErrorsMode | None = None,
        timeout: float | None = None,
        retries: int | None = None,
        backoff: float | None = None,
        param: Any = None,
        labels: MetaFilter | None = None,
        annotations: MetaFilter | None = None,
        when: WhenFilter | None = None,
        field: dicts.FieldSpec | None = None,
        value: ValueFilter = None,
        old: ValueFilter = None,
        new: ValueFilter = None,
) -> Callable[..., Any]:
    """
    Declare a sub-handler of the running handler; it runs after the handler returns (or on execute).

    The filters are those of handlers: a sub-handler that they do not
    accept is skipped (see the module's docstring).
    """
    context = _current()
    context.registry.register(make_subhandler(
        fn, context=context, id=id, errors=errors, timeout=timeout, retries=retries,
        backoff=backoff, param=param, labels=labels, annotations=annotations, when=when,
        field=field, value=value, old=old, new=new))
    return fn


async def execute(
        *,
        fns: Iterable[Callable[..., Any]] | Mapping[str, Callable[..., Any]] | None = None,
        handlers: Iterable[ChangingHandler] | None = None,
        registry: SubRegistry | None = None,
        lifecycle: LifeCycleFn | None = None,
) -> None:
    """
    Run sub-handlers now, inside the running (``async``) handler.

    Without arguments, runs the sub-handlers registered with :func:`register`
    so far. ``fns`` are functions (or ``{id: function}``), ``handlers`` and
    ``registry`` are prepared sub-handlers. Returns when all of them have
    finished successfully; otherwise raises, so that the parent is retried
    when the soonest sub-handler is due (or fails if a sub-handler failed).
    Sub-handlers that succeeded earlier are never called again; those that
    their filters do not accept are not called at all.
    """
    context = _current()
    given = [arg for arg in (fns, handlers, registry) if arg is not None]
    if len(given) > 1:
        raise TypeError("Pass only one of fns=, handlers=, registry= to kopf.execute().")
    children: list[ChangingHandler]
    if fns is not None:
        items = fns.items() if isinstance(fns, Mapping) else [(None, fn) for fn in fns]
        children = [make_subhandler(fn, context=context, id=id) for id, fn in items]
    elif handlers is not None:
        children = [_adopt(handler, context) for handler in handlers]
    elif registry is not None:
        children = [_adopt(handler, context) for handler in registry]
    else:
        children = context.pending
    await _run(context, children, lifecycle)


async def run_pending(context: SubhandlingContext) -> None:
    """Run the sub-handlers that the parent registered but did not execute itself."""
    await _run(context, context.pending, None)


async def _run(context: SubhandlingContext, children: Sequence[ChangingHandler], lifecycle: LifeCycleFn | None) -> None:
    SubRegistry(children)  # validate the ids' uniqueness before anything runs
    # Within one invocation, the stored progress is not re-read: never run a child twice.
    fresh = [child for child in children if child.id not in context.executed and context.selects(child)]
    if fresh:
        context.executed.update(child.id for child in fresh)
        await context.run(fresh, lifecycle)


def _adopt(handler: ChangingHandler, context: SubhandlingContext) -> ChangingHandler:
    """Give a prepared handler its id under the parent (unless it has it already)."""
    prefix = f"{context.parent_id}/"
    if handler.id.startswith(prefix):
        return handler
    return dataclasses.replace(handler, id=context.child_id(handler.id))
