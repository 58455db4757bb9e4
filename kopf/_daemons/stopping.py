"""
Stopping a daemon: the steps after its ``stopped`` flag is set, carried out by the clock.

1. ``stopped`` is set at once, with the reason (``stopped.reason``).
2. The daemon has ``cancellation_backoff`` seconds (default: none) to exit
   on its own.
3. With a ``cancellation_timeout``: an ``async`` daemon is cancelled
   (:class:`asyncio.CancelledError` at its current ``await``); after that
   many more seconds, a daemon still running is **abandoned** with one
   warning, and the object's deletion proceeds. Python cannot stop a
   thread: a plain (``def``) daemon is never cancelled, and once abandoned,
   its thread runs on until the function returns (at the latest, it ends
   with the process: see :mod:`.calls`).
4. Without a ``cancellation_timeout``: the daemon is waited for as long as it
   takes, and reported every ``cancellation_polling`` seconds
   (``config.background.cancellation_polling`` by default); the object's
   deletion waits for it.

:mod:`.escalation` decides the steps; :func:`guard` waits, cancels, reports
and gives up as it says, one guard per stopping daemon.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable

from kopf._daemons import escalation, waiting
from kopf._daemons.escalation import Act, StopOptions
from kopf._daemons.objects import Runner
from kopf._structs.clocks import Clock
from kopf._structs.stoppers import DaemonStoppingReason


async def guard(runner: Runner, *, clock: Clock, polling: float, abandon: Callable[[Runner], None]) -> None:
    """
    Cancel, report, and finally abandon a daemon that does not exit when asked to.

    ``polling`` is the default period of the reports; ``abandon`` is told
    when the daemon is given up on (it no longer holds its object then).
    """
    handler, obj, task = runner.handler, runner.obj, runner.task
    assert task is not None
    options = StopOptions.of(handler, polling=polling, threaded=runner.threaded)
    cancelled_at: float | None = None
    reported_at: float | None = None
    while not task.done():
        now = clock.monotonic()
        asked_at = runner.asked_at if runner.asked_at is not None else now
        step = escalation.next_step(options, asked_at=asked_at, now=now,
                                    cancelled_at=cancelled_at, reported_at=reported_at)
        if step.act == Act.WAIT:
            assert step.until is not None
            if await waiting.ended_within([task], clock, step.until - now):
                return
        elif step.act == Act.CANCEL:
            if options.backoff:
                obj.logger.debug("%s has not exited %ss after it was asked to stop; cancelling it.",
                                 handler, options.backoff)
            else:
                obj.logger.debug("%s is cancelled: it has a cancellation_timeout, and no "
                                 "cancellation_backoff to exit on its own first.", handler)
            runner.stop(DaemonStoppingReason.DAEMON_CANCELLED, now=now)  # as in Kopf: the reason says so too
            task.cancel()
            cancelled_at = now
            await asyncio.sleep(0)  # a turn of the loop to take the cancellation, even with a zero timeout
        elif step.act == Act.REPORT:
            obj.logger.warning(
                "%s is still running %.0fs after it was asked to stop (%s); waiting for it. It must exit when "
                "`stopped` is set; a cancellation_timeout= would abandon it after that many seconds.",
                handler, now - asked_at, runner.reasons())
            reported_at = now
        else:
            assert options.timeout is not None
            runner.abandoned = True
            abandon(runner)
            obj.logger.warning("%s", abandoned_message(runner, options.timeout))
            return


def abandoned_message(runner: Runner, timeout: float) -> str:
    """One warning for a daemon given up on: what happened, what follows, and what to do."""
    handler, reason = runner.handler, runner.stopper.reason or DaemonStoppingReason.DONE
    if runner.threaded:
        what = (f"{handler} did not exit within its cancellation_timeout of {timeout}s after it was asked to stop; "
                f"a thread cannot be stopped, so it keeps running in the background until the function returns "
                f"(at the latest, it ends with the operator's process)")
    else:
        what = (f"{handler} did not exit within its cancellation_timeout of {timeout}s after it was cancelled; "
                f"it is abandoned (its task is cancelled again at the operator's exit)")
    if reason & DaemonStoppingReason.RESOURCE_DELETED:
        then = "The object's deletion proceeds without it."
    elif reason & DaemonStoppingReason.OPERATOR_EXITING:
        then = "The operator exits without it."
    elif reason & DaemonStoppingReason.OPERATOR_PAUSING:
        then = ("The object goes to another replica without waiting for it any longer; the next owner's "
                "daemon may run at the same time.")
    else:
        then = "It is not started again for this object until it has exited."
    return f"{what}. {then} Make it exit when `stopped` is set (e.g. sleep with `stopped.wait(...)`)."
