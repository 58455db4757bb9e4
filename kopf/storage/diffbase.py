"""
Diff-base storages: the "last handled configuration" of each object.

After every successful handling, the object's essence (what the user means,
without what the system or the framework adds) is kept; the next change is
compared against it to decide whether anything really changed and to compute
the ``diff`` for update handlers.
"""
from __future__ import annotations

import abc
import copy
import json
import logging
from collections.abc import Collection, Iterable, MutableMapping
from typing import Any

from kopf.storage import calls, conventions, records
from kopf.structs import dicts
from kopf.structs.bodies import Body
from kopf.structs.patches import Patch

logger = logging.getLogger('kopf.storage')

Essence = dict[str, Any]

LAST_HANDLED_NAME = 'last-handled-configuration'
TOUCH_DUMMY_NAME = 'touch-dummy'  # the default wake-up marker of the annotations progress storages
KUBECTL_LAST_APPLIED = 'kubectl.kubernetes.io/last-applied-configuration'

# Annotations are limited to 256 KiB per object in total; warn well before that.
ESSENCE_SIZE_WARNING = 128 * 1024

_SYSTEM_TOP_LEVEL = ('apiVersion', 'kind', 'status')
_USER_METADATA = ('labels', 'annotations')


class DiffBaseStorage(abc.ABC):
    """The base for diff-base storages; :meth:`build` is shared by all of them."""

    def build(self, *, body: Body, extra_fields: Iterable[dicts.FieldSpec] | None = None) -> Essence:
        """
        The essence of an object: what its users define, nothing more.

        Drops ``apiVersion``, ``kind``, ``status`` and all system metadata;
        keeps ``spec``, other top-level fields, labels and user annotations.
        The framework's own annotations (of any prefix, so that several
        operators do not trigger each other) are dropped too. ``extra_fields``
        restores selected fields, e.g. ``status.x`` watched by a field handler.
        """
        raw = copy.deepcopy(dict(body.raw))
        essence: Essence = {k: v for k, v in raw.items() if k not in _SYSTEM_TOP_LEVEL and k != 'metadata'}
        metadata = raw.get('metadata')
        metadata = metadata if isinstance(metadata, dict) else {}
        kept_meta = {k: metadata[k] for k in _USER_METADATA if metadata.get(k)}
        if kept_meta:
            essence['metadata'] = kept_meta
        annotations = dicts.resolve(essence, ('metadata', 'annotations'), None)
        if isinstance(annotations, MutableMapping):
            for key in [k for k, v in annotations.items() if self._is_framework_annotation(k, v)]:
                dicts.remove(essence, ('metadata', 'annotations', key))
        if extra_fields:
            dicts.cherrypick(body.raw, essence, extra_fields)
        return essence

    def _is_framework_annotation(self, key: str, value: Any) -> bool:
        _, name = conventions.split_key(key)
        return (key == KUBECTL_LAST_APPLIED or name in (LAST_HANDLED_NAME, TOUCH_DUMMY_NAME) or
                (isinstance(value, str) and records.looks_like_record(value)))

    @abc.abstractmethod
    def fetch(self, *, body: Body) -> Essence | None:
        """The last handled essence, or ``None`` if never handled (or unreadable)."""

    @abc.abstractmethod
    def store(self, *, body: Body, patch: Patch, essence: Essence) -> None:
        """Keep the essence as the new base for future diffs."""


def _encode(essence: Essence) -> str:
    return json.dumps(essence, separators=(',', ':'), sort_keys=True)


def _decode(value: Any, *, where: str, body: Body) -> Essence | None:
    """Parse a stored essence; a corrupt one is reported and treated as absent."""
    try:
        data = json.loads(value) if isinstance(value, str) else value
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    except ValueError as e:
        logger.warning(
            "Ignoring the unreadable last-handled configuration in %s of %s: %s. "
            "The object will be handled as if it was never handled before.",
            where, body.describe(), e)
        return None
    return data


def _warn_if_large(encoded: str, *, where: str, body: Body) -> None:
    if len(encoded.encode('utf-8')) > ESSENCE_SIZE_WARNING:
        logger.warning(
            "The last-handled configuration of %s is %d bytes large (in %s); "
            "Kubernetes limits all annotations of an object to 256 KiB together. "
            "Consider kopf.StatusDiffBaseStorage or a smaller object.",
            body.describe(), len(encoded), where)


class AnnotationsDiffBaseStorage(DiffBaseStorage):
    """The essence as compact JSON in one annotation, ``kopf.zalando.org/last-handled-configuration``."""

    def __init__(
            self,
            *,
            prefix: str = 'kopf.zalando.org',
            key: str = LAST_HANDLED_NAME,
            name: str | None = None,
    ) -> None:
        super().__init__()
        if name is not None:
            name_prefix, name_key = conventions.split_key(name)
            if name_prefix is None:
                raise ValueError(f"The diff-base annotation name must be 'prefix/key', got {name!r}.")
            prefix, key = name_prefix, name_key
        self.prefix = conventions.validate_prefix(prefix)
        self.key = f"{prefix}/{conventions.validate_name(key)}"

    def build(self, *, body: Body, extra_fields: Iterable[dicts.FieldSpec] | None = None) -> Essence:
        essence = super().build(body=body, extra_fields=extra_fields)
        dicts.remove(essence, ('metadata', 'annotations', self.key))
        return essence

    def fetch(self, *, body: Body) -> Essence | None:
        value = body.metadata.annotations.get(self.key)
        return None if value is None else _decode(value, where=f"annotation {self.key!r}", body=body)

    def store(self, *, body: Body, patch: Patch, essence: Essence) -> None:
        encoded = _encode(essence)
        if body.metadata.annotations.get(self.key) != encoded:
            _warn_if_large(encoded, where=f"annotation {self.key!r}", body=body)
            patch.meta.annotations[self.key] = encoded


class StatusDiffBaseStorage(DiffBaseStorage):
    """
    The essence as JSON text in a status field.

    Kept as text rather than a nested dict: a merge-patch would merge dicts
    key by key and leave removed keys behind.
    """

    def __init__(self, *, name: str = 'kopf', field: str = 'status.{name}.last-handled-configuration') -> None:
        super().__init__()
        self.field = dicts.parse_field(field.format(name=name))
        if not self.field:
            raise ValueError("The status field for the diff-base must not be empty.")

    def build(self, *, body: Body, extra_fields: Iterable[dicts.FieldSpec] | None = None) -> Essence:
        essence = super().build(body=body, extra_fields=extra_fields)
        dicts.remove(essence, self.field)
        return essence

    def fetch(self, *, body: Body) -> Essence | None:
        value = dicts.resolve(body, self.field, None)
        where = f"field {dicts.format_field(self.field)!r}"
        return None if value is None else _decode(value, where=where, body=body)

    def store(self, *, body: Body, patch: Patch, essence: Essence) -> None:
        encoded = _encode(essence)
        if dicts.resolve(body, self.field, None) != encoded:
            dicts.ensure(patch, self.field, encoded)


class MultiDiffBaseStorage(DiffBaseStorage):
    """Several diff-base storages: the first stored essence wins; writes go to all."""

    def __init__(self, storages: Collection[DiffBaseStorage]) -> None:
        super().__init__()
        if not storages:
            raise ValueError("MultiDiffBaseStorage needs at least one storage.")
        for storage in storages:
            if not isinstance(storage, DiffBaseStorage):
                raise TypeError(f"Expected a kopf.DiffBaseStorage, got {storage!r}.")
        self.storages = tuple(storages)

    def build(self, *, body: Body, extra_fields: Iterable[dicts.FieldSpec] | None = None) -> Essence:
        essence = super().build(body=body, extra_fields=extra_fields)
        for storage in self.storages:
            essence = _intersect(essence, storage.build(body=body, extra_fields=extra_fields))
        return essence

    async def fetch(self, *, body: Body) -> Essence | None:  # type: ignore[override]
        for storage in self.storages:
            essence = await calls.call(storage.fetch, body=body)
            if essence is not None:
                return essence
        return None

    async def store(self, *, body: Body, patch: Patch, essence: Essence) -> None:  # type: ignore[override]
        for storage in self.storages:
            await calls.call(storage.store, body=body, patch=patch, essence=essence)

    async def erase(self, *, body: Body) -> None:
        """Pass the object's disappearance on to the children that keep state outside of it."""
        for storage in self.storages:
            erase = getattr(storage, 'erase', None)
            if callable(erase):
                await calls.call(erase, body=body)


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
