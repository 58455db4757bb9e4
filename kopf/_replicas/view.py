"""
What other parts of the operator may ask about the replicas: who keeps a shared object, who else is alive.

The admission webhooks (:mod:`kopf._admission`) ask it through a protocol of
their own, so that they know nothing of how the replicas coordinate.
"""
from __future__ import annotations

import asyncio
from typing import Protocol

from kopf._kube.auth import APIContext
from kopf._replicas.fencing import Gate
from kopf._replicas.replica import Replica


class Coordination(Protocol):
    """What the view reads of the running coordination (:class:`.peering.Peering`)."""

    @property
    def replica(self) -> Replica: ...

    @property
    def gate(self) -> Gate: ...


class ReplicaView:
    """
    Who keeps a shared object, and who else is alive -- as this replica knows it.

    Made before the coordination starts (the admission webhooks start
    earlier and stop later than the Leases); until :func:`.peering.peering`
    attaches the running replica, this replica keeps nothing. A shared object
    (e.g. the admission webhook configurations) is kept by the replica that
    would handle an object of its key: the HA leader, or the shard that owns
    the key by the ring -- fenced as objects are, so never two replicas at once.
    """

    def __init__(self) -> None:
        self._peers: Coordination | None = None
        self._context: APIContext | None = None
        self._attached = asyncio.Event()

    def attach(self, peers: Coordination, *, context: APIContext) -> None:
        self._peers = peers
        self._context = context  # the operator's own session: it outlives the Leases' thread
        self._attached.set()

    @property
    def identity(self) -> str | None:
        return self._peers.replica.settings.identity if self._peers is not None else None

    def steward(self, key: str) -> bool:
        return self._peers is not None and self._peers.gate.admits(key)

    @property
    def revision(self) -> int:
        return self._peers.gate.revision if self._peers is not None else 0

    async def revised(self, revision: int) -> None:
        if self._peers is None:
            await self._attached.wait()
        else:
            await self._peers.gate.revised(revision)

    @property
    def handover_timeout(self) -> float:
        return float(self._peers.replica.settings.lease_duration) if self._peers is not None else 0.0

    async def alone(self) -> bool:
        """
        At the exit (the Lease is given up): whether no other replica is alive.

        Shards: no other live member in the last listing. HA: standbys hold no
        Lease, so the released Lease is watched: a standby takes it within
        a retry period or two; if nobody does, this replica was the last.
        """
        if self._peers is None or self._context is None:
            return True
        return await self._peers.replica.alone(context=self._context)
