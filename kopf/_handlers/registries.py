"""
Registries: which handlers exist, for which resources and causes.

Handlers are immutable descriptions of the user's functions and their
options. The :class:`OperatorRegistry` keeps a :class:`~kopf._handlers.tables.HandlerTable`
of each kind of handler, by the unresolved resource selector they were
declared for (activity handlers by their activity), each table with the
kind's rule of which handlers may not stand together; the glue resolves
the selectors against the cluster and asks the registry for the handlers
of each resource.

A module-level default registry collects the handlers of the decorators that
are used without ``registry=`` -- the only global mutable state of the framework
besides the default lifecycle.
"""
from __future__ import annotations

import dataclasses
import enum
import inspect
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from typing import Any

from kopf._handlers import filters, invocation
from kopf._handlers.reasons import Reason
from kopf._handlers.tables import HandlerTable
from kopf._handlers.tables import ResourceKey as ResourceKey  # how the glue refers to resources
from kopf._structs import dicts
from kopf._structs.bodies import Body
from kopf._structs.ids import HandlerId
from kopf._structs.resources import Selector
from kopf._structs.reviews import Operation, WebhookType
from kopf.errors import ErrorsMode, HandlerSignatureError

DEFAULT_BACKOFF = 60.0


class Activity(str, enum.Enum):
    """Operator-level activities, not related to any object."""

    STARTUP = 'startup'
    CLEANUP = 'cleanup'
    LOGIN = 'login'
    PROBE = 'probe'

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True, kw_only=True)
class BaseHandler:
    """A user's function with the options that govern its retries."""

    fn: Callable[..., Any]
    id: HandlerId
    param: Any = dataclasses.field(default=None, hash=False)
    errors: ErrorsMode | None = None
    timeout: float | None = None
    retries: int | None = None
    backoff: float | None = None

    def __str__(self) -> str:
        return f"Handler {self.id!r}"

    def __post_init__(self) -> None:
        """Options are checked when a handler is declared, not when it first runs (and fails every time)."""
        check_id(self.id, self.fn)
        check_signature(self.fn)
        if self.errors is not None and not isinstance(self.errors, ErrorsMode):
            try:  # Kopf's users sometimes write errors='permanent': take it, as it is unambiguous
                object.__setattr__(self, 'errors', ErrorsMode(self.errors))
            except ValueError:
                raise ValueError(f"errors= must be a kopf.ErrorsMode (TEMPORARY, PERMANENT or IGNORED), "
                                 f"got {self.errors!r} (for {_fn_name(self.fn)}).") from None
        check_policy_types(retries=self.retries, timeout=self.timeout, backoff=self.backoff, fn=self.fn)


def check_policy_types(*, retries: Any, timeout: Any, backoff: Any, fn: Callable[..., Any] | None = None) -> None:
    """The retry policy is a whole number of attempts and numbers of seconds; refused otherwise, naming the option."""
    where = f" (for {_fn_name(fn)})" if fn is not None else ""
    numbers: list[tuple[str, Any, type | tuple[type, ...]]] = [
        ('retries', retries, int), ('timeout', timeout, (int, float)), ('backoff', backoff, (int, float))]
    for option, value, number in numbers:
        if value is not None and (isinstance(value, bool) or not isinstance(value, number)):
            raise TypeError(f"{option}= must be a number, got {type(value).__name__}: {value!r}{where}.")


def check_id(handler_id: Any, fn: Callable[..., Any]) -> None:
    """A handler id must be a non-empty string: progress is stored by it, in annotation keys."""
    if not isinstance(handler_id, str):
        raise TypeError(f"A handler's id= must be a string, got {type(handler_id).__name__}: {handler_id!r} "
                        f"(for {_fn_name(fn)}).")
    if not handler_id.strip():
        raise ValueError(f"A handler's id= must not be empty, got {handler_id!r} (for {_fn_name(fn)}). "
                         f"Leave it out to use the function's name.")


def check_signature(fn: Callable[..., Any]) -> None:
    """
    A handler is called with keyword arguments only, and with many of them: it must take ``**kwargs``.

    Every handler gets more keyword arguments than it names (``body``,
    ``spec``, ``logger``, ... and more in later versions), as in Kopf: a
    function without ``**kwargs`` -- or with a positional-only parameter
    that has no default -- would fail at every call, so it is refused when
    it is declared, with its name.
    """
    if not callable(fn):
        raise HandlerSignatureError(f"A handler must be a function, got {type(fn).__name__}: {fn!r}.")
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return  # no signature to judge by (some builtins and C callables): it is tried at the call
    where = _fn_name(fn)
    if not any(p.kind == inspect.Parameter.VAR_KEYWORD for p in parameters):
        names = ', '.join(p.name for p in parameters if p.kind != inspect.Parameter.VAR_POSITIONAL)
        raise HandlerSignatureError(
            f"The handler {where}({names}) cannot take the keyword arguments that every handler gets: "
            f"add **kwargs (or **_) to its parameters.")
    positional = [p.name for p in parameters
                  if p.kind == inspect.Parameter.POSITIONAL_ONLY and p.default is inspect.Parameter.empty]
    if positional:
        raise HandlerSignatureError(
            f"The handler {where} has positional-only parameters without defaults ({', '.join(positional)}), "
            f"but handlers get keyword arguments only: make them keyword parameters.")


def _fn_name(fn: Callable[..., Any]) -> str:
    module = getattr(fn, '__module__', None)
    name = getattr(fn, '__qualname__', None) or getattr(fn, '__name__', None)
    return f"{module}.{name}" if module and name else repr(fn)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ActivityHandler(BaseHandler):
    """A startup, cleanup or login handler."""

    activity: Activity


@dataclasses.dataclass(frozen=True, kw_only=True)
class ResourceHandler(BaseHandler):
    """A handler of objects, with the filters that narrow down the objects it handles."""

    labels: filters.MetaFilter | None = dataclasses.field(default=None, hash=False)
    annotations: filters.MetaFilter | None = dataclasses.field(default=None, hash=False)
    when: filters.WhenFilter | None = None
    field: dicts.FieldPath | None = None
    value: filters.ValueFilter = dataclasses.field(default=None, hash=False)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChangingHandler(ResourceHandler):
    """
    A handler of a cause: create, update, delete, resume, a field change, or a sub-handler.

    ``reason`` is ``None`` for field handlers (they join the create and update
    causes when their field changed) and for sub-handlers (they run with
    their parent's cause). ``old``/``new`` filter the field's change (see
    :attr:`watches_change`). ``deleted`` (resume handlers only) makes the
    handler run also when the object is found being deleted, beside the
    delete handlers.
    """

    reason: Reason | None = None
    optional: bool = False
    deleted: bool = False
    old: filters.ValueFilter = dataclasses.field(default=None, hash=False)
    new: filters.ValueFilter = dataclasses.field(default=None, hash=False)

    @property
    def watches_change(self) -> bool:
        """Whether the handler is about a change of its field (update and field handlers), not its value."""
        return bool(self.field) and self.reason in (None, Reason.UPDATE)


@dataclasses.dataclass(frozen=True, kw_only=True)
class WatchingHandler(ResourceHandler):
    """An event handler: called for every watch event, with no state and no retries."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class SpawningHandler(ResourceHandler):
    """
    A handler that runs beside an object for as long as the object exists and matches: a daemon or a timer.

    ``initial_delay`` (seconds, or a function of the handler's keyword
    arguments that returns them) postpones its first start for each object.
    Unless ``optional``, our finalizer holds the object's deletion until it
    has stopped.
    """

    initial_delay: float | Callable[..., float] | None = None
    optional: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class DaemonHandler(SpawningHandler):
    """
    A daemon: one long-running call per object, asked to stop through its ``stopped`` flag.

    When asked to stop, it gets ``cancellation_backoff`` seconds to exit on
    its own; then an ``async`` daemon is cancelled, and after
    ``cancellation_timeout`` more seconds it is abandoned (with a warning) so
    that the object's deletion can proceed. Without a timeout it is waited for,
    and reported every ``cancellation_polling`` seconds.
    """

    cancellation_backoff: float | None = None
    cancellation_timeout: float | None = None
    cancellation_polling: float | None = None

    def __str__(self) -> str:
        return f"Daemon {self.id!r}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class TimerHandler(SpawningHandler):
    """
    A timer: called every ``interval`` seconds per object (once, if there is no interval).

    With ``idle``, only once the object has not changed for that many
    seconds; with ``sharp``, the interval counts from the start of the
    previous call rather than from its end.
    """

    interval: float | None = None
    idle: float | None = None
    sharp: bool = False

    def __str__(self) -> str:
        return f"Timer {self.id!r}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class IndexingHandler(ResourceHandler):
    """
    An index function: called for every watch event, its results kept in an in-memory index.

    The index is passed to all handlers as the keyword argument named by the
    handler's id. ``errors=`` is ``IGNORED`` unless given.
    """


@dataclasses.dataclass(frozen=True, kw_only=True)
class AdmissionHandler(ResourceHandler):
    """
    A validating or mutating admission handler: called by the API server before it stores a change.

    ``operations`` (``None``: all) and ``subresource`` (``None``: the main
    resource only, ``'*'``: any) narrow down the requests; the other options
    describe the webhook to the API server.
    """

    type: WebhookType
    operations: frozenset[Operation] | None = None
    subresource: str | None = None
    persistent: bool = False
    side_effects: bool = False
    ignore_failures: bool = False


@dataclasses.dataclass(frozen=True)
class Relation:
    """
    A resource whose objects matter to a reconcile handler: owned children, or related objects.

    ``name`` is how the handler's ``children`` argument names the resource:
    as it was given to ``owns=`` or ``watches=``. Owned children are found by
    their owner references; related objects by the ``mapper``, which turns
    one of them into the owners to reconcile.
    """

    name: Hashable
    selector: Selector
    mapper: Callable[..., Any] | None = dataclasses.field(default=None, compare=False)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReconcilingHandler(ResourceHandler):
    """
    A reconcile handler: called with the object's current state whenever it or what it owns has changed.

    Calls are coalesced (``coalesce``: the quiet time after the last
    trigger), never concurrent for one object, retried after an exponential
    back-off from ``backoff`` up to ``max_backoff`` seconds, and repeated
    after ``resync`` seconds without a call (see :mod:`kopf._reconciliation`).
    """

    relations: tuple[Relation, ...] = ()
    resync: float | None = None
    coalesce: float | None = None
    max_backoff: float | None = None

    def __str__(self) -> str:
        return f"Reconciler {self.id!r}"

    @property
    def owns(self) -> tuple[Relation, ...]:
        return tuple(relation for relation in self.relations if relation.mapper is None)

    @property
    def watches(self) -> tuple[Relation, ...]:
        return tuple(relation for relation in self.relations if relation.mapper is not None)


def matches(handler: ResourceHandler, *, body: Body, kwargs: Mapping[str, Any]) -> bool:
    """Whether the handler's filters accept the object as it is; ``kwargs`` are what the filter callbacks get."""
    return filters.match(handler, body=body, kwargs=kwargs)


# Handlers that may run in the same handling cycle must have distinct ids,
# because their progress is stored by id. Resume handlers join the update
# cycles on the first sight of a changed object; field handlers join both
# create and update cycles.
def _cycles(handler: ChangingHandler) -> frozenset[Reason]:
    if handler.reason is None:
        return frozenset({Reason.CREATE, Reason.UPDATE})
    if handler.reason == Reason.RESUME:
        return frozenset({Reason.RESUME, Reason.UPDATE})
    return frozenset({handler.reason})


def _conflicts(a: ChangingHandler, b: ChangingHandler) -> bool:
    if a.id != b.id or not (_cycles(a) & _cycles(b)):
        return False
    # The same function as an update and a resume handler is one handler: it runs once.
    return not (a.fn == b.fn and a.reason != b.reason)


# The duplicate rules of the kinds of handlers: why a new handler may not stand beside a registered one.

def _duplicate_activity(activity: Activity, new: ActivityHandler, other: Activity, old: ActivityHandler) -> str | None:
    if activity != other or new.id != old.id:
        return None
    return (f"An {activity} handler with the id {new.id!r} is already registered ({old.fn!r}); "
            f"pass a unique id= to {new.fn!r}.")


def _duplicate_changing(selector: Selector, new: ChangingHandler, other: Selector, old: ChangingHandler) -> str | None:
    if selector != other or not _conflicts(old, new):
        return None
    return (f"Two handlers for {selector} share the id {new.id!r} and can run for the same cause "
            f"({_describe(old)} and {_describe(new)}); their progress would mix up. "
            f"Pass a unique id= to one of them.")


def _duplicate_watching(selector: Selector, new: WatchingHandler, other: Selector, old: WatchingHandler) -> str | None:
    if selector != other or new.id != old.id:
        return None
    return (f"Two event handlers for {selector} share the id {new.id!r} ({old.fn!r} and {new.fn!r}); "
            f"pass a unique id= to one of them.")


def _duplicate_spawning(selector: Selector, new: SpawningHandler, other: Selector, old: SpawningHandler) -> str | None:
    if selector != other or new.id != old.id:
        return None
    return (f"Two daemons or timers for {selector} share the id {new.id!r} ({old} {old.fn!r} and {new} {new.fn!r}); "
            f"pass a unique id= to one of them.")


def _duplicate_indexing(selector: Selector, new: IndexingHandler, other: Selector, old: IndexingHandler) -> str | None:
    # The id is the keyword argument of the index in every handler: one name, one index, across resources.
    if new.id != old.id:
        return None
    return (f"Two indexes are named {new.id!r} ({old.fn!r} for {other} and {new.fn!r} for {selector}); "
            f"handlers get indexes by name. Pass a unique id= to one of them.")


def _duplicate_admission(_: Selector, new: AdmissionHandler, __: Selector, old: AdmissionHandler) -> str | None:
    # The id is the webhook's URL path and name: one id is one function, even across resources.
    if new.id != old.id or (new.fn == old.fn and new.type == old.type):
        return None
    return (f"Two admission handlers share the id {new.id!r} ({old.type} {old.fn!r} and {new.type} {new.fn!r}); "
            f"their webhooks would mix up. Pass a unique id= to one of them.")


def _duplicate_reconciling(
        selector: Selector, new: ReconcilingHandler, other: Selector, old: ReconcilingHandler,
) -> str | None:
    if selector != other or new.id != old.id:
        return None
    return (f"Two reconcile handlers for {selector} share the id {new.id!r} ({old.fn!r} and {new.fn!r}); "
            f"their back-off records would mix up. Pass a unique id= to one of them.")


def _duplicate_subhandler(_: None, new: ChangingHandler, __: None, old: ChangingHandler) -> str | None:
    if new.id != old.id:
        return None
    return f"Two sub-handlers share the id {new.id!r} ({old.fn!r} and {new.fn!r}); pass a unique id= to one of them."


def _describe(handler: ChangingHandler) -> str:
    kind = handler.reason.value if handler.reason is not None else 'field'
    return f"{kind} {handler.fn!r}"


class OperatorRegistry:
    """All handlers of an operator: a table of each kind, activity handlers by activity, the others by selector."""

    def __init__(self) -> None:
        self.activity: HandlerTable[Activity, ActivityHandler] = HandlerTable(_duplicate_activity)
        self.changing: HandlerTable[Selector, ChangingHandler] = HandlerTable(_duplicate_changing)
        self.watching: HandlerTable[Selector, WatchingHandler] = HandlerTable(_duplicate_watching)
        self.spawning: HandlerTable[Selector, SpawningHandler] = HandlerTable(_duplicate_spawning)
        self.indexing: HandlerTable[Selector, IndexingHandler] = HandlerTable(_duplicate_indexing)
        self.admission: HandlerTable[Selector, AdmissionHandler] = HandlerTable(_duplicate_admission)
        self.reconciling: HandlerTable[Selector, ReconcilingHandler] = HandlerTable(_duplicate_reconciling)

    # Registration.

    def register_activity_handler(self, handler: ActivityHandler) -> None:
        self.activity.add(handler.activity, handler)

    def register_changing_handler(self, selector: Selector, handler: ChangingHandler) -> None:
        self.changing.add(selector, handler)

    def register_watching_handler(self, selector: Selector, handler: WatchingHandler) -> None:
        self.watching.add(selector, handler)

    def register_spawning_handler(self, selector: Selector, handler: SpawningHandler) -> None:
        self.spawning.add(selector, handler)

    def register_admission_handler(self, selector: Selector, handler: AdmissionHandler) -> None:
        self.admission.add(selector, handler)

    def register_indexing_handler(self, selector: Selector, handler: IndexingHandler) -> None:
        self.indexing.add(selector, handler)

    def register_reconciling_handler(self, selector: Selector, handler: ReconcilingHandler) -> None:
        self.reconciling.add(selector, handler)

    # Queries.

    @property
    def selectors(self) -> tuple[Selector, ...]:
        """All resources with handlers (and those that reconcile handlers watch), in the order of registration."""
        tables = (self.changing, self.watching, self.spawning, self.indexing, self.reconciling)
        declared = [selector for table in tables for selector in table.keys()]
        return tuple(dict.fromkeys([*declared, *self.related_selectors]))

    @property
    def related_selectors(self) -> tuple[Selector, ...]:
        """The resources that reconcile handlers own or watch, in the order of registration."""
        return tuple(dict.fromkeys(relation.selector for _, handler in self.reconciling
                                   for relation in handler.relations))

    def is_related_only(self, resource: ResourceKey) -> bool:
        """Whether a resource is watched only for reconcile handlers of other resources: nothing handles its objects."""
        tables = (self.changing, self.watching, self.spawning, self.indexing, self.reconciling)
        return not any(table.serving(resource) for table in tables)

    @property
    def admission_selectors(self) -> tuple[Selector, ...]:
        """All resources with admission handlers, in the order of their first registration."""
        return self.admission.keys()

    def iter_admission_handlers(self) -> Iterator[tuple[Selector, AdmissionHandler]]:
        """All admission handlers with the resources they were declared for, resource by resource."""
        return iter(self.admission)

    def get_admission_handlers(
            self,
            resource: ResourceKey,
            type: WebhookType | None = None,
    ) -> list[AdmissionHandler]:
        """The admission handlers of a resource: all, or only the validating or mutating ones."""
        return [h for h in self.admission.serving(resource) if type is None or h.type == type]

    def has_admission_handlers(self) -> bool:
        return bool(len(self.admission))

    def iter_indexing_handlers(self) -> Iterator[tuple[Selector, IndexingHandler]]:
        """All index functions with the resources they were declared for."""
        return iter(self.indexing)

    def get_indexing_handlers(self, resource: ResourceKey) -> list[IndexingHandler]:
        return list(self.indexing.serving(resource))

    def get_activity_handlers(self, activity: Activity) -> list[ActivityHandler]:
        return self.activity.declared_for(activity)

    def iter_reconciling_handlers(self) -> Iterator[tuple[Selector, ReconcilingHandler]]:
        """All reconcile handlers with the resources they were declared for."""
        return iter(self.reconciling)

    def get_reconciling_handlers(self, resource: ResourceKey) -> list[ReconcilingHandler]:
        return list(self.reconciling.serving(resource))

    def has_reconciling_handlers(self, resource: ResourceKey) -> bool:
        return bool(self.reconciling.serving(resource))

    def get_watching_handlers(self, resource: ResourceKey) -> list[WatchingHandler]:
        return list(self.watching.serving(resource))

    def get_changing_handlers(self, resource: ResourceKey, reason: Reason) -> list[ChangingHandler]:
        """The handlers declared for one cause: create, update, delete or resume."""
        return [h for h in self.changing.serving(resource) if h.reason == reason]

    def get_field_handlers(self, resource: ResourceKey) -> list[ChangingHandler]:
        return [h for h in self.changing.serving(resource) if h.reason is None]

    def get_all_changing_handlers(self, resource: ResourceKey) -> list[ChangingHandler]:
        return list(self.changing.serving(resource))

    def has_changing_handlers(self, resource: ResourceKey) -> bool:
        return bool(self.changing.serving(resource))

    def get_spawning_handlers(self, resource: ResourceKey) -> list[SpawningHandler]:
        """The daemons and timers of a resource, in their registration order."""
        return list(self.spawning.serving(resource))

    def has_spawning_handlers(self, resource: ResourceKey) -> bool:
        return bool(self.spawning.serving(resource))

    def get_extra_fields(self, resource: ResourceKey) -> list[dicts.FieldPath]:
        """
        Fields whose changes handlers watch, outside of what the diff-base keeps by itself.

        The essence keeps the spec, labels, annotations and other top-level
        user fields, but not the status: a field handler (or an update
        handler with ``field=``) on ``status.x`` needs ``status.x`` to be
        added explicitly.
        """
        fields = [h.field for h in self.changing.serving(resource) if h.field and h.watches_change]
        return list(dict.fromkeys(f for f in fields if f[0] not in ('spec', 'metadata')))

    def requires_finalizer(
            self,
            resource: ResourceKey,
            body: Body,
            *,
            kwargs: Mapping[str, Any] | None = None,
    ) -> bool:
        """
        Whether our finalizer must block the object's deletion.

        It must if any non-optional delete handler is interested in the
        object. ``when=`` filters receive ``kwargs`` (by default, those that
        describe the object).
        """
        kwargs = invocation.body_kwargs(body) if kwargs is None else kwargs
        return any(
            matches(handler, body=body, kwargs=kwargs)
            for handler in self.get_changing_handlers(resource, Reason.DELETE)
            if not handler.optional
        )


class SubRegistry:
    """The sub-handlers that one parent handler registers during one invocation, in order."""

    def __init__(self, handlers: Iterable[ChangingHandler] = ()) -> None:
        self._table: HandlerTable[None, ChangingHandler] = HandlerTable(_duplicate_subhandler)
        for handler in handlers:
            self.register(handler)

    def register(self, handler: ChangingHandler) -> None:
        self._table.add(None, handler)

    def __iter__(self) -> Iterator[ChangingHandler]:
        return iter(self._table.declared_for(None))

    def __len__(self) -> int:
        return len(self._table)


_default_registry = OperatorRegistry()


def get_default_registry() -> OperatorRegistry:
    """The registry of the decorators used without ``registry=``."""
    return _default_registry


def set_default_registry(registry: OperatorRegistry) -> None:
    """Replace the default registry, e.g. to isolate tests or embedded operators."""
    global _default_registry
    _default_registry = registry
