"""Storage methods may be plain or async: what they return is awaited only if it is awaitable."""
import asyncio
from collections.abc import Generator
from typing import Any

import pytest

from kopf._storage import calls


class AwaitableDict(dict):  # type: ignore[type-arg]
    """A value of a plain type's subclass that is awaitable after all: it must not be taken for a plain dict."""

    def __await__(self) -> Generator[Any, None, str]:
        yield from asyncio.sleep(0).__await__()
        return 'awaited'


@pytest.mark.parametrize('value', [None, {}, {'a': 1}, [], (), '', 'text', True, 0, 1.5])
def test_plain_values_are_not_awaitable(value: Any) -> None:
    assert not calls.is_awaitable(value)


async def test_coroutines_futures_and_custom_awaitables_are_awaitable() -> None:
    async def fn() -> None:
        pass

    coro = fn()
    future = asyncio.get_running_loop().create_future()
    try:
        assert calls.is_awaitable(coro)
        assert calls.is_awaitable(future)
        assert calls.is_awaitable(AwaitableDict())
    finally:
        coro.close()
        future.cancel()


async def test_call_awaits_what_needs_it_and_passes_plain_values_through() -> None:
    async def async_method(**kwargs: Any) -> dict[str, Any]:
        return kwargs

    def sync_method(**kwargs: Any) -> dict[str, Any]:
        return kwargs

    assert await calls.call(async_method, x=1) == {'x': 1}
    assert await calls.call(sync_method, x=2) == {'x': 2}
    assert await calls.call(lambda: AwaitableDict()) == 'awaited'


def test_drive_stays_synchronous_for_plain_results_and_continues_async_after_an_awaitable() -> None:
    def steps(first: Any, second: Any) -> Generator[Any, Any, list[Any]]:
        a = yield first
        b = yield second
        return [a, b]

    assert calls.drive(steps({'a': 1}, None)) == [{'a': 1}, None]
    pending = calls.drive(steps({'a': 1}, AwaitableDict()))
    assert asyncio.iscoroutine(pending)
    assert asyncio.run(pending) == [{'a': 1}, 'awaited']
