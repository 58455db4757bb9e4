"""
Reconciliation for one run of the operator: the reconcilers of the resources, and the children they watch.

The runtime gives it what it needs at the points where it needs it:

* :meth:`OperatorReconciliation.check` at the start: every resource in
  ``owns=`` and ``watches=`` must be served, and the operator must be
  allowed to list and watch it -- else the operator does not start, with
  one line that names the resource and the RBAC rule to grant;
* :meth:`~OperatorReconciliation.stage` for each watch stream of a resource
  with reconcile handlers: its reconciler, as a stage of the handling cycle;
* :meth:`~OperatorReconciliation.watched` around each watch stream of a
  related resource: every event is seen, before the gate of replicas
  decides which objects this replica handles -- a child belongs to its
  owner's replica, whichever replica its own uid would go to -- and before
  the events are queued to the handling (so that the watches of children
  are the operator's own watches: one per resource and namespace, shared
  by all handlers, and by the handlers of the children's own resource);
* :meth:`~OperatorReconciliation.listed` when a stream's listing is over:
  the first calls wait until the streams of the start have listed their
  children; a listing of a re-opened stream that lacks an object means
  that the object is gone.

Owned children are linked to their owners by owner references (of the
owner resource's group and kind, in any version); related objects by their
handlers' mappers, by the owners' namespaces and names (so that an owner
that this replica takes over later finds them linked).
"""
from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Collection, Hashable, Mapping
from typing import Any

from kopf._cycle.cycle import Stage
from kopf._cycle.queueing import Gate
from kopf._handlers import invocation
from kopf._handlers.loggers import ObjectLogger
from kopf._handlers.registries import OperatorRegistry, ReconcilingHandler, Relation
from kopf._kube import access, discovery
from kopf._kube.session import APIContext
from kopf._reconciliation.links import Children, Kind, Links, Listing, RawBody, owner_names, owner_uids
from kopf._reconciliation.reconciler import Reconciler, patch_object
from kopf._structs.bodies import Body
from kopf._structs.clocks import SYSTEM_CLOCK, Clock
from kopf._structs.ids import HandlerId
from kopf._structs.resources import Resource, Selector
from kopf._structs.typedefs import RawEvent
from kopf.config import OperatorConfig

logger = logging.getLogger('kopf._reconciliation.reconciling')

VERBS = ('list', 'watch')


class ReconciliationError(Exception):
    """The reconcile handlers cannot work as declared; the message says which resource and what to do."""


class OperatorReconciliation:
    """All reconcilers of one run of the operator, and the links of the objects they watch to their owners."""

    def __init__(self, registry: OperatorRegistry, *, config: OperatorConfig, memo: Any = None,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self._registry = registry
        self._config = config
        self._memo = memo
        self._clock = clock
        self._context: APIContext | None = None
        self._gate: Gate | None = None
        self._reconcilers: dict[Resource, Reconciler] = {}
        self._owned = Links()
        self._related: dict[ReconcilingHandler, Links] = {}
        self._listings: dict[Hashable, Listing] = {}
        self._awaited: set[Hashable] = set()
        self._ready = asyncio.Event()
        self._ready.set()

    @property
    def active(self) -> bool:
        """Whether there are reconcile handlers at all."""
        return bool(self._registry.related_selectors) or any(True for _ in self._registry.iter_reconciling_handlers())

    # The start.

    async def check(self, *, context: APIContext, namespaces: Collection[str | None]) -> None:
        """
        Every resource that a reconcile handler owns or watches is served, and may be listed and watched.

        ``namespaces`` are those served (``None``: cluster-wide); namespace
        patterns cannot be checked before the namespaces are listed.
        """
        checked: set[tuple[Resource, str | None]] = set()
        for selector, handler in self._registry.iter_reconciling_handlers():
            for relation in handler.relations:
                option = 'owns' if relation.mapper is None else 'watches'
                try:
                    resource = await discovery.resolve(context=context, selector=relation.selector)
                except discovery.ResourceNotFoundError:
                    raise ReconciliationError(
                        f"{handler} of {selector} {option} {relation.name!r}, which the cluster does not serve: "
                        f"is the name spelled right, and its CRD installed? The operator cannot start without it."
                    ) from None
                except discovery.AmbiguousResourceError as e:
                    raise ReconciliationError(f"{handler} of {selector} {option} {relation.name!r}: {e}") from None
                for namespace in sorted(namespaces, key=str) if resource.namespaced else [None]:
                    if (resource, namespace) in checked:
                        continue
                    checked.add((resource, namespace))
                    denied = await access.denied_verbs(context=context, verbs=VERBS, group=resource.group,
                                                       resource=resource.plural, namespace=namespace)
                    if denied:
                        raise ReconciliationError(_forbidden(handler, selector, option, relation, resource,
                                                             namespace, denied))

    def serve(self, *, context: APIContext, gate: Gate | None) -> None:
        """The API session (fenced, with replicas) and the gate that the reconcilers use."""
        self._context = context
        self._gate = gate

    def stage(self, resource: Resource) -> Stage | None:
        """The stage of the handling cycle for a resource with reconcile handlers (one reconciler per resource)."""
        if not self._registry.has_reconciling_handlers(resource):
            return None
        reconciler = self._reconcilers.get(resource)
        if reconciler is None:
            assert self._context is not None, "serve() first"
            patcher = functools.partial(patch_object, context=self._context, resource=resource)
            reconciler = self._reconcilers[resource] = Reconciler(
                registry=self._registry, resource=resource, config=self._config, patcher=patcher,
                children=self.children, gate=self._gate, ready=self.ready, clock=self._clock)
            reconciler.start()
        return reconciler.stage

    def relates(self, resource: Resource) -> bool:
        """Whether reconcile handlers own or watch the resource's objects."""
        return any(selector.check(resource) for selector in self._registry.related_selectors)

    # Readiness: the first calls see the children of the start.

    def expect(self, listing: Hashable) -> None:
        """A stream of children will list at the start: the first calls wait for it (call before it starts)."""
        self._awaited.add(listing)
        self._ready.clear()

    def listed(self, listing: Hashable, resource: Resource) -> None:
        """A stream's listing is over: what it no longer lists is gone; the calls need not wait for it any more."""
        state = self._listings.get(listing)
        if state is not None:
            for uid in state.relisted():
                self._gone(resource, uid)
        self._done(listing)

    def forget(self, listing: Hashable) -> None:
        """A stream has stopped for good: it is not waited for."""
        self._listings.pop(listing, None)
        self._done(listing)

    def _done(self, listing: Hashable) -> None:
        self._awaited.discard(listing)
        if not self._awaited:
            self._ready.set()

    async def ready(self) -> None:
        await self._ready.wait()

    # The events of related resources.

    async def watched(self, stream: AsyncIterator[RawEvent], *, resource: Resource,
                      listing: Hashable) -> AsyncIterator[RawEvent]:
        """See every event of the stream, then pass it on."""
        state = self._listings.setdefault(listing, Listing())
        async for raw_event in stream:
            obj = raw_event.get('object') or {}
            uid = (obj.get('metadata') or {}).get('uid')
            if isinstance(uid, str):
                state.see(uid, raw_event.get('type'))
                await self.see(resource, raw_event)
            yield raw_event

    async def see(self, resource: Resource, raw_event: RawEvent) -> None:
        """One event of an object of a related resource: link it to its owners, and tell them."""
        obj: RawBody = raw_event.get('object') or {}
        meta = obj.get('metadata') or {}
        uid = str(meta.get('uid'))
        body = None if raw_event.get('type') == 'DELETED' else obj
        version = meta.get('resourceVersion')
        owners = self._owners_of(resource)
        if owners:
            kinds = set(owners)
            matched, others = owner_uids(obj, kinds) if body is not None else (frozenset(), [])
            if body is not None and not matched and others:
                logger.debug("%s is owned by %s, not by the resources that reconcile handlers own it for: "
                             "it is ignored.", Body(obj).describe(), ', '.join(others))
            self._relink(self._owned, resource, uid, body, matched, version=version,
                         targets=[target for group in owners.values() for target in group], by_name=False)
        for reconciler, handler, relation in self._watchers(resource):
            names = await self._map(handler, relation, obj) if body is not None else None
            links = self._related.setdefault(handler, Links())
            scoped = reconciler.resource.namespaced  # a cluster-scoped owner is named without a namespace
            linked = links.owners(resource, uid) if names is None else frozenset(
                f"{(namespace or '') if scoped else ''}/{name}" for namespace, name in names)
            self._relink(links, resource, uid, body, linked, version=version,
                         targets=[(reconciler, [handler.id])], by_name=True)

    def _gone(self, resource: Resource, uid: str) -> None:
        """An object that a re-opened stream does not list any more: gone while the stream was closed."""
        owners = self._owners_of(resource)
        targets = [target for group in owners.values() for target in group]
        self._relink(self._owned, resource, uid, None, frozenset(), version=None, targets=targets, by_name=False)
        for reconciler, handler, _ in self._watchers(resource):
            links = self._related.setdefault(handler, Links())
            self._relink(links, resource, uid, None, frozenset(), version=None,
                         targets=[(reconciler, [handler.id])], by_name=True)

    def _relink(self, links: Links, resource: Resource, uid: str, body: RawBody | None, owners: frozenset[str], *,
                version: Any, targets: list[tuple[Reconciler, list[HandlerId]]], by_name: bool) -> None:
        previous = links.body(resource, uid)
        before = links.owners(resource, uid)
        unchanged = (body is not None and previous is not None and before == owners and
                     (previous.get('metadata') or {}).get('resourceVersion') == version)
        affected = links.link(resource, uid, body, owners)
        if unchanged:
            return  # e.g. a listing of what was seen already: nothing for the owners to see
        child = (resource, uid)
        version_text = str(version) if version is not None and body is not None else None  # None: gone
        for owner in affected:
            for reconciler, handler_ids in targets:
                key = owner
                if by_name:
                    namespace, _, name = owner.partition('/')
                    key = reconciler.key_of(namespace or None, name) or ''
                if key:
                    reconciler.poke(key, handler_ids, child, version_text)

    def _owners_of(self, resource: Resource) -> dict[Kind, list[tuple[Reconciler, list[HandlerId]]]]:
        """The owner kinds whose reconcile handlers own this resource's objects, with their handlers."""
        result: dict[Kind, list[tuple[Reconciler, list[HandlerId]]]] = {}
        for owner, reconciler in self._reconcilers.items():
            ids = [handler.id for handler in reconciler.handlers
                   if any(relation.selector.check(resource) for relation in handler.owns)]
            if ids and owner.kind:
                result.setdefault((owner.group, owner.kind), []).append((reconciler, ids))
        return result

    def _watchers(self, resource: Resource) -> list[tuple[Reconciler, ReconcilingHandler, Relation]]:
        return [(reconciler, handler, relation)
                for reconciler in self._reconcilers.values() for handler in reconciler.handlers
                for relation in handler.watches if relation.selector.check(resource)]

    async def _map(self, handler: ReconcilingHandler, relation: Relation,
                   obj: RawBody) -> set[tuple[str | None, str]] | None:
        """The owners that the mapper names for a related object; ``None`` if it fails (the owners stay)."""
        assert relation.mapper is not None
        body = Body(obj)
        log = ObjectLogger(body=body)
        kwargs = {**invocation.body_kwargs(body), 'logger': log, 'memo': self._memo, 'param': handler.param}
        try:
            result = await invocation.invoke(relation.mapper, kwargs=kwargs,
                                             executor=self._config.execution.executor)
            return owner_names(result, namespace=body.metadata.namespace)
        except Exception as e:
            log.exception("The mapper of %s for %r has failed: %s; the owners it named before stay as they were.",
                          handler, relation.name, e)
            return None

    # What the handlers get.

    def children(self, key: str, body: Mapping[str, Any], handler: ReconcilingHandler) -> Children:
        """The objects linked to an owner, for one handler: by the names of its owns= and watches=."""
        owned = self._owned.linked(key)
        meta = body.get('metadata') or {}
        related = self._related.get(handler, Links()).linked(f"{meta.get('namespace') or ''}/{meta.get('name')}")
        items: dict[Hashable, list[RawBody]] = {}
        for relation in handler.relations:
            source = owned if relation.mapper is None else related
            items[relation.name] = [raw for resource, bodies in source.items() if relation.selector.check(resource)
                                    for raw in bodies]
        return Children(items)

    async def close(self) -> None:
        await asyncio.gather(*(reconciler.close() for reconciler in self._reconcilers.values()))


def _forbidden(handler: ReconcilingHandler, selector: Selector, option: str, relation: Relation,
               resource: Resource, namespace: str | None, denied: list[str]) -> str:
    where = f"in the namespace {namespace!r}" if namespace is not None else "cluster-wide"
    role = "a Role in that namespace (or a ClusterRole)" if namespace is not None else "a ClusterRole"
    verbs = ', '.join(f'"{verb}"' for verb in VERBS)
    return (f"{handler} of {selector} {option} {relation.name!r}, but the operator may not "
            f"{' and '.join(denied)} {resource.plural} {where}: grant it in {role} the rule "
            f"{{apiGroups: [\"{resource.group}\"], resources: [\"{resource.plural}\"], verbs: [{verbs}]}}.")
