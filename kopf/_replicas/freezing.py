"""
Kopf's ``kopf freeze`` and ``kopf resume``: pausing the HA replicas by hand, through their Lease.

``kopf freeze`` takes the HA Lease for its lifetime under the holder identity
``frozen:<id>`` and records who held it before (see :mod:`.priorities` for
what a freeze means to the replicas). The leader sees another holder at its
next renewal and stops handling, as when any other replica has taken the
Lease. ``kopf resume`` gives the Lease back to the holder from before the
freeze, who continues at its next renewal; nobody else can take it
meanwhile, so a resume right after a freeze never lets a second replica
start while the first one has not noticed the freeze yet. A freeze that is
not resumed ends after its lifetime; then any replica may take the Lease,
as an expired one.

Each command is a few Lease requests, repeated if the Lease changes under
its feet (``409``); the time it stamps comes from the injected clock.
"""
from __future__ import annotations

import dataclasses
import datetime
import getpass
import socket

from kopf._kube.auth import APIContext
from kopf._kube.errors import APIConflictError
from kopf._replicas import leases
from kopf._replicas.leases import Lease, LeaseSpec
from kopf._replicas.priorities import FREEZE_ANNOTATION, FROZEN_PREFIX, PRIORITY_ANNOTATION, Freeze, lapsed, priority_of
from kopf._replicas.sharding import MEMBER_LABEL
from kopf._structs.clocks import SYSTEM_CLOCK, Clock

FREEZE_PRIORITY = 100  # Kopf's default priority of ``kopf freeze``
DEV_PRIORITY = 666  # Kopf's ``--dev``
ATTEMPTS = 5  # of a freeze/resume whose Lease changes under its feet (409)


class FreezeError(Exception):
    """A freeze or resume cannot be done as asked; the message says why and what to do."""


def default_id() -> str:
    """Who freezes: the user and the host, as Kopf names a freeze by default."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = 'someone'
    return f'{user}@{socket.gethostname()}'


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a command writes into the Lease (or creates it with), and what it tells the user then."""

    spec: LeaseSpec
    annotations: dict[str, str]
    outcome: str


# The decisions: what to write, given the Lease as it is now.

def plan_freeze(
        lease: Lease | None,
        *,
        namespace: str,
        name: str,
        id: str,
        lifetime: int,
        priority: int,
        message: str | None,
        now: datetime.datetime,
) -> Plan:
    """How to freeze the Lease as it is (``None``: there is none yet); :class:`FreezeError` if it cannot be."""
    current = Freeze.from_lease(lease)
    holder = lease.spec.holder if lease is not None else None
    if lease is not None and current is None and holder and priority_of(lease) >= priority and not lapsed(lease, now):
        raise FreezeError(
            f"The lease {namespace}/{name} is held by {holder} with the priority {priority_of(lease)}, not "
            f"lower than the freeze's {priority}: it would keep handling (as in Kopf, a freeze pauses only "
            f"the operators of lower priorities). Freeze with --priority {priority_of(lease) + 1} or higher.")
    if current is not None:
        record = dataclasses.replace(current, by=id, message=message)  # the holder before stays recorded
    else:
        record = Freeze(by=id, message=message, previous=holder,
                        previous_duration=lease.spec.duration if lease is not None and holder else None,
                        previous_priority=priority_of(lease) if holder else 0)
    duration = max(lifetime, record.previous_duration or 0)
    stamp = leases.microtime(now)
    spec = LeaseSpec(holder=f'{FROZEN_PREFIX}{id}', duration=duration, acquired=stamp, renewed=stamp,
                     transitions=(lease.spec.transitions if lease is not None else 0) + (current is None))
    annotations = {**_foreign(lease), PRIORITY_ANNOTATION: str(priority), FREEZE_ANNOTATION: record.to_json()}
    longer = f" (not shorter than the leader's lease duration, {duration}s)" if duration > lifetime else ""
    whom = (f"the leader {record.previous} stops handling at its next renewal, at the latest within its "
            f"renew deadline" if record.previous and current is None else "no replica handles")
    return Plan(spec, annotations, f"Frozen the replicas of the lease {namespace}/{name} for {duration}s{longer} "
                                   f"as {id} with the priority {priority}: {whom}; `kopf resume` ends the freeze "
                                   f"earlier.")


def plan_resume(lease: Lease | None, *, namespace: str, name: str, id: str, now: datetime.datetime) -> Plan | str:
    """How to end the freeze of the Lease as it is; a text if there is nothing to do; :class:`FreezeError`."""
    current = Freeze.from_lease(lease)
    if lease is None or current is None:
        holder = lease.spec.holder if lease is not None else None
        return (f"The lease {namespace}/{name} is not frozen" +
                (f" (held by {holder})" if holder else "") + ": nothing to resume.")
    if current.by != id:
        raise FreezeError(f"The lease {namespace}/{name} is frozen by {current.by}, not by {id}: "
                          f"resume it with --id {current.by!r}.")
    annotations = {k: v for k, v in lease.annotations.items() if k != FREEZE_ANNOTATION}
    stamp = leases.microtime(now)
    if current.previous:
        annotations[PRIORITY_ANNOTATION] = str(current.previous_priority)
        spec = LeaseSpec(holder=current.previous, duration=current.previous_duration or lease.spec.duration,
                         acquired=stamp, renewed=stamp, transitions=lease.spec.transitions + 1)
        outcome = f"given back to {current.previous}, who continues at its next renewal"
    else:
        annotations.pop(PRIORITY_ANNOTATION, None)
        spec = LeaseSpec(holder=None, duration=1, acquired=lease.spec.acquired, renewed=stamp,
                         transitions=lease.spec.transitions)
        outcome = "released: the first replica to see it takes it"
    return Plan(spec, annotations, f"Resumed the replicas of the lease {namespace}/{name}: the lease is {outcome}.")


# The commands.

async def freeze(
        *,
        context: APIContext,
        namespace: str,
        name: str,
        id: str,
        lifetime: int,
        priority: int = FREEZE_PRIORITY,
        message: str | None = None,
        clock: Clock = SYSTEM_CLOCK,
) -> str:
    """Take the HA Lease for ``lifetime`` seconds so that no replica handles; returns what was done."""
    if lifetime < 1:
        raise FreezeError(f"The lifetime of a freeze must be at least 1 second; got {lifetime}.")
    for _ in range(ATTEMPTS):
        lease = await leases.read_lease(context=context, namespace=namespace, name=name)
        if lease is None:
            await _check_not_shards(context=context, namespace=namespace, name=name)
        plan = plan_freeze(lease, namespace=namespace, name=name, id=id, lifetime=lifetime, priority=priority,
                           message=message, now=clock.now())
        try:
            if lease is None:
                await leases.create_lease(context=context, namespace=namespace, name=name, spec=plan.spec,
                                          annotations=plan.annotations)
            else:
                await leases.replace_lease(lease=lease, context=context, spec=plan.spec,
                                           annotations=plan.annotations)
        except APIConflictError:
            continue  # changed meanwhile (e.g. renewed by the leader): look again
        return plan.outcome
    raise FreezeError(f"The lease {namespace}/{name} kept changing while freezing it; try again.")


async def resume(*, context: APIContext, namespace: str, name: str, id: str, clock: Clock = SYSTEM_CLOCK) -> str:
    """End a freeze: give the Lease back to its holder from before the freeze (or release it)."""
    for _ in range(ATTEMPTS):
        lease = await leases.read_lease(context=context, namespace=namespace, name=name)
        plan = plan_resume(lease, namespace=namespace, name=name, id=id, now=clock.now())
        if isinstance(plan, str):
            return plan
        assert lease is not None  # a Lease to resume is there
        try:
            await leases.replace_lease(lease=lease, context=context, spec=plan.spec, annotations=plan.annotations)
        except APIConflictError:
            continue
        return plan.outcome
    raise FreezeError(f"The lease {namespace}/{name} kept changing while resuming it; try again.")


async def _check_not_shards(*, context: APIContext, namespace: str, name: str) -> None:
    """Sharded replicas have no one Lease to freeze: say so instead of freezing nothing."""
    members = await leases.list_leases(context=context, namespace=namespace, labels={MEMBER_LABEL: name})
    if members:
        raise FreezeError(
            f"The replicas of {name!r} in {namespace!r} run with --shards ({len(members)} member lease(s)): "
            f"kopf freeze pauses replicas that coordinate through one lease (--ha or --peering {name}).")


def _foreign(lease: Lease | None) -> dict[str, str]:
    """The Lease's annotations that are not ours to manage here."""
    if lease is None:
        return {}
    return {k: v for k, v in lease.annotations.items() if k not in (PRIORITY_ANNOTATION, FREEZE_ANNOTATION)}

