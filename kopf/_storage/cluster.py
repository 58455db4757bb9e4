"""
The cluster access that storages keeping their records in the cluster (outside of the objects) get from the framework.

Storages never log in or open connections of their own: the framework hands
its own API session to the storages that ask for it -- those with a
``use_cluster(cluster)`` method, also inside Multi storages -- once it has
logged in and before it enters them (:func:`provide`). Storages that keep
their records in the objects never get it: they only write into the patch.

Everything here is typed against :class:`ObjectsAPI`, a handful of requests
that the framework implements with its API client; the storage layer itself
imports no client. :class:`ClusterAccess` adds what every such storage
needs: each object is read at most once per handling cycle (per body: the
framework passes the same body to every storage call of a cycle), and the
storages' own writes update what was read, so that a progress storage and a
diff-base storage sharing one object cost one read per cycle together.
"""
from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

from kopf._storage.diffbase import MultiDiffBaseStorage
from kopf._storage.progress import MultiProgressStorage
from kopf._structs.bodies import Body
from kopf._structs.resources import Resource

RawObject = dict[str, Any]


class ObjectsAPI(Protocol):
    """The requests a storage may make; the framework implements them with its own API session."""

    async def read(self, resource: Resource, *, namespace: str | None, name: str) -> RawObject | None:
        """The object, or ``None`` if it does not exist."""

    async def create(self, resource: Resource, *, namespace: str | None, obj: Mapping[str, Any]) -> RawObject | None:
        """The created object, or ``None`` if an object of that name exists already."""

    async def patch(
            self, resource: Resource, *, namespace: str | None, name: str, patch: Mapping[str, Any],
    ) -> RawObject | None:
        """The object after a merge-patch, or ``None`` if it does not exist."""

    async def delete(self, resource: Resource, *, namespace: str | None, name: str) -> None:
        """Delete the object; nothing happens if it does not exist."""


@runtime_checkable
class UsesCluster(Protocol):
    """A storage that keeps its records in the cluster: it is given the access before it is entered."""

    def use_cluster(self, cluster: ClusterAccess) -> None: ...


_Key = tuple[str, str | None, str]  # resource, namespace, name
_ABSENT: dict[str, Any] = {}  # a sentinel: known not to exist


class ClusterAccess:
    """The framework's API session for storages, with one read per object per handling cycle."""

    def __init__(self, api: ObjectsAPI) -> None:
        self.api = api
        self._reads: dict[int, tuple[weakref.ref[Body], dict[_Key, RawObject]]] = {}

    async def read(self, resource: Resource, *, namespace: str | None, name: str, body: Body) -> RawObject | None:
        """The object as read (or written) earlier in this cycle of ``body``, else as the server has it now."""
        cache = self._cache(body)
        key = (str(resource), namespace, name)
        if key not in cache:
            found = await self.api.read(resource, namespace=namespace, name=name)
            cache[key] = _ABSENT if found is None else found
        found = cache[key]
        return None if found is _ABSENT else found

    async def create(self, resource: Resource, *, namespace: str | None, obj: Mapping[str, Any],
                     body: Body) -> RawObject | None:
        created = await self.api.create(resource, namespace=namespace, obj=obj)
        if created is not None:
            self._cache(body)[(str(resource), namespace, str(obj['metadata']['name']))] = created
        return created

    async def patch(self, resource: Resource, *, namespace: str | None, name: str, patch: Mapping[str, Any],
                    body: Body) -> RawObject | None:
        patched = await self.api.patch(resource, namespace=namespace, name=name, patch=patch)
        self._cache(body)[(str(resource), namespace, name)] = _ABSENT if patched is None else patched
        return patched

    async def delete(self, resource: Resource, *, namespace: str | None, name: str, body: Body) -> None:
        """Delete the object, unless it is known to be gone already in this cycle."""
        cache = self._cache(body)
        key = (str(resource), namespace, name)
        if cache.get(key) is not _ABSENT:
            await self.api.delete(resource, namespace=namespace, name=name)
            cache[key] = _ABSENT

    def _cache(self, body: Body) -> dict[_Key, RawObject]:
        """What was read in the cycle of this body; forgotten as soon as the body is."""
        entry = self._reads.get(id(body))
        if entry is None or entry[0]() is not body:
            ident = id(body)
            ref = weakref.ref(body, lambda _: self._reads.pop(ident, None))
            entry = self._reads[ident] = (ref, {})
        return entry[1]


def provide(storages: Iterable[object], cluster: ClusterAccess) -> None:
    """Give the cluster access to every storage that asks for it, also to the children of Multi storages."""
    for storage in storages:
        if isinstance(storage, (MultiProgressStorage, MultiDiffBaseStorage)):
            provide(storage.storages, cluster)
        if isinstance(storage, UsesCluster):
            storage.use_cluster(cluster)
