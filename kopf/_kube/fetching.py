"""
Reading objects: listing a resource and reading one object.

Listed items come without ``apiVersion`` and ``kind`` (the server puts them on
the list only); they are filled in here, so that every object the framework
handles looks the same whether it came from a listing or from a watch.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncGenerator
from typing import Any

from kopf._kube.errors import APIGoneError, APIMalformedResponseError, APINotFoundError
from kopf._kube.session import APIContext
from kopf._structs.resources import ParamValue, Resource
from kopf._structs.typedefs import Logger

# How often a listing starts over because its continue token has expired before giving up.
MAX_LIST_RESTARTS = 5


@dataclasses.dataclass(frozen=True)
class ListPage:
    """
    One page of a listing, as it comes.

    ``restarted``: the listing has started over from the first page (its
    continue token expired), so the pages before this one are void: they
    belong to an older snapshot. ``resource_version`` is set on the last page
    only: the version of the whole snapshot, from which a watch continues.
    """

    items: list[dict[str, Any]]
    restarted: bool = False
    resource_version: str | None = None


async def list_pages(
        *,
        context: APIContext,
        resource: Resource,
        namespace: str | None,
        limit: int | None = None,
        logger: Logger | None = None,
) -> AsyncGenerator[ListPage, None]:
    """
    The objects of a resource page by page (in a namespace, or cluster-wide for ``None``).

    With a ``limit``, the objects come in pages of that size (``limit`` /
    ``continue``). The next page is requested as a page is handed out, so
    that the server prepares it while the caller handles this one; it is
    handed out only when the caller asks for it, so a caller that handles a
    page before asking for the next one never holds more than two pages of a
    big listing. All pages are one consistent snapshot. A continue token
    expires if the listing takes too long (``410 Gone``); the listing then
    starts over from the first page, which is marked ``restarted``.
    """
    log: Logger = logger if logger is not None else logging.getLogger(__name__)
    url = resource.get_url(server=context.server, namespace=namespace)

    async def page(token: str | None) -> Any:
        params: dict[str, ParamValue] = {'limit': limit or None, 'continue': token}
        return await context.request('GET', url, params=params)

    token: str | None = None
    restarts = 0
    listed = 0
    restarted = False
    upcoming: asyncio.Task[Any] | None = None  # the next page, requested while the caller handles this one
    try:
        while True:
            try:
                document = await (upcoming if upcoming is not None else page(token))
            except APIGoneError:
                if token is None or restarts >= MAX_LIST_RESTARTS:
                    raise
                restarts += 1
                log.info("The continue token of the listing of %s has expired after %d objects; "
                         "listing again from the start.", resource, listed)
                token, listed, restarted = None, 0, True
                continue
            finally:
                upcoming = None
            document = document if isinstance(document, dict) else {}
            items = [item for item in document.get('items') or [] if isinstance(item, dict)]
            for item in items:
                _fill_type(item, resource)
            listed += len(items)
            metadata = document.get('metadata') or {}
            token = metadata.get('continue') or None
            del document  # the caller's page is all that is kept of it
            if token is None:
                resource_version = str(metadata.get('resourceVersion') or '')
                if not resource_version:  # nothing to watch from: the whole listing is asked for again
                    raise APIMalformedResponseError(f"The listing of {resource} has no resourceVersion to watch from",
                                                    status=200)
                yield ListPage(items, restarted=restarted, resource_version=resource_version)
                return
            upcoming = asyncio.create_task(page(token), name=f"listing of {resource}")
            yield ListPage(items, restarted=restarted)
            restarted = False
    finally:
        if upcoming is not None:  # the caller has stopped listing: the next page is not wanted
            upcoming.cancel()  # if it has failed already, its failure is not reported either


async def list_objs(
        *,
        context: APIContext,
        resource: Resource,
        namespace: str | None,
        limit: int | None = None,
        logger: Logger | None = None,
) -> tuple[list[dict[str, Any]], str]:
    """
    All objects of a resource (in a namespace, or cluster-wide for ``None``), in one list.

    Returns the objects and the list's ``resourceVersion``, from which a watch
    continues without missing anything in between; see :func:`list_pages`.
    """
    items: list[dict[str, Any]] = []
    resource_version = ''
    pages = list_pages(context=context, resource=resource, namespace=namespace, limit=limit, logger=logger)
    async with contextlib.aclosing(pages):
        async for page in pages:
            if page.restarted:
                items = []
            items.extend(page.items)
            resource_version = page.resource_version or resource_version
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
