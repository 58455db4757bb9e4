"""
Read-only views over raw Kubernetes objects.

Handlers and storages receive these views instead of the raw dicts, so that no
code can accidentally modify the object the framework compares against. All
changes go through a :class:`kopf.Patch` instead.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, TypeAlias

RawBody: TypeAlias = Mapping[str, Any]

# An object's essence: what the changes are judged by (no status, no system metadata).
Essence: TypeAlias = dict[str, Any]


def object_key(obj: Mapping[str, Any]) -> str:
    """
    An object's identity across events: its uid, or ``namespace/name`` where there is no uid.

    A cluster-scoped object without a uid is ``/name``, never ``None/name``:
    the same object has the same key wherever it is computed.
    """
    meta = obj.get('metadata') or {}
    return str(meta.get('uid') or f"{meta.get('namespace') or ''}/{meta.get('name') or ''}")


class ReadOnlyDict(Mapping[str, Any]):
    """A live read-only mapping over a sub-dict, resolved lazily on every access."""

    __slots__ = ('__weakref__', '_src')  # many views exist per handled object: no per-instance dict

    def __init__(self, src: Mapping[str, Any] | None) -> None:
        self._src: Mapping[str, Any] = src if src is not None else {}

    def __getitem__(self, key: str) -> Any:
        return self._src[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._src)

    def __len__(self) -> int:
        return len(self._src)

    def __repr__(self) -> str:
        return repr(dict(self._src))


def _section(raw: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = raw.get(key)
    if type(value) is dict:  # nearly always: parsed JSON; spares the slower abstract-class check
        return value
    if value is None:  # absent: e.g. a new object's annotations or status
        return {}
    return value if isinstance(value, Mapping) else {}


class Meta(ReadOnlyDict):
    """The ``metadata`` of an object, with shortcuts for the commonly used fields."""

    __slots__ = ()

    @property
    def annotations(self) -> Mapping[str, str]:
        return ReadOnlyDict(_section(self._src, 'annotations'))

    @property
    def labels(self) -> Mapping[str, str]:
        return ReadOnlyDict(_section(self._src, 'labels'))

    @property
    def name(self) -> str | None:
        value = self._src.get('name')
        return str(value) if value is not None else None

    @property
    def namespace(self) -> str | None:
        value = self._src.get('namespace')
        return str(value) if value is not None else None

    @property
    def uid(self) -> str | None:
        value = self._src.get('uid')
        return str(value) if value is not None else None

    @property
    def finalizers(self) -> tuple[str, ...]:
        value = self._src.get('finalizers')
        return tuple(value) if isinstance(value, (list, tuple)) else ()

    @property
    def deletion_timestamp(self) -> str | None:
        value = self._src.get('deletionTimestamp')
        return str(value) if value is not None else None

    @property
    def resource_version(self) -> str | None:
        value = self._src.get('resourceVersion')
        return str(value) if value is not None else None


class Spec(ReadOnlyDict):
    """The ``spec`` of an object (``kopf.Spec``): read-only; change it through the patch."""

    __slots__ = ()


class Status(ReadOnlyDict):
    """The ``status`` of an object (``kopf.Status``): read-only; change it through ``patch.status``."""

    __slots__ = ()


class Body(ReadOnlyDict):
    """A whole object: ``kopf.Body(raw)`` wraps any raw dict without copying it."""

    __slots__ = ()

    def __init__(self, raw: RawBody | None = None) -> None:
        if isinstance(raw, Body):
            raw = raw._src
        super().__init__(raw)

    @property
    def raw(self) -> RawBody:
        """The underlying dict, for serialisation; never modify it."""
        return self._src

    @property
    def metadata(self) -> Meta:
        return Meta(_section(self._src, 'metadata'))

    @property
    def meta(self) -> Meta:
        return self.metadata

    @property
    def spec(self) -> Spec:
        return Spec(_section(self._src, 'spec'))

    @property
    def status(self) -> Status:
        return Status(_section(self._src, 'status'))

    def describe(self) -> str:
        """A short human reference for logs and warnings: ``namespace/name``."""
        meta = self.metadata
        kind = self._src.get('kind')
        ref = f"{meta.namespace}/{meta.name}" if meta.namespace else f"{meta.name}"
        return f"{kind} {ref}" if kind else ref
