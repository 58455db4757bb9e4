"""
The cluster's admission webhook configurations that the operator manages.

The API server calls webhooks only if a ``ValidatingWebhookConfiguration`` or
``MutatingWebhookConfiguration`` lists them. A managed configuration belongs
wholly to the operator: its list of webhooks is replaced as a whole, and the
object is deleted when no webhooks are left in it -- a configuration whose
server is gone would otherwise block every matching request in the cluster.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kopf._kube.auth import APIContext
from kopf._kube.errors import APIConflictError, APINotFoundError
from kopf._structs.reviews import WebhookType

API_VERSION = 'admissionregistration.k8s.io/v1'
MERGE_PATCH = 'application/merge-patch+json'

_KINDS: dict[WebhookType, tuple[str, str]] = {
    WebhookType.VALIDATING: ('validatingwebhookconfigurations', 'ValidatingWebhookConfiguration'),
    WebhookType.MUTATING: ('mutatingwebhookconfigurations', 'MutatingWebhookConfiguration'),
}


def kind_of(type: WebhookType) -> str:
    """The kind of the configuration object for webhooks of this type."""
    return _KINDS[type][1]


def collection_path(type: WebhookType) -> str:
    return f'/apis/{API_VERSION}/{_KINDS[type][0]}'


def object_path(type: WebhookType, name: str) -> str:
    return f'{collection_path(type)}/{name}'


async def read_configuration(*, context: APIContext, type: WebhookType, name: str) -> Mapping[str, Any] | None:
    """The configuration as the server has it, or ``None`` if there is none."""
    try:
        obj = await context.request('GET', object_path(type, name))
    except APINotFoundError:
        return None
    return obj if isinstance(obj, Mapping) else None


async def apply_configuration(
        *,
        context: APIContext,
        type: WebhookType,
        name: str,
        webhooks: Sequence[Mapping[str, Any]],
        annotations: Mapping[str, str] | None = None,
) -> None:
    """
    Make the configuration hold exactly these webhooks: create, replace, or delete it.

    An empty list deletes the object (if it exists), so that no webhook of a
    stopped server, or of handlers that no longer exist, stays behind.
    ``annotations`` are set too (others are kept).
    """
    if not webhooks:
        await delete_configuration(context=context, type=type, name=name)
        return
    patch: dict[str, Any] = {'webhooks': [dict(webhook) for webhook in webhooks]}
    if annotations:
        patch['metadata'] = {'annotations': dict(annotations)}
    try:
        await context.request('PATCH', object_path(type, name), json=patch, headers={'Content-Type': MERGE_PATCH})
        return
    except APINotFoundError:
        pass
    body = {'apiVersion': API_VERSION, 'kind': kind_of(type), **patch,
            'metadata': {'name': name, **({'annotations': dict(annotations)} if annotations else {})}}
    try:
        await context.request('POST', collection_path(type), json=body)
    except APIConflictError:  # created by someone else meanwhile, e.g. another replica: ours wins
        await context.request('PATCH', object_path(type, name), json=patch, headers={'Content-Type': MERGE_PATCH})


async def delete_configuration(*, context: APIContext, type: WebhookType, name: str) -> bool:
    """Delete the configuration; ``False`` if there was none."""
    try:
        await context.request('DELETE', object_path(type, name))
    except APINotFoundError:
        return False
    return True
