"""
Other replicas' Leases as this replica has seen them: when each one last changed, by this replica's clock.

Time is judged as Kubernetes' controllers do it ("renew-time semantics"): a
replica never compares another machine's timestamps with its own clock. A
Lease counts as expired when its record has not changed for its
``leaseDurationSeconds`` *as measured locally since this replica saw it
change*. A holder measures from the moment it *sent* its last successful
renewal, which precedes any observation of it, so only the clocks' rates
must agree, not their readings.

The same records tell a Lease held under our own identity by another process
(a duplicate replica, or a predecessor that has ended) from our own: see
:func:`namesake`. Everything here is pure: the executors observe, the
decisions (:mod:`.election`, :mod:`.sharding`) read.
"""
from __future__ import annotations

import dataclasses
import enum
from collections.abc import Collection, Iterable, Mapping

from kopf._replicas.leases import Lease

INSTANCE_ANNOTATION = 'kopf.dev/instance'  # on Leases we hold: which process of the identity writes them


@dataclasses.dataclass(frozen=True)
class Sighting:
    """One Lease as last seen: its version, since when (monotonic), and whether it was ever seen changing."""

    version: str
    since: float
    changing: bool = False  # seen in more than one version: someone writes it


@dataclasses.dataclass(frozen=True)
class Observations:
    """When each Lease's record was last seen changing, by this replica's monotonic clock."""

    default_duration: int  # for Leases that say no duration of their own
    sightings: Mapping[str, Sighting] = dataclasses.field(default_factory=dict)

    def observe(self, lease: Lease, now: float) -> Observations:
        """The records after seeing this Lease at this (monotonic) time."""
        previous = self.sightings.get(lease.name)
        if previous is not None and previous.version == lease.resource_version:
            return self
        sighting = Sighting(lease.resource_version, now, changing=previous is not None)
        return dataclasses.replace(self, sightings={**self.sightings, lease.name: sighting})

    def observe_all(self, leases: Iterable[Lease], now: float) -> Observations:
        observations = self
        for lease in leases:
            observations = observations.observe(lease, now)
        return observations

    def forget_others(self, names: Collection[str]) -> Observations:
        """The records of these Leases only (e.g. the ones listed now; the others are gone)."""
        sightings = {name: sighting for name, sighting in self.sightings.items() if name in names}
        return dataclasses.replace(self, sightings=sightings)

    def changing(self, lease: Lease) -> bool:
        """Whether the Lease was written while we watched: its writer was alive after we first saw it."""
        sighting = self.sightings.get(lease.name)
        return sighting is not None and sighting.changing

    def seen_at(self, lease: Lease) -> float | None:
        """When this version of the Lease was first seen (monotonic), if it was."""
        sighting = self.sightings.get(lease.name)
        return sighting.since if sighting is not None and sighting.version == lease.resource_version else None

    def expired(self, lease: Lease, now: float) -> bool:
        """Released, or unchanged for its whole duration since we saw it change."""
        if not lease.spec.holder:
            return True
        seen = self.seen_at(lease)
        if seen is None:
            return False
        duration = lease.spec.duration if lease.spec.duration is not None else self.default_duration
        return now - seen >= duration


class Namesake(enum.Enum):
    """How a Lease held under our own identity stands (see :func:`namesake`)."""

    OURS = 'ours'  # written by this very process
    ALIVE = 'alive'  # another process writes it under our identity: a duplicate
    UNKNOWN = 'unknown'  # another process's, not seen written yet: a duplicate, or a predecessor that has ended
    GONE = 'gone'  # another process's, expired: a predecessor that has ended (e.g. a restarted pod)


def namesake(lease: Lease, *, instance: str, observations: Observations, now: float) -> Namesake:
    """
    Who holds a Lease that names our identity as its holder: this process, a duplicate, or a predecessor.

    Every process writes a random instance token of its own into the Leases
    it holds, so a Lease under our identity without our token is another
    process's. It is a live duplicate once we have seen it written (it
    changed while we watched); a predecessor with our identity that has
    ended (a restarted pod with a stable name) leaves it unchanged until it
    expires by renew-time semantics -- until then, we cannot tell the two
    apart, and wait. ``now`` is this replica's monotonic time.
    """
    if lease.annotations.get(INSTANCE_ANNOTATION) == instance:
        return Namesake.OURS
    if observations.changing(lease):
        return Namesake.ALIVE
    if observations.expired(lease, now):
        return Namesake.GONE
    return Namesake.UNKNOWN
