"""
Priorities of HA replicas, and pausing them by hand: Kopf's ``--priority``, ``kopf freeze`` and ``kopf resume``.

Both live in the HA Lease (see :mod:`kopf._replicas.peering`):

* The holder writes its priority into the annotation ``kopf.dev/priority``.
  A replica with a higher priority than the holder's takes the Lease over,
  but starts handling only once the previous holder has surely stopped (see
  :func:`hold_until`). Replicas of equal priority never take it from each
  other: they wait for it to be released or to expire, as usual.
* A *freeze* is a holder that handles nothing: ``kopf freeze`` takes the
  Lease for its lifetime under the holder identity ``frozen:<id>`` and
  records in ``kopf.dev/freeze`` who held it before. The leader sees
  another holder at its next renewal and stops handling, as when any other
  replica has taken the Lease. ``kopf resume`` gives the Lease back to the
  holder from before the freeze, who continues at its next renewal; nobody
  else can take it meanwhile, so a resume right after a freeze never lets a
  second replica start while the first one has not noticed the freeze yet.
  A freeze that is not resumed ends after its lifetime; then any replica may
  take the Lease, as an expired one.

The end of a freeze is the only moment when a wall-clock timestamp of
another machine counts (see :func:`lapsed`): ending a freeze a
little early or late because of a clock difference cannot make two
replicas handle at once, since the frozen holder handles nothing and the
replicas still wait a whole Lease duration after the freeze began.
"""
from __future__ import annotations

import dataclasses
import datetime
import getpass
import json
import logging
import socket
from collections.abc import Mapping
from typing import Any

from kopf._kube.auth import APIContext
from kopf._kube.errors import APIConflictError
from kopf._replicas import leases
from kopf._replicas.leases import Lease, LeaseSpec

logger = logging.getLogger('kopf._replicas.freezing')

PRIORITY_ANNOTATION = 'kopf.dev/priority'  # the holder's priority
FREEZE_ANNOTATION = 'kopf.dev/freeze'  # a frozen Lease: by whom, why, and who held it before
FROZEN_PREFIX = 'frozen:'  # the holder identity of a freeze
SHARDS_LABEL = 'kopf.dev/shards'  # on the member Leases of sharded replicas (see peering)
FREEZE_PRIORITY = 100  # Kopf's default priority of ``kopf freeze``
DEV_PRIORITY = 666  # Kopf's ``--dev``
ATTEMPTS = 5  # of a freeze/resume whose Lease changes under its feet (409)


class FreezeError(Exception):
    """A freeze or resume cannot be done as asked; the message says why and what to do."""


def priority_of(lease: Lease | None) -> int:
    """The priority of the Lease's holder (0 if it says none)."""
    if lease is None:
        return 0
    try:
        return int(lease.annotations.get(PRIORITY_ANNOTATION, 0))
    except (TypeError, ValueError):
        return 0


@dataclasses.dataclass(frozen=True)
class Freeze:
    """What a frozen Lease says about its freeze."""

    by: str
    message: str | None = None
    previous: str | None = None  # the holder before the freeze: it gets the Lease back on resume
    previous_duration: int | None = None
    previous_priority: int = 0

    def to_json(self) -> str:
        return json.dumps({'by': self.by, 'message': self.message, 'previous': self.previous,
                           'previousDuration': self.previous_duration, 'previousPriority': self.previous_priority},
                          separators=(',', ':'))

    @classmethod
    def from_lease(cls, lease: Lease | None) -> Freeze | None:
        if lease is None or not (lease.spec.holder or '').startswith(FROZEN_PREFIX):
            return None
        try:
            record: Mapping[str, Any] = json.loads(lease.annotations.get(FREEZE_ANNOTATION) or '{}')
        except ValueError:
            record = {}
        if not isinstance(record, Mapping):
            record = {}
        duration = record.get('previousDuration')
        priority = record.get('previousPriority')
        return cls(by=str(record.get('by') or (lease.spec.holder or '')[len(FROZEN_PREFIX):]),
                   message=record.get('message') if isinstance(record.get('message'), str) else None,
                   previous=record.get('previous') if isinstance(record.get('previous'), str) else None,
                   previous_duration=duration if isinstance(duration, int) else None,
                   previous_priority=priority if isinstance(priority, int) else 0)

    def describe(self) -> str:
        return f"frozen by {self.by}" + (f" ({self.message})" if self.message else "")


def is_frozen(lease: Lease | None) -> bool:
    return Freeze.from_lease(lease) is not None


def lapsed(lease: Lease, now: datetime.datetime | None = None) -> bool:
    """
    Whether the Lease's duration has passed since its last renewal, by the wall clock.

    Only a freeze's end is judged so, and a freeze's refusal to pause a
    holder of a higher priority: neither can make two replicas handle at once.
    """
    renewed = _parse_time(lease.spec.renewed)
    if renewed is None or lease.spec.duration is None:
        return False
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return now >= renewed + datetime.timedelta(seconds=lease.spec.duration)


def hold_until(lease: Lease, *, taken_at: float, seen_at: float | None, own_duration: int) -> float:
    """
    When a replica that has just taken the Lease from a live holder may start handling (monotonic).

    The previous holder stops by its renew deadline (shorter than its Lease
    duration) after its last successful renewal, which happened before our
    takeover (``taken_at``). A frozen holder handles nothing, but the leader
    from before the freeze may still be handling until its own deadline
    after the freeze began -- which was before we first saw the freeze
    (``seen_at``).
    """
    freeze = Freeze.from_lease(lease)
    if freeze is not None:
        since = seen_at if seen_at is not None else taken_at
        return since + max(own_duration, freeze.previous_duration or 0)
    return taken_at + max(own_duration, lease.spec.duration or 0)


def default_id() -> str:
    """Who freezes: the user and the host, as Kopf names a freeze by default."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = 'someone'
    return f'{user}@{socket.gethostname()}'


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
) -> str:
    """Take the HA Lease for ``lifetime`` seconds so that no replica handles; returns what was done."""
    if lifetime < 1:
        raise FreezeError(f"The lifetime of a freeze must be at least 1 second; got {lifetime}.")
    for _ in range(ATTEMPTS):
        lease = await leases.read_lease(context=context, namespace=namespace, name=name)
        if lease is None:
            await _check_not_shards(context=context, namespace=namespace, name=name)
        current = Freeze.from_lease(lease)
        holder = lease.spec.holder if lease is not None else None
        if lease is not None and current is None and holder and priority_of(lease) >= priority and not lapsed(lease):
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
        stamp = leases.now()
        spec = LeaseSpec(holder=f'{FROZEN_PREFIX}{id}', duration=duration, acquired=stamp, renewed=stamp,
                         transitions=(lease.spec.transitions if lease is not None else 0) + (current is None))
        annotations = {**_foreign(lease), PRIORITY_ANNOTATION: str(priority), FREEZE_ANNOTATION: record.to_json()}
        try:
            if lease is None:
                await leases.create_lease(context=context, namespace=namespace, name=name, spec=spec,
                                          annotations=annotations)
            else:
                await leases.replace_lease(lease=lease, context=context, spec=spec, annotations=annotations)
        except APIConflictError:
            continue  # changed meanwhile (e.g. renewed by the leader): look again
        longer = f" (not shorter than the leader's lease duration, {duration}s)" if duration > lifetime else ""
        whom = (f"the leader {record.previous} stops handling at its next renewal, at the latest within its "
                f"renew deadline" if record.previous and current is None else "no replica handles")
        return (f"Frozen the replicas of the lease {namespace}/{name} for {duration}s{longer} as {id} with the "
                f"priority {priority}: {whom}; `kopf resume` ends the freeze earlier.")
    raise FreezeError(f"The lease {namespace}/{name} kept changing while freezing it; try again.")


async def resume(*, context: APIContext, namespace: str, name: str, id: str) -> str:
    """End a freeze: give the Lease back to its holder from before the freeze (or release it)."""
    for _ in range(ATTEMPTS):
        lease = await leases.read_lease(context=context, namespace=namespace, name=name)
        current = Freeze.from_lease(lease)
        if lease is None or current is None:
            holder = lease.spec.holder if lease is not None else None
            return (f"The lease {namespace}/{name} is not frozen" +
                    (f" (held by {holder})" if holder else "") + ": nothing to resume.")
        if current.by != id:
            raise FreezeError(f"The lease {namespace}/{name} is frozen by {current.by}, not by {id}: "
                              f"resume it with --id {current.by!r}.")
        annotations = {k: v for k, v in lease.annotations.items() if k != FREEZE_ANNOTATION}
        stamp = leases.now()
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
        try:
            await leases.replace_lease(lease=lease, context=context, spec=spec, annotations=annotations)
        except APIConflictError:
            continue
        return f"Resumed the replicas of the lease {namespace}/{name}: the lease is {outcome}."
    raise FreezeError(f"The lease {namespace}/{name} kept changing while resuming it; try again.")


async def _check_not_shards(*, context: APIContext, namespace: str, name: str) -> None:
    """Sharded replicas have no one Lease to freeze: say so instead of freezing nothing."""
    members = await leases.list_leases(context=context, namespace=namespace, labels={SHARDS_LABEL: name})
    if members:
        raise FreezeError(
            f"The replicas of {name!r} in {namespace!r} run with --shards ({len(members)} member lease(s)): "
            f"kopf freeze pauses replicas that coordinate through one lease (--ha or --peering {name}).")


def _foreign(lease: Lease | None) -> dict[str, str]:
    """The Lease's annotations that are not ours to manage here."""
    if lease is None:
        return {}
    return {k: v for k, v in lease.annotations.items() if k not in (PRIORITY_ANNOTATION, FREEZE_ANNOTATION)}


def _parse_time(value: str | None) -> datetime.datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value.replace('Z', '+00:00'))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=datetime.timezone.utc)
