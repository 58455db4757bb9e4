"""
Asking the API server what the operator's own credentials may do.

A ``SelfSubjectAccessReview`` answers "may I <verb> <resource> in <namespace>?"
without trying it, so that a missing permission is reported at start with
its verb and resource, instead of on the first use, which for some verbs
comes only much later. Every authenticated user may ask this by default.
"""
from __future__ import annotations

from collections.abc import Iterable

from kopf._kube.auth import APIContext
from kopf._kube.errors import APIConnectionError, APIError

REVIEWS = '/apis/authorization.k8s.io/v1/selfsubjectaccessreviews'


async def is_allowed(
        *,
        context: APIContext,
        verb: str,
        group: str,
        resource: str,
        namespace: str | None,
        timeout: float | None = None,
) -> bool | None:
    """Whether the verb is allowed; ``None`` if the server cannot tell (e.g. the review API is off limits)."""
    attributes = {'verb': verb, 'group': group, 'resource': resource}
    if namespace is not None:
        attributes['namespace'] = namespace
    body = {'apiVersion': 'authorization.k8s.io/v1', 'kind': 'SelfSubjectAccessReview',
            'spec': {'resourceAttributes': attributes}}
    try:
        review = await context.request('POST', REVIEWS, json=body, timeout=timeout)
    except (APIError, APIConnectionError):
        return None
    status = (review or {}).get('status') or {}
    allowed = status.get('allowed')
    return bool(allowed) if isinstance(allowed, bool) else None


async def denied_verbs(
        *,
        context: APIContext,
        verbs: Iterable[str],
        group: str,
        resource: str,
        namespace: str | None,
        timeout: float | None = None,
) -> list[str]:
    """The verbs that the server says are denied (unknown answers are not counted as denials)."""
    denied: list[str] = []
    for verb in verbs:
        allowed = await is_allowed(context=context, verb=verb, group=group, resource=resource,
                                   namespace=namespace, timeout=timeout)
        if allowed is False:
            denied.append(verb)
    return denied
