"""
What the operator tells about its work as it goes, and the recorder that ignores it all.

Every instrumented place asks :func:`current` for the operator's recorder and
makes one call on it: a handling cycle starts, a handler ends with an
outcome, a watch event arrives, a patch is refused. The default recorder,
:data:`NULL`, is the base class :class:`Recorder` itself: every method does
nothing, and those that give a probe or a scope give a shared one that does
nothing either, so that an operator without metrics or traces pays one
method call per place and allocates nothing for it.

The real recorders (Prometheus metrics in :mod:`.metrics`, OpenTelemetry
traces in :mod:`.tracing`) override what they need; they are imported only
when they are asked for, and so are their libraries.

The recorder is a context variable: the runtime installs it once for the
operator's tasks, which inherit it (so does the replicas' thread, whose tasks
start from the operator's context); a second operator in the same process
has its own.
"""
from __future__ import annotations

import contextvars
import dataclasses
import types
from collections.abc import Callable, Mapping, Sized
from typing import Any, Protocol, TypeAlias

from kopf._structs.resources import Resource, Selector

# A resource as served, or as the handlers' decorators select it.
ResourceKey: TypeAlias = Resource | Selector


class CycleScope:
    """One handling cycle, entered and exited around it; this one records nothing."""

    def __enter__(self) -> CycleScope:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: types.TracebackType | None) -> None:
        return None


class HandlerScope:
    """One call of a handler: entered before it, told its outcome, exited after it; this one records nothing."""

    def __enter__(self) -> HandlerScope:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: types.TracebackType | None) -> None:
        return None

    def ended(self, *, final: bool, error: BaseException | None) -> None:
        """The call's outcome as the retry policy judged it: final or not, and the error if it failed."""


class RequestScope:
    """One API request: entered before it is sent, told its status when the headers arrive; this one records nothing."""

    def __enter__(self) -> RequestScope:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: types.TracebackType | None) -> None:
        return None

    def answered(self, status: int) -> None:
        """The response's status has arrived (its body may follow); without it, the request has failed."""


class QueueProbe:
    """The per-object queue of one watch stream: events arrive, workers take them; this one records nothing."""

    def arrived(self, key: str, *, deleted: bool = False) -> None:
        """An event of the object is queued for its worker (it was admitted, if replicas coordinate)."""

    def taken(self, key: str, *, woken_up: bool) -> None:
        """The object's worker starts a cycle: with its latest event, or on a wake-up after a delay."""

    def forget(self, key: str) -> None:
        """The object's worker has ended: nothing of it waits any more."""


class WatchProbe:
    """One watch of one resource in one namespace (or cluster-wide), across its reconnects."""

    def listed(self, count: int) -> None:
        """A (re)listing has yielded so many objects."""

    def opened(self) -> None:
        """A watch request is established."""

    def closed(self) -> None:
        """The watch request has ended, for whatever reason."""

    def event(self, kind: str) -> None:
        """An event of this type (``ADDED``, ``MODIFIED``, ``DELETED``) is passed on."""

    def restarted(self, reason: str) -> None:
        """
        The watch starts over, for a reason.

        ``expired`` (410), ``timeout``, ``closed``, ``stalled``, ``throttled``, ``garbled``, ``error``.
        """


@dataclasses.dataclass(frozen=True)
class ReplicaState:
    """What a replica's coordination is at, for gauges: read at every scrape."""

    mode: str  # 'ha' or 'shards'
    leading: bool  # HA: this replica handles; shards: its member Lease is live and it handles its share
    members: int  # the live replicas, this one included, as last seen (HA: 0 when unknown)
    admitting: bool  # the gate admits new handling cycles
    writable: bool  # the gate lets the handling write


class Gate(Protocol):
    """Which objects this replica handles now (see :mod:`kopf._replicas.fencing`)."""

    def admits(self, key: str) -> bool: ...


NULL_CYCLE = CycleScope()
NULL_HANDLER = HandlerScope()
NULL_REQUEST = RequestScope()
NULL_QUEUE = QueueProbe()
NULL_WATCH = WatchProbe()


class Recorder:
    """
    The recording interface; this base class records nothing (see :data:`NULL`).

    Labels are what the arguments name: resources, handler ids, causes,
    verbs, never an object's name or uid. Objects are passed as they are at
    hand (a :class:`~kopf._structs.resources.Resource`, a body), so that the
    null recorder computes nothing.
    """

    enabled = False

    # The handling cycle.

    def cycle(self, resource: ResourceKey, body: Mapping[str, Any], event: str | None) -> CycleScope:
        """A handling cycle of one object starts (for one event, or a wake-up)."""
        return NULL_CYCLE

    def caused(self, cause: str, delay: float | None) -> None:
        """The current cycle's cause is known; ``delay``: when it asked to come back (a retry), if it did."""

    def cycle_failed(self, resource: ResourceKey) -> None:
        """The current cycle has failed unexpectedly (reported in the log; retried later)."""

    def patched(self, resource: ResourceKey, patch: Mapping[str, Any], *, size: int | None = None) -> None:
        """A cycle's patch has landed; ``size``: its size as JSON, if the caller knows it already."""

    def patch_refused(self, resource: ResourceKey, outcome: str) -> None:
        """A cycle's patch met ``conflict_rebased``, ``rejected``, ``too_large``, or ``deferred`` (401, 429)."""

    def queue(self, resource: ResourceKey, gate: Gate | None = None) -> QueueProbe:
        """The queue of one watch stream of the resource; ``gate``: which objects are this replica's."""
        return NULL_QUEUE

    # Handlers.

    def handler(self, resource: ResourceKey | None, cause: str, handler_id: str) -> HandlerScope:
        """A handler is called for a cause (``create``, ..., ``daemon``, ``timer``)."""
        return NULL_HANDLER

    def webhook(self, handler_id: str, outcome: str) -> None:
        """An admission handler has answered: ``allowed``, ``rejected``, ``failed``, ``ignored_failure``."""

    # Daemons and timers.

    def daemon_started(self, resource: ResourceKey | None, kind: str) -> None:
        """A daemon or timer (``kind``) of an object has started."""

    def daemon_ended(self, resource: ResourceKey | None, kind: str) -> None:
        """A daemon or timer of an object has ended."""

    def daemon_restarted(self, resource: ResourceKey | None, handler_id: str, kind: str) -> None:
        """A daemon has failed and is called again after its back-off (a timer: its call is retried)."""

    # The API client.

    def api_request(self, method: str, url: str) -> RequestScope:
        """An API request is sent (each attempt; a watch: until its headers arrive)."""
        return NULL_REQUEST

    def api_retry(self, method: str, url: str, *, throttled: bool, delay: float) -> None:
        """A request is repeated after ``delay`` seconds: a transient failure, or a 429 waited out."""

    def watch(self, resource: ResourceKey, namespace: str | None) -> WatchProbe:
        """A watch of the resource starts (it lives as long as the probe is referenced)."""
        return NULL_WATCH

    # Replicas.

    def lease_renewed(self, mode: str, seconds: float) -> None:
        """A replica's Lease is renewed (or taken), the request took so long."""

    def lease_failed(self, mode: str, error: BaseException) -> None:
        """A replica could not look at or renew its Lease(s) this time."""

    # What is read at every scrape.

    def follow_indexes(self, indexes: Mapping[str, Sized]) -> None:
        """The operator's indexes, by name: their sizes are read at every scrape."""

    def follow_replica(self, state: Callable[[], ReplicaState | None]) -> None:
        """The replica's coordination, read at every scrape."""

    def follow_readiness(self, problem: Callable[[], str | None]) -> None:
        """Why the operator is not ready (``None`` when ready), read at every scrape."""


NULL = Recorder()

_current: contextvars.ContextVar[Recorder] = contextvars.ContextVar('kopf.recorder', default=NULL)


def current() -> Recorder:
    """The operator's recorder (:data:`NULL` unless metrics or traces are on)."""
    return _current.get()


def install(recorder: Recorder) -> contextvars.Token[Recorder]:
    """Record the current task's (and its new tasks') work with this recorder."""
    return _current.set(recorder)


def uninstall(token: contextvars.Token[Recorder]) -> None:
    _current.reset(token)
