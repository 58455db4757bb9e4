"""
The life of one daemon or timer of one object: its task, from the initial delay to its end.

A daemon is one long call, retried when it fails; one that returns (or
fails for good) is not started again for that object in this process. A
timer is called again and again, as :mod:`.schedule` says, until it is
stopped; one that fails for good stops ticking for that object. Both end as
soon as they are stopped (``stopped`` is set), whatever they wait for.

Each loop is a thin executor: :mod:`.schedule` decides when, :mod:`.calls`
makes one call, and the waits are by the keeper's clock (:mod:`.waiting`).
"""
from __future__ import annotations

import asyncio

from kopf._daemons import calls, schedule, waiting
from kopf._daemons.calls import Patcher
from kopf._daemons.objects import Runner
from kopf._daemons.schedule import Act, Timeline, TimerOptions
from kopf._handlers.progression import HandlerState
from kopf._handlers.registries import TimerHandler
from kopf._observability import recording
from kopf._structs.clocks import Clock
from kopf._structs.patches import Patch


async def run_daemon(runner: Runner, *, clock: Clock, patcher: Patcher) -> None:
    """Call the daemon, and again after its back-off while it fails, until it returns or is stopped."""
    handler, obj = runner.handler, runner.obj
    if not await initial_delay(runner, clock=clock):
        return
    state = HandlerState.from_scratch(clock=clock)
    while True:
        outcome = await calls.attempt(runner, state, patcher=patcher)
        if outcome.final:
            if not runner.stopper.is_set():
                obj.finished.add(handler.id)
                obj.logger.debug("%s has exited on its own; it is not started again for this object.", handler)
            return
        if runner.stopper.is_set():
            return
        state = state.with_outcome(outcome)
        recording.current().daemon_restarted(obj.resource, handler.id, 'daemon')
        if await waiting.stopped_within(runner.stopper, clock, outcome.delay or 0):
            return


async def run_timer(runner: Runner, *, clock: Clock, patcher: Patcher) -> None:
    """Call the timer whenever it is due (see :mod:`.schedule`), until it is stopped or fails for good."""
    handler, obj = runner.handler, runner.obj
    assert isinstance(handler, TimerHandler)
    if not await initial_delay(runner, clock=clock):
        return
    options = TimerOptions.of(handler)
    state = HandlerState.from_scratch(clock=clock)
    timeline: Timeline | None = Timeline()
    while timeline is not None and not runner.stopper.is_set():
        now = clock.monotonic()
        step = schedule.next_tick(options, timeline, changed_at=obj.changed_at, generation=obj.generation, now=now)
        if step.act == Act.SLEEP:
            assert step.until is not None
            await waiting.stopped_within(runner.stopper, clock, step.until - now)
        elif step.act == Act.AWAIT_CHANGE:
            await waiting.first(clock, None, obj.changed(), runner.stopper.wait_async())
        elif step.act == Act.AWAIT_STOP:
            await runner.stopper.wait_async()
        else:
            await asyncio.sleep(0)  # a turn of the loop between calls, even when they are due at once
            generation, started = obj.generation, clock.monotonic()
            outcome = await calls.attempt(runner, state, patcher=patcher)
            timeline = schedule.after_call(options, timeline, outcome, started=started, ended=clock.monotonic(),
                                           generation=generation)
            if timeline is None:
                if not runner.stopper.is_set():
                    obj.finished.add(handler.id)
                    obj.logger.error("%s has failed for good; it is not called again for this object.", handler)
            elif outcome.final:
                state = HandlerState.from_scratch(clock=clock)  # a success starts the retries anew
            else:
                state = state.with_outcome(outcome)
                recording.current().daemon_restarted(obj.resource, handler.id, 'timer')


async def initial_delay(runner: Runner, *, clock: Clock) -> bool:
    """Wait for the handler's initial delay (counted from the object's first sight); whether to go on."""
    delay = runner.handler.initial_delay
    if callable(delay):
        try:
            delay = float(delay(**calls.kwargs(runner, Patch(), None)))
        except Exception:
            runner.obj.logger.exception("The initial_delay= function of %s has failed; starting it at once.",
                                        runner.handler)
            delay = 0.0
    left = schedule.initial_delay_left(delay, first_seen=runner.obj.first_seen, now=clock.monotonic())
    if left > 0:
        return not await waiting.stopped_within(runner.stopper, clock, left)
    return not runner.stopper.is_set()
