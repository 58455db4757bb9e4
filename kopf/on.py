"""
The decorators that declare handlers: ``@kopf.on.create('kopfexamples')`` and the like.

The resource is given as Kopf's users give it: its name (a plural, a
singular, a kind or a short name, in any case) as the rightmost positional
argument, optionally preceded by its group and version (``'kopf.dev', 'v1'``,
``'kopf.dev/v1'``, ``'v1'`` for the core API, or a group alone); or in
``kubectl``'s dotted forms (``'kopfexamples.kopf.dev'``); or by keywords
(``kind=``, ``plural=``, ``singular=``, ``shortcut=``, ``category=``,
``group=``, ``version=``); or as ``kopf.EVERYTHING`` or a callable that
selects among the served resources (see
:meth:`~kopf._structs.resources.Selector.from_args`). It is resolved against
the cluster when the operator starts. Each decorator registers the function and returns it
unchanged, so that decorators can be stacked.
"""
from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

from typing_extensions import Unpack

from kopf._handlers import declaring, registries, subhandling
from kopf._handlers.filters import MetaFilter, ValueFilter, WhenFilter
from kopf._handlers.reasons import Reason
from kopf._handlers.registries import (
    Activity,
    ActivityHandler,
    AdmissionHandler,
    ChangingHandler,
    DaemonHandler,
    IndexingHandler,
    OperatorRegistry,
    ReconcilingHandler,
    TimerHandler,
    WatchingHandler,
)
from kopf._structs import dicts
from kopf._structs.resources import ResourceArg, ResourceNames, Selector
from kopf._structs.reviews import Operation, WebhookType
from kopf.errors import ErrorsMode

F = TypeVar('F', bound=Callable[..., Any])
H = TypeVar('H', bound=registries.BaseHandler)
Decorator = Callable[[F], F]

# What the decorators return, for those who annotate them (the names of Kopf).
ActivityDecorator = Decorator[Callable[..., Any]]
ChangingDecorator = Decorator[Callable[..., Any]]
WatchingDecorator = Decorator[Callable[..., Any]]
IndexingDecorator = Decorator[Callable[..., Any]]
WebhookDecorator = Decorator[Callable[..., Any]]
DaemonDecorator = Decorator[Callable[..., Any]]
TimerDecorator = Decorator[Callable[..., Any]]
ReconcileDecorator = Decorator[Callable[..., Any]]

register = subhandling.register
execute = subhandling.execute


def startup(
        *,
        id: str | None = None,
        errors: ErrorsMode | None = None,
        timeout: float | None = None,
        retries: int | None = None,
        backoff: float | None = None,
        param: Any = None,
        registry: OperatorRegistry | None = None,
) -> Decorator[F]:
    """Called once when the operator starts, before any object is handled; it may configure the operator."""
    return _activity(Activity.STARTUP, registry, id=id, errors=errors, timeout=timeout, retries=retries,
                     backoff=backoff, param=param)


def cleanup(
        *,
        id: str | None = None,
        errors: ErrorsMode | None = None,
        timeout: float | None = None,
        retries: int | None = None,
        backoff: float | None = None,
        param: Any = None,
        registry: OperatorRegistry | None = None,
) -> Decorator[F]:
    """Called once when the operator exits."""
    return _activity(Activity.CLEANUP, registry, id=id, errors=errors, timeout=timeout, retries=retries,
                     backoff=backoff, param=param)


def login(
        *,
        id: str | None = None,
        errors: ErrorsMode | None = None,
        timeout: float | None = None,
        retries: int | None = None,
        backoff: float | None = None,
        param: Any = None,
        registry: OperatorRegistry | None = None,
) -> Decorator[F]:
    """Called to get the credentials for the Kubernetes API (again when they stop working)."""
    return _activity(Activity.LOGIN, registry, id=id, errors=errors, timeout=timeout, retries=retries,
                     backoff=backoff, param=param)


def probe(
        *,
        id: str | None = None,
        errors: ErrorsMode | None = None,
        timeout: float | None = None,
        retries: int | None = None,
        backoff: float | None = None,
        param: Any = None,
        registry: OperatorRegistry | None = None,
) -> Decorator[F]:
    """
    Called when the liveness endpoint is requested (``kopf run --liveness URL``); reports its result.

    The endpoint answers with ``{id: result, ...}`` of all probes. Each probe
    is called once per run, without retries: a probe that raises makes the
    operator unhealthy (unless ``errors=kopf.ErrorsMode.IGNORED``).
    """
    return _activity(Activity.PROBE, registry, id=id, errors=errors, timeout=timeout, retries=retries,
                     backoff=backoff, param=param)


def create(
        *resource: ResourceArg | None,
        id: str | None = None,
        retries: int | None = None,
        timeout: float | None = None,
        backoff: float | None = None,
        errors: ErrorsMode = ErrorsMode.TEMPORARY,
        labels: MetaFilter | None = None,
        annotations: MetaFilter | None = None,
        when: WhenFilter | None = None,
        field: dicts.FieldSpec | None = None,
        value: ValueFilter = None,
        param: Any = None,
        registry: OperatorRegistry | None = None,
        **names: Unpack[ResourceNames],
) -> Decorator[F]:
    """
    Called when an object is created (or first seen without a last-handled configuration).

    ``field=`` with ``value=`` (default: ``kopf.PRESENT``) narrows it down to
    objects with that field's value, as do the other handlers' ``field=``.
    """
    return _resource(ChangingHandler, OperatorRegistry.register_changing_handler, resource, names, registry,
                     reason=Reason.CREATE, id=id, retries=retries, timeout=timeout, backoff=backoff, errors=errors,
                     labels=labels, annotations=annotations, when=when, field=field, value=value, param=param)


def update(
        *resource: ResourceArg | None,
        id: str | None = None,
        retries: int | None = None,
        timeout: float | None = None,
        backoff: float | None = None,
        errors: ErrorsMode = ErrorsMode.TEMPORARY,
        labels: MetaFilter | None = None,
        annotations: MetaFilter | None = None,
        when: WhenFilter | None = None,
        field: dicts.FieldSpec | None = None,
        value: ValueFilter = None,
        old: ValueFilter = None,
        new: ValueFilter = None,
        param: Any = None,
        registry: OperatorRegistry | None = None,
        **names: Unpack[ResourceNames],
) -> Decorator[F]:
    """
    Called when an object's essence (spec, labels, annotations, ...) has changed; ``diff`` says how.

    With ``field=``, only when that field has changed (``old``, ``new``,
    ``diff`` are the field's); ``value=`` narrows it down to changes from or
    to a value, ``old=``/``new=`` to changes from and to values.
    """
    return _resource(ChangingHandler, OperatorRegistry.register_changing_handler, resource, names, registry,
                     reason=Reason.UPDATE, id=id, retries=retries, timeout=timeout, backoff=backoff, errors=errors,
                     labels=labels, annotations=annotations, when=when, field=field, value=value, old=old, new=new,
                     param=param)


def resume(
        *resource: ResourceArg | None,
        id: str | None = None,
        retries: int | None = None,
        timeout: float | None = None,
        backoff: float | None = None,
        errors: ErrorsMode = ErrorsMode.TEMPORARY,
        labels: MetaFilter | None = None,
        annotations: MetaFilter | None = None,
        when: WhenFilter | None = None,
        field: dicts.FieldSpec | None = None,
        value: ValueFilter = None,
        deleted: bool = False,
        param: Any = None,
        registry: OperatorRegistry | None = None,
        **names: Unpack[ResourceNames],
) -> Decorator[F]:
    """
    Called when the operator starts and finds an object that it has handled before.

    An object found being deleted is not resumed, only deleted -- unless
    ``deleted=True``: then this handler runs beside the delete handlers.
    """
    return _resource(ChangingHandler, OperatorRegistry.register_changing_handler, resource, names, registry,
                     reason=Reason.RESUME, id=id, retries=retries, timeout=timeout, backoff=backoff, errors=errors,
                     labels=labels, annotations=annotations, when=when, field=field, value=value, deleted=deleted,
                     param=param)


def delete(
        *resource: ResourceArg | None,
        id: str | None = None,
        retries: int | None = None,
        timeout: float | None = None,
        backoff: float | None = None,
        errors: ErrorsMode = ErrorsMode.TEMPORARY,
        labels: MetaFilter | None = None,
        annotations: MetaFilter | None = None,
        when: WhenFilter | None = None,
        field: dicts.FieldSpec | None = None,
        value: ValueFilter = None,
        optional: bool = False,
        param: Any = None,
        registry: OperatorRegistry | None = None,
        **names: Unpack[ResourceNames],
) -> Decorator[F]:
    """
    Called when an object is being deleted; the deletion waits for it (via a finalizer).

    With ``optional=True``, the handler does not make the operator add its
    finalizer: it runs only if the finalizer is there for other reasons.
    """
    return _resource(ChangingHandler, OperatorRegistry.register_changing_handler, resource, names, registry,
                     reason=Reason.DELETE, id=id, retries=retries, timeout=timeout, backoff=backoff, errors=errors,
                     labels=labels, annotations=annotations, when=when, field=field, value=value, optional=optional,
                     param=param)


def field(
        *resource: ResourceArg | None,
        field: dicts.FieldSpec,
        id: str | None = None,
        retries: int | None = None,
        timeout: float | None = None,
        backoff: float | None = None,
        errors: ErrorsMode = ErrorsMode.TEMPORARY,
        labels: MetaFilter | None = None,
        annotations: MetaFilter | None = None,
        when: WhenFilter | None = None,
        value: ValueFilter = None,
        old: ValueFilter = None,
        new: ValueFilter = None,
        param: Any = None,
        registry: OperatorRegistry | None = None,
        **names: Unpack[ResourceNames],
) -> Decorator[F]:
    """
    Called when one field (e.g. ``'spec.size'``) has changed, on creation or update.

    ``old``, ``new`` and ``diff`` are those of the field. The handler's id
    is ``fn/spec.size`` (or ``id/spec.size``). ``value=`` narrows it down to
    changes from or to a value, ``old=``/``new=`` to changes from and to values.
    """
    if not dicts.parse_field(field):
        raise ValueError("A field handler needs a non-empty field=, e.g. 'spec.size'.")
    return _resource(ChangingHandler, OperatorRegistry.register_changing_handler, resource, names, registry,
                     reason=None, id=id, retries=retries, timeout=timeout, backoff=backoff, errors=errors,
                     labels=labels, annotations=annotations, when=when, field=field, value=value, old=old, new=new,
                     param=param)


def event(
        *resource: ResourceArg | None,
        id: str | None = None,
        labels: MetaFilter | None = None,
        annotations: MetaFilter | None = None,
        when: WhenFilter | None = None,
        field: dicts.FieldSpec | None = None,
        value: ValueFilter = None,
        param: Any = None,
        registry: OperatorRegistry | None = None,
        **names: Unpack[ResourceNames],
) -> Decorator[F]:
    """Called for every watch event of an object, with ``type`` and ``event``; never retried."""
    return _resource(WatchingHandler, OperatorRegistry.register_watching_handler, resource, names, registry,
                     id=id, labels=labels, annotations=annotations, when=when, field=field, value=value, param=param)


def daemon(
        *resource: ResourceArg | None,
        id: str | None = None,
        param: Any = None,
        errors: ErrorsMode | None = None,
        timeout: float | None = None,
        retries: int | None = None,
        backoff: float | None = None,
        initial_delay: float | Callable[..., float] | None = None,
        cancellation_backoff: float | None = None,
        cancellation_timeout: float | None = None,
        cancellation_polling: float | None = None,
        labels: MetaFilter | None = None,
        annotations: MetaFilter | None = None,
        when: WhenFilter | None = None,
        field: dicts.FieldSpec | None = None,
        value: ValueFilter = None,
        optional: bool = False,
        registry: OperatorRegistry | None = None,
        **names: Unpack[ResourceNames],
) -> Decorator[F]:
    """
    Runs beside every matching object for as long as it exists and matches; see :doc:`daemons`.

    The function receives ``stopped`` (check it, or sleep with
    ``stopped.wait(seconds)``) and is asked to stop when the object is being
    deleted, stops matching the filters, or the operator exits. A daemon
    that returns is not started again for that object; one that raises is
    retried per ``errors=``, ``backoff=``, ``retries=``, ``timeout=``.
    """
    return _resource(DaemonHandler, OperatorRegistry.register_spawning_handler, resource, names, registry,
                     id=id, param=param, errors=errors, timeout=timeout, retries=retries, backoff=backoff,
                     labels=labels, annotations=annotations, when=when, field=field, value=value,
                     initial_delay=initial_delay, cancellation_backoff=cancellation_backoff,
                     cancellation_timeout=cancellation_timeout, cancellation_polling=cancellation_polling,
                     optional=optional)


def timer(
        *resource: ResourceArg | None,
        id: str | None = None,
        param: Any = None,
        errors: ErrorsMode | None = None,
        timeout: float | None = None,
        retries: int | None = None,
        backoff: float | None = None,
        interval: float | None = None,
        initial_delay: float | Callable[..., float] | None = None,
        sharp: bool | None = None,
        idle: float | None = None,
        labels: MetaFilter | None = None,
        annotations: MetaFilter | None = None,
        when: WhenFilter | None = None,
        field: dicts.FieldSpec | None = None,
        value: ValueFilter = None,
        optional: bool = False,
        registry: OperatorRegistry | None = None,
        **names: Unpack[ResourceNames],
) -> Decorator[F]:
    """
    Called every ``interval`` seconds for every matching object, as long as it exists; see :doc:`daemons`.

    ``idle``: only once the object has not changed for that many seconds;
    ``sharp``: the interval counts from the start of the previous call;
    ``initial_delay``: the first call not before that many seconds. Without
    an ``interval``, it is called once per object. Calls never overlap.
    """
    return _resource(TimerHandler, OperatorRegistry.register_spawning_handler, resource, names, registry,
                     id=id, param=param, errors=errors, timeout=timeout, retries=retries, backoff=backoff,
                     labels=labels, annotations=annotations, when=when, field=field, value=value,
                     initial_delay=initial_delay, idle=idle, interval=interval, sharp=sharp, optional=optional)


def index(
        *resource: ResourceArg | None,
        id: str | None = None,
        errors: ErrorsMode | None = None,
        timeout: float | None = None,
        retries: int | None = None,
        backoff: float | None = None,
        labels: MetaFilter | None = None,
        annotations: MetaFilter | None = None,
        when: WhenFilter | None = None,
        field: dicts.FieldSpec | None = None,
        value: ValueFilter = None,
        param: Any = None,
        registry: OperatorRegistry | None = None,
        **names: Unpack[ResourceNames],
) -> Decorator[F]:
    """
    An index function: its results for all objects of the resource form an in-memory index.

    Every handler of the operator gets the index as the keyword argument
    named by the function (or ``id=``): a :class:`kopf.Index` of keys to
    :class:`kopf.Store` collections of values. The function returns
    ``{key: value, ...}``, a value (under the key ``None``), or ``None`` to
    keep what the object has in the index. Handlers of objects run only once
    the initial listing has filled every index. ``errors=`` is ``IGNORED`` by
    default (the object's values stay as they were); with ``TEMPORARY`` or
    ``PERMANENT``, a failing object's values are removed and it is not
    indexed again for ``backoff=`` seconds or at all.
    """
    # The index's name is the keyword argument of handlers: its field does not go into it.
    return _resource(IndexingHandler, OperatorRegistry.register_indexing_handler, resource, names, registry,
                     named_by_field=False, id=id, errors=errors, timeout=timeout, retries=retries, backoff=backoff,
                     labels=labels, annotations=annotations, when=when, field=field, value=value, param=param)


def reconcile(
        *resource: ResourceArg | None,
        owns: Collection[ResourceArg | tuple[str, ...] | Selector] = (),
        watches: Mapping[ResourceArg | tuple[str, ...] | Selector, Callable[..., Any]] | None = None,
        resync: float | None = None,
        coalesce: float | None = None,
        backoff: float | None = None,
        max_backoff: float | None = None,
        errors: ErrorsMode | None = None,
        id: str | None = None,
        labels: MetaFilter | None = None,
        annotations: MetaFilter | None = None,
        when: WhenFilter | None = None,
        field: dicts.FieldSpec | None = None,
        value: ValueFilter = None,
        param: Any = None,
        registry: OperatorRegistry | None = None,
        **names: Unpack[ResourceNames],
) -> Decorator[F]:
    """
    Called with an object's current state to make the world match it; see :doc:`reconciliation`.

    Called when the object appears or its essence changes, when a child of
    a resource in ``owns=`` (by its owner reference) or an object of a
    resource in ``watches=`` (by its mapper) appears, changes or goes, after
    ``resync`` seconds without a call, and when it returns
    ``kopf.Requeue(after=...)``. Calls are coalesced (``coalesce`` seconds
    of quiet, default 0.25), never concurrent for one object, and failures
    are retried after a back-off from ``backoff`` (default 1) doubling up
    to ``max_backoff`` (default 300) seconds. The handler gets ``children``
    (by resource as named in ``owns=``/``watches=``) and ``triggers``.
    """
    return _resource(ReconcilingHandler, OperatorRegistry.register_reconciling_handler, resource, names, registry,
                     id=id, owns=owns, watches=watches, resync=resync, coalesce=coalesce, backoff=backoff,
                     max_backoff=max_backoff, errors=errors, labels=labels, annotations=annotations, when=when,
                     field=field, value=value, param=param)


def validate(
        *resource: ResourceArg | None,
        id: str | None = None,
        param: Any = None,
        operation: Operation | None = None,
        operations: Collection[Operation] | None = None,
        subresource: str | None = None,
        persistent: bool | None = None,
        side_effects: bool | None = None,
        ignore_failures: bool | None = None,
        labels: MetaFilter | None = None,
        annotations: MetaFilter | None = None,
        when: WhenFilter | None = None,
        field: dicts.FieldSpec | None = None,
        value: ValueFilter = None,
        registry: OperatorRegistry | None = None,
        **names: Unpack[ResourceNames],
) -> Decorator[F]:
    """
    Called by the API server before an object is stored; ``kopf.AdmissionError`` rejects the request.

    ``operation``/``operations`` limit it to ``'CREATE'``, ``'UPDATE'``,
    ``'DELETE'``, ``'CONNECT'`` (default: all); ``subresource`` to a
    subresource (``'*'``: any; default: the main resource only). See the
    Admission documentation for the webhook options.
    """
    return _resource(AdmissionHandler, OperatorRegistry.register_admission_handler, resource, names, registry,
                     type=WebhookType.VALIDATING, id=id, param=param, labels=labels, annotations=annotations, when=when,
                     field=field, value=value, operation=operation, operations=operations, subresource=subresource,
                     persistent=persistent, side_effects=side_effects, ignore_failures=ignore_failures)


def mutate(
        *resource: ResourceArg | None,
        id: str | None = None,
        param: Any = None,
        operation: Operation | None = None,
        operations: Collection[Operation] | None = None,
        subresource: str | None = None,
        persistent: bool | None = None,
        side_effects: bool | None = None,
        ignore_failures: bool | None = None,
        labels: MetaFilter | None = None,
        annotations: MetaFilter | None = None,
        when: WhenFilter | None = None,
        field: dicts.FieldSpec | None = None,
        value: ValueFilter = None,
        registry: OperatorRegistry | None = None,
        **names: Unpack[ResourceNames],
) -> Decorator[F]:
    """
    Called by the API server before an object is stored; changes to ``patch`` are applied to the object.

    The options are those of :func:`validate`.
    """
    return _resource(AdmissionHandler, OperatorRegistry.register_admission_handler, resource, names, registry,
                     type=WebhookType.MUTATING, id=id, param=param, labels=labels, annotations=annotations, when=when,
                     field=field, value=value, operation=operation, operations=operations, subresource=subresource,
                     persistent=persistent, side_effects=side_effects, ignore_failures=ignore_failures)


def subhandler(
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
) -> Decorator[F]:
    """The decorator form of :func:`kopf.register`, for use inside a handler; with the filters of handlers."""
    def decorator(fn: F) -> F:
        subhandling.register(fn, id=id, errors=errors, timeout=timeout, retries=retries,
                             backoff=backoff, param=param, labels=labels, annotations=annotations,
                             when=when, field=field, value=value, old=old, new=new)
        return fn
    return decorator


# Kopf's earlier name of the decorator form of sub-handlers: ``@kopf.on.this(id=...)``.
this = subhandler


def _activity(activity: Activity, registry: OperatorRegistry | None, **options: Any) -> Decorator[F]:
    """A decorator of an activity's handlers: the options are checked at once."""
    declaration = declaring.declare(ActivityHandler, activity=activity, **options)
    return _declare(registry, OperatorRegistry.register_activity_handler, declaration)


def _resource(
        kind: type[H],
        register: Callable[[OperatorRegistry, Selector, H], None],
        resource: tuple[ResourceArg | None, ...],
        names: ResourceNames,
        registry: OperatorRegistry | None,
        *,
        named_by_field: bool = True,
        **options: Any,
) -> Decorator[F]:
    """A decorator of a resource's handlers: the resource's selector, then the options, are checked at once."""
    selector = Selector.from_args(*resource, **names)
    declaration = declaring.declare(kind, named_by_field=named_by_field, **options)
    return _declare(registry, lambda target, handler: register(target, selector, handler), declaration)


def _declare(
        registry: OperatorRegistry | None,
        register: Callable[[OperatorRegistry, H], None],
        declaration: declaring.Declaration[H],
) -> Decorator[F]:
    """The decorator itself: it registers the function's handler and returns the function unchanged."""
    def decorator(fn: F) -> F:
        register(registry if registry is not None else registries.get_default_registry(), declaration.handler(fn))
        return fn
    return decorator
