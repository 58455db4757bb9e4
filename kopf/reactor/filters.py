"""
Handler filters: which objects a handler is interested in.

``labels=`` and ``annotations=`` map keys to an exact value, to
:data:`PRESENT` / :data:`ABSENT`, or to a callable that receives the value
(``None`` if absent) and returns whether it fits. ``when=`` receives the same
keyword arguments as the handler itself and returns whether to call it.
:func:`all_`, :func:`any_`, :func:`none_` and :func:`not_` combine callbacks
of either kind.
"""
from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeAlias, TypeVar, cast


class MetaFilterToken(enum.Enum):
    """Markers for ``labels=`` / ``annotations=`` filters that check only the key."""

    PRESENT = 'present'
    ABSENT = 'absent'

    def __repr__(self) -> str:
        return f"kopf.{self.name}"


PRESENT = MetaFilterToken.PRESENT
ABSENT = MetaFilterToken.ABSENT

MetaFilterValue: TypeAlias = str | MetaFilterToken | Callable[[str | None], bool]
MetaFilter: TypeAlias = Mapping[str, MetaFilterValue]
WhenFilter: TypeAlias = Callable[..., bool]


def match_meta(criteria: MetaFilter | None, values: Mapping[str, str]) -> bool:
    """Whether a mapping (the object's labels or annotations) satisfies every criterion."""
    if not criteria:
        return True
    return all(_match_one(criterion, values.get(key)) for key, criterion in criteria.items())


def _match_one(criterion: MetaFilterValue, value: str | None) -> bool:
    if criterion is PRESENT:
        return value is not None
    if criterion is ABSENT:
        return value is None
    if callable(criterion):
        return bool(criterion(value))
    return value is not None and value == criterion


def match_when(when: WhenFilter | None, kwargs: Mapping[str, Any]) -> bool:
    """Whether the ``when=`` callback (if any) accepts the handler's keyword arguments."""
    return when is None or bool(when(**kwargs))


# Combinators of filter callbacks, for ``when=`` and for callable label/annotation values.
# The combined callback passes its arguments to every callback as they are.

FnT = TypeVar('FnT', bound=Callable[..., Any])


def all_(fns: Collection[FnT]) -> FnT:
    """A callback that is true when every one of the callbacks is true (and for none at all)."""
    fns = list(fns)

    def all_of(*args: Any, **kwargs: Any) -> bool:
        return all(fn(*args, **kwargs) for fn in fns)
    return cast(FnT, all_of)


def any_(fns: Collection[FnT]) -> FnT:
    """A callback that is true when at least one of the callbacks is true."""
    fns = list(fns)

    def any_of(*args: Any, **kwargs: Any) -> bool:
        return any(fn(*args, **kwargs) for fn in fns)
    return cast(FnT, any_of)


def none_(fns: Collection[FnT]) -> FnT:
    """A callback that is true when none of the callbacks is true."""
    fns = list(fns)

    def none_of(*args: Any, **kwargs: Any) -> bool:
        return not any(fn(*args, **kwargs) for fn in fns)
    return cast(FnT, none_of)


def not_(fn: FnT) -> FnT:
    """A callback that is true when the callback is false."""
    def negated(*args: Any, **kwargs: Any) -> bool:
        return not fn(*args, **kwargs)
    return cast(FnT, negated)
