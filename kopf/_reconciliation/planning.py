"""
The reconciliation queue of one object, as pure decisions: when the next call is due, and what a call changes.

A :class:`Slot` is where one reconcile handler stands with one object. It
moves by four transitions, each a function of the slot and the time (a
monotonic clock's seconds, given by the caller), and :func:`due` says when
the next call should begin. Nothing here waits, calls or stores anything;
the executor (:mod:`.reconciler`) does, and asks these functions.

The rules:

* **Coalescing.** A trigger (the object has appeared or changed, a child
  has changed) that comes after a quiet time -- at least ``coalesce``
  seconds after the previous call began -- calls at once: a single change
  is repaired as fast as it can be. The triggers that follow it closely are
  a burst: their call is due once no other trigger has come for
  ``coalesce`` seconds -- or ``max_coalesce`` seconds after the first of
  them, whichever comes first, so that a steady stream of changes does not
  hold the object back for ever. A burst of a hundred child events gives
  a call at its start and one after it, not a hundred.
* **Never concurrent.** While a call runs, nothing is due; triggers that
  come meanwhile wait in the slot, and the next call answers them all.
* **Back-off.** A failed call is retried after ``backoff`` seconds, doubled
  with every further failure in a row, up to ``max_backoff`` (a
  :class:`kopf.TemporaryError` names its own delay). Children's triggers,
  resyncs and requeues wait for the back-off too -- a child that the failing
  call has half-made must not make it hammer what is failing -- but a change
  of the object itself does not: the user may have just fixed its spec.
* **Requeue and resync.** ``kopf.Requeue(after=...)`` asks for a call after
  that many seconds; ``resync`` calls again that long after the last call,
  to repair drift that no event shows. Any call answers all of them.
"""
from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any

from kopf import errors
from kopf.errors import ErrorsMode, PermanentError, TemporaryError

# The defaults of the handlers' options.
DEFAULT_COALESCE = 0.25
DEFAULT_BACKOFF = 1.0
DEFAULT_MAX_BACKOFF = 300.0
# However steady the triggers, a call is never held back longer than this (or 8 coalescing windows).
MIN_MAX_COALESCE = 2.0


class Requeue:
    """
    What a reconcile handler returns to be called again after ``after`` seconds (if nothing calls it sooner).

    It is a success: the back-off is reset, and nothing is stored as the result.
    """

    __slots__ = ('after',)

    def __init__(self, after: float) -> None:
        if isinstance(after, bool) or not isinstance(after, (int, float)) or math.isnan(after) or after < 0:
            raise ValueError(f"kopf.Requeue(after=...) is a number of seconds >= 0, got {after!r}.")
        self.after = float(after)

    def __repr__(self) -> str:
        return f"kopf.Requeue(after={self.after:g})"


class Trigger(str, enum.Enum):
    """Why a call is made; the handler gets their values as ``triggers``."""

    OBJECT = 'object'      # the object has appeared (or is seen for the first time since the start), or changed
    CHILDREN = 'children'  # an owned child or a watched related object has appeared, changed or gone
    RETRY = 'retry'        # the previous call has failed
    REQUEUE = 'requeue'    # the previous call has asked for it
    RESYNC = 'resync'      # the resync period has passed without a call

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True)
class Policy:
    """The timing options of one reconcile handler, in seconds."""

    coalesce: float = DEFAULT_COALESCE
    backoff: float = DEFAULT_BACKOFF
    max_backoff: float = DEFAULT_MAX_BACKOFF
    resync: float | None = None

    @property
    def max_coalesce(self) -> float:
        """The longest a burst of triggers holds a call back."""
        return max(MIN_MAX_COALESCE, 8 * self.coalesce)

    def backoff_after(self, failures: int) -> float:
        """The pause after this many failures in a row: exponential, capped."""
        exponent = min(max(failures - 1, 0), 64)  # 2**64 seconds is beyond any cap anyway
        return float(min(self.backoff * 2.0 ** exponent, self.max_backoff))


class Verdict(enum.Enum):
    SUCCESS = 'success'  # done; the next call on the next trigger (or resync)
    REQUEUE = 'requeue'  # done; the next call after a delay (or sooner, on a trigger)
    RETRY = 'retry'      # failed; retried after a delay, the failures counted
    FAILED = 'failed'    # failed for good: not retried, the next call on the next trigger (or resync)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How a call has ended; ``delay`` for requeues and retries (``None``: the back-off decides)."""

    verdict: Verdict
    delay: float | None = None
    result: Any = None
    error: BaseException | None = None

    @property
    def failed(self) -> bool:
        return self.verdict in (Verdict.RETRY, Verdict.FAILED)


@dataclasses.dataclass(frozen=True)
class Slot:
    """Where one reconcile handler stands with one object; changed only by the transitions below."""

    triggers: frozenset[Trigger] = frozenset()  # those that wait for a call
    first: float | None = None  # when the first waiting trigger came
    last: float | None = None  # when the latest waiting trigger came
    urgent: bool = False  # a waiting trigger does not wait for the back-off (the object itself has changed)
    running: bool = False
    called: float | None = None  # when the latest call began
    failures: int = 0  # calls failed in a row
    retry_at: float | None = None
    requeue_at: float | None = None
    resync_at: float | None = None

    @property
    def idle(self) -> bool:
        """Nothing runs, waits or is scheduled: the slot holds nothing worth keeping."""
        return (not self.running and not self.triggers and not self.failures and
                self.retry_at is None and self.requeue_at is None and self.resync_at is None)


def restore(*, failures: int, retry_in: float | None, now: float) -> Slot:
    """A slot as a previous process left it: failed so many times, to be retried in so many seconds."""
    retry_at = None if retry_in is None else now + max(retry_in, 0.0)
    return Slot(failures=max(failures, 0), retry_at=retry_at)


def trigger(slot: Slot, what: Trigger, *, now: float, urgent: bool = False) -> Slot:
    """Something has happened that the next call must see."""
    return dataclasses.replace(
        slot,
        triggers=slot.triggers | {what},
        first=slot.first if slot.first is not None else now,
        last=now if slot.last is None else max(slot.last, now),
        urgent=slot.urgent or urgent,
    )


def due(slot: Slot, policy: Policy) -> float | None:
    """When the next call should begin (``None``: not unless triggered); never while one runs."""
    if slot.running:
        return None
    coalesced: float | None = None
    if slot.triggers and slot.first is not None and slot.last is not None:
        if slot.called is None or slot.first - slot.called >= policy.coalesce:
            coalesced = slot.first  # after a quiet time: at once
        else:
            coalesced = min(slot.last + policy.coalesce, slot.first + policy.max_coalesce)
    if slot.retry_at is not None:  # everything waits for the retry, but a change of the object itself
        return min(coalesced, slot.retry_at) if coalesced is not None and slot.urgent else slot.retry_at
    times = [when for when in (coalesced, slot.requeue_at, slot.resync_at) if when is not None]
    return min(times) if times else None


def start(slot: Slot, *, now: float) -> tuple[Slot, frozenset[Trigger]]:
    """A call begins: it answers everything that waits or is due; returns the new slot and why it is called."""
    answered = set(slot.triggers)
    for what, scheduled in ((Trigger.RETRY, slot.retry_at), (Trigger.REQUEUE, slot.requeue_at),
                            (Trigger.RESYNC, slot.resync_at)):
        if scheduled is not None and scheduled <= now:
            answered.add(what)
    started = dataclasses.replace(slot, triggers=frozenset(), first=None, last=None, urgent=False, running=True,
                                  called=now, retry_at=None, requeue_at=None, resync_at=None)
    return started, frozenset(answered)


def interrupt(slot: Slot, answered: frozenset[Trigger], *, now: float) -> Slot:
    """A call has not ended (cancelled, or broken by a bug of ours): what it was to answer waits again."""
    waiting = (slot.triggers | answered) - {Trigger.RETRY, Trigger.REQUEUE, Trigger.RESYNC}
    if not waiting:
        waiting = frozenset({Trigger.OBJECT})
    return dataclasses.replace(slot, running=False, triggers=waiting, first=slot.first if slot.first is not None
                               else now, last=slot.last if slot.last is not None else now)


def finish(slot: Slot, outcome: Outcome, *, now: float, policy: Policy) -> Slot:
    """A call has ended: count its failure or forget the failures, and schedule what it asks for."""
    resync_at = now + policy.resync if policy.resync is not None else None
    failures = slot.failures + 1 if outcome.failed else 0
    retry_at: float | None = None
    requeue_at: float | None = None
    if outcome.verdict == Verdict.RETRY:
        retry_at = now + (outcome.delay if outcome.delay is not None else policy.backoff_after(failures))
    elif outcome.verdict == Verdict.REQUEUE:
        requeue_at = now + (outcome.delay or 0.0)
    return dataclasses.replace(slot, running=False, failures=failures, retry_at=retry_at,
                               requeue_at=requeue_at, resync_at=resync_at)


def judge(result: Any = None, error: BaseException | None = None, *, mode: ErrorsMode | None = None) -> Outcome:
    """
    What a call's return value or exception means for the next call.

    A :class:`Requeue` asks for a call after its delay; any other value is a
    success (stored as the result). :class:`kopf.TemporaryError` is retried
    after its ``delay`` (``None``: the back-off), :class:`kopf.PermanentError`
    is not retried; other exceptions as ``errors=`` says (by default: retried
    after the back-off).
    """
    if error is None:
        if isinstance(result, Requeue):
            return Outcome(Verdict.REQUEUE, delay=result.after)
        return Outcome(Verdict.SUCCESS, result=result)
    if isinstance(error, TemporaryError):
        return Outcome(Verdict.RETRY, delay=error.delay, error=error)
    if isinstance(error, PermanentError):
        return Outcome(Verdict.FAILED, error=error)
    mode = mode or ErrorsMode.TEMPORARY
    if mode == ErrorsMode.IGNORED:
        return Outcome(Verdict.SUCCESS, error=error)
    if mode == ErrorsMode.PERMANENT:
        return Outcome(Verdict.FAILED, error=error)
    return Outcome(Verdict.RETRY, error=error)


def describe(outcome: Outcome) -> str:
    """The error of a failed call, in the words of the logs."""
    return errors.message(outcome.error) if outcome.error is not None else ''
