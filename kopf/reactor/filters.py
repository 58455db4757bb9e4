"""
Handler filters: which objects a handler is interested in.

``labels=`` and ``annotations=`` map keys to an exact value, to
:data:`PRESENT` / :data:`ABSENT`, or to a callable that receives the value
(``None`` if absent) and returns whether it fits. ``when=`` receives the same
keyword arguments as the handler itself and returns whether to call it.
"""
from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias


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
