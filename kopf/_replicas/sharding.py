"""
The decisions of a sharded member: who the live members are, which ring to hand over by, what to permit.

Every member holds a Lease of its own (a *member Lease*, labelled with the
operator's name) and publishes in it the ring (member list) it handles by.
Each retry period, a member lists the member Leases and decides from the
listing (:func:`assess`): its own Lease, the others' rings, and which of
them have expired (their members have stopped by their hard fence before
that; their Leases are deleted).

**Fencing of hand-overs.** A member handles an object only if (1) its
published ring gives the object to it, and (2) no other live member's
published ring gives the object to that member -- judged by a listing of the
Leases read *after* its own ring was published (:func:`permission`). A
member that adopts a new ring first stops handling the objects the new ring
takes away (it waits for their running cycles to finish: :func:`keeps`),
and only then publishes the ring -- the publication is its acknowledgement
of the hand-over. Two members cannot both pass (2) for one object:
whichever published its ring later has read the other's ring after that one
was published, and yields. Hence an object is never handled by two replicas
at once, and since all progress lives in the object, the next owner
continues where the previous one stopped.

Everything here is pure; :mod:`.member` does the requests, the waiting and
the logging around it.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from kopf._replicas import ownership
from kopf._replicas.fencing import Permit, nothing
from kopf._replicas.leases import Lease, LeaseSpec
from kopf._replicas.observations import INSTANCE_ANNOTATION, Namesake, Observations, namesake
from kopf._replicas.ownership import Ring, ShardPermit
from kopf._replicas.settings import PeeringSettings

MEMBER_LABEL = 'kopf.dev/shards'  # on member Leases: the operator's peering name
RING_ANNOTATION = 'kopf.dev/ring'  # on member Leases: the ring the member handles by

Basis = tuple[Ring, Mapping[Ring, frozenset[str]]]  # what a permit is made of: our ring, the others' claims


def labels(settings: PeeringSettings) -> dict[str, str]:
    """The labels of the member Leases of this operator: the listing selects by them."""
    return {MEMBER_LABEL: settings.name}


@dataclasses.dataclass(frozen=True)
class Listing:
    """What one listing of the member Leases tells a member."""

    own: Lease | None  # our member Lease as seen, to renew; None: to create -- or to wait for (see ``namesake``)
    named: Lease | None  # the listed Lease of our member name that names our identity as its holder ...
    namesake: Namesake | None  # ... and who holds it: this process, a duplicate, or a predecessor
    expired: tuple[Lease, ...]  # the others' Leases, expired: their members have stopped; to be deleted
    others: Mapping[str, Ring]  # the other live members, with the rings they have published
    vanished: bool  # our member Lease, which we held, is not listed: the others took it for expired

    @property
    def waiting(self) -> bool:
        """Another process may still hold our member Lease under our identity: no joining yet."""
        return self.namesake is Namesake.UNKNOWN

    @property
    def live_others(self) -> frozenset[str]:
        return frozenset(self.others)


def assess(
        listed: Sequence[Lease],
        *,
        known: Lease | None,
        observations: Observations,
        settings: PeeringSettings,
        instance: str,
        now: float,
) -> Listing:
    """
    Judge a listing (already observed) by renew-time semantics; ``known`` is our member Lease as last written.

    Our own Lease is ours to renew only if this very process wrote it (or
    the process that did has surely ended); the others' Leases are live
    until they stay unchanged for their duration, by our clock.
    """
    own, named, verdict = known, None, None
    expired: list[Lease] = []
    others: dict[str, Ring] = {}
    for lease in listed:
        if lease.name == settings.member_lease_name:
            if lease.spec.holder == settings.identity:
                named = lease
                verdict = namesake(lease, instance=instance, observations=observations, now=now)
                own = None if verdict is Namesake.UNKNOWN else lease
        elif observations.expired(lease, now):
            expired.append(lease)
        elif lease.spec.holder:
            others[lease.spec.holder] = ownership.parse_ring(lease.annotations.get(RING_ANNOTATION))
    vanished = known is not None and settings.member_lease_name not in {lease.name for lease in listed}
    return Listing(own=None if vanished else own, named=named, namesake=verdict, expired=tuple(expired), others=others,
                   vanished=vanished)


def view(listing: Listing, settings: PeeringSettings) -> Ring:
    """The ring of the live members as this listing shows them, with us among them."""
    return ownership.make_ring([*listing.others, settings.identity])


@dataclasses.dataclass(frozen=True)
class Permission:
    """What the gate permits after a listing, and whether the watch streams must list the objects anew."""

    permit: Permit
    basis: Basis
    resync: bool  # objects may have become ours whose events were dropped before


def permission(
        identity: str,
        *,
        published: Ring | None,
        others: Mapping[str, Ring],
        view: Ring,
        previous: Basis | None,
) -> Permission:
    """
    Permit by the ring we published before this listing, minus what the others' rings claim.

    While moving to a new ring (``view``), only what both rings give us.
    A listing may bring objects that were not ours before (changed rings of
    ours or of the others, compared with the ``previous`` basis): then the
    streams list the objects anew.
    """
    ring = published if published is not None else ()
    permit = ShardPermit(identity, ring, others, keep=view if view != ring else None)
    basis: Basis = (permit.ring, dict(permit.claims))
    return Permission(permit=permit if ring else nothing, basis=basis, resync=basis != previous)


def keeps(identity: str, view: Ring) -> Permit:
    """The objects that stay ours by the new ring; a hand-over waits for the cycles of all the others."""
    def keep(key: str) -> bool:
        return ownership.owner(key, view) == identity
    return keep


def publishing(*, closing: bool, published: Ring | None, adopted: Ring) -> Ring:
    """
    The ring to write into our member Lease at this renewal.

    The adopted one; but a member that is stopping adopts nothing new and
    keeps what it has published, so that the others take its objects only
    when it has left.
    """
    return (published or ()) if closing else adopted


def member_spec(settings: PeeringSettings, *, known: Lease | None, stamp: str) -> LeaseSpec:
    """Our member Lease's spec at a renewal: held by us, renewed now, acquired when first created."""
    return LeaseSpec(holder=settings.identity, duration=settings.lease_duration,
                     acquired=known.spec.acquired if known is not None else stamp, renewed=stamp)


def member_annotations(ring: Ring, *, instance: str) -> dict[str, str]:
    return {RING_ANNOTATION: ownership.format_ring(ring), INSTANCE_ANNOTATION: instance}
