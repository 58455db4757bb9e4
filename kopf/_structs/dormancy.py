"""
Containers that lie packed in one block of bytes while nobody uses them.

A watch remembers every object for as long as the object exists: its
identity, to report it as deleted should it vanish unseen, and whether it
has been handled since the operator started. That is a few small Python
objects per Kubernetes object, made during a burst of events among the many
short-lived objects of the handling itself. CPython's allocator gives its
1 MiB arenas back to the system only when they are entirely free, so a few
long-lived objects scattered over them keep most of a burst's memory
resident for good (measured: 10,000 objects kept about 60 MB that way).

Packed into one block of bytes -- too big for that allocator -- after a quiet
while, those objects are freed and the arenas with them. The first use
afterwards unpacks them (milliseconds for 10,000 objects) and they are packed
again after the next quiet while. Containers without a running event loop,
small ones, and those with contents that cannot be packed stay as they are.

The quiet while is measured by an injected clock (the system's by default),
with a timer rather than a task: a timer is all the waiting costs.
"""
from __future__ import annotations

import asyncio
import functools
import marshal
from collections.abc import Callable, Hashable, Iterable, Iterator, MutableSet, Sized
from typing import Any, Generic, TypeVar

from kopf._structs.clocks import SYSTEM_CLOCK, Clock

QUIET = 10.0  # seconds without use before a container is packed
MIN_PACKED = 256  # items: fewer are not worth the packing

T = TypeVar('T', bound=Sized)
H = TypeVar('H', bound=Hashable)


class Dormant(Generic[T]):
    """
    A container that is packed after ``quiet`` seconds without use, and unpacked at the next use.

    ``pack`` turns the container into what :mod:`marshal` can store (plain
    strings, numbers, tuples, lists, dicts, sets); ``unpack`` turns that back.
    Every use goes through :attr:`value`, and nobody may keep the container
    across an ``await``: packing replaces it.
    """

    __slots__ = ('_clock', '_live', '_pack', '_packed', '_timer_loop', '_unpack', '_used', 'quiet')

    def __init__(self, value: T, *, pack: Callable[[T], Any], unpack: Callable[[Any], T],
                 quiet: float | None = None, clock: Clock = SYSTEM_CLOCK) -> None:
        self._live: T | None = value
        self._packed: bytes | None = None
        self._pack = pack
        self._unpack = unpack
        self._used = 0.0
        self._timer_loop: asyncio.AbstractEventLoop | None = None  # where the packing is scheduled, if it is
        self._clock = clock
        self.quiet = QUIET if quiet is None else quiet

    @property
    def value(self) -> T:
        """The container, unpacked if it was packed; every use postpones the packing."""
        if self._live is None:
            assert self._packed is not None
            self._live = self._unpack(marshal.loads(self._packed))
            self._packed = None
        self._used_now()
        return self._live

    @value.setter
    def value(self, value: T) -> None:
        self._live, self._packed = value, None
        self._used_now()

    @property
    def packed(self) -> bool:
        return self._packed is not None

    def _used_now(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # nothing to pack it later: it stays as it is
        self._used = self._clock.monotonic()
        if self._timer_loop is not loop:  # not scheduled yet, or in a loop that has ended
            self._schedule(loop, self.quiet)

    def _schedule(self, loop: asyncio.AbstractEventLoop, delay: float) -> None:
        self._clock.call_later(delay, functools.partial(self._pack_if_quiet, loop))
        self._timer_loop = loop

    def _pack_if_quiet(self, loop: asyncio.AbstractEventLoop) -> None:
        if loop is not self._timer_loop:
            return  # a timer of an earlier loop
        self._timer_loop = None
        if self._live is None:
            return
        remaining = self._used + self.quiet - self._clock.monotonic()
        if remaining > 0:  # used meanwhile: quiet only from the last use on
            self._schedule(loop, remaining)
        elif len(self._live) >= MIN_PACKED:  # a small container keeps too little memory to be worth it
            try:
                packed = marshal.dumps(self._pack(self._live))
            except ValueError:  # contents that marshal cannot store: keep them as they are
                return
            self._live, self._packed = None, packed


class DormantSet(MutableSet[H]):
    """A set (of strings, numbers, tuples of them) that is packed while unused; see :class:`Dormant`."""

    __slots__ = ('_box',)

    def __init__(self, items: Iterable[H] = (), *, quiet: float | None = None, clock: Clock = SYSTEM_CLOCK) -> None:
        self._box: Dormant[set[H]] = Dormant(set(items), pack=_same, unpack=_same, quiet=quiet, clock=clock)

    @property
    def packed(self) -> bool:
        return self._box.packed

    def __contains__(self, item: object) -> bool:
        return item in self._box.value

    def __iter__(self) -> Iterator[H]:
        return iter(self._box.value)

    def __len__(self) -> int:
        return len(self._box.value)

    def add(self, item: H) -> None:
        self._box.value.add(item)

    def discard(self, item: H) -> None:
        self._box.value.discard(item)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({'packed' if self.packed else f'{len(self)} items'})"


def _same(value: Any) -> Any:
    return value
