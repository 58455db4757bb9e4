"""
The one way the framework calls storage methods.

Storages may implement their methods either as plain functions or as
``async def`` (e.g. when they keep state in an external system). The
framework never calls a storage method directly, only through :func:`call`,
so both kinds work everywhere.
"""
from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar('T')


async def call(method: Callable[..., T | Awaitable[T]], **kwargs: Any) -> T:
    """Call a storage method with keyword arguments and await its result if needed."""
    result = method(**kwargs)
    if inspect.isawaitable(result):
        return await result
    return result
