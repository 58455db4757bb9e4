"""
Sending the accumulated merge-patch, and noticing what the server dropped.

Two facts of Kubernetes make patches fail silently: with the ``status``
subresource, the main endpoint ignores ``.status`` (and ``/status`` ignores
everything else); and structural schemas prune unknown fields without an
error. The first is handled by splitting the patch; the second by comparing
the server's answer with what was sent and warning loudly — a silently lost
field here is exactly how handler progress used to vanish.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any, TypeAlias

from kopf.clients.errors import APINotFoundError
from kopf.clients.session import APIContext
from kopf.structs.dicts import FieldPath, format_field
from kopf.structs.resources import Resource

Logger: TypeAlias = 'logging.Logger | logging.LoggerAdapter[Any]'

MERGE_PATCH = 'application/merge-patch+json'

# Fields that change on every write by design; the server never echoes the sent value.
_VOLATILE_PATHS: frozenset[FieldPath] = frozenset({('metadata', 'resourceVersion')})

_MISSING = object()


async def patch_obj(
        *,
        context: APIContext,
        resource: Resource,
        namespace: str | None,
        name: str,
        patch: Mapping[str, Any],
        logger: Logger | None = None,
) -> dict[str, Any] | None:
    """
    Apply a JSON merge-patch to an object; return the object as the server has it now.

    With a status subresource, the main part goes to the object and the
    ``status`` part to ``/status``, in this order, each only if non-empty.
    Returns ``None`` if the object is gone (404), or if the patch is empty
    (nothing is sent then). Conflicts, invalid patches and other errors are
    raised as typed API errors: the caller keeps its patch and retries.
    """
    log: Logger = logger if logger is not None else logging.getLogger(__name__)
    parts: list[tuple[str | None, dict[str, Any]]] = []
    if 'status' in resource.subresources:
        main = {key: value for key, value in patch.items() if key != 'status'}
        status = patch.get('status')
        if main:
            parts.append((None, main))
        if status is not None and status != {}:
            parts.append(('status', {'status': status}))
    elif patch:
        parts.append((None, dict(patch)))

    result: dict[str, Any] | None = None
    dropped: list[str] = []
    for subresource, body in parts:
        url = resource.get_url(server=context.server, namespace=namespace, name=name, subresource=subresource)
        try:
            result = await context.request('PATCH', url, json=body, headers={'Content-Type': MERGE_PATCH})
        except APINotFoundError:
            log.debug("Cannot patch %s %r: it is gone.", resource, name)
            return None
        dropped.extend(format_field(path) for path in find_dropped(body, result if isinstance(result, dict) else {}))

    if dropped:
        where = f"{namespace}/{name}" if namespace else name
        log.warning(
            "The server dropped some patched fields of %s %s: %s. "
            "The resource's schema prunes these fields: add `x-kubernetes-preserve-unknown-fields: true` "
            "to the status schema, or keep the progress in annotations "
            "(the default kopf.SmartProgressStorage, or kopf.AnnotationsProgressStorage).",
            resource.kind or resource.plural, where, ', '.join(dropped))
    return result if isinstance(result, dict) else None


def find_dropped(sent: Mapping[str, Any], received: Mapping[str, Any]) -> list[FieldPath]:
    """
    The paths of the sent values that the server did not keep.

    Dicts are walked; lists and scalars are leaves and must come back equal.
    A ``None`` sent means "delete", so the key must be absent in the answer.
    Empty lists and dicts may come back absent: the server omits them.
    """
    return list(_walk(sent, received, ()))


def _walk(sent: Mapping[str, Any], received: Any, path: FieldPath) -> Iterator[FieldPath]:
    for key, value in sent.items():
        subpath = path + (key,)
        if subpath in _VOLATILE_PATHS:
            continue
        actual = received.get(key, _MISSING) if isinstance(received, Mapping) else _MISSING
        if value is None:
            if actual is not _MISSING and actual is not None:
                yield subpath
        elif isinstance(value, Mapping):
            yield from _walk(value, actual, subpath)
        elif actual is _MISSING and value == []:
            continue
        elif actual is _MISSING or actual != value:
            yield subpath
