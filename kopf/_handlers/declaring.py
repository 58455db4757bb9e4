"""
Declaring handlers: what every decorator of :mod:`kopf.on` (and :func:`kopf.register`) does with its options.

Each decorator spells out its options as typed keyword parameters of its
own, for the users' IDEs and ``help()``; what it does with them is the same
for all of them, and is here. The options are checked when the decorator is
made -- before the function is known, so that a wrong option fails at the
line that declares it, naming the option -- and the handler is made once the
function is known. Its id is the function's qualified name unless given,
followed by ``/spec.field`` where a field filter names it (as in Kopf), and
preceded by ``parent/`` for a sub-handler.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Hashable, Mapping
from typing import Any, Generic, TypeVar, cast

from kopf._handlers.filters import check_field_filters
from kopf._handlers.registries import BaseHandler, Relation, check_id, check_policy_types
from kopf._structs import dicts
from kopf._structs.ids import HandlerId
from kopf._structs.resources import ResourceArg, Selector
from kopf._structs.reviews import OPERATIONS, Operation

H = TypeVar('H', bound=BaseHandler)


@dataclasses.dataclass(frozen=True)
class Declaration(Generic[H]):
    """A handler but for its function: its kind, its checked options, and how its id is made."""

    kind: type[H]
    id: str | None
    options: Mapping[str, Any]
    parent: HandlerId | None = None
    named_by_field: bool = True

    def handler(self, fn: Callable[..., Any]) -> H:
        """The handler of the function; the handler checks the function and what depends on it (see BaseHandler)."""
        field = self.options.get('field') if self.named_by_field else None
        return self.kind(fn=fn, id=handler_id(fn, self.id, field=field, parent=self.parent), **self.options)


def declare(kind: type[H], *, id: str | None, **options: Any) -> Declaration[H]:
    """What a decorator makes of its options: all of them checked, the retry policy in full."""
    check_policy(retries=options.get('retries'), timeout=options.get('timeout'), backoff=options.get('backoff'))
    return prepare(kind, id=id, **options)


def prepare(
        kind: type[H],
        *,
        id: str | None,
        parent: HandlerId | None = None,
        named_by_field: bool = True,
        **options: Any,
) -> Declaration[H]:
    """
    Check the options that need no function, and parse the field.

    The retry policy is checked here only for its types, by the handler
    itself: sub-handlers take any numbers, as they always have.
    """
    check_field_filters(field=options.get('field'), value=options.get('value'),
                        old=options.get('old'), new=options.get('new'))
    if 'operation' in options:
        options['operations'] = operations(operation=options.pop('operation'), operations=options.get('operations'))
    if 'owns' in options or 'watches' in options:
        options['relations'] = relations(owns=options.pop('owns', None), watches=options.pop('watches', None))
        check_backoffs(backoff=options.get('backoff'), max_backoff=options.get('max_backoff'))
    for name, value in options.items():
        check = _CHECKS.get(name)
        if check is not None:
            check(name, value)
    if 'field' in options:
        options['field'] = dicts.parse_field(options['field']) or None
    options.update({name: bool(options[name]) for name in _FLAGS if name in options})
    return Declaration(kind, id=id, options=options, parent=parent, named_by_field=named_by_field)


def handler_id(
        fn: Callable[..., Any],
        id: str | None,
        *,
        field: dicts.FieldPath | None = None,
        parent: HandlerId | None = None,
) -> HandlerId:
    """The function's qualified name unless given (stable across restarts), with its field and its parent."""
    base = id if id is not None else default_id(fn)
    check_id(base, fn)
    name = f"{base}/{dicts.format_field(field)}" if field else base
    return HandlerId(f"{parent}/{name}" if parent is not None else name)


def default_id(fn: Callable[..., Any]) -> str:
    """A function's id unless given: its qualified name."""
    name = getattr(fn, '__qualname__', None) or getattr(fn, '__name__', None)
    return str(name) if name else repr(fn)


def check_policy(*, retries: Any, timeout: Any, backoff: Any) -> None:
    """The retry policy of a decorator: numbers (see the handlers), at least one attempt, no negative seconds."""
    check_policy_types(retries=retries, timeout=timeout, backoff=backoff)
    if retries is not None and retries < 1:
        raise ValueError(f"retries= is the number of attempts and must be at least 1, got {retries}.")
    if timeout is not None and timeout < 0:
        raise ValueError(f"timeout= must not be negative, got {timeout}.")
    if backoff is not None and backoff < 0:
        raise ValueError(f"backoff= must not be negative, got {backoff}.")


def operations(
        *,
        operation: Operation | None,
        operations: Collection[Operation] | None,
) -> frozenset[Operation] | None:
    """The admission operations of a handler, from either option; ``None`` for all of them."""
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


def relations(*, owns: Collection[Any] | None, watches: Mapping[Any, Any] | None) -> tuple[Relation, ...]:
    """
    The resources that a reconcile handler owns (``owns=``) or watches through mappers (``watches=``).

    Each is given as a decorator's resource is: a name (``'configmaps'``,
    ``'deployments.apps'``), a tuple of positional arguments
    (``('apps', 'v1', 'deployments')``), or a selector; it must name one
    resource. Its ``children`` are named by how it was given.
    """
    if isinstance(owns, (str, bytes)):
        raise ValueError(f"owns= is a list of resources such as ['configmaps'], got a string: {owns!r}.")
    if watches is not None and not isinstance(watches, Mapping):
        raise ValueError(f"watches= maps resources to mappers, e.g. {{'configmaps': fn}}, got {watches!r}.")
    result: list[Relation] = [Relation(name=entry, selector=_related(entry, 'owns')) for entry in owns or ()]
    for entry, mapper in (watches or {}).items():
        if not callable(mapper):
            raise ValueError(f"watches= maps resources to mappers (functions that name the owners to reconcile), "
                             f"got {mapper!r} for {entry!r}.")
        result.append(Relation(name=entry, selector=_related(entry, 'watches'), mapper=mapper))
    names = [relation.name for relation in result]
    repeated = sorted({repr(name) for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"A resource is named more than once in owns= and watches=: {', '.join(repeated)}.")
    return tuple(result)


def _related(entry: Any, option: str) -> Selector:
    try:
        if isinstance(entry, Selector):
            selector = entry
        elif isinstance(entry, tuple):
            selector = Selector.from_args(*entry)
        elif isinstance(entry, Hashable):
            selector = Selector.from_args(cast(ResourceArg, entry))  # from_args says what it cannot take
        else:
            raise TypeError(f"a {type(entry).__name__} cannot name one")
    except (TypeError, ValueError) as e:
        raise ValueError(f"{option}= names resources as the decorators do ('configmaps', 'deployments.apps', "
                         f"('apps', 'v1', 'deployments')): {entry!r} is none ({e}).") from None
    if not selector.is_specific:
        raise ValueError(f"{option}= names one resource per entry; {entry!r} selects many ({selector}).")
    return selector


def check_backoffs(*, backoff: Any, max_backoff: Any) -> None:
    """The back-off grows from ``backoff`` up to ``max_backoff``: the cap may not be below the start."""
    if isinstance(backoff, (int, float)) and isinstance(max_backoff, (int, float)) and max_backoff < backoff:
        raise ValueError(f"max_backoff= ({max_backoff}) is the cap of the back-off and may not be less than "
                         f"backoff= ({backoff}), where it starts.")


def _seconds(name: str, value: Any) -> None:
    if value is None or callable(value):
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{name}= must be a number of seconds >= 0, got {value!r}.")


def _positive_seconds(name: str, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name}= must be a positive number of seconds, got {value!r}.")


def _subresource(name: str, value: Any) -> None:
    if value is not None and (not isinstance(value, str) or not value or '/' in value):
        raise ValueError(f"{name}= is a subresource's name such as 'status', or '*'; got {value!r}.")


# The options that are flags: ``None`` (not given) is ``False``.
_FLAGS = ('deleted', 'sharp', 'persistent', 'side_effects', 'ignore_failures')

# The options checked by their names, whichever decorators have them.
_CHECKS: dict[str, Callable[[str, Any], None]] = {
    'initial_delay': _seconds,
    'cancellation_backoff': _seconds,
    'cancellation_timeout': _seconds,
    'idle': _seconds,
    'cancellation_polling': _positive_seconds,
    'interval': _positive_seconds,
    'resync': _positive_seconds,
    'coalesce': _seconds,
    'max_backoff': _positive_seconds,
    'subresource': _subresource,
}
