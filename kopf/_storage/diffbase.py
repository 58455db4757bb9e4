"""
Diff-base storages: the "last handled configuration" of each object.

After every successful handling, the object's essence (what the user means,
without what the system or the framework adds) is kept; the next change is
compared against it to decide whether anything really changed and to compute
the ``diff`` for update handlers.
"""
from __future__ import annotations

import abc
import json
import logging
from collections.abc import Collection, Iterable, Mapping
from typing import Any, TypedDict, cast

from kopf._storage import calls, conventions, trimming
from kopf._storage.calls import MaybeAwaitable, Steps
from kopf._structs import dicts
from kopf._structs.bodies import Body, Essence
from kopf._structs.patches import Patch

logger = logging.getLogger('kopf._storage')


DEFAULT_PREFIX = 'kopf.zalando.org'
LAST_HANDLED_NAME = 'last-handled-configuration'
KUBECTL_LAST_APPLIED = 'kubectl.kubernetes.io/last-applied-configuration'

# Annotations are limited to 256 KiB per object in total; the annotation budget warns well before that.
ESSENCE_SIZE_WARNING = 128 * 1024

_SYSTEM_TOP_LEVEL = ('apiVersion', 'kind', 'status')
_USER_METADATA = ('labels', 'annotations')


class MetaEssence(TypedDict, total=False):
    """The part of the metadata that belongs to an object's essence."""

    labels: Mapping[str, str]
    annotations: Mapping[str, str]


class BodyEssence(TypedDict, total=False):
    """
    The shape of an essence, for type annotations in user code.

    Essences are plain dicts: ``spec`` and other top-level fields, labels and
    user annotations; ``status`` only with the fields of field handlers.
    """

    metadata: MetaEssence
    spec: Mapping[str, Any]
    status: Mapping[str, Any]


class DiffBaseStorage(calls.Lifetime, abc.ABC):
    """
    The base for diff-base storages; :meth:`build` is shared by all of them.

    :meth:`fetch` and :meth:`store` may be overridden as ``async def``.
    Storages are async context managers, entered once when the operator
    starts and exited when it stops; the defaults do nothing.
    """

    ignored_fields: tuple[dicts.FieldPath, ...] = ()

    def build(self, *, body: Body, extra_fields: Iterable[dicts.FieldSpec] | None = None) -> Essence:
        """
        The essence of an object: what its users define, nothing more.

        Drops ``apiVersion``, ``kind``, ``status`` and all system metadata;
        keeps ``spec``, other top-level fields, labels and user annotations.
        Of the annotations, ``kubectl``'s last applied configuration and the
        last handled configurations of all operators (any prefix) are dropped;
        the progress storage removes its own bookkeeping (see
        :meth:`kopf.ProgressStorage.clear`). ``extra_fields`` restores
        selected fields, e.g. ``status.x`` watched by a field handler;
        ``ignored_fields`` of the storage are dropped.
        """
        # Only what the essence keeps is copied: not the system metadata (managedFields!) or the status.
        raw = body.raw
        essence: Essence = {k: dicts.copy_json(v) for k, v in raw.items()
                            if k not in _SYSTEM_TOP_LEVEL and k != 'metadata'}
        metadata = raw.get('metadata')
        metadata = metadata if isinstance(metadata, dict) else {}
        kept_meta = {k: dicts.copy_json(metadata[k]) for k in _USER_METADATA if metadata.get(k)}
        if kept_meta:
            essence['metadata'] = kept_meta
        annotations = dicts.resolve(essence, ('metadata', 'annotations'), None)
        if isinstance(annotations, dict):
            for key in [k for k in annotations if _is_diffbase_annotation(k)]:
                dicts.remove(essence, ('metadata', 'annotations', key))
        if extra_fields:
            dicts.cherrypick(body.raw, essence, extra_fields)
        for field in self.ignored_fields:
            dicts.remove(essence, field)
        return essence

    def restore(self, essence: Essence | None, *, body: Body) -> Essence | None:
        """
        A fetched essence with the values of its trimmed fields put back where they are unchanged.

        An essence stored trimmed (see :mod:`kopf._storage.trimming`) has
        digests instead of its biggest fields; each digest that matches the
        object's current value is replaced with that value. Storages call it
        on what they fetch; essences without digests are returned as they are.
        """
        if essence is None or not trimming.trimmed_paths(essence):
            return essence
        return trimming.restore(essence, current=self.build(body=body))

    @abc.abstractmethod
    def fetch(self, *, body: Body) -> MaybeAwaitable[Essence | None]:
        """The last handled essence, or ``None`` if never handled (or unreadable)."""

    @abc.abstractmethod
    def store(self, *, body: Body, patch: Patch, essence: Essence) -> MaybeAwaitable[None]:
        """Keep the essence as the new base for future diffs."""

    def erase(self, *, body: Body) -> MaybeAwaitable[None]:
        """
        Forget everything about an object that is gone (its deletion was seen).

        A no-op by default: an essence kept in the object disappears with it.
        Storages that keep essences outside of the object override it.
        """
        return None

    def purge(self, *, body: Body, patch: Patch) -> MaybeAwaitable[None]:
        """
        Optional: forget the stored essence of an object that stays (``kopf migrate`` moves it elsewhere).

        The handling never calls it. The built-in storages implement it; a
        storage that cannot forget raises :class:`NotImplementedError` (the
        default), and ``kopf migrate`` then leaves its essence where it is.
        """
        raise NotImplementedError


def _is_diffbase_annotation(key: str) -> bool:
    _, name = conventions.split_key(key)
    return key == KUBECTL_LAST_APPLIED or name == LAST_HANDLED_NAME


def _ignored(fields: Iterable[dicts.FieldSpec] | None) -> tuple[dicts.FieldPath, ...]:
    return tuple(path for path in (dicts.parse_field(f) for f in fields or ()) if path)


def encode_essence(essence: Essence) -> str:
    return json.dumps(essence, separators=(',', ':'), sort_keys=True)


def decode_essence(value: Any, *, where: str, body: Body) -> Essence | None:
    """Parse a stored essence; a corrupt one is reported and treated as absent."""
    try:
        try:
            data = json.loads(value) if isinstance(value, str) else value
        except RecursionError:
            raise ValueError("not valid JSON (nested too deeply)") from None
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    except ValueError as e:
        logger.warning(
            "Ignoring the unreadable last-handled configuration in %s of %s: %s. "
            "The object will be handled as if it was never handled before.",
            where, body.describe(), e)
        return None
    return data


def _same(stored: Any, essence: Essence) -> bool:
    """Whether a stored essence (in any format ever written) holds exactly this essence already."""
    if not isinstance(stored, str):
        return False
    try:
        return bool(json.loads(stored) == essence)
    except (ValueError, RecursionError):
        return False


class AnnotationsDiffBaseStorage(DiffBaseStorage):
    """
    The essence as compact JSON in one annotation, ``kopf.zalando.org/last-handled-configuration``.

    As in Kopf, ``.prefix`` and ``.key`` are the two parts of the annotation's
    name and ``.name`` is the whole of it; ``name=`` in the constructor sets
    both parts at once. Essences that Kopf stored (with spaces, or with a
    trailing newline) are read as they are.
    """

    def __init__(
            self,
            *,
            prefix: str | None = DEFAULT_PREFIX,
            key: str = LAST_HANDLED_NAME,
            name: str | None = None,
            ignored_fields: Iterable[dicts.FieldSpec] | None = None,
            v1: bool = True,
    ) -> None:
        super().__init__()
        if name is not None:
            prefix, key = conventions.split_key(name)
        self.prefix = conventions.validate_prefix(prefix) if prefix is not None else None
        self.key = conventions.validate_name(key)
        self.ignored_fields = _ignored(ignored_fields)
        self.v1 = v1  # accepted for compatibility; it changes nothing here

    @property
    def name(self) -> str:
        """The full annotation name, ``prefix/key``."""
        return conventions.join_key(self.prefix, self.key)

    def build(self, *, body: Body, extra_fields: Iterable[dicts.FieldSpec] | None = None) -> Essence:
        essence = super().build(body=body, extra_fields=extra_fields)
        dicts.remove(essence, ('metadata', 'annotations', self.name))
        return essence

    def fetch(self, *, body: Body) -> Essence | None:
        value = body.metadata.annotations.get(self.name)
        essence = None if value is None else decode_essence(value, where=f"annotation {self.name!r}", body=body)
        if isinstance(value, str) and trimming.MARKER not in value:
            return essence  # stored whole, as most are: no digests to look for
        return self.restore(essence, body=body)

    def store(self, *, body: Body, patch: Patch, essence: Essence) -> None:
        stored = body.metadata.annotations.get(self.name)
        if not _same(stored, essence):
            patch.meta.annotations[self.name] = encode_essence(essence)

    def purge(self, *, body: Body, patch: Patch) -> None:
        if self.name in body.metadata.annotations:
            patch.meta.annotations[self.name] = None
        elif self.name in patch.meta.annotations:
            del patch.meta.annotations[self.name]


class StatusDiffBaseStorage(DiffBaseStorage):
    """
    The essence as JSON text in a status field.

    Kept as text rather than a nested dict: a merge-patch would merge dicts
    key by key and leave removed keys behind.
    """

    def __init__(
            self,
            *,
            name: str = 'kopf',
            field: dicts.FieldSpec = 'status.{name}.last-handled-configuration',
            ignored_fields: Iterable[dicts.FieldSpec] | None = None,
    ) -> None:
        super().__init__()
        self._name = name
        self._field = _status_path(field, name=name)
        self.ignored_fields = _ignored(ignored_fields)

    @property
    def field(self) -> dicts.FieldPath:
        """Where the essence is: a path, settable as ``'status.x'`` or ``('status', 'x')``."""
        return self._field

    @field.setter
    def field(self, value: dicts.FieldSpec) -> None:
        self._field = _status_path(value, name=self._name)

    def build(self, *, body: Body, extra_fields: Iterable[dicts.FieldSpec] | None = None) -> Essence:
        essence = super().build(body=body, extra_fields=extra_fields)
        dicts.remove(essence, self.field)
        return essence

    def fetch(self, *, body: Body) -> Essence | None:
        value = dicts.resolve(body, self.field, None)
        where = f"field {dicts.format_field(self.field)!r}"
        return self.restore(None if value is None else decode_essence(value, where=where, body=body), body=body)

    def store(self, *, body: Body, patch: Patch, essence: Essence) -> None:
        if not _same(dicts.resolve(body, self.field, None), essence):
            dicts.ensure(patch, self.field, encode_essence(essence))

    def purge(self, *, body: Body, patch: Patch) -> None:
        if dicts.resolve(body, self.field, None) is not None:
            dicts.ensure(patch, self.field, None)
        else:
            dicts.remove(patch, self.field)


def _status_path(value: dicts.FieldSpec, *, name: str) -> dicts.FieldPath:
    path = dicts.parse_field(value.format(name=name) if isinstance(value, str) else value)
    if not path:
        raise ValueError("The status field for the diff-base must not be empty "
                         "(e.g. 'status.my-op.last-handled-configuration').")
    if path[0] != 'status' or len(path) < 2:
        # Anywhere else, the essence would overwrite the object's own fields (or be part of the essence itself).
        raise ValueError(f"The status field for the diff-base must be a field under 'status' "
                         f"(e.g. 'status.my-op.last-handled-configuration'), not {dicts.format_field(path)!r}.")
    return path


class MultiDiffBaseStorage(calls.EnteredTogether, DiffBaseStorage):
    """Several diff-base storages: the first stored essence wins; writes go to all."""

    def __init__(self, storages: Collection[DiffBaseStorage]) -> None:
        super().__init__()
        if not storages:
            raise ValueError("MultiDiffBaseStorage needs at least one storage.")
        for storage in storages:
            if not isinstance(storage, DiffBaseStorage):
                raise TypeError(f"Expected a kopf.DiffBaseStorage, got {storage!r}.")
        self.storages: tuple[DiffBaseStorage, ...] = tuple(storages)

    def build(self, *, body: Body, extra_fields: Iterable[dicts.FieldSpec] | None = None) -> Essence:
        essence = super().build(body=body, extra_fields=extra_fields)
        for storage in self.storages:
            essence = _intersect(essence, storage.build(body=body, extra_fields=extra_fields))
        return essence

    def fetch(self, *, body: Body) -> MaybeAwaitable[Essence | None]:
        def steps() -> Steps[Essence | None]:
            for storage in self.storages:
                essence = yield storage.fetch(body=body)
                if essence is not None:
                    return cast(Essence, essence)
            return None
        return calls.drive(steps())

    def store(self, *, body: Body, patch: Patch, essence: Essence) -> MaybeAwaitable[None]:
        return calls.drive(calls.each(s.store(body=body, patch=patch, essence=essence) for s in self.storages))

    def erase(self, *, body: Body) -> MaybeAwaitable[None]:
        """Pass the object's disappearance on to the children, which may keep state outside of it."""
        return calls.drive(calls.each(s.erase(body=body) for s in self.storages))

    def purge(self, *, body: Body, patch: Patch) -> MaybeAwaitable[None]:
        """Forget the essence in every child."""
        return calls.drive(calls.each(s.purge(body=body, patch=patch) for s in self.storages))


def _intersect(a: Essence, b: Essence) -> Essence:
    """Keep only what both essences have, so that every child's own traces are excluded."""
    result: Essence = {}
    for key, value in a.items():
        if key not in b:
            continue
        if isinstance(value, dict) and isinstance(b[key], dict):
            sub = _intersect(value, b[key])
            if sub:
                result[key] = sub
        elif value == b[key]:
            result[key] = value
    return result
