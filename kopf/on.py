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

from collections.abc import Callable, Collection
from typing import Any, TypeVar

from typing_extensions import Unpack

from kopf._handlers import registries, subhandling
from kopf._handlers.filters import MetaFilter, ValueFilter, WhenFilter, check_field_filters
from kopf._handlers.reasons import Reason
from kopf._handlers.registries import (
    Activity,
    ActivityHandler,
    AdmissionHandler,
    ChangingHandler,
    DaemonHandler,
    IndexingHandler,
    OperatorRegistry,
    TimerHandler,
    WatchingHandler,
    default_id,
    field_id,
)
from kopf._structs import dicts
from kopf._structs.ids import HandlerId
from kopf._structs.resources import ResourceArg, ResourceNames, Selector
from kopf._structs.reviews import OPERATIONS, Operation, WebhookType
from kopf.errors import ErrorsMode

F = TypeVar('F', bound=Callable[..., Any])
Decorator = Callable[[F], F]

# What the decorators return, for those who annotate them (the names of Kopf).
ActivityDecorator = Decorator[Callable[..., Any]]
ChangingDecorator = Decorator[Callable[..., Any]]
WatchingDecorator = Decorator[Callable[..., Any]]
IndexingDecorator = Decorator[Callable[..., Any]]
WebhookDecorator = Decorator[Callable[..., Any]]
DaemonDecorator = Decorator[Callable[..., Any]]
TimerDecorator = Decorator[Callable[..., Any]]

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
    return _activity(Activity.STARTUP, id=id, errors=errors, timeout=timeout, retries=retries,
                     backoff=backoff, param=param, registry=registry)


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
    return _activity(Activity.CLEANUP, id=id, errors=errors, timeout=timeout, retries=retries,
                     backoff=backoff, param=param, registry=registry)


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
    return _activity(Activity.LOGIN, id=id, errors=errors, timeout=timeout, retries=retries,
                     backoff=backoff, param=param, registry=registry)


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
    return _activity(Activity.PROBE, id=id, errors=errors, timeout=timeout, retries=retries,
                     backoff=backoff, param=param, registry=registry)


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
    selector = Selector.from_args(*resource, **names)
    return _changing(selector, Reason.CREATE, id=id, retries=retries, timeout=timeout, backoff=backoff,
                     errors=errors, labels=labels, annotations=annotations, when=when, param=param,
                     registry=registry, field=field, value=value)


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
    selector = Selector.from_args(*resource, **names)
    return _changing(selector, Reason.UPDATE, id=id, retries=retries, timeout=timeout, backoff=backoff,
                     errors=errors, labels=labels, annotations=annotations, when=when, param=param,
                     registry=registry, field=field, value=value, old=old, new=new)


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
    selector = Selector.from_args(*resource, **names)
    return _changing(selector, Reason.RESUME, id=id, retries=retries, timeout=timeout, backoff=backoff,
                     errors=errors, labels=labels, annotations=annotations, when=when, param=param,
                     registry=registry, field=field, value=value, deleted=deleted)


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
    selector = Selector.from_args(*resource, **names)
    return _changing(selector, Reason.DELETE, id=id, retries=retries, timeout=timeout, backoff=backoff,
                     errors=errors, labels=labels, annotations=annotations, when=when, param=param,
                     registry=registry, field=field, value=value, optional=optional)


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
    selector = Selector.from_args(*resource, **names)
    return _changing(selector, None, id=id, retries=retries, timeout=timeout, backoff=backoff,
                     errors=errors, labels=labels, annotations=annotations, when=when, param=param,
                     registry=registry, field=field, value=value, old=old, new=new)


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
    selector = Selector.from_args(*resource, **names)
    check_field_filters(field=field, value=value)
    path = dicts.parse_field(field) or None

    def decorator(fn: F) -> F:
        base = id if id is not None else default_id(fn)
        handler = WatchingHandler(
            fn=fn, id=field_id(base, path, fn) if path else HandlerId(base),
            labels=labels, annotations=annotations, when=when, field=path, value=value, param=param)
        _registry(registry).register_watching_handler(selector, handler)
        return fn
    return decorator


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
    selector = Selector.from_args(*resource, **names)
    _check_policy(retries=retries, timeout=timeout, backoff=backoff)
    check_field_filters(field=field, value=value)
    path = dicts.parse_field(field) or None
    _check_seconds(initial_delay=initial_delay, cancellation_backoff=cancellation_backoff,
                   cancellation_timeout=cancellation_timeout)
    if cancellation_polling is not None and not cancellation_polling > 0:
        raise ValueError(f"cancellation_polling= must be a positive number of seconds, got {cancellation_polling!r}.")

    def decorator(fn: F) -> F:
        base = id if id is not None else default_id(fn)  # with a field: ``fn/spec.field``, as in Kopf
        handler = DaemonHandler(
            fn=fn, id=field_id(base, path) if path else HandlerId(base), param=param, errors=errors,
            timeout=timeout, retries=retries, backoff=backoff, initial_delay=initial_delay, optional=optional,
            cancellation_backoff=cancellation_backoff, cancellation_timeout=cancellation_timeout,
            cancellation_polling=cancellation_polling, labels=labels, annotations=annotations, when=when,
            field=path, value=value)
        _registry(registry).register_spawning_handler(selector, handler)
        return fn
    return decorator


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
    selector = Selector.from_args(*resource, **names)
    _check_policy(retries=retries, timeout=timeout, backoff=backoff)
    check_field_filters(field=field, value=value)
    path = dicts.parse_field(field) or None
    _check_seconds(initial_delay=initial_delay, idle=idle)
    if interval is not None and not interval > 0:
        raise ValueError(f"interval= must be a positive number of seconds, got {interval!r}.")

    def decorator(fn: F) -> F:
        base = id if id is not None else default_id(fn)  # with a field: ``fn/spec.field``, as in Kopf
        handler = TimerHandler(
            fn=fn, id=field_id(base, path) if path else HandlerId(base), param=param, errors=errors,
            timeout=timeout, retries=retries, backoff=backoff, initial_delay=initial_delay, optional=optional,
            interval=interval, idle=idle, sharp=bool(sharp), labels=labels, annotations=annotations, when=when,
            field=path, value=value)
        _registry(registry).register_spawning_handler(selector, handler)
        return fn
    return decorator



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
    selector = Selector.from_args(*resource, **names)
    _check_policy(retries=retries, timeout=timeout, backoff=backoff)
    check_field_filters(field=field, value=value)
    path = dicts.parse_field(field) or None

    def decorator(fn: F) -> F:
        handler = IndexingHandler(
            fn=fn, id=HandlerId(id if id is not None else default_id(fn)), errors=errors, timeout=timeout,
            retries=retries, backoff=backoff, labels=labels, annotations=annotations, when=when,
            field=path, value=value, param=param)
        _registry(registry).register_indexing_handler(selector, handler)
        return fn
    return decorator

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
    selector = Selector.from_args(*resource, **names)
    return _admission(selector, WebhookType.VALIDATING, id=id, param=param, operation=operation,
                      operations=operations, subresource=subresource, persistent=persistent,
                      side_effects=side_effects, ignore_failures=ignore_failures, labels=labels,
                      annotations=annotations, when=when, field=field, value=value, registry=registry)


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
    selector = Selector.from_args(*resource, **names)
    return _admission(selector, WebhookType.MUTATING, id=id, param=param, operation=operation,
                      operations=operations, subresource=subresource, persistent=persistent,
                      side_effects=side_effects, ignore_failures=ignore_failures, labels=labels,
                      annotations=annotations, when=when, field=field, value=value, registry=registry)


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


def _registry(registry: OperatorRegistry | None) -> OperatorRegistry:
    return registry if registry is not None else registries.get_default_registry()


def _check_policy(*, retries: int | None, timeout: float | None, backoff: float | None) -> None:
    for option, value in (('retries', retries), ('timeout', timeout), ('backoff', backoff)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise TypeError(f"{option}= must be a number, got {type(value).__name__}: {value!r}.")
    if retries is not None and retries < 1:
        raise ValueError(f"retries= is the number of attempts and must be at least 1, got {retries}.")
    if timeout is not None and timeout < 0:
        raise ValueError(f"timeout= must not be negative, got {timeout}.")
    if backoff is not None and backoff < 0:
        raise ValueError(f"backoff= must not be negative, got {backoff}.")


def _check_seconds(**values: float | Callable[..., float] | None) -> None:
    for name, value in values.items():
        if value is None or callable(value):
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise ValueError(f"{name}= must be a number of seconds >= 0, got {value!r}.")


def _activity(
        activity: Activity,
        *,
        id: str | None,
        errors: ErrorsMode | None,
        timeout: float | None,
        retries: int | None,
        backoff: float | None,
        param: Any,
        registry: OperatorRegistry | None,
) -> Decorator[F]:
    _check_policy(retries=retries, timeout=timeout, backoff=backoff)

    def decorator(fn: F) -> F:
        handler = ActivityHandler(
            fn=fn, id=HandlerId(id if id is not None else default_id(fn)), activity=activity,
            errors=errors, timeout=timeout, retries=retries, backoff=backoff, param=param)
        _registry(registry).register_activity_handler(handler)
        return fn
    return decorator


def _changing(
        selector: Selector,
        reason: Reason | None,
        *,
        id: str | None,
        retries: int | None,
        timeout: float | None,
        backoff: float | None,
        errors: ErrorsMode | None,
        labels: MetaFilter | None,
        annotations: MetaFilter | None,
        when: WhenFilter | None,
        param: Any,
        registry: OperatorRegistry | None,
        optional: bool = False,
        field: dicts.FieldSpec | None = None,
        value: ValueFilter = None,
        old: ValueFilter = None,
        new: ValueFilter = None,
        deleted: bool = False,
) -> Decorator[F]:
    _check_policy(retries=retries, timeout=timeout, backoff=backoff)
    check_field_filters(field=field, value=value, old=old, new=new)
    path = dicts.parse_field(field) or None

    def decorator(fn: F) -> F:
        # As in Kopf, a handler with a field is known as ``fn/spec.field``: one function may watch several.
        base = id if id is not None else default_id(fn)
        handler = ChangingHandler(
            fn=fn, id=field_id(base, path, fn) if path else HandlerId(base), reason=reason, field=path,
            value=value, old=old, new=new, optional=optional, deleted=bool(deleted), errors=errors,
            timeout=timeout, retries=retries, backoff=backoff, labels=labels, annotations=annotations, when=when,
            param=param)
        _registry(registry).register_changing_handler(selector, handler)
        return fn
    return decorator


def _admission(
        selector: Selector,
        type: WebhookType,
        *,
        id: str | None,
        param: Any,
        operation: Operation | None,
        operations: Collection[Operation] | None,
        subresource: str | None,
        persistent: bool | None,
        side_effects: bool | None,
        ignore_failures: bool | None,
        labels: MetaFilter | None,
        annotations: MetaFilter | None,
        when: WhenFilter | None,
        registry: OperatorRegistry | None,
        field: dicts.FieldSpec | None = None,
        value: ValueFilter = None,
) -> Decorator[F]:
    check_field_filters(field=field, value=value)
    path = dicts.parse_field(field) or None
    allowed = _operations(operation=operation, operations=operations)
    if subresource is not None and (not isinstance(subresource, str) or not subresource or '/' in subresource):
        raise ValueError(f"subresource= is a subresource's name such as 'status', or '*'; got {subresource!r}.")

    def decorator(fn: F) -> F:
        base = id if id is not None else default_id(fn)
        handler = AdmissionHandler(
            fn=fn, id=field_id(base, path, fn) if path else HandlerId(base), type=type, param=param,
            operations=allowed, subresource=subresource, persistent=bool(persistent),
            side_effects=bool(side_effects), ignore_failures=bool(ignore_failures),
            labels=labels, annotations=annotations, when=when, field=path, value=value)
        _registry(registry).register_admission_handler(selector, handler)
        return fn
    return decorator


def _operations(
        *,
        operation: Operation | None,
        operations: Collection[Operation] | None,
) -> frozenset[Operation] | None:
    """The admission operations of a handler; ``None`` for all of them."""
    if operation is not None and operations is not None:
        raise ValueError("Pass either operation= or operations=, not both.")
    if isinstance(operations, str):
        raise ValueError(f"operations= is a collection such as ['CREATE', 'UPDATE'], got a string: {operations!r}.")
    values: list[str] = [operation] if operation is not None else list(operations or [])
    unknown = [value for value in values if value not in OPERATIONS and value != '*']
    if unknown:
        raise ValueError(f"Unknown admission operation(s) {unknown!r}; use {', '.join(OPERATIONS)}.")
    if not values or '*' in values:
        return None
    return frozenset(value for value in OPERATIONS if value in values)
