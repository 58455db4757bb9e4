"""
Priorities of HA replicas and freezes, as the HA Lease records them: Kopf's ``--priority`` and ``kopf freeze``.

Both live in the HA Lease; here is what they mean (pure), while
:mod:`.election` decides by them and :mod:`.freezing` writes freezes:

* The holder writes its priority into the annotation ``kopf.dev/priority``.
  A replica with a higher priority than the holder's takes the Lease over,
  but starts handling only once the previous holder has surely stopped (see
  :func:`hold_until`). Replicas of equal priority never take it from each
  other: they wait for it to be released or to expire, as usual.
* A *freeze* is a holder that handles nothing: ``kopf freeze`` takes the
  Lease for its lifetime under the holder identity ``frozen:<id>`` and
  records in ``kopf.dev/freeze`` who held it before (:class:`Freeze`).

The end of a freeze is the only moment when a wall-clock timestamp of
another machine counts (see :func:`lapsed`): ending a freeze a
little early or late because of a clock difference cannot make two
replicas handle at once, since the frozen holder handles nothing and the
replicas still wait a whole Lease duration after the freeze began.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Mapping
from typing import Any

from kopf._replicas.leases import Lease, parse_microtime

PRIORITY_ANNOTATION = 'kopf.dev/priority'  # the holder's priority
FREEZE_ANNOTATION = 'kopf.dev/freeze'  # a frozen Lease: by whom, why, and who held it before
FROZEN_PREFIX = 'frozen:'  # the holder identity of a freeze


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


def lapsed(lease: Lease, now: datetime.datetime) -> bool:
    """
    Whether the Lease's duration has passed since its last renewal, by the wall clock (``now``).

    Only a freeze's end is judged so, and a freeze's refusal to pause a
    holder of a higher priority: neither can make two replicas handle at once.
    """
    renewed = parse_microtime(lease.spec.renewed)
    if renewed is None or lease.spec.duration is None:
        return False
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
