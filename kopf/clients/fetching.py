"""
Reading objects: listing a resource and reading one object.

Listed items come without ``apiVersion`` and ``kind`` (the server puts them on
the list only); they are filled in here, so that every object the framework
handles looks the same whether it came from a listing or from a watch.
"""
from __future__ import annotations

from typing import Any

from kopf.clients.auth import APIContext
from kopf.clients.errors import APINotFoundError
from kopf.structs.resources import Resource


async def list_objs(
        *,
        context: APIContext,
        resource: Resource,
        namespace: str | None,
) -> tuple[list[dict[str, Any]], str]:
    """
    All objects of a resource (in a namespace, or cluster-wide for ``None``).

    Returns the objects and the list's ``resourceVersion``, from which a watch
    continues without missing anything in between.
    """
    url = resource.get_url(server=context.server, namespace=namespace)
    document = await context.request('GET', url)
    document = document if isinstance(document, dict) else {}
    items: list[dict[str, Any]] = [item for item in document.get('items') or [] if isinstance(item, dict)]
    for item in items:
        _fill_type(item, resource)
    resource_version = str((document.get('metadata') or {}).get('resourceVersion') or '')
    return items, resource_version


async def read_obj(
        *,
        context: APIContext,
        resource: Resource,
        namespace: str | None,
        name: str,
) -> dict[str, Any] | None:
    """One object, or ``None`` if it does not exist (anymore)."""
    url = resource.get_url(server=context.server, namespace=namespace, name=name)
    try:
        obj = await context.request('GET', url)
    except APINotFoundError:
        return None
    if not isinstance(obj, dict):
        return None
    _fill_type(obj, resource)
    return obj


def _fill_type(obj: dict[str, Any], resource: Resource) -> None:
    obj.setdefault('apiVersion', resource.api_version)
    if resource.kind is not None:
        obj.setdefault('kind', resource.kind)
