"""
Reading objects: listing a resource and reading one object.

Listed items come without ``apiVersion`` and ``kind`` (the server puts them on
the list only); they are filled in here, so that every object the framework
handles looks the same whether it came from a listing or from a watch.
"""
from __future__ import annotations

import logging
from typing import Any

from kopf._kube.errors import APIGoneError, APINotFoundError
from kopf._kube.session import APIContext
from kopf._structs.resources import ParamValue, Resource
from kopf._structs.typedefs import Logger

# How often a listing starts over because its continue token has expired before giving up.
MAX_LIST_RESTARTS = 5


async def list_objs(
        *,
        context: APIContext,
        resource: Resource,
        namespace: str | None,
        limit: int | None = None,
        logger: Logger | None = None,
) -> tuple[list[dict[str, Any]], str]:
    """
    All objects of a resource (in a namespace, or cluster-wide for ``None``).

    Returns the objects and the list's ``resourceVersion``, from which a watch
    continues without missing anything in between. With a ``limit``, the
    objects come in pages of that size (``limit``/``continue``), which keeps
    the server's and our memory low on big clusters; all pages are one
    consistent snapshot. A continue token expires if the listing takes too
    long (``410 Gone``); the listing then starts over from the first page.
    """
    log: Logger = logger if logger is not None else logging.getLogger(__name__)
    url = resource.get_url(server=context.server, namespace=namespace)
    items: list[dict[str, Any]] = []
    token: str | None = None
    restarts = 0
    while True:
        params: dict[str, ParamValue] = {'limit': limit or None, 'continue': token}
        try:
            document = await context.request('GET', url, params=params)
        except APIGoneError:
            if token is None or restarts >= MAX_LIST_RESTARTS:
                raise
            restarts += 1
            log.info("The continue token of the listing of %s has expired after %d objects; "
                     "listing again from the start.", resource, len(items))
            items, token = [], None
            continue
        document = document if isinstance(document, dict) else {}
        items.extend(item for item in document.get('items') or [] if isinstance(item, dict))
        metadata = document.get('metadata') or {}
        token = metadata.get('continue') or None
        if token is None:
            break
    for item in items:
        _fill_type(item, resource)
    resource_version = str(metadata.get('resourceVersion') or '')
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
