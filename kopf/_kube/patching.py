"""
Sending the accumulated merge-patch, and noticing what the server dropped.

Two facts of Kubernetes make patches fail silently: with the ``status``
subresource, the main endpoint ignores ``.status`` (and ``/status`` ignores
everything else); and structural schemas prune unknown fields without an
error. The first is handled by splitting the patch; the second by comparing
the server's answer with what was sent and warning loudly — a silently lost
field here is exactly how handler progress used to vanish.

The transformation functions of a patch (``patch.fns``) are applied to the
freshest body after the merge-patch; their difference goes as a JSON patch
that first tests the object's ``resourceVersion``, so that a concurrent
change is never overwritten: the object is read again and the functions
are applied to it anew.
"""
from __future__ import annotations

import copy
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from kopf._kube import fetching
from kopf._kube.errors import APIConflictError, APINotFoundError, APIUnprocessableError
from kopf._kube.session import APIContext
from kopf._structs.dicts import FieldPath, format_field
from kopf._structs.resources import Resource
from kopf._structs.typedefs import Logger, PatchFn

MERGE_PATCH = 'application/merge-patch+json'
JSON_PATCH = 'application/json-patch+json'

# How often the transformation functions are applied to a fresher body when the object keeps changing.
TRANSFORM_ATTEMPTS = 5


class TransformationError(Exception):
    """A transformation function of ``patch.fns`` has failed; the message names it and what it raised."""


class TransformationConflict(Exception):
    """The object kept changing while the transformation functions' JSON patch was sent; nothing was stored."""

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
        fns: Sequence[PatchFn] = (),
        body: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """
    Apply a JSON merge-patch to an object; return the object as the server has it now.

    With a status subresource, the ``status`` part goes to ``/status`` and
    then the main part to the object, each only if non-empty: what concludes
    a cause (the diff-base, the progress in annotations) lands last.
    Returns ``None`` if the object is gone (404), or if the patch is empty
    (nothing is sent then). Conflicts, invalid patches and other errors are
    raised as typed API errors: the caller keeps its patch and retries.

    ``fns`` (the patch's transformation functions) are applied then (see
    :func:`transform_obj`) to the object as the merge-patch has left it, or
    to ``body`` (the freshest known object; read if not given) if there is
    no merge-patch.
    """
    sent, result = await _merge_patch(context=context, resource=resource, namespace=namespace, name=name,
                                      patch=patch, logger=logger)
    if not fns or (sent and result is None):  # no functions, or the object is gone
        return result
    return await transform_obj(context=context, resource=resource, namespace=namespace, name=name,
                               fns=fns, body=result if sent else body, logger=logger)


async def transform_obj(
        *,
        context: APIContext,
        resource: Resource,
        namespace: str | None,
        name: str,
        fns: Sequence[PatchFn],
        body: Mapping[str, Any] | None = None,
        logger: Logger | None = None,
        attempts: int = TRANSFORM_ATTEMPTS,
) -> dict[str, Any] | None:
    """
    Apply transformation functions to the freshest body and send the difference as a JSON patch.

    Every function gets one deep copy of the body (the given one, else the
    object as read now) and mutates it in place. The difference goes as a
    JSON patch that tests the body's ``resourceVersion`` first (main and
    ``/status`` parts apart, if the resource has the status subresource).
    If the object has changed meanwhile, it is read again and the functions
    are applied anew, up to ``attempts`` times (then
    :class:`TransformationConflict`). Returns the object as the server has
    it now (``None`` if it is gone); a function that raises is reported as
    :class:`TransformationError`, and nothing is sent.
    """
    log: Logger = logger if logger is not None else logging.getLogger(__name__)
    fresh: Mapping[str, Any] | None = body
    for _ in range(attempts):
        if fresh is None:
            fresh = await fetching.read_obj(context=context, resource=resource, namespace=namespace, name=name)
            if fresh is None:
                return None
        operations = _transformed(fresh, fns)
        if not operations:
            return dict(fresh)
        try:
            return await _send_operations(context=context, resource=resource, namespace=namespace, name=name,
                                          operations=operations, version=_version(fresh), logger=log)
        except (APIConflictError, APIUnprocessableError) as e:
            seen = _version(fresh)
            fresh = await fetching.read_obj(context=context, resource=resource, namespace=namespace, name=name)
            if fresh is None:
                return None
            if _version(fresh) == seen:
                raise  # not a change meanwhile: the server refuses the changes themselves
            log.debug("The object has changed meanwhile (%s); applying the transformation functions anew.", e)
    raise TransformationConflict(f"The object has kept changing while the changes of the transformation "
                                 f"functions (patch.fns) were sent: {attempts} attempts.")


def _transformed(body: Mapping[str, Any], fns: Sequence[PatchFn]) -> list[dict[str, Any]]:
    """The JSON patch operations that the functions make of a deep copy of the body."""
    import jsonpatch  # only operators with transformation functions need it

    changed = copy.deepcopy(dict(body))
    for fn in fns:
        try:
            fn(changed)
        except Exception as e:
            name = getattr(fn, '__qualname__', None) or getattr(fn, '__name__', None) or repr(fn)
            raise TransformationError(f"The transformation function {name} of patch.fns has failed: "
                                      f"{type(e).__name__}: {e}.") from e
    operations: list[dict[str, Any]] = jsonpatch.make_patch(dict(body), changed).patch
    return operations


def _version(body: Mapping[str, Any]) -> str | None:
    version = (body.get('metadata') or {}).get('resourceVersion')
    return str(version) if version is not None else None


async def _send_operations(
        *,
        context: APIContext,
        resource: Resource,
        namespace: str | None,
        name: str,
        operations: list[dict[str, Any]],
        version: str | None,
        logger: Logger,
) -> dict[str, Any] | None:
    """Send the operations, each part tested against the object's version as it was when they were made."""
    parts: list[tuple[str | None, list[dict[str, Any]]]] = []
    if 'status' in resource.subresources:
        main = [op for op in operations if not _touches_status(op)]
        status = [op for op in operations if _touches_status(op)]
        parts = [(subresource, ops) for subresource, ops in ((None, main), ('status', status)) if ops]
    else:
        parts = [(None, operations)]
    result: dict[str, Any] | None = None
    for subresource, ops in parts:
        test = [{'op': 'test', 'path': '/metadata/resourceVersion', 'value': version}] if version else []
        url = resource.get_url(server=context.server, namespace=namespace, name=name, subresource=subresource)
        try:
            answer = await context.request('PATCH', url, json=[*test, *ops], headers={'Content-Type': JSON_PATCH})
        except APINotFoundError:
            logger.debug("Cannot patch %s %r: it is gone.", resource, name)
            return None
        result = answer if isinstance(answer, dict) else None
        version = _version(result) if result is not None else None  # the next part follows our own change
    return result


def _touches_status(operation: Mapping[str, Any]) -> bool:
    paths = [str(operation.get('path', '')), str(operation.get('from', ''))]
    return any(path == '/status' or path.startswith('/status/') for path in paths)


async def _merge_patch(
        *,
        context: APIContext,
        resource: Resource,
        namespace: str | None,
        name: str,
        patch: Mapping[str, Any],
        logger: Logger | None = None,
) -> tuple[bool, dict[str, Any] | None]:
    """Whether anything was sent, and the object as the server has it now (``None``: gone, or nothing sent)."""
    log: Logger = logger if logger is not None else logging.getLogger(__name__)
    parts: list[tuple[str | None, dict[str, Any]]] = []
    if 'status' in resource.subresources:
        # The status first, the rest last: the main part carries the diff-base and the progress in
        # annotations, so once they are visible, so are the handlers' results (a crash in between
        # re-runs handlers rather than losing what they returned).
        main = {key: value for key, value in patch.items() if key != 'status'}
        status = patch.get('status')
        if status is not None and status != {}:
            parts.append(('status', {'status': status}))
        if main:
            parts.append((None, main))
    elif len(patch):  # not bool(): a Patch with transformation functions only is true, but has nothing to merge
        parts.append((None, dict(patch)))

    result: dict[str, Any] | None = None
    dropped: list[str] = []
    for subresource, body in parts:
        url = resource.get_url(server=context.server, namespace=namespace, name=name, subresource=subresource)
        try:
            result = await context.request('PATCH', url, json=body, headers={'Content-Type': MERGE_PATCH})
        except APINotFoundError:
            log.debug("Cannot patch %s %r: it is gone.", resource, name)
            return True, None
        dropped.extend(format_field(path) for path in find_dropped(body, result if isinstance(result, dict) else {}))

    if dropped:
        where = f"{namespace}/{name}" if namespace else name
        log.warning(
            "The server dropped some patched fields of %s %s: %s. "
            "The resource's schema prunes these fields: add `x-kubernetes-preserve-unknown-fields: true` "
            "to the status schema, or keep the progress in annotations "
            "(the default kopf.SmartProgressStorage, or kopf.AnnotationsProgressStorage).",
            resource.kind or resource.plural, where, ', '.join(dropped))
    return bool(parts), result if isinstance(result, dict) else None


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
