"""
The values of labels: few and stable, so that the number of series stays bounded.

A resource is ``plural.group`` (``plural`` for the core group); an API
request is its Kubernetes verb (``LIST``, ``WATCH``, ``GET``, ``PATCH``, ...)
and the resource of its path. Names of objects and namespaces in paths never
become labels: objects are many, resources are few.
"""
from __future__ import annotations

import urllib.parse

from kopf._structs.resources import Resource, Selector

# Path segments that say what is asked of the server itself, not of a resource.
_DISCOVERY = 'discovery'


def resource_label(resource: Resource | Selector | None) -> str:
    """``plural.group``, or ``plural`` for the core API group; ``''`` for none; a selector as it names itself."""
    if resource is None:
        return ''
    if not resource.plural:
        return str(resource)
    return f"{resource.plural}.{resource.group}" if resource.group else resource.plural


def request_labels(method: str, url: str) -> tuple[str, str]:
    """
    The Kubernetes verb and the resource of a request, from its method and URL.

    ``GET`` of a collection is ``LIST``, with ``watch=true`` ``WATCH``; the
    resource is ``plural.group`` (``plural/subresource`` for subresources);
    anything that is not a resource's path (``/api``, ``/apis/group``,
    ``/version``, ...) is ``discovery``.
    """
    parsed = urllib.parse.urlsplit(url)
    resource, named = _resource_of_path(parsed.path)
    verb = method.upper()
    if verb == 'GET' and not named and resource != _DISCOVERY:
        query = parsed.query
        verb = 'WATCH' if 'watch=true' in query or 'watch=1' in query else 'LIST'
    return verb, resource


def _resource_of_path(path: str) -> tuple[str, bool]:
    """The resource of an API path and whether it addresses one object (not the collection)."""
    parts = [part for part in path.split('/') if part]
    if len(parts) >= 2 and parts[0] == 'api':
        group, rest = '', parts[2:]
    elif len(parts) >= 3 and parts[0] == 'apis':
        group, rest = parts[1], parts[3:]
    else:
        return _DISCOVERY, False
    if len(rest) >= 3 and rest[0] == 'namespaces':
        rest = rest[2:]  # a namespaced resource; a bare /namespaces/NAME is the namespace itself
    if not rest:
        return _DISCOVERY, False
    plural = rest[0]
    label = f"{plural}.{group}" if group else plural
    if len(rest) >= 3:
        label = f"{label}/{rest[2]}"
    return label, len(rest) >= 2
