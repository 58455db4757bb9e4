"""
Readiness: which initial listings the handlers still wait for, and what each stream has indexed.

Handlers of objects run only once every index is filled from the initial
listings of the streams that were there at the start; a stream that lists
again (after a hand-over between replicas) does not tell which objects were
deleted meanwhile, so what it had indexed and did not list any more must
leave the indexes. Both are bookkeeping of what the streams have said, kept
apart from the indexes themselves and from any waiting: no I/O, no time.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Hashable

from kopf._indexing.indexes import ObjectKey


class Readiness:
    """The listings that the handlers wait for: expected before their streams start, done once listed or gone."""

    def __init__(self) -> None:
        self._awaited: set[Hashable] = set()

    def expect(self, listing: Hashable) -> None:
        self._awaited.add(listing)

    def done(self, listing: Hashable) -> None:
        """The listing is over (or its stream has stopped for good): it holds nothing back any more."""
        self._awaited.discard(listing)

    @property
    def ready(self) -> bool:
        """Whether no listing is awaited (also when none ever was)."""
        return not self._awaited


@dataclasses.dataclass
class Membership:
    """The objects one stream has indexed and not seen deleted; and those of the listing in progress."""

    members: set[ObjectKey] = dataclasses.field(default_factory=set)
    listed: set[ObjectKey] = dataclasses.field(default_factory=set)
    listing: bool = False  # whether the last event was a listed one

    def see(self, obj: ObjectKey, event_type: str | None) -> None:
        """An event of the stream: a listed object (no type), or a watch event."""
        if event_type is None:
            if not self.listing:  # a new listing begins
                self.listed, self.listing = set(), True
            self.listed.add(obj)
        else:
            self.listing = False
        if event_type == 'DELETED':
            self.members.discard(obj)
        else:
            self.members.add(obj)

    def relisted(self) -> set[ObjectKey]:
        """The listing is over: the objects it no longer has (deleted while there was no stream) are returned."""
        gone = self.members - self.listed
        self.members = self.listed
        self.listed, self.listing = set(), False
        return gone

    def everything(self) -> set[ObjectKey]:
        """All objects the stream has indexed, listed or not."""
        return self.members | self.listed
