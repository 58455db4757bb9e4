"""
Waiting for something or for a time, whichever comes first, by the keeper's clock.

Every timed wait of daemons and timers (delays, intervals, idling, the steps of
a stop, the exit) goes through these, so that all of them follow the clock
that the keeper was given: the real one, or a test's, which waits until it is
moved.
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Collection
from typing import Any

from kopf._structs.clocks import Clock
from kopf._structs.stoppers import DaemonStopper


async def first(clock: Clock, seconds: float | None, *waits: Awaitable[Any]) -> None:
    """
    Wait until one of ``waits`` is done, or ``seconds`` of the clock have passed (``None``: no limit).

    The rest of them are cancelled: give only waits of one's own, never a task
    that must go on (see :func:`ended_within`).
    """
    futures = [asyncio.ensure_future(wait) for wait in waits]
    if seconds is not None:
        futures.append(asyncio.ensure_future(clock.sleep(max(0.0, seconds))))
    try:
        await asyncio.wait(futures, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for future in futures:  # not waited for: the caller goes on at once, they end in their next turn
            future.cancel()


async def stopped_within(stopper: DaemonStopper, clock: Clock, seconds: float | None) -> bool:
    """Wait until stopped or ``seconds`` of the clock have passed; whether it is stopped."""
    if stopper.is_set():
        return True
    if seconds is not None and seconds <= 0:
        await asyncio.sleep(0)  # a turn of the loop all the same: a loop of zero delays must not hog it
        return stopper.is_set()
    await first(clock, seconds, stopper.wait_async())
    return stopper.is_set()


async def ended_within(tasks: Collection[asyncio.Task[Any]], clock: Clock, seconds: float | None) -> bool:
    """Wait until all the tasks have ended or ``seconds`` of the clock have passed; whether they have ended."""
    pending: set[asyncio.Future[Any]] = {task for task in tasks if not task.done()}
    if not pending:
        return True
    timer = asyncio.ensure_future(clock.sleep(max(0.0, seconds))) if seconds is not None else None
    try:
        while pending and (timer is None or not timer.done()):
            waits = pending if timer is None else pending | {timer}
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            pending -= done
    finally:
        if timer is not None:
            timer.cancel()
    return all(task.done() for task in tasks)
