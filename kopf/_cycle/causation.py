"""
Causation: what happened to an object, judged from one watch event.

This module is the only place where the cause of a handling cycle is
decided. The rules, in the order of precedence:

=====================================================  ==============
The event and the object                               The cause
=====================================================  ==============
the watch says the object is deleted (``DELETED``)     ``GONE``
deletion requested, our finalizer is on it             ``DELETE``
deletion requested, no finalizer of ours               ``NOOP`` [1]_
no change handlers, daemons or timers for the resource ``NOOP``
a handler needs our finalizer, it is not there [3]_    ``FINALIZER``
no change handler selects the object [4]_              ``NOOP``
never handled (no diff-base)                           ``CREATE``
the essence differs from the diff-base                 ``UPDATE`` [2]_
resuming (see below)                                   ``RESUME``
otherwise                                              ``NOOP``
=====================================================  ==============

.. [1] Without our finalizer the object may vanish at any moment: nothing
   can be done reliably, so nothing is tried.
.. [2] With the resume handlers joining, if resuming.
.. [3] A (non-optional) delete handler, daemon or timer that is interested
   in the object.
.. [4] By its filters (see :func:`~kopf._cycle.selection.selects`): an
   object that no handler selects is never written to -- no diff-base, no
   progress. It becomes a creation when it starts to be selected.

**Resuming** is explicit in the cause (:attr:`Cause.resuming`): if the
resource has resume handlers, an object that was handled before is resuming
on its first sight since the operator started (without them, that sight is
a ``NOOP``: a restart over many handled objects costs no cycle of
handlers), and for as long as any resume handler of it has progress stored
(so that a resume that needs several cycles is not forgotten after the
first one). Objects being deleted resume only for the resume handlers with
``deleted=True`` (on the first sight, or while those have progress stored),
beside the delete handlers.

The cause is derived only from the event and the object itself (its deletion
mark, finalizers, diff-base and stored progress, read through the cycle's
:class:`~kopf._storage.persistence.Persistence`), never from memory beyond
"first seen", so that an operator restarted in the middle of handling picks
up where it left. The facts are read lazily: a ``GONE`` or an unhandled
resource costs no storage call at all.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from typing import Any

from kopf._handlers.reasons import Reason
from kopf._storage import finalizers
from kopf._storage.persistence import Essences, Persistence
from kopf._structs.bodies import Body
from kopf._structs.diffs import Diff
from kopf._structs.ids import HandlerId


@dataclasses.dataclass(frozen=True)
class Cause:
    """
    The cause of one handling cycle, with the facts it was judged by.

    ``essences`` is ``None`` where the cause is clear without the object's
    history (gone, or nothing to handle). ``resuming``: the resume handlers
    are due (alone for ``RESUME``, with the update handlers for ``UPDATE``),
    or, for ``FINALIZER``, must be remembered as due. ``deleting``: the
    object is marked for deletion.
    """

    reason: Reason
    essences: Essences | None = None
    resuming: bool = False
    deleting: bool = False

    @property
    def old(self) -> dict[str, Any] | None:
        return self.essences.old if self.essences is not None else None

    @property
    def new(self) -> dict[str, Any]:
        return self.essences.new if self.essences is not None else {}

    @property
    def diff(self) -> Diff:
        return self.essences.diff if self.essences is not None else Diff()


async def detect(
        *,
        event_type: str | None,
        body: Body,
        finalizer: str,
        first_seen: bool,
        handled: bool,
        guarded: bool = False,
        resume_ids: Collection[HandlerId],
        requires_finalizer: Callable[[Essences], bool],
        persistence: Persistence,
        selected: Callable[[Essences], bool] = lambda essences: True,
        resume_deleted_ids: Collection[HandlerId] = (),
) -> Cause:
    """
    Decide the cause of a handling cycle (see the module's rules).

    ``handled``: whether the resource has change handlers at all;
    ``selected``: whether any of them is interested in this object;
    ``guarded``: whether it has other handlers that may need our finalizer
    (daemons, timers).
    ``requires_finalizer``: whether a delete handler is interested in the
    object (its filters may look at the essences). ``first_seen``: whether
    this is the first event of the object since the operator started.
    ``resume_deleted_ids``: the resume handlers that run for a deletion too.
    """
    if event_type == 'DELETED':
        return Cause(Reason.GONE)
    if finalizers.is_deletion_ongoing(body):
        if not finalizers.is_deletion_blocked(body, finalizer):
            return Cause(Reason.NOOP, deleting=True)
        essences = await persistence.essences()
        resuming = bool(resume_deleted_ids) and (first_seen or await persistence.holds_any(resume_deleted_ids))
        return Cause(Reason.DELETE, essences=essences, deleting=True, resuming=resuming)
    if not handled and not guarded:
        return Cause(Reason.NOOP)
    essences = await persistence.essences()
    handled = handled and selected(essences)
    if not finalizers.is_deletion_blocked(body, finalizer) and requires_finalizer(essences):
        return Cause(Reason.FINALIZER, essences=essences,
                     resuming=handled and essences.old is not None and first_seen)
    if not handled:
        return Cause(Reason.NOOP, essences=essences)
    if essences.old is None:
        return Cause(Reason.CREATE, essences=essences)
    resuming = bool(resume_ids) and (first_seen or await persistence.holds_any(resume_ids))
    if essences.diff:
        return Cause(Reason.UPDATE, essences=essences, resuming=resuming)
    if resuming:
        return Cause(Reason.RESUME, essences=essences, resuming=True)
    return Cause(Reason.NOOP, essences=essences)
