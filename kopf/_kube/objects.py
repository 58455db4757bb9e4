"""
Plain object requests -- read, create, merge-patch, delete -- with "not there" and "already there" as values.

The storages that keep their records in the cluster get these from the
framework (as :class:`kopf._storage.cluster.ObjectsAPI`, which this class
satisfies): they decide by return values, not by the client's error types,
so that the storage layer needs no client of its own. Every other error is
raised as the typed API error.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kopf._kube.errors import APIConflictError, APINotFoundError
from kopf._kube.session import APIContext
from kopf._structs.resources import Resource

MERGE_PATCH = 'application/merge-patch+json'


class ObjectsClient:
    """The requests of :class:`kopf._storage.cluster.ObjectsAPI` over one API session."""

    def __init__(self, context: APIContext) -> None:
        self.context = context

    async def read(self, resource: Resource, *, namespace: str | None, name: str) -> dict[str, Any] | None:
        url = resource.get_url(server=self.context.server, namespace=namespace, name=name)
        try:
            found = await self.context.request('GET', url)
        except APINotFoundError:
            return None
        return found if isinstance(found, dict) else None

    async def create(
            self, resource: Resource, *, namespace: str | None, obj: Mapping[str, Any],
    ) -> dict[str, Any] | None:
        url = resource.get_url(server=self.context.server, namespace=namespace)
        try:
            created = await self.context.request('POST', url, json=dict(obj))
        except APIConflictError:
            return None
        return created if isinstance(created, dict) else None

    async def patch(
            self, resource: Resource, *, namespace: str | None, name: str, patch: Mapping[str, Any],
    ) -> dict[str, Any] | None:
        url = resource.get_url(server=self.context.server, namespace=namespace, name=name)
        try:
            patched = await self.context.request('PATCH', url, json=dict(patch), headers={'Content-Type': MERGE_PATCH})
        except APINotFoundError:
            return None
        return patched if isinstance(patched, dict) else None

    async def delete(self, resource: Resource, *, namespace: str | None, name: str) -> None:
        url = resource.get_url(server=self.context.server, namespace=namespace, name=name)
        try:
            await self.context.request('DELETE', url)
        except APINotFoundError:
            pass
