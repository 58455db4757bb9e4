"""
What the executors of both modes share: the loop on the clock, the fences, stepping down, and the fatal errors.

A replica looks at its Lease(s) every retry period (:meth:`Replica.tick`),
decides by the pure rules of its mode (:mod:`.election`, :mod:`.sharding`),
and applies the decision: Lease requests, the gate (:mod:`.fencing`), the
deadlines (:mod:`.deadlines`), and the log. Transient failures of a request
are retried at the next period; a ``403`` and a duplicate identity are
fatal (:class:`~.settings.PeeringError`), with a message that says what to do.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Iterator

import aiohttp

from kopf import errors
from kopf._kube.auth import APIContext
from kopf._kube.errors import APIConnectionError, APIError, APIForbiddenError
from kopf._observability import recording
from kopf._observability.readiness import Coordination
from kopf._observability.recording import ReplicaState
from kopf._replicas import leases
from kopf._replicas.deadlines import Fences
from kopf._replicas.fencing import Gate, nothing
from kopf._replicas.leases import Lease
from kopf._replicas.observations import Observations
from kopf._replicas.settings import VERBS, PeeringError, PeeringSettings
from kopf._structs.clocks import SYSTEM_CLOCK, Clock

logger = logging.getLogger('kopf._replicas.peering')  # one logger for all the coordination's messages

# Transient failures of one request: the loop tries again in the next period.
TRANSIENT = (APIError, APIConnectionError, aiohttp.ClientError, asyncio.TimeoutError)


def duplicate_error(settings: PeeringSettings, lease: Lease) -> PeeringError:
    return PeeringError(
        f"Another replica runs with the identity {settings.identity!r}: the lease {lease.namespace}/{lease.name} "
        f"is renewed under this identity by another process, so this replica does not join. Give each replica "
        f"a unique --identity (config.peering.identity), or leave it to the default (the host name, the process "
        f"id and a random suffix).")


class Replica:
    """One replica's coordination in one mode (see :class:`.elector.Elector` and :class:`.member.Member`)."""

    mode: str

    def __init__(
            self,
            *,
            context: APIContext,
            gate: Gate,
            settings: PeeringSettings,
            clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.context = context
        self.gate = gate
        self.settings = settings
        self.clock = clock
        self.fences = Fences(gate, settings, clock=clock)
        self.observations = Observations(settings.lease_duration)
        self.instance = secrets.token_hex(8)  # this process among those that may share the identity
        self.closing = False
        self.waiting_for: str | None = None  # a Lease under our identity, of another process: logged once

    async def run(self) -> None:
        """Look at the Lease(s) every retry period, by the clock, until cancelled or failed fatally."""
        while True:
            started = self.clock.monotonic()
            try:
                await self.tick()
            except TRANSIENT as e:
                recording.current().lease_failed(self.mode, e)
                logger.warning("Cannot coordinate through the lease(s) in %r right now: %s; retrying.",
                               self.settings.namespace, errors.describe(e))
            await self.clock.sleep(max(0.0, started + self.settings.retry_period - self.clock.monotonic()))

    async def tick(self) -> None:
        raise NotImplementedError

    def coordination(self) -> Coordination:
        """Where the replica stands, for readiness: it handles, it stands by knowingly, or it is joining."""
        raise NotImplementedError

    def state(self) -> ReplicaState:
        """What the coordination is at, for the metrics (read from another thread: plain values only)."""
        raise NotImplementedError

    async def release(self) -> None:
        raise NotImplementedError

    async def alone(self, *, context: APIContext) -> bool:
        """At the exit, after the Lease(s) are given up: whether no other replica is alive (see the modes)."""
        raise NotImplementedError

    async def step_down(self, *, timeout: float) -> bool:
        """Stop handling for good (the operator is stopping); wait for the running cycles while still renewing."""
        self.closing = True
        self.gate.permit(nothing, resync=False)
        return await self.gate.drain(nothing, timeout=timeout)

    @contextlib.contextmanager
    def verb(self, verb: str) -> Iterator[None]:
        """Turn a 403 of a Lease request into a fatal error that names the verb and the resource."""
        try:
            yield
        except APIForbiddenError as e:
            raise PeeringError(
                f"RBAC forbids to {verb} {leases.RESOURCE} in the namespace {self.settings.namespace!r} "
                f"({e}). Replicas with --{self.mode} need the verbs {', '.join(VERBS[self.mode])} on "
                f"{leases.RESOURCE} (see the Role in docs/install.rst).") from None

    @property
    def timeout(self) -> float:
        return self.settings.request_timeout

    def stamp(self) -> str:
        """The wall-clock time to write into a Lease (informative only: no replica decides by it)."""
        return leases.microtime(self.clock.now())

    # The duplicate identities, as the decisions have judged them (see :func:`.observations.namesake`).

    def refuse(self, lease: Lease) -> PeeringError:
        """Another live process renews a Lease under our identity: this replica must not join."""
        return duplicate_error(self.settings, lease)

    def wait_for_namesake(self, lease: Lease) -> None:
        """A Lease under our identity, of another process: an ended predecessor, or a duplicate; say so once."""
        if self.waiting_for != lease.name:
            self.waiting_for = lease.name
            duration = lease.spec.duration or self.settings.lease_duration
            logger.warning("The lease %s/%s is held under our identity %r by another process: waiting up to %ss "
                           "for it to expire (a previous process of this identity that has ended) -- or to be "
                           "renewed (another replica with the same identity: this one then exits).",
                           lease.namespace, lease.name, self.settings.identity, duration)

    def succeed(self, lease: Lease) -> None:
        """The Lease of an ended predecessor with our identity has expired: it is ours to take."""
        logger.info("The lease %s/%s of a previous process with our identity %r has expired; taking it over.",
                    lease.namespace, lease.name, self.settings.identity)
