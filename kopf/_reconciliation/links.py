"""
Links between objects and their owners, as the watch streams show them: pure bookkeeping, no I/O.

A reconcile handler gets its object's children from here (``children``),
and a child's event reaches its owners through here: :meth:`Links.link`
says which owners an event concerns -- those the object was linked to
before, and those it is linked to now (an owner that a child leaves must
see it gone). Owners are known by their uids, which are unique in the
cluster; the objects by their resource and uid.

Memory: an object is kept only while it is linked to an owner (an owned
child, or a related object that a mapper has placed), with its latest
body -- without ``metadata.managedFields``, which are about half of a
small object's memory and of no use to a handler (:func:`lean`); objects of
a watched resource that belong to no owner cost nothing.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Collection, Hashable, Iterable, Iterator, Mapping
from typing import Any

from kopf._structs.bodies import Body
from kopf._structs.resources import Resource

RawBody = Mapping[str, Any]
Kind = tuple[str, str]  # an owner resource's (group, kind): what an owner reference names, in any version


class Links:
    """Which objects are linked to which owners, with the objects' latest bodies."""

    def __init__(self) -> None:
        self._owners: dict[tuple[Resource, str], frozenset[str]] = {}
        self._bodies: dict[tuple[Resource, str], RawBody] = {}
        self._linked: dict[str, dict[Resource, set[str]]] = {}

    def __len__(self) -> int:
        return len(self._bodies)

    def link(self, resource: Resource, uid: str, body: RawBody | None, owners: Collection[str]) -> frozenset[str]:
        """The object as it is now (``None``: gone) and its owners now; the owners affected, before and now."""
        key = (resource, uid)
        before = self._owners.get(key, frozenset())
        now = frozenset(owners) if body is not None else frozenset()
        for owner in before - now:
            children = self._linked.get(owner, {})
            uids = children.get(resource)
            if uids is not None:
                uids.discard(uid)
                if not uids:
                    del children[resource]
            if not children:
                self._linked.pop(owner, None)
        for owner in now - before:
            self._linked.setdefault(owner, {}).setdefault(resource, set()).add(uid)
        if now and body is not None:
            self._owners[key] = now
            self._bodies[key] = lean(body)
        else:
            self._owners.pop(key, None)
            self._bodies.pop(key, None)
        return before | now

    def owners(self, resource: Resource, uid: str) -> frozenset[str]:
        return self._owners.get((resource, uid), frozenset())

    def body(self, resource: Resource, uid: str) -> RawBody | None:
        """The object as last seen, if it is linked to any owner."""
        return self._bodies.get((resource, uid))

    def linked(self, owner: str) -> dict[Resource, list[RawBody]]:
        """The objects linked to an owner, by resource, in the order of their names."""
        result: dict[Resource, list[RawBody]] = {}
        for resource, uids in self._linked.get(owner, {}).items():
            bodies = [self._bodies[(resource, uid)] for uid in uids]
            result[resource] = sorted(bodies, key=_name_of)
        return result


def lean(body: RawBody) -> RawBody:
    """The object as kept in memory: without ``metadata.managedFields`` (the server's bookkeeping of fields)."""
    meta = body.get('metadata')
    if not isinstance(meta, Mapping) or 'managedFields' not in meta:
        return body
    return {**body, 'metadata': {key: value for key, value in meta.items() if key != 'managedFields'}}


def _name_of(body: RawBody) -> tuple[str, str]:
    meta = body.get('metadata') or {}
    return (str(meta.get('namespace') or ''), str(meta.get('name') or ''))


def owner_uids(body: RawBody, kinds: Collection[Kind]) -> tuple[frozenset[str], list[str]]:
    """
    The uids of the object's owners of these kinds; and, for the logs, its owners of other kinds.

    An owner reference names its owner by ``apiVersion`` and ``kind``: only
    the group of the version counts (an owner is the same object in every
    version of its resource).
    """
    matched: set[str] = set()
    others: list[str] = []
    for ref in (body.get('metadata') or {}).get('ownerReferences') or []:
        if not isinstance(ref, Mapping):
            continue
        api_version = str(ref.get('apiVersion') or '')
        group = api_version.rpartition('/')[0] if '/' in api_version else ''
        kind = str(ref.get('kind') or '')
        uid = ref.get('uid')
        if (group, kind) in kinds and isinstance(uid, str) and uid:
            matched.add(uid)
        else:
            others.append(f"{kind or '?'} {ref.get('name') or '?'}")
    return frozenset(matched), others


OwnerName = tuple[str | None, str]  # (namespace, name) of an owner, as a mapper names it


def owner_names(result: Any, *, namespace: str | None) -> set[OwnerName]:
    """
    The owners that a mapper has named, each as ``(namespace, name)``.

    A mapper returns ``None`` (no owners), a name (in the related object's
    namespace), a ``(namespace, name)`` pair, a mapping with ``metadata``
    (an owner's body, e.g. from an index) or with ``name``/``namespace``, or
    an iterable of these. Anything else is a mistake of the mapper:
    :class:`TypeError` says what it has returned.
    """
    if result is None:
        return set()
    single = _owner_name(result, namespace=namespace)
    if single is not None:
        return {single}
    if isinstance(result, Iterable) and not isinstance(result, (str, bytes, Mapping)):
        names: set[OwnerName] = set()
        for item in result:
            name = _owner_name(item, namespace=namespace) if item is not None else None
            if item is not None and name is None:
                raise TypeError(_unexpected(item))
            if name is not None:
                names.add(name)
        return names
    raise TypeError(_unexpected(result))


def _owner_name(value: Any, *, namespace: str | None) -> OwnerName | None:
    if isinstance(value, str):
        return (namespace, value) if value else None
    if isinstance(value, tuple) and len(value) == 2 and all(v is None or isinstance(v, str) for v in value):
        return (value[0], value[1]) if value[1] else None
    if isinstance(value, Mapping):
        nested = value.get('metadata')
        meta: Mapping[str, Any] = nested if isinstance(nested, Mapping) else value
        name = meta.get('name')
        if isinstance(name, str) and name:
            ns = meta.get('namespace', namespace)
            return (ns if isinstance(ns, str) or ns is None else namespace, name)
    return None


def _unexpected(value: Any) -> str:
    return (f"a mapper returned {type(value).__name__} {value!r:.100}; it must return the owners to reconcile: "
            f"None, a name, a (namespace, name) pair, an owner's body, or a list of these")


@dataclasses.dataclass
class Listing:
    """
    What one watch stream has listed, to find the objects that a new listing of it no longer has.

    A stream that is opened anew (with replicas, after a hand-over) lists
    again, but does not say which objects were deleted while it was closed.
    """

    members: set[str] = dataclasses.field(default_factory=set)
    listed: set[str] = dataclasses.field(default_factory=set)
    listing: bool = False

    def see(self, uid: str, event_type: str | None) -> None:
        if event_type is None:
            if not self.listing:
                self.listed, self.listing = set(), True
            self.listed.add(uid)
        else:
            self.listing = False
        if event_type == 'DELETED':
            self.members.discard(uid)
        else:
            self.members.add(uid)

    def relisted(self) -> set[str]:
        """The listing is over: the objects that it no longer has."""
        gone = self.members - self.listed
        self.members, self.listed, self.listing = self.listed, set(), False
        return gone


Listings = dict[Hashable, Listing]


class Children(Mapping[Hashable, tuple[Body, ...]]):
    """
    What a reconcile handler gets as ``children``: the objects of each related resource, by how it was named.

    ``children['configmaps']`` are the owned ConfigMaps if the handler says
    ``owns=['configmaps']``; a resource of ``watches=`` gives the objects
    that its mapper has placed at this object. Every named resource is
    there, empty if it has no objects; they are read-only views of the
    objects as the operator's watch streams have last shown them, ordered by
    namespace and name.
    """

    __slots__ = ('_items',)

    def __init__(self, items: Mapping[Hashable, Iterable[RawBody]]) -> None:
        self._items = {name: tuple(Body(raw) for raw in bodies) for name, bodies in items.items()}

    def __getitem__(self, name: Hashable) -> tuple[Body, ...]:
        try:
            return self._items[name]
        except KeyError:
            known = ', '.join(repr(key) for key in self._items) or 'none'
            raise KeyError(f"{name!r} is not among the resources of owns= and watches= ({known}).") from None

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        counts = ', '.join(f"{name!r}: {len(bodies)}" for name, bodies in self._items.items())
        return f"<children {{{counts}}}>"
