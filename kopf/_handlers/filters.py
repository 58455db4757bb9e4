"""
Handler filters: which objects a handler is interested in.

Every filter receives the same keyword arguments as the handler itself
(``body``, ``spec``, ``meta``, ``old``, ``new``, ``diff``, ``logger``, ``memo``,
the indexes, ...):

* ``labels=`` / ``annotations=`` map keys to an exact value, to
  :data:`PRESENT` / :data:`ABSENT`, or to a callback that gets the value
  (``None`` if absent) as its positional argument, plus the keyword arguments.
* ``field=`` with ``value=`` checks one field of the object the same ways;
  ``field=`` alone means ``value=PRESENT``.
* For the handlers of changes (``on.update`` and ``on.field``), ``field=``
  means that the field has changed (including appearing or disappearing),
  ``value=`` that its old *or* new value matches, and ``old=`` / ``new=``
  check the old and the new value separately (:class:`Transition`).
* ``when=`` gets the keyword arguments and returns whether to call the handler.

A callback gets the keyword arguments it declares -- all of them if it takes
``**kwargs``. :func:`all_`, :func:`any_`, :func:`none_` and :func:`not_`
combine callbacks of either kind.
"""
from __future__ import annotations

import dataclasses
import enum
import inspect
from collections.abc import Callable, Collection, Mapping
from typing import Any, Protocol, TypeAlias, TypeVar, cast

from kopf._structs import dicts
from kopf._structs.bodies import Body


class MetaFilterToken(enum.Enum):
    """Markers for filters that check only whether a label, an annotation or a field is there."""

    PRESENT = 'present'
    ABSENT = 'absent'

    def __repr__(self) -> str:
        return f"kopf.{self.name}"


PRESENT = MetaFilterToken.PRESENT
ABSENT = MetaFilterToken.ABSENT

MetaFilterValue: TypeAlias = str | MetaFilterToken | Callable[..., bool]
MetaFilter: TypeAlias = Mapping[str, MetaFilterValue]
ValueFilter: TypeAlias = Any  # a value to compare with, a marker, or a callback
WhenFilter: TypeAlias = Callable[..., bool]


class Filtered(Protocol):
    """What a handler declares about the objects it wants (all of it optional)."""

    @property
    def labels(self) -> MetaFilter | None: ...

    @property
    def annotations(self) -> MetaFilter | None: ...

    @property
    def when(self) -> WhenFilter | None: ...

    @property
    def field(self) -> dicts.FieldPath | None: ...

    @property
    def value(self) -> ValueFilter: ...


@dataclasses.dataclass(frozen=True)
class Transition:
    """
    How the handler's field has changed, for the handlers of changes.

    ``before``/``after`` are the field's values (``None``: absent),
    ``changed`` whether it has changed at all, ``old``/``new`` the handler's
    criteria for either side (``None``: not checked).
    """

    before: Any
    after: Any
    changed: bool
    old: ValueFilter = None
    new: ValueFilter = None


def match(
        spec: Filtered,
        *,
        body: Body,
        kwargs: Mapping[str, Any],
        transition: Transition | None = None,
        field: bool = True,
) -> bool:
    """
    Whether all filters accept the object; ``when=`` is asked last, only if the others agree.

    ``field=False`` leaves the field filter out (for handlers of a field's
    change, when asking whether the object is theirs at all: any object's
    field may change).
    """
    meta = body.metadata
    return (match_meta(spec.labels, meta.labels, kwargs) and
            match_meta(spec.annotations, meta.annotations, kwargs) and
            (not field or match_field(spec, body=body, kwargs=kwargs, transition=transition)) and
            match_when(spec.when, kwargs))


def match_meta(criteria: MetaFilter | None, values: Mapping[str, str], kwargs: Mapping[str, Any] | None = None) -> bool:
    """Whether a mapping (the object's labels or annotations) satisfies every criterion."""
    if not criteria:
        return True
    return all(match_value(criterion, values.get(key), kwargs or {}) for key, criterion in criteria.items())


def match_field(
        spec: Filtered,
        *,
        body: Body,
        kwargs: Mapping[str, Any],
        transition: Transition | None = None,
) -> bool:
    """
    Whether the object's field satisfies ``value=`` (by default: the field is present).

    With a ``transition`` (handlers of changes), the field must have changed,
    and ``value=`` may match either side, or ``old=``/``new=`` their own side.
    """
    if not spec.field:
        return True
    if transition is None:
        criterion = PRESENT if spec.value is None else spec.value
        return match_value(criterion, dicts.resolve(body, spec.field, None), kwargs)
    if not transition.changed:
        return False
    if spec.value is not None:
        return (match_value(spec.value, transition.before, kwargs) or
                match_value(spec.value, transition.after, kwargs))
    return ((transition.old is None or match_value(transition.old, transition.before, kwargs)) and
            (transition.new is None or match_value(transition.new, transition.after, kwargs)))


def match_value(criterion: ValueFilter, value: Any, kwargs: Mapping[str, Any]) -> bool:
    """One criterion against one value (``None``: absent)."""
    if criterion is PRESENT:
        return value is not None
    if criterion is ABSENT:
        return value is None
    if callable(criterion):
        return bool(call(criterion, value, **kwargs))
    return value is not None and value == criterion


def match_when(when: WhenFilter | None, kwargs: Mapping[str, Any]) -> bool:
    """Whether the ``when=`` callback (if any) accepts the handler's keyword arguments."""
    return when is None or bool(call(when, **kwargs))


def call(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """
    Call a filter callback with the keyword arguments it declares (all of them if it takes ``**kwargs``).

    Kopf's callbacks take ``**kwargs``; callbacks that name only what they
    use (``lambda value: ...``) work too.
    """
    accepted = _accepted(fn, positional=len(args))
    if accepted is None:
        return fn(*args, **kwargs)
    return fn(*args, **{name: value for name, value in kwargs.items() if name in accepted})


def _accepted(fn: Callable[..., Any], *, positional: int) -> frozenset[str] | None:
    """The keyword arguments a callable takes besides the positional ones; ``None``: any."""
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # no signature (some builtins): pass everything
        return None
    if any(p.kind == inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    names: set[str] = set()
    for parameter in parameters:
        if positional and parameter.kind in (inspect.Parameter.POSITIONAL_ONLY,
                                             inspect.Parameter.POSITIONAL_OR_KEYWORD):
            positional -= 1  # taken by a positional argument
        elif parameter.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY):
            names.add(parameter.name)
    return frozenset(names)


def check_field_filters(*, field: Any = None, value: Any = None, old: Any = None, new: Any = None) -> None:
    """Refuse combinations of ``field=``, ``value=``, ``old=``, ``new=`` that mean nothing, at declaration."""
    if not field and (value is not None or old is not None or new is not None):
        given = ', '.join(name for name, v in [('value=', value), ('old=', old), ('new=', new)] if v is not None)
        raise TypeError(f"{given} filter(s) need the field they apply to: add field='spec.something'.")
    if value is not None and (old is not None or new is not None):
        raise TypeError("Use either value= (either side of a change) or old=/new= (each side), not both.")


# Combinators of filter callbacks, for ``when=`` and for callable label/annotation/field values.
# The combined callback passes its arguments on to every callback (as each declares them).

FnT = TypeVar('FnT', bound=Callable[..., Any])


def all_(fns: Collection[FnT]) -> FnT:
    """A callback that is true when every one of the callbacks is true (and for none at all)."""
    fns = list(fns)

    def all_of(*args: Any, **kwargs: Any) -> bool:
        return all(call(fn, *args, **kwargs) for fn in fns)
    return cast(FnT, all_of)


def any_(fns: Collection[FnT]) -> FnT:
    """A callback that is true when at least one of the callbacks is true."""
    fns = list(fns)

    def any_of(*args: Any, **kwargs: Any) -> bool:
        return any(call(fn, *args, **kwargs) for fn in fns)
    return cast(FnT, any_of)


def none_(fns: Collection[FnT]) -> FnT:
    """A callback that is true when none of the callbacks is true."""
    fns = list(fns)

    def none_of(*args: Any, **kwargs: Any) -> bool:
        return not any(call(fn, *args, **kwargs) for fn in fns)
    return cast(FnT, none_of)


def not_(fn: FnT) -> FnT:
    """A callback that is true when the callback is false."""
    def negated(*args: Any, **kwargs: Any) -> bool:
        return not call(fn, *args, **kwargs)
    return cast(FnT, negated)
