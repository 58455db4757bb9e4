"""
Parent-child relations between objects: owner references, namespaces, names, labels.

Handlers that create children call ``kopf.adopt(child)``, so that Kubernetes
deletes the children together with their owner. Inside a handler, the owner
defaults to the object being handled. Every helper modifies the given
objects in place, before they are sent to the API: dicts, pykube-ng objects
(their ``.obj``), or any iterable of them. What a child already has is kept
unless ``forced=True``.
"""
from __future__ import annotations

import contextvars
import enum
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import Any, TypeAlias

from kopf.structs import dicts
from kopf.structs.typedefs import ObjectReference, OwnerReference

# The object being handled in the current context; set by the framework around every handler call.
owner_var: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar('kopf.owner')

Obj: TypeAlias = MutableMapping[str, Any] | Any  # a dict, or a pykube-ng object with a dict in ``.obj``
Objs: TypeAlias = Obj | Iterable[Obj]
NestedPaths: TypeAlias = str | Iterable[dicts.FieldSpec] | None


class _Unset(enum.Enum):
    token = enum.auto()


_UNSET = _Unset.token


def build_object_reference(body: Mapping[str, Any]) -> ObjectReference:
    """A reference to the object, as in Events' ``involvedObject``."""
    meta = body.get('metadata') or {}
    ref: ObjectReference = {
        'apiVersion': body.get('apiVersion', ''),
        'kind': body.get('kind', ''),
        'name': meta.get('name', ''),
        'uid': meta.get('uid', ''),
    }
    if meta.get('namespace') is not None:
        ref['namespace'] = meta['namespace']
    return ref


def build_owner_reference(
        body: Mapping[str, Any],
        *,
        controller: bool | None = True,
        block_owner_deletion: bool | None = True,
) -> OwnerReference:
    """An owner reference to the object; ``None`` flags are left out (the server's defaults apply)."""
    meta = body.get('metadata') or {}
    ref: OwnerReference = {
        'apiVersion': body.get('apiVersion', ''),
        'kind': body.get('kind', ''),
        'name': meta.get('name', ''),
        'uid': meta.get('uid', ''),
    }
    if controller is not None:
        ref['controller'] = controller
    if block_owner_deletion is not None:
        ref['blockOwnerDeletion'] = block_owner_deletion
    return ref


def append_owner_reference(
        objs: Objs,
        owner: Mapping[str, Any] | None = None,
        *,
        controller: bool | None = True,
        block_owner_deletion: bool | None = True,
) -> None:
    """Make the owner own the objects (once per owner), so that they are garbage-collected with it."""
    reference = build_owner_reference(_owner(owner), controller=controller, block_owner_deletion=block_owner_deletion)
    for obj in _each(objs):
        refs = obj.setdefault('metadata', {}).setdefault('ownerReferences', [])
        if not any(ref.get('uid') == reference['uid'] for ref in refs):
            refs.append(dict(reference))


def remove_owner_reference(objs: Objs, owner: Mapping[str, Any] | None = None) -> None:
    """Disown the objects: remove the owner's references (by its uid); others stay."""
    uid = build_owner_reference(_owner(owner))['uid']
    for obj in _each(objs):
        refs = (obj.get('metadata') or {}).get('ownerReferences')
        if refs:
            refs[:] = [ref for ref in refs if ref.get('uid') != uid]


def harmonize_naming(
        objs: Objs,
        name: str | _Unset | None = _UNSET,
        *,
        forced: bool = False,
        strict: bool = False,
) -> None:
    """
    Name the objects after the owner (by default, the object being handled).

    Normally, the name is a prefix: ``generateName: owner-``, so that several
    children get unique names from the server. With ``strict=True``, the
    exact ``name`` is used. Objects that have a name or a ``generateName``
    keep it, unless ``forced=True``.
    """
    if isinstance(name, _Unset):
        name = _owner(None).get('metadata', {}).get('name')
    if name is None:
        raise LookupError("The name must be given explicitly: there is none to take from the owner.")
    for obj in _each(objs):
        meta = obj.setdefault('metadata', {})
        if not forced and (meta.get('name') or meta.get('generateName')):
            continue
        meta.pop('name', None)
        meta.pop('generateName', None)
        if strict:
            meta['name'] = name
        else:
            meta['generateName'] = f"{name}-"


def adjust_namespace(
        objs: Objs,
        namespace: str | _Unset | None = _UNSET,
        *,
        forced: bool = False,
) -> None:
    """
    Put the objects into the owner's namespace (by default, of the object being handled).

    Objects with a namespace keep it, unless ``forced=True``. A ``None``
    namespace (a cluster-scoped owner) adds none, and with ``forced=True``
    removes the objects' own.
    """
    if isinstance(namespace, _Unset):
        namespace = _owner(None).get('metadata', {}).get('namespace')
    for obj in _each(objs):
        meta = obj.setdefault('metadata', {})
        if not forced and meta.get('namespace'):
            continue
        if namespace is None:
            if forced:
                meta.pop('namespace', None)
        else:
            meta['namespace'] = namespace


def label(
        objs: Objs,
        labels: Mapping[str, str | None] | _Unset | None = _UNSET,
        *,
        forced: bool = False,
        nested: NestedPaths = None,
        force: bool | None = None,
) -> None:
    """
    Add labels to the objects (by default, the labels of the object being handled).

    Existing values win unless ``forced`` (``force`` is its older spelling).
    ``nested`` are field paths inside the objects that hold objects of their
    own, e.g. ``'spec.template'`` of a Job or Deployment: they are labelled
    too where they exist.
    """
    forced = forced or bool(force)
    if labels is None or isinstance(labels, _Unset):
        labels = _owner(None).get('metadata', {}).get('labels') or {}
    for obj in _each(objs):
        for target in [obj, *_nested(obj, nested)]:
            existing = target.setdefault('metadata', {}).setdefault('labels', {})
            for key, value in labels.items():
                if forced or key not in existing:
                    existing[key] = value


def adopt(
        objs: Objs,
        owner: Mapping[str, Any] | None = None,
        *,
        forced: bool = False,
        strict: bool = False,
        nested: NestedPaths = None,
) -> None:
    """
    Prepare children for creation under their owner (by default, the object being handled).

    Adds the owner reference, puts the children into the owner's namespace,
    names them after the owner (``generateName``, or the exact name with
    ``strict=True``), and copies the owner's labels to them (and to the
    ``nested`` objects, e.g. ``'spec.template'``). What the children have
    already is kept, unless ``forced=True``.
    """
    owner = _owner(owner)
    meta = owner.get('metadata') or {}
    children = list(_each(objs))
    append_owner_reference(children, owner)
    harmonize_naming(children, meta.get('name'), forced=forced, strict=strict)
    adjust_namespace(children, meta.get('namespace'), forced=forced)
    label(children, meta.get('labels') or {}, forced=forced, nested=nested)


def _owner(owner: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if owner is not None:
        return owner
    try:
        return owner_var.get()
    except LookupError:
        raise LookupError("No owner given, and not inside a handler: pass owner=... explicitly.") from None


def _each(objs: Objs) -> Iterator[MutableMapping[str, Any]]:
    """The raw dicts to modify: of the object itself, or of every object of an iterable."""
    single = _raw(objs)
    if single is not None:
        yield single
        return
    if isinstance(objs, (str, bytes, Mapping)) or not isinstance(objs, Iterable):
        raise TypeError(_unsupported(objs))
    for obj in objs:
        raw = _raw(obj)
        if raw is None:
            raise TypeError(_unsupported(obj))
        yield raw


def _raw(obj: Any) -> MutableMapping[str, Any] | None:
    if isinstance(obj, MutableMapping):
        return obj
    inner = getattr(obj, 'obj', None)  # pykube-ng objects keep their raw dict here
    if isinstance(inner, MutableMapping):
        return inner
    return None


def _unsupported(obj: Any) -> str:
    return (f"Cannot modify a {type(obj).__name__}: pass a dict, a pykube-ng object, or a list of them "
            f"(read-only bodies such as kopf.Body cannot be changed; copy them into a dict first).")


def _nested(obj: MutableMapping[str, Any], nested: NestedPaths) -> list[MutableMapping[str, Any]]:
    if nested is None:
        return []
    paths = [nested] if isinstance(nested, str) else list(nested)
    targets: list[MutableMapping[str, Any]] = []
    for path in paths:
        target = dicts.resolve(obj, path, None)
        if isinstance(target, MutableMapping):
            targets.append(target)
    return targets
