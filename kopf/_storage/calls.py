"""
The one way the framework calls storage methods, and the sync-or-async plumbing of storages.

Storages may implement their methods either as plain functions or as
``async def`` (e.g. when they keep state in an external system). The
framework never calls a storage method directly, only through :func:`call`,
so both kinds work everywhere.

Storages that combine other storages (the Multi storages) must stay plain
synchronous calls for users who call them directly when all their children
are synchronous, and still work with asynchronous children: :func:`drive`
runs their steps synchronously until a child returns an awaitable, and only
then continues asynchronously.
"""
from __future__ import annotations

import contextlib
import inspect
from collections.abc import Awaitable, Callable, Collection, Generator, Iterable
from types import TracebackType
from typing import Any, TypeAlias, TypeVar, cast

from typing_extensions import Self, TypeIs

T = TypeVar('T')

# What a storage method returns: the value itself (sync) or something to await for it (async).
MaybeAwaitable: TypeAlias = T | Awaitable[T]

# A sequence of storage calls: yields what each call returned, gets its awaited result back.
Steps: TypeAlias = Generator[Any, Any, T]


# What storage methods return when they are synchronous: never awaitable, and checked cheaply (the ABC check
# of ``inspect.isawaitable`` is a good part of a cycle's cost when called for every plain value).
_PLAIN: frozenset[type] = frozenset({type(None), dict, list, tuple, str, bool, int, float})


def is_awaitable(value: Any) -> TypeIs[Awaitable[Any]]:
    """Whether a storage method's result must be awaited: ``inspect.isawaitable``, quick for plain values."""
    return type(value) not in _PLAIN and inspect.isawaitable(value)


async def call(method: Callable[..., MaybeAwaitable[T]], **kwargs: Any) -> T:
    """Call a storage method with keyword arguments and await its result if needed."""
    result = method(**kwargs)
    if is_awaitable(result):
        return await result
    return result


def drive(steps: Steps[T]) -> MaybeAwaitable[T]:
    """
    Run a sequence of storage calls synchronously for as long as they are synchronous.

    The generator yields what each child call returned and receives the
    result back (awaited, if it was an awaitable). As long as no call returns
    an awaitable, everything happens right here and the final value is
    returned as is. From the first awaitable on, the rest continues in the
    returned coroutine, which the caller must await.
    """
    try:
        yielded = next(steps)
        while not is_awaitable(yielded):
            yielded = steps.send(yielded)
    except StopIteration as e:
        return cast(T, e.value)
    return _continue(steps, yielded)


async def _continue(steps: Steps[T], pending: Awaitable[Any]) -> T:
    yielded: Any = pending
    try:
        while True:
            result = (await yielded) if is_awaitable(yielded) else yielded
            yielded = steps.send(result)
    except StopIteration as e:
        return cast(T, e.value)


def each(results: Iterable[Any]) -> Steps[None]:
    """Steps for calls whose results do not matter (only that they are awaited, in order)."""
    for result in results:
        _ = yield result  # what a call returned is of no use, only that it was awaited
    return None


class Lifetime:
    """
    A storage's lifetime: entered once when the operator starts, exited once when it stops.

    The storages' base classes have it; the storages that prepare or release
    something (a file, a connection) override :meth:`_enter` and
    :meth:`_exit`. Users' storages may override the ``async with`` methods
    themselves, as documented.
    """

    async def _enter(self) -> None:
        """Prepare what the storage needs while the operator runs: nothing by default."""

    async def _exit(self) -> None:
        """Release it: nothing by default."""

    async def __aenter__(self) -> Self:
        await self._enter()
        return self

    async def __aexit__(
            self,
            exc_type: type[BaseException] | None,
            exc_val: BaseException | None,
            exc_tb: TracebackType | None,
    ) -> None:
        await self._exit()


class EnteredTogether(Lifetime):
    """
    The lifetime of a storage that combines others: its children are entered and exited with it.

    Mixed into the Multi storages (before their storage base class).
    """

    storages: Collection[contextlib.AbstractAsyncContextManager[Any]]
    _stack: contextlib.AsyncExitStack | None = None

    async def _enter(self) -> None:
        """Enter every child in order; if one fails, those already entered are exited."""
        async with contextlib.AsyncExitStack() as stack:
            for storage in self.storages:
                await stack.enter_async_context(storage)
            self._stack = stack.pop_all()

    async def _exit(self) -> None:
        """Exit the children in reverse order."""
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()
