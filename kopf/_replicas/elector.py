"""
The executor of HA replicas: reads and writes the one Lease, leads or stands by, as :mod:`.election` decides.

A leader renews its Lease without reading it first; a standby reads it each
retry period, observes it, and applies the decision: creating or taking the
Lease over, permitting everything on the gate while it leads, and cancelling
the fences and stopping the handling when somebody else holds the Lease.
A preempting replica holds the Lease but permits nothing until the previous
holder has surely stopped (``holding_until``).
"""
from __future__ import annotations

import logging
from collections.abc import Awaitable

from kopf import errors
from kopf._kube.auth import APIContext
from kopf._kube.errors import APIConflictError, APINotFoundError
from kopf._observability import recording
from kopf._observability.readiness import Coordination
from kopf._observability.recording import ReplicaState
from kopf._replicas import election, leases
from kopf._replicas.election import Acquire, Create, Decision, Refuse, Renew, StandBy, Takeover
from kopf._replicas.fencing import everything
from kopf._replicas.leases import Lease
from kopf._replicas.priorities import Freeze, priority_of
from kopf._replicas.replica import TRANSIENT, Replica

logger = logging.getLogger('kopf._replicas.peering')  # one logger for all the coordination's messages

ALONE_PERIODS = 2.5  # at the exit, how many retry periods to watch the released Lease for a standby to take it


class Elector(Replica):
    """HA: one Lease, one leader; the others stand by and take over when it expires or is released."""

    mode = 'ha'

    # The state, as the loop has left it (defaults until first set).
    lease: Lease | None = None  # as last seen
    leading: bool = False
    leader: str | None = None  # as last logged
    holding_until: float | None = None  # ours after a takeover, but no handling before then

    async def tick(self) -> None:
        if self.fences.lost:
            self.leading = False
        if self.leading and self.lease is not None:
            try:
                await self._write(self.lease)
                return
            except APIConflictError:
                logger.debug("The lease has changed meanwhile; reading it again.")
            except APINotFoundError:
                self.lease = None
        with self.verb('get'):
            lease = await leases.read_lease(context=self.context, namespace=self.settings.namespace,
                                            name=self.settings.name, timeout=self.timeout)
        now = self.clock.monotonic()
        if lease is not None:
            self.lease = lease
            self.observations = self.observations.observe(lease, now)
        decision = election.decide(lease, observations=self.observations, settings=self.settings,
                                   instance=self.instance, closing=self.closing, now=now, wall=self.clock.now())
        await self._apply(decision)

    async def _apply(self, decision: Decision) -> None:
        match decision:
            case Create():
                self._stand_by(None)
                await self._create()
            case Renew(lease=lease):
                await self._write(lease)
            case Acquire(lease=lease, reason=reason):
                if reason is Takeover.PREDECESSOR:
                    self.succeed(lease)
                await self._write(lease, takeover=decision)
            case StandBy(lease=lease, waiting=waiting):
                if lease is not None and waiting:
                    self.wait_for_namesake(lease)
                self._stand_by(lease, quiet=waiting)
            case Refuse(lease=lease):
                raise self.refuse(lease)

    async def _create(self) -> None:
        sent = self.clock.monotonic()
        try:
            with self.verb('create'):
                lease = await leases.create_lease(
                    context=self.context, namespace=self.settings.namespace, name=self.settings.name,
                    spec=election.spec(self.settings, None, acquire=True, stamp=self.stamp()), timeout=self.timeout,
                    annotations=election.lease_annotations(self.settings, None, instance=self.instance))
        except APIConflictError:
            logger.debug("Another replica has created the lease first.")
            return
        self._lead(lease, sent)

    async def _write(self, lease: Lease, *, takeover: Acquire | None = None) -> None:
        """Renew the lease (ours) or take it over (free, or of a lower priority); a 409: someone was faster."""
        sent = self.clock.monotonic()
        spec = election.spec(self.settings, lease, acquire=takeover is not None, stamp=self.stamp())
        try:
            with self.verb('update'):
                renewed = await leases.replace_lease(
                    lease=lease, context=self.context, spec=spec, timeout=self.timeout,
                    annotations=election.lease_annotations(self.settings, lease, instance=self.instance))
        except APIConflictError:
            if self.leading:
                raise
            logger.debug("Another replica has changed the lease first.")
            return
        holding_until = None
        if takeover is not None:
            holding_until = election.handling_from(takeover, taken_at=self.clock.monotonic(),
                                                   observations=self.observations, settings=self.settings)
            self._log_takeover(takeover, holding_until)
        self._lead(renewed, sent, holding_until=holding_until)

    def _log_takeover(self, takeover: Acquire, holding_until: float | None) -> None:
        lease = takeover.lease
        freeze = Freeze.from_lease(lease)
        if takeover.reason is Takeover.PREEMPTED:
            wait = max(0.0, (holding_until or 0.0) - self.clock.monotonic())
            what = freeze.describe() if freeze is not None else f"held by {lease.spec.holder}"
            logger.info("Took over the lease %s/%s (%s) with a higher priority (%d > %d); handling %s.",
                        lease.namespace, lease.name, what, self.settings.priority, priority_of(lease),
                        f"in {wait:.0f}s, when the previous leader has surely stopped" if wait else "now")
        elif freeze is not None:
            logger.info("Took over the lease %s/%s: the freeze is over (%s).", lease.namespace, lease.name,
                        freeze.describe())
        elif lease.spec.holder:
            logger.info("Took over the lease %s/%s from %s: not renewed for %ss.",
                        lease.namespace, lease.name, lease.spec.holder, lease.spec.duration)
        else:
            logger.info("Took over the lease %s/%s: released by its previous holder.", lease.namespace, lease.name)

    def coordination(self) -> Coordination:
        if self.leading:
            return 'handling'
        return 'standing-by' if self.lease is not None else 'joining'

    def state(self) -> ReplicaState:
        return ReplicaState(mode=self.mode, leading=self.leading, members=0, admitting=self.gate.active,
                            writable=self.gate.writable)

    def _lead(self, lease: Lease, sent: float, *, holding_until: float | None = None) -> None:
        recording.current().lease_renewed(self.mode, self.clock.monotonic() - sent)
        self.lease = lease
        self.observations = self.observations.observe(lease, self.clock.monotonic())
        self.fences.renewed(sent)
        if self.closing:
            return
        if holding_until is not None:
            self.holding_until = holding_until
        if self.holding_until is not None:
            if self.clock.monotonic() < self.holding_until:
                return  # the lease is ours, but the previous holder may still be handling
            self.holding_until = None
        if not self.leading:
            logger.info("Leading as %s: the lease %s/%s is ours; handling the objects.",
                        self.settings.identity, lease.namespace, lease.name)
        if not self.leading or not self.gate.active:
            self.leading = True
            self.leader = self.settings.identity
            self.gate.permit(everything, resync=True)

    def _stand_by(self, lease: Lease | None, *, quiet: bool = False) -> None:
        holder = lease.spec.holder if lease is not None else None
        freeze = Freeze.from_lease(lease)
        if self.leading or self.holding_until is not None:
            if self.leading:
                self._log_pause(lease, holder)
            self.leading = False
            self.holding_until = None
            self.fences.cancel()
            self.gate.harden()
        if holder is not None and holder != self.leader and not quiet:
            if freeze is not None:
                logger.info("Standing by: the lease %s/%s is %s.", self.settings.namespace, self.settings.name,
                            freeze.describe())
            else:
                logger.info("Standing by: %s leads (the lease %s/%s).", holder, self.settings.namespace,
                            self.settings.name)
        self.leader = holder

    def _log_pause(self, lease: Lease | None, holder: str | None) -> None:
        freeze = Freeze.from_lease(lease)
        priority = priority_of(lease)
        if lease is not None and freeze is not None:
            logger.info("Paused: the lease is %s for %ss: stopped handling until `kopf resume` or the end of "
                        "the freeze.", freeze.describe(), lease.spec.duration)
        elif priority > self.settings.priority:
            logger.info("Paused: %s with a higher priority (%d > %d) has taken the lease over: stopped handling.",
                        holder, priority, self.settings.priority)
        else:
            logger.error("The lease is held by %s now: stopped handling.", holder or 'nobody')

    async def release(self) -> None:
        """Give the lease up at once, so that a standby takes over in one retry period, not one lease duration."""
        self.fences.cancel()
        self.gate.harden()
        if (not self.leading and self.holding_until is None) or self.lease is None:
            return
        def give_up(lease: Lease) -> Awaitable[Lease]:
            spec = election.released_spec(lease, stamp=self.stamp())
            return leases.replace_lease(lease=lease, context=self.context, spec=spec, timeout=self.timeout)

        try:
            await leases.on_own_lease(self.lease, give_up, context=self.context, timeout=self.timeout)
        except TRANSIENT as e:
            logger.warning("Cannot release the lease %s/%s: %s; the standbys take over when it expires.",
                           self.settings.namespace, self.settings.name, errors.describe(e))
            return
        self.leading = False
        self.holding_until = None
        logger.info("Released the lease %s/%s.", self.settings.namespace, self.settings.name)

    async def alone(self, *, context: APIContext) -> bool:
        """
        Standbys hold no Lease, so the released one is watched: a standby takes it within a retry period or two.

        If nobody does within :data:`ALONE_PERIODS` retry periods, this replica was the last.
        """
        settings = self.settings
        deadline = self.clock.monotonic() + ALONE_PERIODS * settings.retry_period
        while True:
            try:
                lease = await leases.read_lease(context=context, namespace=settings.namespace,
                                                name=settings.name, timeout=settings.request_timeout)
            except TRANSIENT as e:
                logger.warning("Cannot read the lease %s/%s: %s.",
                               settings.namespace, settings.name, errors.describe(e))
                lease = None
            holder = lease.spec.holder if lease is not None else None
            if holder and holder != settings.identity:
                return False
            if self.clock.monotonic() >= deadline:
                return True
            await self.clock.sleep(settings.retry_period / 4)
