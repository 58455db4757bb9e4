"""
Parent-child relations between objects: owner references, namespaces, names, labels.

Handlers that create children call ``kopf.adopt(child)``, so that Kubernetes
deletes the children together with their owner. Inside a handler, the owner
defaults to the object being handled.
"""
from __future__ import annotations

import contextvars
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any

# The object being handled in the current context; set by the framework around every handler call.
owner_var: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar('kopf.owner')

Objs = MutableMapping[str, Any] | Iterable[MutableMapping[str, Any]]


def _each(objs: Objs) -> list[MutableMapping[str, Any]]:
    return [objs] if isinstance(objs, MutableMapping) else list(objs)


def _owner(owner: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if owner is not None:
        return owner
    try:
        return owner_var.get()
    except LookupError:
        raise LookupError("No owner given, and not inside a handler: pass owner=... explicitly.") from None


def append_owner_reference(objs: Objs, owner: Mapping[str, Any] | None = None, *,
                           controller: bool = True, block_owner_deletion: bool = True) -> None:
    """Make the owner own the objects (once), so that they are garbage-collected with it."""
    owner = _owner(owner)
    meta = owner.get('metadata', {})
    reference = {
        'apiVersion': owner.get('apiVersion'),
        'kind': owner.get('kind'),
        'name': meta.get('name'),
        'uid': meta.get('uid'),
        'controller': controller,
        'blockOwnerDeletion': block_owner_deletion,
    }
    for obj in _each(objs):
        refs = obj.setdefault('metadata', {}).setdefault('ownerReferences', [])
        if not any(ref.get('uid') == reference['uid'] for ref in refs):
            refs.append(dict(reference))


def label(objs: Objs, labels: Mapping[str, str], *, forced: bool = False) -> None:
    """Add labels to the objects; existing values win unless ``forced``."""
    for obj in _each(objs):
        existing = obj.setdefault('metadata', {}).setdefault('labels', {})
        for key, value in labels.items():
            if forced or key not in existing:
                existing[key] = value


def adopt(objs: Objs, owner: Mapping[str, Any] | None = None, *, nested: Iterable[str] = ()) -> None:
    """
    Prepare children for creation under their owner.

    Adds the owner reference, puts the children into the owner's namespace
    (unless they have one), names them after the owner (``generateName``)
    unless they have a name, and copies the owner's labels to them (also to
    the ``nested`` field paths, e.g. ``spec.template``, for pods of a job).
    """
    owner = _owner(owner)
    meta = owner.get('metadata', {})
    append_owner_reference(objs, owner)
    for obj in _each(objs):
        obj_meta = obj.setdefault('metadata', {})
        if meta.get('namespace') and 'namespace' not in obj_meta:
            obj_meta['namespace'] = meta['namespace']
        if 'name' not in obj_meta and 'generateName' not in obj_meta:
            obj_meta['generateName'] = f"{meta.get('name')}-"
        owner_labels = meta.get('labels') or {}
        label(obj, owner_labels)
        for path in nested:
            target: Any = obj
            for key in path.split('.'):
                target = target.setdefault(key, {})
            label(target, owner_labels)
