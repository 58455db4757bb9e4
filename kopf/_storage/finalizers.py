"""
The operator's finalizer: it holds an object's deletion until our delete handlers are done.

A merge-patch replaces lists as a whole, so adding or removing our finalizer
means sending the full list, including other controllers' finalizers. To not
lose a finalizer that another controller adds at the same moment, the patch
also carries the ``resourceVersion`` that the list was computed from: the
server then rejects the patch with 409 Conflict instead of overwriting a newer
list, and the framework retries with the fresh object.
"""
from __future__ import annotations

from kopf._structs.bodies import Body
from kopf._structs.patches import Patch


def is_deletion_ongoing(body: Body) -> bool:
    """Whether the object is marked for deletion and waits for its finalizers."""
    return body.metadata.deletion_timestamp is not None


def is_deletion_blocked(body: Body, finalizer: str) -> bool:
    """Whether our finalizer is among the object's finalizers (as the patch will leave them)."""
    return finalizer in body.metadata.finalizers


def block_deletion(*, body: Body, patch: Patch, finalizer: str) -> None:
    """Add our finalizer, keeping all others, if it is not there yet."""
    current = _current(body, patch)
    if finalizer not in current:
        _set(body, patch, current + [finalizer])


def allow_deletion(*, body: Body, patch: Patch, finalizer: str) -> None:
    """Remove our finalizer, keeping all others, if it is there."""
    current = _current(body, patch)
    if finalizer in current:
        _set(body, patch, [f for f in current if f != finalizer])


def _current(body: Body, patch: Patch) -> list[str]:
    """The list as it would be after the patch: an earlier change in this patch wins."""
    pending = patch.meta.get('finalizers')
    return list(pending) if isinstance(pending, list) else list(body.metadata.finalizers)


def _set(body: Body, patch: Patch, finalizers: list[str]) -> None:
    patch.meta['finalizers'] = finalizers
    if body.metadata.resource_version is not None:
        patch.meta['resourceVersion'] = body.metadata.resource_version
