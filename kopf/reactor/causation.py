"""
Cause detection: what happened to an object, judged from one watch event.

The cause is derived only from the event and the object itself (its
deletion mark, its finalizers, its stored diff-base), never from memory, so
that an operator restarted in the middle of handling picks up where it left.
"""
from __future__ import annotations

import enum

from kopf.storage import finalizers
from kopf.structs.bodies import Body
from kopf.structs.diffs import Diff


class Reason(str, enum.Enum):
    """Why a handling cycle runs; handlers receive it as ``reason``."""

    CREATE = 'create'
    UPDATE = 'update'
    DELETE = 'delete'
    RESUME = 'resume'
    NOOP = 'noop'
    GONE = 'gone'
    # A pseudo-cause: our finalizer must be added before any change handler runs.
    FINALIZER = 'finalizer'

    def __str__(self) -> str:
        return self.value


# Causes whose handlers are called; the others only patch or do nothing.
HANDLED_REASONS = frozenset({Reason.CREATE, Reason.UPDATE, Reason.DELETE, Reason.RESUME})


def detect_reason(
        *,
        event_type: str | None,
        body: Body,
        finalizer: str,
        requires_finalizer: bool,
        old_exists: bool,
        diff: Diff,
        resuming: bool,
) -> Reason:
    """
    Decide the cause of a handling cycle, in the order of precedence.

    ``old_exists`` tells whether a diff-base was stored (the object was
    handled before); ``resuming`` whether the object is seen for the first
    time since the operator started (or its resuming is still in progress).
    """
    if event_type == 'DELETED':
        return Reason.GONE
    if finalizers.is_deletion_ongoing(body):
        # Without our finalizer the object may vanish at any moment: nothing can be done reliably.
        return Reason.DELETE if finalizers.is_deletion_blocked(body, finalizer) else Reason.NOOP
    if requires_finalizer and not finalizers.is_deletion_blocked(body, finalizer):
        return Reason.FINALIZER
    if not old_exists:
        return Reason.CREATE
    if diff:
        return Reason.UPDATE
    if resuming:
        return Reason.RESUME
    return Reason.NOOP
