"""
The decisions of HA replicas: whether to renew, take over, create the Lease, or stand by.

**HA** (``mode='ha'``): one Lease; its holder is the leader and handles all
objects, the other replicas poll it and take it over once it has expired or
been released (by renew-time semantics, see :mod:`.observations`). A replica
of a higher priority than the holder's takes the Lease over at once, but
handles only when the previous holder has surely stopped; a frozen Lease is
free only when the freeze is over (see :mod:`.priorities`).

:func:`decide` is pure: it takes the Lease as just read, what this replica
has seen of it, and the time, and returns one of the decisions below;
:mod:`.elector` does the requests, the logging and the fencing around it.
"""
from __future__ import annotations

import dataclasses
import datetime
import enum

from kopf._replicas.leases import Lease, LeaseSpec
from kopf._replicas.observations import INSTANCE_ANNOTATION, Namesake, Observations, namesake
from kopf._replicas.priorities import FREEZE_ANNOTATION, PRIORITY_ANNOTATION, Freeze, hold_until, lapsed, priority_of
from kopf._replicas.settings import PeeringSettings


class Takeover(enum.Enum):
    """Why a Lease held by somebody else (or by nobody) may be taken."""

    RELEASED = 'released'  # its holder gave it up (or there is none)
    EXPIRED = 'expired'  # not renewed for its duration, by our clock
    THAWED = 'thawed'  # a freeze that is over
    PREDECESSOR = 'predecessor'  # held under our identity by a process that has ended
    PREEMPTED = 'preempted'  # held alive, but with a lower priority than ours


@dataclasses.dataclass(frozen=True)
class Create:
    """There is no Lease: create it, held by us (we stand by until it is created)."""


@dataclasses.dataclass(frozen=True)
class Renew:
    """The Lease is ours: renew it."""

    lease: Lease


@dataclasses.dataclass(frozen=True)
class Acquire:
    """Take the Lease over; a preempting replica handles only once the previous holder has surely stopped."""

    lease: Lease
    reason: Takeover


@dataclasses.dataclass(frozen=True)
class StandBy:
    """Somebody else holds the Lease (or we are stopping): do not handle, watch it."""

    lease: Lease | None
    waiting: bool = False  # held under our identity by another process: a duplicate, or an ended predecessor


@dataclasses.dataclass(frozen=True)
class Refuse:
    """Another live process renews the Lease under our identity: a duplicate; this replica must not join."""

    lease: Lease


Decision = Create | Renew | Acquire | StandBy | Refuse


def decide(
        lease: Lease | None,
        *,
        observations: Observations,
        settings: PeeringSettings,
        instance: str,
        closing: bool,
        now: float,
        wall: datetime.datetime,
) -> Decision:
    """
    What to do with the HA Lease as just read (``None``: there is none), already observed.

    ``now`` is this replica's monotonic time, ``wall`` the wall-clock time
    (only the end of a freeze is judged by it). A replica that is stopping
    (``closing``) renews what it holds, but takes and creates nothing.
    """
    if lease is None:
        return StandBy(None) if closing else Create()
    if lease.spec.holder == settings.identity:
        verdict = namesake(lease, instance=instance, observations=observations, now=now)
        if verdict is Namesake.OURS:
            return Renew(lease)
        if verdict is Namesake.ALIVE:
            return Refuse(lease)
        if verdict is Namesake.UNKNOWN:
            return StandBy(lease, waiting=True)
        return StandBy(lease) if closing else Acquire(lease, Takeover.PREDECESSOR)
    if closing:
        return StandBy(lease)
    if free(lease, observations=observations, settings=settings, now=now, wall=wall):
        reason = (Takeover.THAWED if Freeze.from_lease(lease) is not None else
                  Takeover.EXPIRED if lease.spec.holder else Takeover.RELEASED)
        return Acquire(lease, reason)
    if settings.priority > priority_of(lease):
        return Acquire(lease, Takeover.PREEMPTED)
    return StandBy(lease)


def free(
        lease: Lease,
        *,
        observations: Observations,
        settings: PeeringSettings,
        now: float,
        wall: datetime.datetime,
) -> bool:
    """
    Released, expired, or a freeze that is over.

    A freeze is over when its lifetime has passed by the wall clock, but
    only after a whole Lease duration since we saw it begin: the leader
    from before the freeze has stopped by then.
    """
    if observations.expired(lease, now):
        return True
    freeze = Freeze.from_lease(lease)
    seen = observations.seen_at(lease)
    if freeze is None or seen is None or not lapsed(lease, wall):
        return False
    return now - seen >= max(settings.lease_duration, freeze.previous_duration or 0)


def handling_from(decision: Acquire, *, taken_at: float, observations: Observations,
                  settings: PeeringSettings) -> float | None:
    """When a takeover may start handling (monotonic); ``None``: at once (the previous holder has stopped)."""
    if decision.reason is not Takeover.PREEMPTED:
        return None
    return hold_until(decision.lease, taken_at=taken_at, seen_at=observations.seen_at(decision.lease),
                      own_duration=settings.lease_duration)


def spec(settings: PeeringSettings, lease: Lease | None, *, acquire: bool, stamp: str) -> LeaseSpec:
    """The Lease's spec when we create it (``None``), renew it, or take it over (``acquire``)."""
    if lease is None:
        return LeaseSpec(holder=settings.identity, duration=settings.lease_duration, acquired=stamp, renewed=stamp)
    return LeaseSpec(holder=settings.identity, duration=settings.lease_duration,
                     acquired=stamp if acquire else lease.spec.acquired or stamp, renewed=stamp,
                     transitions=lease.spec.transitions + (1 if acquire else 0))


def released_spec(lease: Lease, *, stamp: str) -> LeaseSpec:
    """The Lease's spec when we give it up: no holder, so a standby takes it at its next look."""
    return LeaseSpec(holder=None, duration=1, acquired=lease.spec.acquired, renewed=stamp,
                     transitions=lease.spec.transitions)


def lease_annotations(settings: PeeringSettings, lease: Lease | None, *, instance: str) -> dict[str, str]:
    """What we write into the Lease besides the spec: our priority and instance; a freeze's record goes away."""
    kept = {k: v for k, v in (lease.annotations if lease is not None else {}).items()
            if k not in (PRIORITY_ANNOTATION, FREEZE_ANNOTATION)}
    return {**kept, PRIORITY_ANNOTATION: str(settings.priority), INSTANCE_ANNOTATION: instance}
