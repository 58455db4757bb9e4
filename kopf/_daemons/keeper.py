"""
The keeper: which objects have which daemons and timers running; a stage of the handling cycle.

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
  abandoned (:mod:`.stopping`);
* the object is gone (``DELETED``): its daemons are asked to stop, and the
  keeper forgets the object.

With replicas (``--ha``/``--shards``, :mod:`~kopf._replicas.fencing`), events
reach the keeper only for the objects that this replica may handle, so
daemons start only there. An object that moves to another replica sends no
more events here, so the keeper follows the gate instead: whenever the
gate's permit or deadlines change (and every :data:`PATROL_INTERVAL` in
any case), it stops the daemons of the objects that are not its own any
more (``OPERATOR_PAUSING``, with the usual steps). Every daemon and timer
is a *resident* of its object at the gate until it exits, and a hand-over of
the object is acknowledged only after that (see
:meth:`~kopf._replicas.fencing.Gate.drain`): the next owner never starts a
daemon while the previous one's still runs. When the Lease is lost (the hard
fence), there is no time for the usual steps: the ``async`` daemons and
timers are cancelled at once, since the next owner may start them as soon
as the Lease expires. At the exit, a replica stops its daemons before it
gives up its Lease.

At the operator's exit, all daemons and timers are asked to stop at once
(``OPERATOR_EXITING``), the usual steps apply, and all of them together get
``config.background.exit_timeout`` seconds; those left are then cancelled,
and their threads are left to end with the process.

Memory: the keeper holds an entry for an object only while a daemon of it
runs (or stops), or has finished for good (so that it is not started
again); it is dropped as soon as nothing runs for the object and nothing is
to be remembered, or when the object is gone. Objects without daemons cost
nothing.
"""
from __future__ import annotations

import asyncio
import functools
from typing import Protocol

from kopf._cycle import selection
from kopf._cycle.causation import Cause
from kopf._cycle.cycle import Holding
from kopf._daemons import escalation, loops, stopping, waiting
from kopf._daemons.calls import Patcher
from kopf._daemons.escalation import StopOptions
from kopf._daemons.objects import KeptObject, Runner
from kopf._handlers.arguments import Arguments
from kopf._handlers.reasons import Reason
from kopf._handlers.registries import DaemonHandler, OperatorRegistry, ResourceKey, SpawningHandler
from kopf._observability import recording
from kopf._structs.bodies import object_key
from kopf._structs.clocks import SYSTEM_CLOCK, Clock
from kopf._structs.stoppers import DaemonStoppingReason
from kopf.config import BackgroundConfig

# With replicas: how often to look for objects that this replica may not handle any more.
PATROL_INTERVAL = 1.0

# At the exit, how long the daemons left after the exit timeout get to take their cancellation.
CANCELLED_EXIT_TIMEOUT = 1.0


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
    ``clock`` times every delay, interval and timeout of theirs.
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
        self._objects: dict[str, KeptObject] = {}
        self._runners: set[Runner] = set()  # every runner not yet ended, also of forgotten objects
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
        now = self._clock.monotonic()
        if cause.reason == Reason.GONE:
            if obj is not None:
                del self._objects[key]
                obj.update(body, now=now)
                self._stop(obj, DaemonStoppingReason.RESOURCE_DELETED)
            return None

        handlers = registry.get_spawning_handlers(resource)
        if obj is None:
            if cause.deleting or not handlers:
                return None
            obj = KeptObject(key=key, body=body, operator=arguments.operator, resource=arguments.object.resource,
                             now=now)
            self._objects[key] = obj
        else:
            obj.update(body, now=now)

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
            runner.stop(reason, now=self._clock.monotonic())
        # The abandoned ones were given up already (and reported): they are not waited for again.
        tasks = [runner.task for runner in runners if runner.task is not None and not runner.abandoned]
        await waiting.ended_within(tasks, self._clock, timeout)
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
        await waiting.ended_within([runner.task for runner in late if runner.task is not None], self._clock,
                                   CANCELLED_EXIT_TIMEOUT)
        for guard in list(self._guards):
            guard.cancel()
        await asyncio.gather(*self._guards, return_exceptions=True)
        self._objects.clear()

    # Starting.

    def _spawn(self, obj: KeptObject, handler: SpawningHandler) -> None:
        runner = Runner(handler=handler, obj=obj)
        run = loops.run_daemon if isinstance(handler, DaemonHandler) else loops.run_timer
        if self._fence is not None:
            runner.residence = self._fence.reside(obj.key)
        runner.task = asyncio.create_task(run(runner, clock=self._clock, patcher=self._patcher),
                                          name=f"kopf {handler} of {obj.describe()}")
        runner.task.add_done_callback(functools.partial(self._ended, runner))
        recording.current().daemon_started(obj.resource, _kind(handler))
        obj.runners[handler.id] = runner
        self._runners.add(runner)
        if self._fence is not None and self._patrol is None:
            self._patrol = asyncio.create_task(self._patrol_fence(self._fence), name='kopf daemons patrol')

    async def _patrol_fence(self, fence: Fence) -> None:
        """With replicas: stop the daemons of the objects that another replica (or none) handles now."""
        while True:
            revision = fence.revision
            self._follow(fence)
            await waiting.first(self._clock, PATROL_INTERVAL, fence.revised(revision))

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

    def _fence_off(self, runner: Runner) -> None:
        """The Lease is lost: stop the daemon now, not after its usual steps; the next owner may start soon."""
        if not runner.running or runner.fenced or runner.task is None:
            return
        runner.fenced = True
        runner.stop(DaemonStoppingReason.OPERATOR_PAUSING, now=self._clock.monotonic())
        if runner.threaded:
            runner.obj.logger.warning(
                "%s is asked to stop: this replica has lost its lease, and the next owner may start it when "
                "the lease expires; a thread cannot be cancelled, so it must exit when `stopped` is set.",
                runner.handler)
        else:
            runner.obj.logger.info("%s is cancelled: this replica has lost its lease, and the next owner may "
                                   "start it when the lease expires.", runner.handler)
            runner.task.cancel()

    def _ended(self, runner: Runner, task: asyncio.Task[None]) -> None:
        recording.current().daemon_ended(runner.obj.resource, _kind(runner.handler))
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

    def _depart(self, runner: Runner) -> None:
        if self._fence is not None and runner.residence is not None:
            self._fence.depart(runner.residence)
            runner.residence = None

    def _forget_if_idle(self, obj: KeptObject) -> None:
        if not obj.runners and not obj.finished and self._objects.get(obj.key) is obj:
            del self._objects[obj.key]

    # Stopping.

    def _stop(self, obj: KeptObject, reason: DaemonStoppingReason) -> None:
        for runner in list(obj.runners.values()):
            self._request_stop(obj, runner, reason)

    def _request_stop(self, obj: KeptObject, runner: Runner, reason: DaemonStoppingReason) -> None:
        """Set the stop flag, and (once) start the steps that follow if the daemon does not exit."""
        runner.stop(reason, now=self._clock.monotonic())
        if runner.guard is None and runner.running:
            polling = obj.operator.config.background.cancellation_polling
            runner.guard = asyncio.create_task(
                stopping.guard(runner, clock=self._clock, polling=polling, abandon=self._depart),
                name=f"kopf stopping {runner.handler} of {obj.describe()}")
            self._guards.add(runner.guard)
            runner.guard.add_done_callback(self._guards.discard)

    async def _release(self, obj: KeptObject, *, held: bool, settings: BackgroundConfig) -> Holding | None:
        """Ask all the object's daemons to stop; if our finalizer holds the object, keep it while they stop."""
        self._stop(obj, DaemonStoppingReason.RESOURCE_DELETED)
        stopping_now = [runner for runner in obj.runners.values() if runner.holding]
        if stopping_now:
            tasks = [runner.task for runner in stopping_now if runner.task is not None]
            if settings.instant_exit_timeout is not None:
                await waiting.ended_within(tasks, self._clock, settings.instant_exit_timeout)
            else:
                for _ in range(settings.instant_exit_zero_time_cycles):
                    if all(task.done() for task in tasks):
                        break
                    await asyncio.sleep(0)
        stopping_now = [runner for runner in obj.runners.values() if runner.holding]
        if not held or not stopping_now:
            return None
        now = self._clock.monotonic()
        delays = [escalation.recheck_delay(StopOptions.of(runner.handler, polling=settings.cancellation_polling,
                                                          threaded=runner.threaded),
                                           asked_at=runner.asked_at, now=now)
                  for runner in stopping_now]
        obj.logger.debug("The deletion waits for %s to stop.", ', '.join(str(r.handler) for r in stopping_now))
        return Holding(delay=min(delays))


def _kind(handler: SpawningHandler) -> str:
    """How metrics name the kind of a spawning handler."""
    return 'daemon' if isinstance(handler, DaemonHandler) else 'timer'
