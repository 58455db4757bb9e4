"""
The ``coordination.k8s.io/v1`` Lease API: the records replicas coordinate through.

A Lease is a small object whose ``spec`` says who holds it and for how long
(``holderIdentity``, ``leaseDurationSeconds``, ``renewTime``); replicas renew
their Leases by replacing them with the ``resourceVersion`` they last saw,
so that of two concurrent writers exactly one succeeds and the other gets a
``409 Conflict``. Everything here is one request (or the format of a Lease's
fields); what the records mean is decided in :mod:`kopf._replicas.election`
and :mod:`kopf._replicas.sharding`.
"""
from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from kopf._kube.auth import APIContext
from kopf._kube.errors import APIConflictError, APINotFoundError

GROUP = 'coordination.k8s.io'
VERSION = 'v1'
PLURAL = 'leases'
RESOURCE = f'{PLURAL}.{GROUP}'  # as RBAC rules and error messages name it


@dataclasses.dataclass(frozen=True)
class LeaseSpec:
    """What a Lease says: who holds it, since when, and for how long after the last renewal."""

    holder: str | None = None
    duration: int | None = None  # leaseDurationSeconds
    acquired: str | None = None  # acquireTime, informative only: clocks of machines differ
    renewed: str | None = None  # renewTime, informative only
    transitions: int = 0  # leaseTransitions: how often the holder has changed

    def to_json(self) -> dict[str, Any]:
        spec: dict[str, Any] = {'leaseTransitions': self.transitions}
        if self.holder is not None:
            spec['holderIdentity'] = self.holder
        if self.duration is not None:
            spec['leaseDurationSeconds'] = self.duration
        if self.acquired is not None:
            spec['acquireTime'] = self.acquired
        if self.renewed is not None:
            spec['renewTime'] = self.renewed
        return spec

    @classmethod
    def from_json(cls, spec: Mapping[str, Any]) -> LeaseSpec:
        duration = spec.get('leaseDurationSeconds')
        return cls(
            holder=spec.get('holderIdentity') or None,
            duration=int(duration) if duration is not None else None,
            acquired=spec.get('acquireTime'),
            renewed=spec.get('renewTime'),
            transitions=int(spec.get('leaseTransitions') or 0),
        )


@dataclasses.dataclass(frozen=True)
class Lease:
    """One Lease as the server has it, with the version needed to replace or delete it."""

    namespace: str
    name: str
    resource_version: str
    spec: LeaseSpec
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Lease:
        meta = obj.get('metadata') or {}
        return cls(
            namespace=str(meta.get('namespace') or ''),
            name=str(meta.get('name') or ''),
            resource_version=str(meta.get('resourceVersion') or ''),
            spec=LeaseSpec.from_json(obj.get('spec') or {}),
            labels=dict(meta.get('labels') or {}),
            annotations=dict(meta.get('annotations') or {}),
        )


def microtime(moment: datetime.datetime) -> str:
    """A time (timezone-aware) in the ``MicroTime`` format of Lease fields."""
    return moment.astimezone(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%S.%fZ')


def parse_microtime(value: str | None) -> datetime.datetime | None:
    """A Lease field's time, timezone-aware (UTC if it says none); ``None`` if absent or malformed."""
    if not value:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value.replace('Z', '+00:00'))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=datetime.timezone.utc)


def _collection(namespace: str) -> str:
    return f'/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}'


def _body(
        *,
        namespace: str,
        name: str,
        spec: LeaseSpec,
        labels: Mapping[str, str] | None,
        annotations: Mapping[str, str] | None,
        resource_version: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {'name': name, 'namespace': namespace}
    if resource_version is not None:
        meta['resourceVersion'] = resource_version
    if labels:
        meta['labels'] = dict(labels)
    if annotations:
        meta['annotations'] = dict(annotations)
    return {'apiVersion': f'{GROUP}/{VERSION}', 'kind': 'Lease', 'metadata': meta, 'spec': spec.to_json()}


async def read_lease(
        *,
        context: APIContext,
        namespace: str,
        name: str,
        timeout: float | None = None,
) -> Lease | None:
    """The Lease, or ``None`` if there is none of this name (a ``get``)."""
    try:
        obj = await context.request('GET', f'{_collection(namespace)}/{name}', timeout=timeout)
    except APINotFoundError:
        return None
    return Lease.from_json(obj or {})


async def list_leases(
        *,
        context: APIContext,
        namespace: str,
        labels: Mapping[str, str],
        timeout: float | None = None,
) -> list[Lease]:
    """The Leases with these labels, as of now (a ``list`` read from the quorum, never from a cache)."""
    selector = ','.join(f'{key}={value}' for key, value in sorted(labels.items()))
    document = await context.request('GET', _collection(namespace), params={'labelSelector': selector},
                                     timeout=timeout)
    items = (document or {}).get('items') or []
    return [Lease.from_json(item) for item in items if isinstance(item, Mapping)]


async def create_lease(
        *,
        context: APIContext,
        namespace: str,
        name: str,
        spec: LeaseSpec,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        timeout: float | None = None,
) -> Lease:
    """Create a Lease (a ``create``); a ``409`` (``APIConflictError``) means it exists already."""
    body = _body(namespace=namespace, name=name, spec=spec, labels=labels, annotations=annotations)
    obj = await context.request('POST', _collection(namespace), json=body, timeout=timeout)
    return Lease.from_json(obj or {})


async def replace_lease(
        *,
        lease: Lease,
        context: APIContext,
        spec: LeaseSpec,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        timeout: float | None = None,
) -> Lease:
    """
    Replace a Lease as last seen (an ``update``): a ``409`` means someone else has changed it meanwhile.

    Labels and annotations are replaced too; ``None`` keeps the seen ones.
    """
    body = _body(namespace=lease.namespace, name=lease.name, spec=spec, resource_version=lease.resource_version,
                 labels=lease.labels if labels is None else labels,
                 annotations=lease.annotations if annotations is None else annotations)
    obj = await context.request('PUT', f'{_collection(lease.namespace)}/{lease.name}', json=body, timeout=timeout)
    return Lease.from_json(obj or {})


async def delete_lease(
        *,
        lease: Lease,
        context: APIContext,
        timeout: float | None = None,
) -> bool:
    """
    Delete a Lease as last seen (a ``delete``), but not if it has changed since: that is a ``409``.

    Returns whether it was deleted by this call (``False`` if it was gone already).
    """
    body = {'apiVersion': 'v1', 'kind': 'DeleteOptions',
            'preconditions': {'resourceVersion': lease.resource_version}}
    try:
        await context.request('DELETE', f'{_collection(lease.namespace)}/{lease.name}', json=body, timeout=timeout)
    except APINotFoundError:
        return False
    return True


T = TypeVar('T')


async def on_own_lease(
        lease: Lease,
        action: Callable[[Lease], Awaitable[T]],
        *,
        context: APIContext,
        timeout: float | None = None,
        attempts: int = 3,
) -> T | None:
    """
    Do something to our Lease as last seen, or to its fresh version if only its holder's own write changed it.

    A write whose answer never came (a renewal cut short by the operator's
    stop) has changed the Lease on the server, not in our memory: the server
    then refuses the next write with ``409``. If the fresh Lease has the same
    holder, the change was ours, and the action is done again on the fresh
    one. ``None`` if the Lease is gone; the ``409`` is raised if the Lease
    has another holder now, or keeps changing.
    """
    for attempt in range(1, attempts + 1):
        try:
            return await action(lease)
        except APIConflictError:
            fresh = await read_lease(context=context, namespace=lease.namespace, name=lease.name, timeout=timeout)
            if fresh is None:
                return None
            if fresh.spec.holder != lease.spec.holder or attempt == attempts:
                raise
            lease = fresh
    return None
