"""
Selection: which handlers are interested in an object, for a cause or an event.

The handlers of a cause are those declared for it, plus:

* field handlers, on create and update, when their field has changed;
* resume handlers, on an update while the object is resuming (it changed
  while the operator was away);
* resume handlers with ``deleted=True``, on a deletion found at the
  operator's start (the others never run for an object being deleted);

each once (a function that is both an update and a resume handler runs
once), and only if its filters accept the object (:mod:`~kopf._handlers.filters`):
``labels=``, ``annotations=``, ``field=`` with ``value=`` (or ``old=``/``new=``),
and ``when=``. Filter callbacks receive the handler's own keyword arguments,
e.g. the field's own ``old``/``new``/``diff`` for handlers with a field.

A handler of changes with a field (``on.update(field=...)``, ``on.field``)
is interested only if its field has changed; the other handlers with a
field check the field's current value.

A filter that raises is reported and counts as "not interested" -- except for
the finalizer: a failing filter of a delete handler keeps the finalizer,
because an unneeded finalizer costs less than delete handlers that cannot run.
"""
from __future__ import annotations

from kopf._cycle.causation import Cause
from kopf._handlers import filters
from kopf._handlers.arguments import Arguments, CauseArguments
from kopf._handlers.reasons import Reason
from kopf._handlers.registries import ChangingHandler, OperatorRegistry, ResourceHandler, ResourceKey, WatchingHandler
from kopf._storage.persistence import Essences
from kopf._structs.bodies import Body
from kopf._structs.ids import HandlerId
from kopf._structs.typedefs import Logger


def matches(handler: ResourceHandler, *, arguments: Arguments, logger: Logger) -> bool:
    """Whether the handler's filters accept the object; a failing filter is reported and skips the handler."""
    try:
        return _accepts(handler, arguments)
    except Exception:
        logger.exception("The filters of %s have failed; the handler is skipped.", handler)
        return False


def changing_handlers(
        registry: OperatorRegistry,
        resource: ResourceKey,
        cause: Cause,
        *,
        arguments: Arguments,
        logger: Logger,
) -> list[ChangingHandler]:
    """The handlers of the cause that are interested in this object, in their registration order."""
    candidates = registry.get_changing_handlers(resource, cause.reason)
    if cause.reason in (Reason.CREATE, Reason.UPDATE):
        candidates += registry.get_field_handlers(resource)  # if their field has changed (see the filters)
    if cause.reason == Reason.UPDATE and cause.resuming:
        candidates += registry.get_changing_handlers(resource, Reason.RESUME)
    if cause.reason == Reason.DELETE and cause.resuming:
        candidates += [handler for handler in registry.get_changing_handlers(resource, Reason.RESUME)
                       if handler.deleted]
    selected: dict[HandlerId, ChangingHandler] = {}
    for handler in candidates:
        if handler.id not in selected and matches(handler, arguments=arguments, logger=logger):
            selected[handler.id] = handler
    return list(selected.values())


def watching_handlers(
        registry: OperatorRegistry,
        resource: ResourceKey,
        *,
        arguments: Arguments,
        logger: Logger,
) -> list[WatchingHandler]:
    """The event handlers interested in this object."""
    return [h for h in registry.get_watching_handlers(resource) if matches(h, arguments=arguments, logger=logger)]


def requires_finalizer(
        registry: OperatorRegistry,
        resource: ResourceKey,
        essences: Essences,
        *,
        arguments: Arguments,
        logger: Logger,
) -> bool:
    """
    Whether a (non-optional) delete handler, daemon or timer is interested in the object.

    If so, our finalizer must hold the object's deletion: until the delete
    handlers have run, and the daemons and timers have stopped.
    """
    cause = CauseArguments(reason=Reason.DELETE, old=essences.old, new=essences.new, diff=essences.diff)
    try:
        return any(
            _accepts(handler, arguments.with_cause(cause))
            for handler in registry.get_changing_handlers(resource, Reason.DELETE)
            if not handler.optional
        ) or any(
            _accepts(handler, arguments)
            for handler in registry.get_spawning_handlers(resource)
            if not handler.optional
        )
    except Exception:
        logger.exception("A filter of the delete handlers, daemons or timers has failed; "
                         "assuming the finalizer is needed.")
        return True


def selects(
        registry: OperatorRegistry,
        resource: ResourceKey,
        essences: Essences,
        *,
        arguments: Arguments,
) -> bool:
    """
    Whether any handler of changes may be interested in the object: otherwise, the object is not ours.

    An object that no handler selects is never written to: no diff-base, no
    progress, no finalizer for them (as in Kopf). A handler of a field's
    change counts whatever its field is now, since any object's field may
    change; the other filters (labels, annotations, ``when=``, a field's
    value) must accept the object as it is. ``when=`` sees the essences with
    the handler's own reason (for handlers of creation and update: creation
    if the object has no diff-base yet, else update). A filter that fails
    counts as interested here: the handler's own selection reports it, and
    skips the handler.
    """
    if selects_every_object(registry, resource):
        return True  # nothing to ask
    handlers = registry.get_all_changing_handlers(resource)
    changed = Reason.CREATE if essences.old is None else Reason.UPDATE
    views: dict[Reason, Arguments] = {}
    for handler in handlers:
        reason = handler.reason if handler.reason in (Reason.DELETE, Reason.RESUME) else changed
        if reason not in views:
            views[reason] = arguments.with_cause(CauseArguments(reason=reason, old=essences.old, new=essences.new,
                                                                diff=essences.diff))
        own = views[reason].for_handler(handler)
        try:
            if filters.match(handler, body=_body(own), kwargs=own.render(), field=not handler.watches_change):
                return True
        except Exception:
            return True
    return False


def selects_every_object(registry: OperatorRegistry, resource: ResourceKey) -> bool:
    """Whether a handler of changes has no filters that look at the object: then it selects every object."""
    return any(_unfiltered(handler, field_checked=not handler.watches_change)
               for handler in registry.changing.serving(resource))


def finalizer_need(registry: OperatorRegistry, resource: ResourceKey) -> bool | None:
    """
    Whether every object of the resource needs our finalizer (``True``), none does (``False``), or it depends.

    It depends on the object (``None``) where only filters decide it (see
    :func:`requires_finalizer`), and wherever daemons or timers are there.
    """
    if registry.has_spawning_handlers(resource):
        return None
    deleters = [handler for handler in registry.get_changing_handlers(resource, Reason.DELETE) if not handler.optional]
    if not deleters:
        return False
    return True if any(_unfiltered(handler, field_checked=True) for handler in deleters) else None


def _unfiltered(handler: ResourceHandler, *, field_checked: bool) -> bool:
    """Whether a handler accepts every object: no labels, annotations or ``when=``, no field whose value counts."""
    return (not handler.labels and not handler.annotations and handler.when is None
            and not (handler.field and field_checked))


def resume_ids(registry: OperatorRegistry, resource: ResourceKey, *, deleted: bool = False) -> list[HandlerId]:
    """The ids of the resume handlers (only those with ``deleted=True``, if asked): their progress means resuming."""
    return [handler.id for handler in registry.get_changing_handlers(resource, Reason.RESUME)
            if handler.deleted or not deleted]


def all_ids(registry: OperatorRegistry, resource: ResourceKey) -> list[HandlerId]:
    """The ids of all the resource's change handlers: any of them may have progress left over."""
    return [handler.id for handler in registry.get_all_changing_handlers(resource)]


def _body(arguments: Arguments) -> Body:
    assert arguments.object is not None, "Only handlers of objects have filters."
    return arguments.object.body


def _accepts(handler: ResourceHandler, arguments: Arguments) -> bool:
    if _unfiltered(handler, field_checked=True):
        return True  # no filter to ask: no kwargs to make
    view = arguments.for_handler(handler)
    return filters.match(handler, body=_body(arguments), kwargs=view.render(), transition=_transition(handler, view))


def _transition(handler: ResourceHandler, view: Arguments) -> filters.Transition | None:
    """How the field of a handler of changes has changed (``view.cause`` is already the field's own)."""
    if not isinstance(handler, ChangingHandler) or not handler.watches_change or view.cause is None:
        return None
    return filters.Transition(before=view.cause.old, after=view.cause.new, changed=bool(view.cause.diff),
                              old=handler.old, new=handler.new)
