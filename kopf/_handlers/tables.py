"""
Handler tables: the handlers of one kind, by the key they were declared for.

The operator's registry keeps one table per kind of handler (keyed by the
resource selector, or by the activity), and a parent handler one for its
sub-handlers. The kinds differ only in which handlers may not stand
together -- their duplicate rule, given to the table; the rest is the same
for all of them and is here: handlers stay in the order of registration, a
duplicate is refused in the rule's words, and the handlers that serve a
resource are found once per resource (the cycle asks on every event) and
remembered until the next registration.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Generic, TypeVar

from kopf._structs.resources import Resource, Selector
from kopf.errors import DuplicateHandlerError

K = TypeVar('K', bound=Hashable)
H = TypeVar('H')

# How the glue refers to a resource: by the declared selector, or by a resolved resource.
ResourceKey = Selector | Resource

# Why a new handler (declared for the first key) may not stand beside a registered one (declared
# for the second key), in words for the user; ``None`` if they may.
DuplicateRule = Callable[[K, H, K, H], str | None]


class HandlerTable(Generic[K, H]):
    """The handlers of one kind: by the key they were declared for, in the order of registration."""

    def __init__(self, duplicate: DuplicateRule[K, H]) -> None:
        self._duplicate = duplicate
        self._handlers: dict[K, list[H]] = {}
        self._served: dict[Hashable, tuple[H, ...]] = {}  # by resource; cleared by every registration
        # The resource asked about last (mostly the very same object, e.g. a watch's) and its answer.
        self._last: tuple[ResourceKey, tuple[H, ...]] | None = None

    def add(self, key: K, handler: H) -> None:
        """Register a handler for a key, unless the duplicate rule refuses it beside one already there."""
        for other_key, existing in self:
            reason = self._duplicate(key, handler, other_key, existing)
            if reason is not None:
                raise DuplicateHandlerError(reason)
        self._handlers.setdefault(key, []).append(handler)
        self._served.clear()
        self._last = None

    def __iter__(self) -> Iterator[tuple[K, H]]:
        """All handlers with the keys they were declared for, key by key in the order of their first use."""
        for key, handlers in list(self._handlers.items()):
            for handler in list(handlers):
                yield key, handler

    def __len__(self) -> int:
        return sum(len(handlers) for handlers in self._handlers.values())

    def keys(self) -> tuple[K, ...]:
        """The keys with handlers, in the order of their first registration."""
        return tuple(self._handlers)

    def declared_for(self, key: K) -> list[H]:
        """The handlers declared for exactly this key."""
        return list(self._handlers.get(key, ()))

    def serving(self: HandlerTable[Selector, H], resource: ResourceKey) -> tuple[H, ...]:
        """The handlers of every selector that selects the resource (or of that very selector), each once."""
        last = self._last
        if last is not None and last[0] is resource:
            return last[1]
        memo = _memo_key(resource)
        served = self._served.get(memo)
        if served is None:
            selected = (handler for selector, handlers in self._handlers.items()
                        if _selects(selector, resource) for handler in handlers)
            served = self._served[memo] = tuple(_unique(selected))
        self._last = (resource, served)
        return served


def _selects(selector: Selector, resource: ResourceKey) -> bool:
    """Whether the handlers declared for a selector apply to a served resource (or to that very selector)."""
    if isinstance(resource, Selector):
        return selector == resource or selector.everything
    return selector.check(resource)


def _memo_key(resource: ResourceKey) -> Hashable:
    """Served resources equal by group-version-plural may still differ in the names that selectors match."""
    if isinstance(resource, Selector):
        return resource
    return (resource.group, resource.version, resource.plural, resource.kind, resource.singular,
            resource.shortcuts, resource.categories, resource.preferred)


def _unique(handlers: Iterable[H]) -> Iterator[H]:
    """Drop the repeated handlers that several matching selectors may give (by identity)."""
    seen: set[int] = set()
    for handler in handlers:
        if id(handler) not in seen:
            seen.add(id(handler))
            yield handler
