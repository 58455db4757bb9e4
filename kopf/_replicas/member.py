"""
The executor of sharded replicas: lists the member Leases, renews its own, hands objects over (see :mod:`.sharding`).

Each retry period, a member lists the member Leases, deletes the expired
ones (their members have stopped), permits on the gate what the rings give
it, waits for the cycles of the objects that a new ring takes away, and
only then publishes the new ring in its own Lease.
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
from kopf._replicas import leases, ownership, sharding
from kopf._replicas.leases import Lease
from kopf._replicas.observations import Namesake
from kopf._replicas.ownership import Ring
from kopf._replicas.replica import TRANSIENT, Replica

logger = logging.getLogger('kopf._replicas.peering')  # one logger for all the coordination's messages


class Member(Replica):
    """Shards: a member Lease of our own; the live members' rings decide what we handle."""

    mode = 'shards'

    # The state, as the loop has left it (defaults until first set).
    lease: Lease | None = None  # our own, as last seen
    adopted: Ring = ()  # what we handle by, or are moving to once published
    published: Ring | None = None  # what the server has in our lease
    permitted: sharding.Basis | None = None  # what the gate permits by
    live_others: frozenset[str] = frozenset()  # the other live members, as of the last listing

    async def tick(self) -> None:
        if self.fences.lost:
            self._reset()
        with self.verb('list'):
            listed = await leases.list_leases(context=self.context, namespace=self.settings.namespace,
                                              labels=sharding.labels(self.settings), timeout=self.timeout)
        now = self.clock.monotonic()
        self.observations = self.observations.forget_others([lease.name for lease in listed]).observe_all(listed, now)
        listing = sharding.assess(listed, known=self.lease, observations=self.observations, settings=self.settings,
                                  instance=self.instance, now=now)
        self._judge_namesake(listing)
        self.lease = listing.own
        for lease in listing.expired:
            await self._collect(lease)
        if listing.vanished:
            self._lose("Our member lease is gone (the others took it for expired)")
        self.live_others = listing.live_others
        if listing.waiting:
            return
        if not self.closing:
            view = sharding.view(listing, self.settings)
            self._permit(listing, view)
            if view != self.adopted and await self._let_go(view):
                self.adopted = view
                logger.info("Shard members (%d): %s; adopted the ring %s.", len(view), ', '.join(view),
                            ownership.ring_version(view))
        await self._renew()

    def _judge_namesake(self, listing: sharding.Listing) -> None:
        """Refuse to go on if a duplicate writes our member Lease; say what we wait for or take over."""
        if listing.named is None or listing.namesake is Namesake.OURS:
            return
        if listing.namesake is Namesake.ALIVE:
            raise self.refuse(listing.named)
        if listing.namesake is Namesake.UNKNOWN:
            self.wait_for_namesake(listing.named)
        if listing.namesake is Namesake.GONE:
            self.succeed(listing.named)

    def _permit(self, listing: sharding.Listing, view: Ring) -> None:
        """Permit by the ring we published before this listing, minus what the others' rings claim."""
        permission = sharding.permission(self.settings.identity, published=self.published, others=listing.others,
                                         view=view, previous=self.permitted)
        self.permitted = permission.basis
        self.gate.permit(permission.permit, resync=permission.resync)

    async def _let_go(self, view: Ring) -> bool:
        """Wait for the running cycles of the objects that the new ring takes away; ``True`` if none is left."""
        released = await self.gate.drain(sharding.keeps(self.settings.identity, view),
                                         timeout=self.settings.retry_period)
        if not released:
            logger.debug("Waiting for the cycles of the objects that move away to finish.")
        return released

    async def _renew(self) -> None:
        """Publish our ring in our lease (creating it if needed); from now on the others see it."""
        ring = sharding.publishing(closing=self.closing, published=self.published, adopted=self.adopted)
        sent = self.clock.monotonic()
        annotations = sharding.member_annotations(ring, instance=self.instance)
        spec = sharding.member_spec(self.settings, known=self.lease, stamp=self.stamp())
        try:
            if self.lease is None:
                if self.closing:
                    return
                with self.verb('create'):
                    lease = await leases.create_lease(
                        context=self.context, namespace=self.settings.namespace,
                        name=self.settings.member_lease_name, spec=spec, labels=sharding.labels(self.settings),
                        annotations=annotations, timeout=self.timeout)
            else:
                with self.verb('update'):
                    lease = await leases.replace_lease(lease=self.lease, context=self.context, spec=spec,
                                                       labels=sharding.labels(self.settings),
                                                       annotations=annotations, timeout=self.timeout)
        except APIConflictError:  # created or changed meanwhile: the next listing tells by whom
            logger.debug("The member lease %s has changed meanwhile; looking again.", self.settings.member_lease_name)
            return
        except APINotFoundError:
            self._lose("Our member lease is gone (the others took it for expired)")
            return
        recording.current().lease_renewed(self.mode, self.clock.monotonic() - sent)
        self.lease = lease
        self.published = ring
        self.fences.renewed(sent)

    def coordination(self) -> Coordination:
        return 'handling' if self.lease is not None and self.permitted is not None else 'joining'

    def state(self) -> ReplicaState:
        joined = self.lease is not None and self.permitted is not None
        return ReplicaState(mode=self.mode, leading=joined, members=len(self.live_others) + (1 if joined else 0),
                            admitting=self.gate.active, writable=self.gate.writable)

    async def _collect(self, lease: Lease) -> None:
        """Delete a member lease that has expired (unless it has changed since): that member has stopped."""
        if self.closing:
            return
        try:
            with self.verb('delete'):
                deleted = await leases.delete_lease(lease=lease, context=self.context, timeout=self.timeout)
        except APIConflictError:
            return  # it was renewed meanwhile: not dead after all
        if deleted:
            logger.info("The member %s has left (its lease %s has expired).", lease.spec.holder or '?', lease.name)

    def _lose(self, reason: str) -> None:
        logger.error("%s: stopped handling; joining anew.", reason)
        self.gate.harden()
        self.fences.cancel()
        self._reset()
        self.lease = None

    def _reset(self) -> None:
        self.adopted = ()
        self.published = None
        self.permitted = None

    async def release(self) -> None:
        """Leave: delete our lease, so that the others take our objects over at once."""
        self.fences.cancel()
        self.gate.harden()
        if self.lease is None:
            return
        def leave(lease: Lease) -> Awaitable[bool]:
            return leases.delete_lease(lease=lease, context=self.context, timeout=self.timeout)

        try:
            await leases.on_own_lease(self.lease, leave, context=self.context, timeout=self.timeout)
        except TRANSIENT as e:
            logger.warning("Cannot delete the member lease %s: %s; the others take over when it expires.",
                           self.settings.member_lease_name, errors.describe(e))
            return
        logger.info("Left the shards: deleted the member lease %s.", self.settings.member_lease_name)

    async def alone(self, *, context: APIContext) -> bool:
        """No other live member in the last listing."""
        return not self.live_others
