"""
Lifecycles: which of the handlers that are due now run in this handling cycle.

A lifecycle is a plain callable ``lifecycle(handlers, *, state, **kwargs)``
that receives the awakened handlers (not finished, not sleeping) in their
registration order and returns those to run now, in the order to run them.

Within one handling cycle, the cycle asks the lifecycle again after the
chosen handlers have run, with what is still due, and runs the new choice
too -- until nothing is due, the lifecycle chooses a handler that has already
run in this cycle (its next attempt belongs to a later cycle), or the
cycle's time budget is spent (``config.persistence.max_unpersisted_time``).
So ``one_by_one`` still runs the handlers strictly in order and stops at a
failing one, ``asap`` still lets the least retried go first, and the quick
handlers of all lifecycles share one write to the object.
"""
from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar

from kopf._structs.ids import HandlerId


class _Identified(Protocol):
    @property
    def id(self) -> HandlerId: ...


class _Retried(Protocol):
    @property
    def retries(self) -> int: ...


H = TypeVar('H', bound=_Identified)
# What lifecycles may know of the handlers' progress: e.g. how often each was tried.
State = Mapping[HandlerId, _Retried]


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


# The lifecycles of this module: they read nothing but the handlers and the state, so no other kwargs are made.
BUILTIN: tuple[LifeCycleFn, ...] = (all_at_once, one_by_one, randomized, shuffled, asap)


def get_default_lifecycle() -> LifeCycleFn:
    return _default_lifecycle


def set_default_lifecycle(lifecycle: LifeCycleFn | None) -> None:
    """Set the operator-wide lifecycle; ``None`` restores the built-in default, :func:`asap`."""
    global _default_lifecycle
    _default_lifecycle = lifecycle if lifecycle is not None else asap
