"""
Lifecycles: which of the handlers that are due now run in this handling cycle.

A lifecycle is a plain callable ``lifecycle(handlers, *, state, **kwargs)``
that receives the awakened handlers (not finished, not sleeping) in their
registration order and returns those to run now, in the order to run them.
The remaining ones run in later cycles.
"""
from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

from kopf.storage.states import State
from kopf.structs.ids import HandlerId


class _Identified(Protocol):
    @property
    def id(self) -> HandlerId: ...


H = TypeVar('H', bound=_Identified)


class LifeCycleFn(Protocol):
    def __call__(self, handlers: Sequence[H], *, state: State, **kwargs: Any) -> Sequence[H]: ...


def all_at_once(handlers: Sequence[H], *, state: State, **kwargs: Any) -> Sequence[H]:
    """All of them, in their registration order."""
    return list(handlers)


def one_by_one(handlers: Sequence[H], *, state: State, **kwargs: Any) -> Sequence[H]:
    """Only the first one: a failing handler blocks the following ones until it succeeds or gives up."""
    return list(handlers[:1])


def randomized(handlers: Sequence[H], *, state: State, **kwargs: Any) -> Sequence[H]:
    """One handler, chosen at random."""
    return [random.choice(handlers)] if handlers else []


def shuffled(handlers: Sequence[H], *, state: State, **kwargs: Any) -> Sequence[H]:
    """All of them, in a random order."""
    return random.sample(list(handlers), len(handlers))


def asap(handlers: Sequence[H], *, state: State, **kwargs: Any) -> Sequence[H]:
    """
    One handler: the one retried the least, the first registered among equals.

    So a failing handler does not block the others: after its failure, the
    handlers that have not been tried yet go first.
    """
    if not handlers:
        return []
    return [min(handlers, key=lambda handler: _retries(state, handler.id))]


def _retries(state: State, handler_id: HandlerId) -> int:
    handler_state = state.get(handler_id)
    return handler_state.retries if handler_state is not None else 0


_default_lifecycle: LifeCycleFn = asap


def get_default_lifecycle() -> LifeCycleFn:
    return _default_lifecycle


def set_default_lifecycle(lifecycle: LifeCycleFn | None) -> None:
    """Set the operator-wide lifecycle; ``None`` restores the built-in default, :func:`asap`."""
    global _default_lifecycle
    _default_lifecycle = lifecycle if lifecycle is not None else asap
