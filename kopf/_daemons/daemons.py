"""
Daemons and timers: per-object tasks that run beside the handling cycle.

Where they live
===============

Daemon tasks outlive a handling cycle and an object's worker (a worker ends
when its object is idle), so neither can own them. One :class:`Daemons`
keeper per watched resource owns them instead: :mod:`~kopf._runtime.running`
creates it with the resource's watch and closes it at the operator's exit, or
when the watch stops because its namespace or its CRD is gone
(:meth:`Daemons.close`), which stops every daemon and timer it has started.

The keeper is a stage of the handling cycle
(:class:`~kopf._cycle.cycle.Stage`): every event of every object passes it,
and that is the only way daemons start and stop:

* the object matches a daemon's filters (``labels=``, ``annotations=``,
  ``when=``) and that daemon does not run for it: it is started (after its
  ``initial_delay``) -- unless it has finished for good for this object
  (returned on its own, or failed permanently), or a previous run is still
  stopping (it is started again on a later event, once that run has exited);
* a running daemon stops matching: it is asked to stop
  (``FILTERS_MISMATCH``);
* the object is being deleted: all its daemons are asked to stop
  (``RESOURCE_DELETED``). While any of them is still stopping, the stage
  answers :class:`~kopf._cycle.cycle.Holding`: our finalizer stays on the
  object, and the cycle comes back to check, until each has exited or been
  abandoned;
* the object is gone (``DELETED``): its daemons are asked to stop, and the
  keeper forgets the object.

With replicas (``--ha``/``--shards``, :mod:`~kopf._replicas.fencing`), events
reach the keeper only for the objects that this replica may handle, so
daemons start only there. An object that moves to another replica sends no
more events here, so the keeper follows the gate instead: whenever the
gate's permit or deadlines change (and every :data:`PATROL_INTERVAL` in
any case), it stops the daemons of the objects that are not its own any
more (``OPERATOR_PAUSING``, with the usual steps below). Every daemon and
timer is a *resident* of its object at the gate until it exits, and a
hand-over of the object is acknowledged only after that (see
:meth:`~kopf._replicas.fencing.Gate.drain`): the next owner never starts a
daemon while the previous one's still runs. When the Lease is lost (the hard
fence), there is no time for the usual steps: the ``async`` daemons and
timers are cancelled at once, since the next owner may start them as soon
as the Lease expires. At the exit, a replica stops its daemons before it
gives up its Lease.

Memory: the keeper holds an entry for an object only while a daemon of it
runs (or stops), or has finished for good (so that it is not started
again). The entry holds the object's latest body -- the live view that its
daemons see in ``body``, ``spec``, ``status``, ... -- and is dropped as soon
as nothing runs for the object and nothing is to be remembered, or when the
object is gone. Objects without daemons cost nothing.

Stopping
========

1. ``stopped`` is set at once, with the reason (``stopped.reason``).
2. The daemon has ``cancellation_backoff`` seconds (default: none) to exit
   on its own.
3. With a ``cancellation_timeout``: an ``async`` daemon is cancelled
   (:class:`asyncio.CancelledError` at its current ``await``); after that
   many more seconds, a daemon still running is **abandoned** with one
   warning, and the object's deletion proceeds. Python cannot stop a
   thread: a plain (``def``) daemon is never cancelled, and once abandoned,
   its thread runs on until the function returns. Every plain daemon has a
   thread of its own (a daemon thread, not one of the executor's), so an
   abandoned one blocks no handler and does not hold up the operator's
   exit: it ends with the process at the latest.
4. Without a ``cancellation_timeout``: the daemon is waited for as long as it
   takes, and reported every ``cancellation_polling`` seconds
   (``config.background.cancellation_polling`` by default); the object's
   deletion waits for it.

At the operator's exit, all daemons and timers are asked to stop at once
(``OPERATOR_EXITING``), the same steps apply, and all of them together get
``config.background.exit_timeout`` seconds; those left are then cancelled,
and their threads are left to end with the process.

Retries and results
===================

Daemons and timers follow the retry policy of all handlers
(:mod:`~kopf._handlers.execution`): an exception is retried after the
handler's ``backoff`` (or the :class:`kopf.TemporaryError`'s ``delay``) per
``errors=``, ``retries=``, ``timeout=``, with ``retry``, ``started``,
``runtime`` as usual. Their progress is kept in memory only: a restarted
operator starts them anew. A daemon that returns (or fails for good) is not
started again for that object in this process; a timer that fails for good
stops ticking for it. Whatever a call writes into ``patch``, and its result
as ``status.<id>``, is applied to the object when the call ends: after
every tick of a timer, when a daemon returns or raises.

Timers
======

One task per object and timer calls the function, then sleeps: ``interval``
seconds after the call's end (``sharp``: after its start), so calls of one
timer never overlap, however long they take. ``idle`` waits until the object
has had no event for that many seconds (every event counts: also our own
patches). Without an ``interval``, a timer is called once per object --
again after each change if it has an ``idle``. Failed calls are retried after
their back-off rather than the interval.
"""
from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, Protocol

from kopf._cycle import selection
from kopf._cycle.causation import Cause
from kopf._cycle.cycle import Holding
from kopf._handlers import execution, invocation
from kopf._handlers.arguments import Arguments, ObjectArguments, OperatorArguments
from kopf._handlers.execution import HandlerOutcome
from kopf._handlers.progression import HandlerState
from kopf._handlers.reasons import Reason
from kopf._handlers.registries import DaemonHandler, OperatorRegistry, ResourceKey, SpawningHandler, TimerHandler
from kopf._kube import patching
from kopf._kube.auth import APIContext
from kopf._structs import hierarchies
from kopf._structs.bodies import Body, Meta, Spec, Status, object_key
from kopf._structs.clocks import SYSTEM_CLOCK, Clock
from kopf._structs.patches import Patch
from kopf._structs.resources import Resource
from kopf._structs.stoppers import DaemonStopper, DaemonStoppingReason
from kopf._structs.typedefs import Logger
from kopf.config import BackgroundConfig

logger = logging.getLogger('kopf._daemons.daemons')

Patcher = Callable[[Body, Patch, Logger], Awaitable[None]]

# With replicas: how often to look for objects that this replica may not handle any more.
PATROL_INTERVAL = 1.0

# While daemons of an object being deleted are stopping, the cycle checks again this soon at first,
# then less and less often (as long as they have been stopping), at most every cancellation_polling.
MIN_RECHECK = 1.0


class Fence(Protocol):
    """
    What the keeper needs of a replica's gate (:class:`kopf._replicas.fencing.Gate`).

    A protocol, so that daemons know nothing of how replicas coordinate.
    """

    def admits(self, key: str) -> bool:
        """Whether this replica may handle the object now."""

    @property
    def writable(self) -> bool:
        """Whether the hard fence has not struck yet."""

    def reside(self, key: str) -> int:
        """A daemon or timer of the object has started."""

    def depart(self, token: int) -> None:
        """It has exited, or was given up on."""

    @property
    def revision(self) -> int:
        """Grows with every change of what is permitted, and until when."""

    async def revised(self, revision: int) -> None:
        """Wait until the revision differs from the given one."""


class Daemons:
    """
    The daemons and timers of one watched resource, by object; a stage of the handling cycle.

    ``patcher`` applies the patches (and results) of the calls to an object.
    ``fence`` (with replicas) says whether this replica may handle an object
    now; the daemons of objects that it may not handle any more are stopped
    (``OPERATOR_PAUSING``) as soon as the fence changes, since their events
    no longer come here, and the fence knows them until they have exited.
    """

    def __init__(
            self,
            *,
            patcher: Patcher,
            fence: Fence | None = None,
            clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._patcher = patcher
        self._fence = fence
        self._patrol: asyncio.Task[None] | None = None
        self._clock = clock
        self._objects: dict[str, _Object] = {}
        self._runners: set[_Runner] = set()  # every runner not yet ended, also of forgotten objects
        self._guards: set[asyncio.Task[None]] = set()
        self._closed = False

    def __len__(self) -> int:
        """How many objects the keeper remembers (for tests of its memory)."""
        return len(self._objects)

    @property
    def running(self) -> int:
        """How many daemons and timers run (or stop) now, of all objects."""
        return sum(1 for runner in self._runners if runner.running)

    async def __call__(
            self,
            registry: OperatorRegistry,
            resource: ResourceKey,
            cause: Cause,
            arguments: Arguments,
    ) -> float | Holding | None:
        """Start, keep or stop the object's daemons as its latest event says."""
        if arguments.object is None:
            return None
        body = arguments.object.body
        key = object_key(body.raw)
        obj = self._objects.get(key)
        if cause.reason == Reason.GONE:
            if obj is not None:
                del self._objects[key]
                obj.update(body)
                self._stop(obj, DaemonStoppingReason.RESOURCE_DELETED)
            return None

        handlers = registry.get_spawning_handlers(resource)
        if obj is None:
            if cause.deleting or not handlers:
                return None
            obj = _Object(key=key, body=body, operator=arguments.operator, resource=arguments.object.resource)
            self._objects[key] = obj
        else:
            obj.update(body)

        if cause.deleting:
            return await self._release(obj, held=cause.reason == Reason.DELETE,
                                       settings=arguments.operator.config.background)

        wanted = [h for h in handlers if selection.matches(h, arguments=arguments, logger=obj.logger)]
        wanted_ids = {handler.id for handler in wanted}
        for runner in list(obj.runners.values()):
            if runner.handler.id not in wanted_ids:
                self._request_stop(obj, runner, DaemonStoppingReason.FILTERS_MISMATCH)
        admitted = self._fence is None or self._fence.admits(key)  # the permit may have changed since the cycle began
        for handler in wanted:
            current = obj.runners.get(handler.id)
            if (current is None or not current.running) and handler.id not in obj.finished and not self._closed \
                    and admitted:
                self._spawn(obj, handler)
        self._forget_if_idle(obj)
        return None

    async def close(
            self,
            *,
            timeout: float,
            reason: DaemonStoppingReason = DaemonStoppingReason.OPERATOR_EXITING,
    ) -> None:
        """
        Stop all daemons and timers, within ``timeout`` seconds for all of them; start none any more.

        At the operator's exit (``OPERATOR_EXITING``), or when the watch of
        the resource stops because its namespace or its CRD is gone
        (``RESOURCE_DELETED``).
        """
        self._closed = True
        if self._patrol is not None:
            self._patrol.cancel()
            await asyncio.gather(self._patrol, return_exceptions=True)
        for obj in list(self._objects.values()):
            self._stop(obj, reason)
        runners = [runner for runner in self._runners if runner.running]
        for runner in runners:  # also those of forgotten objects, already stopping
            runner.stopper.set(reason)
        # The abandoned ones were given up already (and reported): they are not waited for again.
        tasks = [runner.task for runner in runners if runner.task is not None and not runner.abandoned]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
        late = [runner for runner in runners if runner.running]
        for runner in late:
            kind = ("its thread is left running until the function returns or the process ends"
                    if runner.threaded else "it is cancelled")
            if runner.abandoned:
                runner.obj.logger.debug("%s was abandoned earlier; at the exit, %s.", runner.handler, kind)
            else:
                runner.obj.logger.warning("%s did not stop within the %s of %ss; %s.", runner.handler,
                                          "operator's exit timeout" if reason == DaemonStoppingReason.OPERATOR_EXITING
                                          else "timeout of stopping the watch", timeout, kind)
            assert runner.task is not None
            runner.task.cancel()
        if late:
            await asyncio.wait([runner.task for runner in late if runner.task is not None], timeout=1.0)
        for guard in list(self._guards):
            guard.cancel()
        await asyncio.gather(*self._guards, return_exceptions=True)
        self._objects.clear()

    # Starting.

    def _spawn(self, obj: _Object, handler: SpawningHandler) -> None:
        runner = _Runner(handler=handler, obj=obj, stopper=DaemonStopper())
        run = self._run_daemon if isinstance(handler, DaemonHandler) else self._run_timer
        if self._fence is not None:
            runner.residence = self._fence.reside(obj.key)
        runner.task = asyncio.create_task(run(runner), name=f"kopf {handler} of {obj.describe()}")
        runner.task.add_done_callback(functools.partial(self._ended, runner))
        obj.runners[handler.id] = runner
        self._runners.add(runner)
        if self._fence is not None and self._patrol is None:
            self._patrol = asyncio.create_task(self._patrol_fence(self._fence), name='kopf daemons patrol')

    async def _patrol_fence(self, fence: Fence) -> None:
        """With replicas: stop the daemons of the objects that another replica (or none) handles now."""
        while True:
            revision = fence.revision
            self._follow(fence)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(fence.revised(revision), timeout=PATROL_INTERVAL)

    def _follow(self, fence: Fence) -> None:
        """Stop what is not ours any more; at the hard fence, cancel what has not exited yet."""
        for obj in list(self._objects.values()):
            if not fence.admits(obj.key):
                del self._objects[obj.key]
                if obj.runners:
                    obj.logger.info("This replica does not handle the object any more; "
                                    "stopping its daemons and timers.")
                self._stop(obj, DaemonStoppingReason.OPERATOR_PAUSING)
        if not fence.writable:
            for runner in list(self._runners):
                self._fence_off(runner)

    def _fence_off(self, runner: _Runner) -> None:
        """The Lease is lost: stop the daemon now, not after its usual steps; the next owner may start soon."""
        if not runner.running or runner.fenced or runner.task is None:
            return
        runner.fenced = True
        runner.stopper.set(DaemonStoppingReason.OPERATOR_PAUSING)
        if runner.threaded:
            runner.obj.logger.warning(
                "%s is asked to stop: this replica has lost its lease, and the next owner may start it when "
                "the lease expires; a thread cannot be cancelled, so it must exit when `stopped` is set.",
                runner.handler)
        else:
            runner.obj.logger.info("%s is cancelled: this replica has lost its lease, and the next owner may "
                                   "start it when the lease expires.", runner.handler)
            runner.task.cancel()

    def _ended(self, runner: _Runner, task: asyncio.Task[None]) -> None:
        self._depart(runner)
        self._runners.discard(runner)
        obj = runner.obj
        if obj.runners.get(runner.handler.id) is runner:
            del obj.runners[runner.handler.id]
        if not task.cancelled() and task.exception() is not None:
            obj.logger.error("%s has crashed in the framework; it is not started again for this object.",
                             runner.handler, exc_info=task.exception())
            obj.finished.add(runner.handler.id)
        if self._objects.get(obj.key) is obj:
            self._forget_if_idle(obj)

    def _depart(self, runner: _Runner) -> None:
        if self._fence is not None and runner.residence is not None:
            self._fence.depart(runner.residence)
            runner.residence = None

    def _forget_if_idle(self, obj: _Object) -> None:
        if not obj.runners and not obj.finished and self._objects.get(obj.key) is obj:
            del self._objects[obj.key]

    # Stopping.

    def _stop(self, obj: _Object, reason: DaemonStoppingReason) -> None:
        for runner in list(obj.runners.values()):
            self._request_stop(obj, runner, reason)

    def _request_stop(self, obj: _Object, runner: _Runner, reason: DaemonStoppingReason) -> None:
        """Set the stop flag, and (once) start the steps that follow if the daemon does not exit."""
        runner.stopper.set(reason)
        if runner.guard is None and runner.running:
            polling = obj.operator.config.background.cancellation_polling
            runner.guard = asyncio.create_task(self._guard(runner, polling=polling),
                                               name=f"kopf stopping {runner.handler} of {obj.describe()}")
            self._guards.add(runner.guard)
            runner.guard.add_done_callback(self._guards.discard)

    async def _guard(self, runner: _Runner, *, polling: float) -> None:
        """Cancel and finally abandon a daemon that does not exit when asked to (see the module's docs)."""
        handler, obj, task = runner.handler, runner.obj, runner.task
        assert task is not None
        backoff, timeout = _cancellation(handler)
        if backoff and await _exited(task, backoff):
            return
        if timeout is not None:
            if not runner.threaded:
                if backoff:
                    obj.logger.debug("%s has not exited %ss after it was asked to stop; cancelling it.",
                                     handler, backoff)
                else:
                    obj.logger.debug("%s is cancelled: it has a cancellation_timeout, and no "
                                     "cancellation_backoff to exit on its own first.", handler)
                runner.stopper.set(DaemonStoppingReason.DAEMON_CANCELLED)  # as in Kopf: the reason says so too
                task.cancel()
            if await _exited(task, timeout):
                return
            runner.abandoned = True
            self._depart(runner)  # a hand-over proceeds without it, as a deletion does
            obj.logger.warning("%s", _abandoned_message(runner, timeout))
            return
        every = handler.cancellation_polling if isinstance(handler, DaemonHandler) else None
        while not await _exited(task, every or polling):
            elapsed = time.monotonic() - (runner.stopper.when or time.monotonic())
            obj.logger.warning(
                "%s is still running %.0fs after it was asked to stop (%s); waiting for it. It must exit when "
                "`stopped` is set; a cancellation_timeout= would abandon it after that many seconds.",
                handler, elapsed, _reasons(runner))

    async def _release(self, obj: _Object, *, held: bool, settings: BackgroundConfig) -> Holding | None:
        """Ask all the object's daemons to stop; if our finalizer holds the object, keep it while they stop."""
        self._stop(obj, DaemonStoppingReason.RESOURCE_DELETED)
        stopping = [runner for runner in obj.runners.values() if runner.holding]
        if stopping:
            tasks = [runner.task for runner in stopping if runner.task is not None]
            if settings.instant_exit_timeout is not None:
                await asyncio.wait(tasks, timeout=settings.instant_exit_timeout)
            else:
                for _ in range(settings.instant_exit_zero_time_cycles):
                    if all(task.done() for task in tasks):
                        break
                    await asyncio.sleep(0)
        stopping = [runner for runner in obj.runners.values() if runner.holding]
        if not held or not stopping:
            return None
        delays = [_recheck_delay(runner, polling=settings.cancellation_polling) for runner in stopping]
        obj.logger.debug("The deletion waits for %s to stop.", ', '.join(str(r.handler) for r in stopping))
        return Holding(delay=min(delays))

    # Running.

    async def _run_daemon(self, runner: _Runner) -> None:
        handler, obj = runner.handler, runner.obj
        if not await self._initial_delay(runner):
            return
        state = HandlerState.from_scratch(clock=self._clock)
        while True:
            outcome = await self._attempt(runner, state)
            if outcome.final:
                if not runner.stopper.is_set():
                    obj.finished.add(handler.id)
                    obj.logger.debug("%s has exited on its own; it is not started again for this object.", handler)
                return
            if runner.stopper.is_set():
                return
            state = state.with_outcome(outcome)
            if await runner.stopper.wait_async(outcome.delay or 0):
                return

    async def _run_timer(self, runner: _Runner) -> None:
        handler, obj = runner.handler, runner.obj
        assert isinstance(handler, TimerHandler)
        if not await self._initial_delay(runner):
            return
        state = HandlerState.from_scratch(clock=self._clock)
        ticked: int | None = None  # the object's generation at the last successful call
        while not runner.stopper.is_set():
            if handler.idle is not None and not await _until_idle(runner, handler.idle):
                return
            if handler.interval is None and ticked is not None:
                # Once per object -- or, with idling, once per change.
                if handler.idle is None or not await _until_changed(runner, since=ticked):
                    await runner.stopper.wait_async()
                    return
                ticked = None
                continue
            generation = obj.generation
            started = time.monotonic()
            outcome = await self._attempt(runner, state)
            if outcome.final and outcome.exception is not None:
                if not runner.stopper.is_set():
                    obj.finished.add(handler.id)
                    obj.logger.error("%s has failed for good; it is not called again for this object.", handler)
                return
            if not outcome.final:
                state = state.with_outcome(outcome)
                if await runner.stopper.wait_async(outcome.delay or 0):
                    return
                continue
            state = HandlerState.from_scratch(clock=self._clock)  # a success starts the retries anew
            ticked = generation
            if handler.interval is not None:
                pause = handler.interval - (time.monotonic() - started if handler.sharp else 0.0)
                if await runner.stopper.wait_async(max(0.0, pause)):
                    return

    async def _initial_delay(self, runner: _Runner) -> bool:
        """Wait for the handler's initial delay (counted from the object's first sight); whether to go on."""
        delay = runner.handler.initial_delay
        if callable(delay):
            try:
                delay = float(delay(**self._kwargs(runner, Patch(), None)))
            except Exception:
                runner.obj.logger.exception("The initial_delay= function of %s has failed; starting it at once.",
                                            runner.handler)
                delay = 0.0
        remaining = (delay or 0.0) - (time.monotonic() - runner.obj.first_seen)
        if remaining > 0:
            return not await runner.stopper.wait_async(remaining)
        return not runner.stopper.is_set()

    async def _attempt(self, runner: _Runner, state: HandlerState) -> HandlerOutcome:
        """One call with the retry policy; its patch and result are applied to the object right after it."""
        handler, obj = runner.handler, runner.obj
        patch = Patch()
        kwargs = self._kwargs(runner, patch, state)
        outcome = await execution.attempt(handler, state, call=functools.partial(self._invoke, runner, kwargs),
                                          logger=obj.logger,
                                          default_backoff=obj.operator.config.execution.default_backoff)
        del kwargs
        if outcome.final and outcome.exception is None and outcome.result is not None:
            patch.status[handler.id] = outcome.result
        if patch:
            try:
                await self._patcher(Body(obj.raw), patch, obj.logger)
            except Exception as e:
                obj.logger.error("The patch of %s could not be applied to the object, and is lost: %s",
                                 handler, e)
        return outcome

    async def _invoke(self, runner: _Runner, kwargs: Mapping[str, Any]) -> Any:
        """One call; its result is checked as every handler's is: a result that cannot be stored fails it."""
        if runner.threaded:
            result = await _call_in_thread(runner.handler.fn, kwargs,
                                           name=f"kopf {runner.handler} of {runner.obj.describe()}")
        else:
            executor = runner.obj.operator.config.execution.executor
            result = await invocation.invoke(runner.handler.fn, kwargs=kwargs, executor=executor)
        return execution.storable(runner.handler, result)

    def _kwargs(self, runner: _Runner, patch: Patch, state: HandlerState | None) -> dict[str, Any]:
        """The handler's keyword arguments: live views of the object, its patch, its stop flag, its retries."""
        obj = runner.obj
        arguments = Arguments(operator=obj.operator, param=runner.handler.param,
                              object=ObjectArguments(body=obj.body, patch=patch, resource=obj.resource))
        if state is not None:
            arguments = arguments.with_attempt(state)
        kwargs = arguments.render()
        kwargs.update(obj.live_kwargs())
        is_async = invocation.is_async(runner.handler.fn)
        kwargs['stopped'] = runner.stopper.async_checker if is_async else runner.stopper.sync_checker
        return kwargs


@dataclasses.dataclass(eq=False)
class _Runner:
    """One daemon or timer of one object: its task, its stop flag, and how its stopping goes."""

    handler: SpawningHandler
    obj: _Object
    stopper: DaemonStopper
    task: asyncio.Task[None] | None = None
    guard: asyncio.Task[None] | None = None
    abandoned: bool = False
    residence: int | None = None  # its token at the replica's fence, while it runs
    fenced: bool = False  # stopped at once because the Lease was lost

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    @property
    def holding(self) -> bool:
        """Whether it holds the object's deletion: still running, and not abandoned."""
        return self.running and not self.abandoned

    @property
    def threaded(self) -> bool:
        """Whether it runs in a thread of its own (a plain-function daemon), which cannot be cancelled."""
        return isinstance(self.handler, DaemonHandler) and not invocation.is_async(self.handler.fn)


class _Object:
    """What the keeper knows of one object: its latest body, and its daemons."""

    def __init__(self, *, key: str, body: Body, operator: OperatorArguments, resource: ResourceKey | None) -> None:
        self.key = key
        self.raw: Mapping[str, Any] = body.raw
        self.operator = operator
        self.resource = resource
        self.runners: dict[str, _Runner] = {}
        self.finished: set[str] = set()  # handler ids that are not started again for this object
        self.first_seen = time.monotonic()
        self.changed_at = self.first_seen
        self.generation = 0
        self._change = asyncio.Event()
        self.body = Body(_Live(self, ()))

    @property
    def logger(self) -> Logger:
        return self.operator.logger

    def describe(self) -> str:
        return Body(self.raw).describe()

    def update(self, body: Body) -> None:
        """A new event: the object's latest state, which its daemons see from now on."""
        self.raw = body.raw
        self.changed_at = time.monotonic()
        self.generation += 1
        self._change.set()
        self._change = asyncio.Event()

    async def changed(self) -> None:
        """Wait for the next event of the object."""
        await self._change.wait()

    def live_kwargs(self) -> dict[str, Any]:
        """The object's keyword arguments as live views: they show the latest state whenever they are read."""
        meta = self.raw.get('metadata', {})
        return {
            'body': self.body,
            'spec': Spec(_Live(self, ('spec',))),
            'meta': Meta(_Live(self, ('metadata',))),
            'status': Status(_Live(self, ('status',))),
            'labels': _Live(self, ('metadata', 'labels')),
            'annotations': _Live(self, ('metadata', 'annotations')),
            'name': meta.get('name'),
            'namespace': meta.get('namespace'),
            'uid': meta.get('uid'),
        }


class _Live(Mapping[str, Any]):
    """A read-only view of a part of an object's latest state, resolved on every access."""

    def __init__(self, obj: _Object, path: tuple[str, ...]) -> None:
        self._obj = obj
        self._path = path

    def _current(self) -> Mapping[str, Any]:
        current: Any = self._obj.raw
        for key in self._path:
            current = current.get(key) if isinstance(current, Mapping) else None
        return current if isinstance(current, Mapping) else {}

    def __getitem__(self, key: str) -> Any:
        return self._current()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._current())

    def __len__(self) -> int:
        return len(self._current())

    def __repr__(self) -> str:
        return repr(dict(self._current()))


async def patch_object(body: Body, patch: Patch, logger: Logger, *, context: APIContext, resource: Resource) -> None:
    """Apply a daemon's or timer's patch (and its ``patch.fns``) to its object (nothing if the object is gone)."""
    await patching.patch_obj(context=context, resource=resource, namespace=body.metadata.namespace,
                             name=body.metadata.name or '', patch=patch, logger=logger, fns=patch.fns, body=body)


def _cancellation(handler: SpawningHandler) -> tuple[float | None, float | None]:
    if isinstance(handler, DaemonHandler):
        return handler.cancellation_backoff, handler.cancellation_timeout
    return None, None


def _reasons(runner: _Runner) -> str:
    reason = runner.stopper.reason
    if reason is None:
        return "not asked"
    return ', '.join(member.name or '' for member in DaemonStoppingReason if member in reason).lower()


def _abandoned_message(runner: _Runner, timeout: float) -> str:
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


def _recheck_delay(runner: _Runner, *, polling: float) -> float:
    """When to check again whether a stopping daemon has exited: soon at first, then less often."""
    handler = runner.handler
    since = runner.stopper.when
    elapsed = time.monotonic() - since if since is not None else 0.0
    delay = max(MIN_RECHECK, elapsed)
    backoff, timeout = _cancellation(handler)
    if timeout is not None:  # it is abandoned then, and the deletion may proceed
        delay = min(delay, max(0.0, (backoff or 0.0) + timeout - elapsed) + 0.1)
    every = handler.cancellation_polling if isinstance(handler, DaemonHandler) else None
    return min(delay, every or polling)


async def _exited(task: asyncio.Task[None], timeout: float | None) -> bool:
    """Wait up to ``timeout`` seconds for the task to end; whether it has."""
    await asyncio.wait([task], timeout=timeout)
    return task.done()


async def _until_idle(runner: _Runner, idle: float) -> bool:
    """Wait until the object has had no event for ``idle`` seconds; ``False`` if stopped meanwhile."""
    while True:
        remaining = idle - (time.monotonic() - runner.obj.changed_at)
        if remaining <= 0:
            return not runner.stopper.is_set()
        if await runner.stopper.wait_async(remaining):
            return False


async def _until_changed(runner: _Runner, *, since: int) -> bool:
    """Wait until the object changes after its generation ``since``; ``False`` if stopped meanwhile."""
    while runner.obj.generation == since:
        change = asyncio.ensure_future(runner.obj.changed())
        stop = asyncio.ensure_future(runner.stopper.wait_async())
        try:
            await asyncio.wait([change, stop], return_when=asyncio.FIRST_COMPLETED)
        finally:
            change.cancel()
            stop.cancel()
            await asyncio.gather(change, stop, return_exceptions=True)
        if runner.stopper.is_set():
            return False
    return True


async def _call_in_thread(fn: Callable[..., Any], kwargs: Mapping[str, Any], *, name: str) -> Any:
    """
    Call a plain function in a daemon thread of its own, and wait for its result.

    If the waiting is cancelled, the thread runs on: threads cannot be stopped.
    Being a daemon thread, it does not keep the process alive at exit.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()
    body = kwargs.get('body')
    if isinstance(body, Mapping):
        context.run(hierarchies.owner_var.set, body)  # kopf.adopt() & co. know the object in the thread too

    def target() -> None:
        try:
            result = context.run(fn, **kwargs)
        except BaseException as e:
            settle = functools.partial(_settle, future, None, e)
        else:
            settle = functools.partial(_settle, future, result, None)
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(settle)

    threading.Thread(target=target, name=name, daemon=True).start()
    result = await future
    if inspect.isawaitable(result):
        return await result
    return result


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
