"""
Readiness, apart from liveness: whether the operator is ready to do its job, as ``/readyz`` says.

Ready means: the initial listing of every resource watched at the start is
done (the objects that existed before the operator are known, and their
handling has begun), and with replicas, the replica knows its place -- an HA
leader (which lists when it starts leading), or a standby that has seen the
Lease; a member of shards once it has joined. While the operator stops, it
is not ready. Liveness (``/healthz``) keeps its own meaning: the operator
runs, its watchers have not died, its probes pass.

Listings that start later (namespaces and resources that appear, relistings)
do not make a ready operator unready: readiness is about the start, and a
flapping readiness would only take the pod out of its Service for nothing.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Literal

# Where a replica stands: it handles (or lists to handle); it stands by, knowingly; it has not seen its Lease yet.
Coordination = Literal['handling', 'standing-by', 'joining']


class Readiness:
    """What the runtime tells about the start; :meth:`problem` is ``None`` once ready."""

    def __init__(self) -> None:
        self._awaited: dict[Hashable, str] | None = None  # None: the watching has not started
        self._coordination: Callable[[], Coordination] | None = None
        self._stopping = False

    def expect(self, listings: Mapping[Hashable, str]) -> None:
        """The watching starts with these listings (and what they list, in words); ready once all are done."""
        self._awaited = dict(listings)

    def listed(self, listing: Hashable) -> None:
        """One listing is done (an initial one, or any later one, which changes nothing)."""
        if self._awaited is not None:
            self._awaited.pop(listing, None)

    def coordinated(self, coordination: Callable[[], Coordination]) -> None:
        """The replica's coordination, asked at every check."""
        self._coordination = coordination

    def stopping(self) -> None:
        self._stopping = True

    def problem(self) -> str | None:
        """Why the operator is not ready, or ``None``."""
        if self._stopping:
            return "The operator is stopping."
        if self._coordination is not None:
            where = self._coordination()
            if where == 'joining':
                return "The replica has not seen its Lease yet."
            if where == 'standing-by':
                return None  # a standby does not watch: it is ready to take over
        if self._awaited is None:
            return "The operator is starting: it has not started watching yet."
        if self._awaited:
            waiting = sorted(self._awaited.values())
            more = f" (and {len(waiting) - 3} more)" if len(waiting) > 3 else ''
            return f"Waiting for the initial listing of {', '.join(waiting[:3])}{more}."
        return None
