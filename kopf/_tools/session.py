"""
The tools' way to the cluster: logging in as the operator would, the resource, its objects, and their patches.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable
from typing import Any

from kopf._handlers.registries import Activity, OperatorRegistry
from kopf._kube import auth, discovery, fetching, patching
from kopf._kube.objects import ObjectsClient
from kopf._kube.session import APIContext
from kopf._runtime import activities
from kopf._storage import cluster
from kopf._structs.credentials import ConnectionInfo
from kopf._structs.ephemera import Memo
from kopf._structs.patches import Patch
from kopf._structs.resources import Resource, Selector
from kopf.config import OperatorConfig

logger = logging.getLogger('kopf._tools')


class ToolError(Exception):
    """The tool cannot do what it was asked; the message says why, in one line."""


async def configured(registry: OperatorRegistry) -> OperatorConfig:
    """The operator's configuration as its startup handlers make it (the framework's defaults without them)."""
    config = OperatorConfig()
    if registry.get_activity_handlers(Activity.STARTUP):
        await activities.run_activity(registry=registry, activity=Activity.STARTUP, config=config, memo=Memo(),
                                      logger=logger)
    return config


@contextlib.asynccontextmanager
async def connected(*, registry: OperatorRegistry, config: OperatorConfig) -> AsyncIterator[APIContext]:
    """An API session with the operator's credentials: its login handlers if any, else the environment's."""
    info = await _login(registry=registry, config=config)
    networking = config.networking
    async with APIContext(info, timeout=networking.request_timeout, connect_timeout=networking.connect_timeout,
                          backoffs=networking.error_backoffs or ()) as context:
        yield context


async def _login(*, registry: OperatorRegistry, config: OperatorConfig) -> ConnectionInfo:
    if registry.get_activity_handlers(Activity.LOGIN):
        results = await activities.run_activity(registry=registry, activity=Activity.LOGIN, config=config,
                                                memo=Memo(), logger=logger)
        for result in results.values():
            if isinstance(result, ConnectionInfo):
                return result
        raise ToolError("The operator's login handlers returned no kopf.ConnectionInfo.")
    return await asyncio.get_running_loop().run_in_executor(None, auth.login_default)


async def resolve(context: APIContext, name: str) -> Resource:
    """The served resource for a name as users write it (``kopfexamples``, ``kopfexamples.kopf.dev``, ...)."""
    try:
        selector = Selector.parse(name)
    except ValueError as e:
        raise ToolError(str(e)) from None
    try:
        return await discovery.resolve(context=context, selector=selector)
    except (discovery.ResourceNotFoundError, discovery.AmbiguousResourceError) as e:
        raise ToolError(str(e)) from None


async def objects(
        context: APIContext,
        resource: Resource,
        *,
        namespace: str | None,
        name: str | None,
) -> list[dict[str, Any]]:
    """One object by name, or all objects of the resource (in a namespace, or everywhere for ``None``)."""
    if name is not None:
        found = await fetching.read_obj(context=context, resource=resource, namespace=namespace, name=name)
        if found is None:
            where = f" in the namespace {namespace!r}" if namespace and resource.namespaced else ""
            raise ToolError(f"There is no {resource} named {name!r}{where}.")
        return [found]
    items, _ = await fetching.list_objs(context=context, resource=resource, namespace=namespace)
    return sorted(items, key=lambda obj: (obj.get('metadata', {}).get('namespace') or '',
                                          obj.get('metadata', {}).get('name') or ''))


async def patch(context: APIContext, resource: Resource, obj: dict[str, Any], changes: Patch) -> dict[str, Any] | None:
    """Send a patch to an object; its new state, or ``None`` if it is gone."""
    metadata = obj.get('metadata') or {}
    return await patching.patch_obj(context=context, resource=resource, namespace=metadata.get('namespace'),
                                    name=str(metadata.get('name')), patch=changes, logger=logger)


@contextlib.asynccontextmanager
async def entered(context: APIContext, storages: Iterable[object]) -> AsyncIterator[None]:
    """The storages, given the cluster access and entered (once each), as the operator does it."""
    unique = list({id(storage): storage for storage in storages}.values())
    cluster.provide(unique, cluster.ClusterAccess(ObjectsClient(context)))
    async with contextlib.AsyncExitStack() as stack:
        for storage in unique:
            await stack.enter_async_context(storage)  # type: ignore[arg-type]
        yield
