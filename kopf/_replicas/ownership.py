"""
Which replica owns which object: rendezvous hashing over the live members.

Every member scores every object by a hash of the pair (member, object uid);
the highest score owns the object. Every replica computes the same answer
from the same member list without talking to the others, and when a member
joins or leaves, only the objects it wins or held change hands -- about 1/N
of them -- while all the others stay where they are.

A member's *ring* is the member list it has adopted and handles by; rings
differ for a short while whenever membership changes. :class:`ShardPermit`
lets a replica handle an object only if its own ring gives the object to
it **and** no other live member's ring gives it to that member: that is the
fencing of hand-overs (see :mod:`kopf._replicas.peering` for why it is enough).
"""
from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping

Ring = tuple[str, ...]  # the sorted identities of a member list


def make_ring(members: Iterable[str]) -> Ring:
    return tuple(sorted(set(members)))


def format_ring(ring: Ring) -> str:
    """How a ring is written into a member's Lease; identities never contain commas."""
    return ','.join(ring)


def parse_ring(text: str | None) -> Ring:
    return make_ring(item for item in (text or '').split(',') if item)


def ring_version(ring: Ring) -> str:
    """A short, stable name of a ring for the logs."""
    return hashlib.blake2b(format_ring(ring).encode(), digest_size=4).hexdigest()


def score(member: str, key: str) -> int:
    digest = hashlib.blake2b(f'{member}\0{key}'.encode(), digest_size=8).digest()
    return int.from_bytes(digest, 'big')


def owner(key: str, ring: Ring) -> str | None:
    """The member of the ring that owns the object, or ``None`` for an empty ring."""
    best: str | None = None
    best_score = -1
    for member in ring:
        value = score(member, key)
        if value > best_score:  # ties are astronomically rare; the ring's order breaks them the same everywhere
            best, best_score = member, value
    return best


@dataclasses.dataclass(frozen=True)
class ShardPermit:
    """
    Whether this replica may handle an object now, by its own ring and the others' claims.

    ``ring`` is this replica's published ring (``()``: nothing); ``others``
    maps every other live member to the ring it has published. ``keep``, if
    given, further limits the permit to the objects that this replica also
    owns by a ring it is moving to (while it stops handling the others).
    """

    identity: str
    ring: Ring
    others: Mapping[str, Ring] = dataclasses.field(default_factory=dict)
    keep: Ring | None = None
    claims: Mapping[Ring, frozenset[str]] = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # The others' rings that differ from ours, with the members that hold each: the only
        # claims that can collide with ours (a ring equal to ours gives our objects to us).
        claims: dict[Ring, frozenset[str]] = {}
        for member, ring in self.others.items():
            if ring != self.ring and member != self.identity:
                claims[ring] = claims.get(ring, frozenset()) | {member}
        object.__setattr__(self, 'claims', claims)

    def __call__(self, key: str) -> bool:
        if owner(key, self.ring) != self.identity:
            return False
        if self.keep is not None and owner(key, self.keep) != self.identity:
            return False
        return all(owner(key, ring) not in members for ring, members in self.claims.items())
