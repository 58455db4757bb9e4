"""
The replicas as the operator runs them: the coordination's thread, its start and its graceful end.

:func:`peering` is what the runtime enters: it resolves the settings
(:mod:`.settings`), checks RBAC for the Lease verbs of the mode, and runs the
executor of the mode (:mod:`.elector` for HA, :mod:`.member` for shards) in
a thread of its own (:class:`Peering`). The runtime handles through the gate
(:mod:`.fencing`) and reaches everything else of the replicas through this
module, which therefore re-exports the few names it and the CLI use.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Collection

from kopf import errors
from kopf._kube import access
from kopf._kube.auth import APIContext
from kopf._observability.readiness import Coordination
from kopf._observability.recording import ReplicaState
from kopf._replicas import leases
from kopf._replicas.elector import Elector
from kopf._replicas.fencing import Gate
from kopf._replicas.member import Member
from kopf._replicas.replica import Replica
from kopf._replicas.settings import VERBS, PeeringError, PeeringSettings, default_name, lease_namespace, resolve
from kopf._replicas.view import ReplicaView
from kopf._structs.clocks import SYSTEM_CLOCK, Clock
from kopf._structs.namespaces import NamespaceSpec
from kopf.config import PeeringConfig

__all__ = ['Peering', 'PeeringError', 'ReplicaView', 'default_name', 'lease_namespace', 'peering']

logger = logging.getLogger('kopf._replicas.peering')


class Peering:
    """
    A running replica's coordination: the gate for the handling, and the graceful stepping down.

    The Lease loop runs in a thread with an event loop and an API session of
    its own: synchronous handlers that keep the CPU busy slow the operator's
    event loop down, sometimes by seconds, and the renewals must not wait
    behind the handling they protect. (The fences hold regardless: the gate
    checks its deadlines by the clock.)
    """

    def __init__(self, *, gate: Gate, replica: Replica, stop: asyncio.Event) -> None:
        self.gate = gate
        self.replica = replica
        self.released = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name='kopf peering', daemon=True)
        self._thread.start()
        self._stopping = asyncio.Event()  # used in the thread's loop only
        self._future = asyncio.run_coroutine_threadsafe(self._lifecycle(), self._loop)
        operator_loop = asyncio.get_running_loop()

        def stop_the_operator(_: object) -> None:  # the coordination is over: so is the handling
            if not operator_loop.is_closed():
                operator_loop.call_soon_threadsafe(stop.set)

        self._future.add_done_callback(stop_the_operator)

    async def _lifecycle(self) -> None:
        """In the thread: run until stopped or failed, then release the Lease."""
        async with self.replica.context:
            run = asyncio.create_task(self.replica.run(), name='kopf peering')
            stopping = asyncio.create_task(self._stopping.wait())
            await asyncio.wait([run, stopping], return_when=asyncio.FIRST_COMPLETED)
            for task in (run, stopping):
                task.cancel()
            await asyncio.gather(run, stopping, return_exceptions=True)
            await self.replica.release()
            error = run.exception() if not run.cancelled() else None
            if error is not None:
                raise error

    def coordination(self) -> Coordination:
        """Where this replica stands (for readiness): handling, standing by knowingly, or joining."""
        return 'joining' if self.released else self.replica.coordination()

    def state(self) -> ReplicaState | None:
        """What the coordination is at (for the metrics); ``None`` once it is over."""
        return None if self.released else self.replica.state()

    async def step_down(self, *, timeout: float) -> None:
        """
        Stop handling and give the Lease up (the operator is stopping).

        The running cycles finish first, while the Lease is still renewed;
        only then is it released, so that the next owner starts right away
        but never while this replica still handles anything.
        """
        if not await self.replica.step_down(timeout=timeout):
            logger.warning("%d handling cycle(s) did not finish within %.1fs of stopping; they are cancelled. "
                           "A synchronous handler among them may still be running when the next owner starts.",
                           self.gate.cycles, timeout)
        await self.release()

    async def release(self) -> None:
        """Stop the Lease loop, release the Lease(s), and end the thread."""
        if self.released:
            return
        self.released = True
        self._loop.call_soon_threadsafe(self._stopping.set)
        with contextlib.suppress(Exception):
            await asyncio.wrap_future(self._future)
        self._loop.call_soon_threadsafe(self._loop.stop)
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join)
        self._loop.close()

    def error(self) -> PeeringError | None:
        """Why the coordination has failed, if it has."""
        if not self._future.done() or self._future.cancelled() or self._future.exception() is None:
            return None
        error = self._future.exception()
        if error is None or isinstance(error, PeeringError):
            return error
        return PeeringError(f"Coordination with the other replicas has failed: {errors.describe(error)}")


@contextlib.asynccontextmanager
async def peering(
        *,
        context: APIContext,
        config: PeeringConfig,
        namespaces: Collection[NamespaceSpec],
        clusterwide: bool,
        stop: asyncio.Event,
        view: ReplicaView | None = None,
        clock: Clock = SYSTEM_CLOCK,
) -> AsyncIterator[Peering | None]:
    """
    Coordinate with the other replicas while the operator runs; ``None`` for standalone operators.

    A fatal problem (e.g. RBAC forbids the Lease verbs) stops the operator
    and is raised as :class:`PeeringError` when the context exits.
    """
    if config.mode == 'standalone':
        if config.priority:
            logger.info("The priority %d has no effect: this operator is standalone. Priorities rank the replicas "
                        "of one lease: run them with --peering NAME (or --ha).", config.priority)
        yield None
        return
    if config.mode == 'shards' and config.priority:
        logger.info("The priority %d has no effect with --shards: every member handles its share of the objects; "
                    "priorities rank the replicas of one lease (--peering NAME or --ha).", config.priority)
    settings = resolve(config, namespaces=namespaces, clusterwide=clusterwide,
                       default_namespace=context.info.default_namespace)
    if getattr(context, 'custom_session', False):
        raise PeeringError(
            "The login handlers gave a session of their own (kopf.AiohttpSession), but the Leases of "
            f"--{settings.mode} are renewed from a thread with a session of its own, made from the credentials. "
            "Return kopf.ConnectionInfo from the login handlers to run replicas.")
    await _check_access(context, settings)
    gate = Gate(clock=clock)
    cls = Elector if settings.mode == 'ha' else Member
    own_context = APIContext(context.info, retries=0)  # a session of its own, opened in the peering thread
    replica: Replica = cls(context=own_context, gate=gate, settings=settings, clock=clock)
    logger.info("Coordinating as %s (%s) through the lease(s) %r in the namespace %r.",
                settings.identity, 'HA' if settings.mode == 'ha' else 'shards', settings.name, settings.namespace)
    peers = Peering(gate=gate, replica=replica, stop=stop)
    if view is not None:
        view.attach(peers, context=context)
    try:
        yield peers
    finally:
        await peers.release()
    error = peers.error()
    if error is not None:
        raise error


async def _check_access(context: APIContext, settings: PeeringSettings) -> None:
    """Fail at start, naming the verbs, if RBAC forbids what this mode needs on Leases."""
    denied = await access.denied_verbs(context=context, verbs=VERBS[settings.mode], group=leases.GROUP,
                                       resource=leases.PLURAL, namespace=settings.namespace,
                                       timeout=settings.request_timeout)
    if denied:
        raise PeeringError(
            f"RBAC forbids to {', '.join(denied)} {leases.RESOURCE} in the namespace {settings.namespace!r}, "
            f"which --{settings.mode} needs ({', '.join(VERBS[settings.mode])}). Grant these verbs to the "
            f"operator's account (see the Role in docs/install.rst), or choose another namespace with "
            f"--lease-namespace.")


