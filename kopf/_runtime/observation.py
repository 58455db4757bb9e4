"""
Observation: which resources and which namespaces the operator serves, kept current while it runs.

The handlers name resources (``'kopfexamples'``, ``kopf.EVERYTHING``) and
``kopf run -n`` names namespaces or patterns of them; neither is fixed:
CRDs are created and deleted, namespaces come and go. :class:`Insights`
holds what is served at the moment; the observers here revise it, and the
watch streams (:mod:`~kopf._runtime.orchestration`) follow.

Resources
=========

At the start, every resource of the handlers is resolved through the
cluster's discovery. One that the cluster does not serve yet is not an
error: it is named in one warning, and served once its CRD appears. The
CRDs are watched; when one is created, changed or deleted, the resources are
resolved anew, and those that have appeared or gone start or stop their
watches. Discovery lags a moment behind a CRD's own status, so the
resolution is repeated shortly until it agrees with the CRDs. A watch that
meets a ``404`` asks for the same re-resolution instead of failing: its CRD
is probably being deleted.

A CRD being deleted stays served until it is gone: its objects are being
deleted, and the operator must handle their deletion (and release its
finalizers), or the CRD's deletion never completes.

Namespaces
==========

Exact names (``-n ns1 -n ns2``) are served as they are: Kubernetes accepts
watches in namespaces that do not exist (yet). Patterns (``-n 'myapp-*'``)
need the namespaces listed and watched: a namespace that matches is served
as soon as it exists, and its watches stop when it is deleted (not while it
is terminating: its objects' deletion must still be handled).

Restrictions
============

With ``settings.scanning.disabled``, or without the permission to list and
watch CRDs (or namespaces), the resources are resolved once, at the start,
and only the exact namespace names are served; each restriction that loses
something is named in one warning line (for the CRDs, only if a resource is
awaited: one not served at the start, or ``kopf.EVERYTHING``; else it is
said at INFO, since a namespaced Role cannot grant it). A watch whose
resource is then deleted stops with one warning, and the rest of the
operator goes on.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Collection, Mapping
from typing import Any

from kopf import errors
from kopf._kube import discovery, watching
from kopf._kube.errors import APIConnectionError, APIError, APIForbiddenError, describe_api_failure
from kopf._kube.session import APIContext
from kopf._runtime import preflight
from kopf._storage.errors import StorageError
from kopf._structs.clocks import SYSTEM_CLOCK, Clock, wait_event
from kopf._structs.namespaces import NamespaceScope
from kopf._structs.resources import Resource, Selector
from kopf.config import OperatorConfig, PersistenceConfig, WatchingConfig

logger = logging.getLogger('kopf._runtime.observation')

NAMESPACES = Resource(group='', version='v1', plural='namespaces', kind='Namespace', namespaced=False)
CRDS = preflight.CRDS

# After a CRD's change, discovery is asked again this soon, then less often, until it agrees with the CRD.
LAG_BACKOFF = 0.1
MAX_LAG_BACKOFF = 1.0
# How long discovery may disagree with a CRD before the disagreement is no longer waited out.
LAG_PATIENCE = 30.0
# After a failed re-resolution, the next attempt is this much later.
RESCAN_BACKOFF = 5.0


class ObservationError(Exception):
    """What to serve cannot be decided; the message says why and what to do."""


class Insights:
    """
    What the operator serves now: resources by the handlers' selectors, and namespaces.

    ``namespaces`` is ``{None}`` for a cluster-wide operator. ``revised`` is
    set whenever either changes (the watchers follow and clear it).
    ``scanning`` says whether the resources are kept current: if not, a
    resource that goes away stops its watches for good.
    """

    def __init__(self, *, resources: Mapping[Selector, Resource], namespaces: Collection[str | None]) -> None:
        self.resources: dict[Selector, Resource] = dict(resources)
        self.namespaces: frozenset[str | None] = frozenset(namespaces)
        self.revised = asyncio.Event()
        self.rescan = asyncio.Event()  # set to resolve the resources anew (e.g. a watch met a 404)
        self.scanning = False

    def revise(self, *, resources: Mapping[Selector, Resource] | None = None,
               namespaces: Collection[str | None] | None = None) -> None:
        if resources is not None and dict(resources) != self.resources:
            self.resources = dict(resources)
            self.revised.set()
        if namespaces is not None and frozenset(namespaces) != self.namespaces:
            self.namespaces = frozenset(namespaces)
            self.revised.set()

    def suspect(self, resource: Resource) -> None:
        """A watch of the resource met a 404: resolve the resources anew (if they are kept current)."""
        if self.scanning:
            logger.debug("%s is not found by its watch; resolving the resources anew.", resource)
            self.rescan.set()


@dataclasses.dataclass(frozen=True)
class Resolution:
    """The outcome of resolving the handlers' selectors: what is served, and what is not (and why)."""

    resources: Mapping[Selector, Resource]
    unresolved: tuple[Selector, ...] = ()
    ambiguous: Mapping[Selector, str] = dataclasses.field(default_factory=dict)
    # The selectors of many resources (kopf.EVERYTHING, categories, callables), and the selectors they added.
    scanned: Mapping[Selector, tuple[Selector, ...]] = dataclasses.field(default_factory=dict)

    @property
    def everything(self) -> bool:
        """Whether resources that appear later may be served by a selector of many resources."""
        return bool(self.scanned)


async def resolve(context: APIContext, selectors: Collection[Selector]) -> Resolution:
    """
    Resolve the handlers' resources as the cluster serves them now.

    The selectors of many resources (``kopf.EVERYTHING``, categories,
    callables) add every other served resource that they select (each under
    a selector of its own), so that no resource is watched twice.
    """
    resolved: dict[Selector, Resource] = {}
    unresolved: list[Selector] = []
    ambiguous: dict[Selector, str] = {}
    for selector in selectors:
        if not selector.is_specific:
            continue
        try:
            resolved[selector] = await discovery.resolve(context=context, selector=selector)
        except discovery.ResourceNotFoundError:
            unresolved.append(selector)
        except discovery.AmbiguousResourceError as e:
            ambiguous[selector] = str(e)
    multiple = [selector for selector in selectors if not selector.is_specific]
    scanned: dict[Selector, tuple[Selector, ...]] = {}
    if multiple:
        # A resource is watched in one version, unless a callable chooses several versions itself.
        served: set[tuple[str, ...]] = {(resource.group, resource.plural) for resource in resolved.values()}
        served |= {(resource.group, resource.plural, resource.version) for resource in resolved.values()}
        found = await discovery.scan(context=context, all_versions=any(s.predicate for s in multiple))
        for selector in multiple:
            picked = discovery.select(selector, found)
            keys = {resource: (resource.group, resource.plural) + ((resource.version,) if selector.predicate else ())
                    for resource in picked}
            added: list[Selector] = []
            for resource in picked:
                if keys[resource] not in served:
                    key = Selector(group=resource.group, version=resource.version, plural=resource.plural)
                    resolved[key] = resource
                    served.add(keys[resource])
                    added.append(key)
            scanned[selector] = tuple(added)
    return Resolution(resources=resolved, unresolved=tuple(unresolved), ambiguous=ambiguous, scanned=scanned)


def revised_resources(
        previous: Mapping[Selector, Resource],
        resolution: Resolution,
) -> dict[Selector, Resource]:
    """
    The resources to serve after a re-resolution.

    A selector that has become ambiguous (another CRD now claims the same
    name) keeps the resource it was served as, rather than switching or
    dropping it in the middle of the operator's run.
    """
    result = dict(resolution.resources)
    for selector in resolution.ambiguous:
        if selector in previous:
            result[selector] = previous[selector]
    return result


def crd_presence(body: Mapping[str, Any], *, deleted: bool = False) -> tuple[tuple[str, str], bool] | None:
    """
    The CRD's resource (group, plural), and whether discovery should list it now.

    A CRD is served once established with at least one served version, and
    until it is gone -- also while it is being deleted.
    """
    spec = body.get('spec') or {}
    group, plural = spec.get('group'), (spec.get('names') or {}).get('plural')
    if not isinstance(group, str) or not isinstance(plural, str):
        return None
    conditions = (body.get('status') or {}).get('conditions') or []
    established = any(c.get('type') == 'Established' and c.get('status') == 'True' for c in conditions)
    served = any(version.get('served') for version in spec.get('versions') or [])
    return (group, plural), established and served and not deleted


@contextlib.asynccontextmanager
async def observing(
        *,
        context: APIContext,
        selectors: Collection[Selector],
        config: OperatorConfig,
        scope: NamespaceScope | None,
        stop: asyncio.Event,
        clock: Clock = SYSTEM_CLOCK,
) -> AsyncIterator[Insights]:
    """
    Decide what to serve at the start, and keep it current while the block runs.

    ``scope`` is ``None`` for a cluster-wide operator; ``clock`` times the
    retries while discovery lags behind the CRDs. Raises
    :class:`ObservationError` if the handlers' resources cannot be served as
    named (ambiguous names).
    """
    scanning = not config.scanning.disabled
    resolution = await resolve(context, selectors)
    if resolution.ambiguous:
        raise ObservationError(' '.join(f"Cannot serve the resource {selector}: {message}"
                                        for selector, message in resolution.ambiguous.items()))
    _log_start(resolution, scanning=scanning)
    insights = Insights(resources=resolution.resources, namespaces={None} if scope is None else scope.exact_names)
    tasks: list[asyncio.Task[None]] = []
    try:
        if scope is not None and scope.inexact:
            if not scanning:
                logger.warning("settings.scanning.disabled is set: the namespace pattern(s) %s are not served, only "
                               "the exact namespace names are%s.", _patterns(scope), _exact_note(scope))
            else:
                listed = asyncio.Event()
                tasks.append(asyncio.create_task(
                    _observe_namespaces(context=context, scope=scope, settings=config.watching, insights=insights,
                                        listed=listed, stop=stop),
                    name='kopf namespace observer'))
                await _first_listing(listed, tasks[-1], what='namespaces')
        if scanning:
            observer = _ResourceObserver(context=context, selectors=selectors, config=config, insights=insights,
                                         stop=stop, awaited=bool(resolution.unresolved) or resolution.everything,
                                         clock=clock)
            tasks.append(asyncio.create_task(observer.run(), name='kopf resource observer'))
        yield insights
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _log_start(resolution: Resolution, *, scanning: bool) -> None:
    added = {key for keys in resolution.scanned.values() for key in keys}
    for selector, resource in resolution.resources.items():
        if selector not in added:
            logger.info("Serving %s as %s.", selector, resource)
    for selector, keys in resolution.scanned.items():
        logger.info("Serving %s: %d more resources.", selector, len(keys))
    if resolution.unresolved:
        names = ', '.join(str(selector) for selector in resolution.unresolved)
        if scanning:
            logger.warning("Unresolved resources cannot be served yet: %s. The cluster does not serve them (are "
                           "their CRDs installed, and the names spelled right?); they are served as soon as their "
                           "CRDs appear.", names)
        else:
            logger.warning("Unresolved resources cannot be served: %s. The cluster does not serve them (are their "
                           "CRDs installed, and the names spelled right?); with settings.scanning.disabled, they are "
                           "served only if they exist when the operator starts.", names)


async def _first_listing(listed: asyncio.Event, task: asyncio.Task[None], *, what: str) -> None:
    """Wait until the observer has listed once (or given up listing); its failure fails the start."""
    waiter = asyncio.create_task(listed.wait())
    try:
        await asyncio.wait([waiter, task], return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    if not listed.is_set():
        error = None if task.cancelled() else task.exception()
        raise ObservationError(f"Observing the {what} has failed: {_describe(error)}") from error


def _patterns(scope: NamespaceScope) -> str:
    return ', '.join(repr(pattern.text) for pattern in scope.inexact)


def _exact_note(scope: NamespaceScope) -> str:
    names = sorted(scope.exact_names)
    return f" ({', '.join(repr(name) for name in names)})" if names else " (there are none: nothing is served)"


def _describe(error: BaseException | None) -> str:
    if error is None:
        return "it has stopped"
    if isinstance(error, (APIError, APIConnectionError)):
        return describe_api_failure(error)
    return errors.describe(error)


async def _observe_namespaces(
        *,
        context: APIContext,
        scope: NamespaceScope,
        settings: WatchingConfig,
        insights: Insights,
        listed: asyncio.Event,
        stop: asyncio.Event,
) -> None:
    """Serve the namespaces that match the patterns (and the exact names) as they come and go."""
    existing: set[str] = set()

    def revise() -> None:
        served = scope.select(existing) | scope.exact_names
        for name in sorted(served - insights.namespaces):
            logger.info("Serving the namespace %r.", name)
        for name in sorted(name for name in insights.namespaces - served if name is not None):
            logger.info("The namespace %r is gone: its watches stop.", name)
        insights.revise(namespaces=served)

    def on_listed() -> None:
        if not listed.is_set():
            names = sorted(scope.select(existing))
            logger.debug("The namespace pattern(s) %s match %d existing namespace(s): %s.", _patterns(scope),
                         len(names), ', '.join(names) or 'none yet')
            insights.revise(namespaces=scope.select(existing) | scope.exact_names)
            listed.set()
        else:
            revise()

    try:
        async for event in watching.infinite_watch(context=context, resource=NAMESPACES, namespace=None,
                                                   settings=settings, stop=stop, on_listed=on_listed, logger=logger):
            name = (event['object'].get('metadata') or {}).get('name')
            if not isinstance(name, str):
                continue
            if event['type'] == 'DELETED':
                existing.discard(name)
            else:
                existing.add(name)
            if listed.is_set() and event['type'] is not None:
                revise()
    except APIForbiddenError as e:
        if not listed.is_set():
            logger.warning("Cannot list the namespaces (%s): the namespace pattern(s) %s are not served, only the "
                           "exact namespace names are%s. To serve the patterns, grant the operator 'list' and 'watch' "
                           "on namespaces in a ClusterRole.", e, _patterns(scope), _exact_note(scope))
            listed.set()
        else:
            logger.warning("Cannot watch the namespaces (%s): namespaces created or deleted from now on are not "
                           "noticed until the operator restarts. Grant the operator 'watch' on namespaces in a "
                           "ClusterRole.", e)


class _ResourceObserver:
    """Watch the CRDs; on every change, resolve the handlers' resources anew until discovery agrees."""

    def __init__(self, *, context: APIContext, selectors: Collection[Selector], config: OperatorConfig,
                 insights: Insights, stop: asyncio.Event, awaited: bool = True, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock
        self.awaited = awaited  # whether resources are expected to appear (unresolved ones, kopf.EVERYTHING)
        self.context = context
        self.selectors = selectors
        self.persistence: PersistenceConfig = config.persistence
        self.settings: WatchingConfig = config.watching
        self.insights = insights
        self.stop = stop
        self.pending: dict[tuple[str, str], tuple[bool, float]] = {}  # expected in discovery, since when
        self.ambiguous: set[Selector] = set()  # reported already
        self.refused: set[Resource] = set()  # by the storages' checks; reported already

    async def run(self) -> None:
        self.insights.scanning = True
        watcher = asyncio.create_task(self._watch(), name='kopf CRD watcher')
        try:
            await self._rescan_when_asked()
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)

    async def _watch(self) -> None:
        def on_listed() -> None:
            # A CRD may have appeared since the resolution at the start, or while the watch was relisting.
            self.insights.rescan.set()

        try:
            async for event in watching.infinite_watch(context=self.context, resource=CRDS, namespace=None,
                                                       settings=self.settings, stop=self.stop, on_listed=on_listed,
                                                       logger=logger):
                if event['type'] is None:
                    continue  # a listing: resolved anew once it is over (on_listed)
                presence = crd_presence(event['object'], deleted=event['type'] == 'DELETED')
                if presence is not None:
                    key, present = presence
                    self.pending[key] = (present, self.clock.monotonic())
                    self.insights.rescan.set()
        except APIForbiddenError as e:
            self.insights.scanning = False
            if self.awaited:
                logger.warning("Cannot watch the CustomResourceDefinitions (%s): resources created or deleted from "
                               "now on are not noticed until the operator restarts. Grant the operator 'list' and "
                               "'watch' on customresourcedefinitions.apiextensions.k8s.io in a ClusterRole, or set "
                               "settings.scanning.disabled = True to declare this mode intended.", e)
            else:  # every resource is served already: only a CRD's later deletion goes unnoticed (and is said then)
                logger.info("The CustomResourceDefinitions cannot be watched (no 'list' and 'watch' permission on "
                            "them): a CRD deleted or created from now on is noticed only after a restart.")
        except (APIError, APIConnectionError) as e:
            self.insights.scanning = False
            logger.error("The watch of the CustomResourceDefinitions has failed: %s. Resources created or deleted "
                         "from now on are not noticed until the operator restarts.", describe_api_failure(e))

    async def _rescan_when_asked(self) -> None:
        delay = LAG_BACKOFF
        while True:
            await self.insights.rescan.wait()
            self.insights.rescan.clear()
            try:
                await self._rescan()
                lagging = await self._lagging()
            except (APIError, APIConnectionError) as e:
                logger.warning("Cannot resolve the resources anew: %s; trying again in %gs.",
                               describe_api_failure(e), RESCAN_BACKOFF)
                await self._sleep(RESCAN_BACKOFF)
                self.insights.rescan.set()
                continue
            if lagging:
                await self._sleep(delay)
                delay = min(delay * 2, MAX_LAG_BACKOFF)
                self.insights.rescan.set()
            else:
                delay = LAG_BACKOFF

    async def _rescan(self) -> None:
        discovery.refresh(context=self.context)
        resolution = await resolve(self.context, self.selectors)
        for selector, message in resolution.ambiguous.items():
            if selector not in self.ambiguous:
                self.ambiguous.add(selector)
                kept = self.insights.resources.get(selector)
                logger.warning("%s%s", message, f" It stays served as {kept}." if kept else " It is not served.")
        self.ambiguous &= set(resolution.ambiguous)
        resources = revised_resources(self.insights.resources, resolution)
        previous = self.insights.resources
        for selector, resource in list(resources.items()):
            if previous.get(selector) == resource:
                continue
            if not await self._admissible(resource):
                del resources[selector]
                continue
            logger.info("Serving %s as %s.", selector, resource)
        for selector, resource in previous.items():
            if resources.get(selector) != resource:
                logger.info("%s is not served by the cluster any more (its CRD is deleted?): its watches stop.",
                            resource)
        self.insights.revise(resources=resources)

    async def _admissible(self, resource: Resource) -> bool:
        """Whether the storages can keep the state of a resource that has appeared (checked as at the start)."""
        try:
            await preflight.check_persistence(context=self.context, resources=[resource],
                                              persistence=self.persistence)
        except StorageError as e:
            if resource not in self.refused:
                self.refused.add(resource)
                logger.error("%s is not served: %s", resource, e)
            return False
        self.refused.discard(resource)
        return True

    async def _lagging(self) -> bool:
        """Whether discovery still disagrees with a changed CRD (and it is worth waiting for it)."""
        now = self.clock.monotonic()
        for key, (expected, since) in list(self.pending.items()):
            if await discovery.serves(context=self.context, group=key[0], plural=key[1]) == expected:
                del self.pending[key]
            elif now - since > LAG_PATIENCE:
                del self.pending[key]
                logger.debug("Discovery still %s %s.%s after %gs; not waiting for it any more.",
                             "lacks" if expected else "lists", key[1], key[0], LAG_PATIENCE)
        return bool(self.pending)

    async def _sleep(self, delay: float) -> None:
        await wait_event(self.stop, delay, clock=self.clock)
