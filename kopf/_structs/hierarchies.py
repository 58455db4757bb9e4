"""
Parent-child relations between objects: owner references, namespaces, names, labels.

Handlers that create children call ``kopf.adopt(child)``, so that Kubernetes
deletes the children together with their owner. Inside a handler, the owner
defaults to the object being handled. Every helper modifies the given
objects in place, before they are sent to the API: dicts, pykube-ng objects
(their ``.obj``), models of the official ``kubernetes`` and
``kubernetes_asyncio`` clients (their attributes, with nested models and
owner references of the client's own types), or any iterable of them. What
a child already has is kept unless ``forced=True``.
"""
from __future__ import annotations

import contextvars
import enum
import re
import sys
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import Any, TypeAlias

from kopf._structs import dicts
from kopf._structs.typedefs import ObjectReference, OwnerReference

# The object being handled in the current context; set by the framework around every handler call.
owner_var: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar('kopf.owner')

# A dict, a pykube-ng object (with a dict in ``.obj``), or a model of the official clients.
Obj: TypeAlias = MutableMapping[str, Any] | Any
Objs: TypeAlias = Obj | Iterable[Obj]
Owner: TypeAlias = Mapping[str, Any] | Any
NestedPaths: TypeAlias = str | Iterable[dicts.FieldSpec] | None


class _Unset(enum.Enum):
    token = enum.auto()


_UNSET = _Unset.token


def _identity(body: Mapping[str, Any]) -> OwnerReference:
    """What both kinds of references say of the object: its kind and its identity."""
    meta = body.get('metadata') or {}
    return {'apiVersion': body.get('apiVersion', ''), 'kind': body.get('kind', ''),
            'name': meta.get('name', ''), 'uid': meta.get('uid', '')}


def build_object_reference(body: Mapping[str, Any]) -> ObjectReference:
    """A reference to the object, as in Events' ``involvedObject``."""
    identity = _identity(body)
    ref: ObjectReference = {'apiVersion': identity['apiVersion'], 'kind': identity['kind'],
                            'name': identity['name'], 'uid': identity['uid']}
    namespace = (body.get('metadata') or {}).get('namespace')
    if namespace is not None:
        ref['namespace'] = namespace
    return ref


def build_owner_reference(
        body: Mapping[str, Any],
        *,
        controller: bool | None = True,
        block_owner_deletion: bool | None = True,
) -> OwnerReference:
    """An owner reference to the object; ``None`` flags are left out (the server's defaults apply)."""
    ref = _identity(body)
    if controller is not None:
        ref['controller'] = controller
    if block_owner_deletion is not None:
        ref['blockOwnerDeletion'] = block_owner_deletion
    return ref


def append_owner_reference(
        objs: Objs,
        owner: Owner | None = None,
        *,
        controller: bool | None = True,
        block_owner_deletion: bool | None = True,
) -> None:
    """Make the owner own the objects (once per owner), so that they are garbage-collected with it."""
    reference = build_owner_reference(_owner(owner), controller=controller, block_owner_deletion=block_owner_deletion)
    for obj in _each(objs):
        meta = obj.ensure('metadata')
        refs = list(meta.get('ownerReferences') or [])
        if not any(_field(ref, 'uid') == reference['uid'] for ref in refs):
            meta.set('ownerReferences', [*refs, meta.item('ownerReferences', dict(reference))])


def remove_owner_reference(objs: Objs, owner: Owner | None = None) -> None:
    """Disown the objects: remove the owner's references (by its uid); others stay."""
    uid = build_owner_reference(_owner(owner))['uid']
    for obj in _each(objs):
        meta = obj.child('metadata')
        refs = meta.get('ownerReferences') if meta is not None else None
        if meta is not None and refs:
            meta.set('ownerReferences', [ref for ref in refs if _field(ref, 'uid') != uid])


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
        meta = obj.ensure('metadata')
        if not forced and (meta.get('name') or meta.get('generateName')):
            continue
        meta.set('name', name if strict else None)
        meta.set('generateName', None if strict else f"{name}-")


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
        meta = obj.ensure('metadata')
        if not forced and meta.get('namespace'):
            continue
        if namespace is not None or forced:
            meta.set('namespace', namespace)


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
            meta = target.ensure('metadata')
            existing = dict(meta.get('labels') or {})
            for key, value in labels.items():
                if forced or key not in existing:
                    existing[key] = value
            meta.set('labels', existing)


def adopt(
        objs: Objs,
        owner: Owner | None = None,
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
    children = list(_raw_objects(objs))
    append_owner_reference(children, owner)
    harmonize_naming(children, meta.get('name'), forced=forced, strict=strict)
    adjust_namespace(children, meta.get('namespace'), forced=forced)
    label(children, meta.get('labels') or {}, forced=forced, nested=nested)


def _owner(owner: Owner | None) -> Mapping[str, Any]:
    """The owner as a mapping of its JSON fields: given (a dict, a client's model or object), or the handled one."""
    if owner is not None:
        if isinstance(owner, Mapping):
            return owner
        node = _node(owner)
        if node is None:
            raise TypeError(f"Cannot take a {type(owner).__name__} as an owner: pass a dict, a pykube-ng object, or "
                            f"a model of the kubernetes or kubernetes_asyncio client.")
        return node.as_mapping()
    try:
        return owner_var.get()
    except LookupError:
        raise LookupError("No owner given, and not inside a handler: pass owner=... explicitly.") from None


def _raw_objects(objs: Objs) -> Iterator[Any]:
    """The objects themselves: one object, or every object of an iterable (each must be supported)."""
    if _node(objs) is not None:
        yield objs
        return
    if isinstance(objs, (str, bytes, Mapping)) or not isinstance(objs, Iterable):
        raise TypeError(_unsupported(objs))
    for obj in objs:
        if _node(obj) is None:
            raise TypeError(_unsupported(obj))
        yield obj


def _each(objs: Objs) -> Iterator[_Fields]:
    """The fields to modify: of the object itself, or of every object of an iterable."""
    for obj in _raw_objects(objs):
        node = _node(obj)
        assert node is not None  # checked by _raw_objects
        yield node


def _unsupported(obj: Any) -> str:
    return (f"Cannot modify a {type(obj).__name__}: pass a dict, a pykube-ng object, a model of the kubernetes "
            f"or kubernetes_asyncio client, or a list of them (read-only bodies such as kopf.Body cannot be "
            f"changed; copy them into a dict first).")


def _nested(obj: _Fields, nested: NestedPaths) -> list[_Fields]:
    if nested is None:
        return []
    paths = [nested] if isinstance(nested, str) else list(nested)
    targets: list[_Fields] = []
    for path in paths:
        target: _Fields | None = obj
        for key in dicts.parse_field(path):
            target = target.child(key) if target is not None else None
        if target is not None:
            targets.append(target)
    return targets


def _field(item: Any, key: str) -> Any:
    """A field of a list's item: a dict's key, or a model's attribute by its JSON name."""
    node = _node(item)
    return node.get(key) if node is not None else None


# The objects that the helpers modify: their JSON fields, read and written alike for dicts and models.

class _Fields:
    """The JSON fields of an object in a dict (also a pykube-ng object's ``.obj``)."""

    def __init__(self, data: MutableMapping[str, Any]) -> None:
        self._data = data

    def get(self, key: str) -> Any:
        return self._data.get(key)

    def set(self, key: str, value: Any) -> None:
        """Set a field; ``None`` removes it."""
        if value is None:
            self._data.pop(key, None)
        else:
            self._data[key] = value

    def child(self, key: str) -> _Fields | None:
        """The fields of a nested object, if there is one."""
        return _node(self._data.get(key))

    def ensure(self, key: str) -> _Fields:
        """The fields of a nested object, made empty if there is none."""
        if self._data.get(key) is None:
            self._data[key] = {}
        return _Fields(self._data[key])

    def item(self, key: str, value: Mapping[str, Any]) -> Any:
        """A list item of this field, made from its JSON fields."""
        return dict(value)

    def as_mapping(self) -> Mapping[str, Any]:
        return self._data


class _ModelFields(_Fields):
    """
    The JSON fields of a model of the official clients (``kubernetes``, ``kubernetes_asyncio``).

    Their classes say how each attribute is named in JSON (``attribute_map``)
    and of which type it is (``openapi_types``, e.g. ``'V1ObjectMeta'`` or
    ``'list[V1OwnerReference]'``); the types live in the package of the
    model's module. Nested objects and list items are made of those types.
    """

    def __init__(self, model: Any) -> None:
        self._model = model
        self._attrs = {json: attr for attr, json in type(model).attribute_map.items()}

    def get(self, key: str) -> Any:
        attr = self._attrs.get(key)
        return getattr(self._model, attr, None) if attr is not None else None

    def set(self, key: str, value: Any) -> None:
        setattr(self._model, self._attr(key), value)

    def child(self, key: str) -> _Fields | None:
        return _node(self.get(key))

    def ensure(self, key: str) -> _Fields:
        if self.get(key) is None:
            self.set(key, self._type(key)())
        return _ModelFields(self.get(key))

    def item(self, key: str, value: Mapping[str, Any]) -> Any:
        cls = self._type(key)
        attrs = {json: attr for attr, json in cls.attribute_map.items()}
        return cls(**{attrs[json]: item for json, item in value.items() if json in attrs})

    def as_mapping(self) -> Mapping[str, Any]:
        """Its JSON fields (nested models too, as far as owners are read: their metadata)."""
        result: dict[str, Any] = {}
        for json, attr in self._attrs.items():
            value = getattr(self._model, attr, None)
            result[json] = _ModelFields(value).as_mapping() if _is_model(value) else value
        return result

    def _attr(self, key: str) -> str:
        try:
            return str(self._attrs[key])
        except KeyError:
            raise TypeError(f"A {type(self._model).__name__} has no field {key!r}.") from None

    def _type(self, key: str) -> Any:
        """The model class of a field (of its items, for lists), from its declared type's name."""
        declared = str(type(self._model).openapi_types[self._attr(key)])
        listed = re.fullmatch(r'[Ll]ist\[(.+)\]', declared)  # 'list[V1OwnerReference]' or 'List[...]'
        name = listed.group(1) if listed else declared
        package = sys.modules[type(self._model).__module__.rpartition('.')[0]]
        return getattr(package, name)


def _node(obj: Any) -> _Fields | None:
    """The fields of a supported object, or ``None`` if it is not one."""
    if isinstance(obj, MutableMapping):
        return _Fields(obj)
    inner = getattr(obj, 'obj', None)  # pykube-ng objects keep their raw dict here
    if isinstance(inner, MutableMapping):
        return _Fields(inner)
    return _ModelFields(obj) if _is_model(obj) else None


def _is_model(obj: Any) -> bool:
    """Whether it is a model of the official clients: their classes map attributes to JSON names and types."""
    cls = type(obj)
    return isinstance(getattr(cls, 'attribute_map', None), Mapping) and \
        isinstance(getattr(cls, 'openapi_types', None), Mapping)
