"""
Which status fields the storages write, and whether a resource's structural schema keeps them.

A custom resource with a structural schema silently prunes every field that
the schema does not know, unless ``x-kubernetes-preserve-unknown-fields:
true`` covers it; built-in resources have fixed schemas. A storage that
writes into such a field loses everything it writes, without an error: the
handlers then run again or are never retried. These are the pure parts of
the startup check (:mod:`kopf._runtime.preflight`): what is written where,
and where a schema would prune it.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from kopf._storage.diffbase import DiffBaseStorage, MultiDiffBaseStorage, StatusDiffBaseStorage
from kopf._storage.progress import MultiProgressStorage, ProgressStorage, SmartProgressStorage, StatusProgressStorage
from kopf._structs.dicts import FieldPath

# A path to probe in a schema: field names, or None for "any key" (a handler id).
Probe = tuple[str | None, ...]


@dataclasses.dataclass(frozen=True)
class StatusWrite:
    """A storage that writes into the status: which one, what, and the fields."""

    storage: object
    what: str  # 'progress' or 'last-handled configuration'
    fields: tuple[FieldPath, ...]
    probes: tuple[Probe, ...]

    @property
    def alternative(self) -> str:
        """Where else to keep it: in annotations, which no schema prunes."""
        if self.what == 'progress':
            return "kopf.AnnotationsProgressStorage or the default kopf.SmartProgressStorage"
        return "the default kopf.AnnotationsDiffBaseStorage"

    @property
    def outside(self) -> str:
        """Where else to keep it: outside of the object."""
        if self.what == 'progress':
            return "kopf.SQLiteProgressStorage or kopf.ConfigMapProgressStorage"
        return "kopf.SQLiteDiffBaseStorage or kopf.ConfigMapDiffBaseStorage"


def status_writes(progress: ProgressStorage, diffbase: DiffBaseStorage) -> list[StatusWrite]:
    """The storages that write into the status (the legacy status part of the Smart storage only reads)."""
    return [*_progress_writes(progress), *_diffbase_writes(diffbase)]


def _progress_writes(storage: ProgressStorage) -> Iterator[StatusWrite]:
    if isinstance(storage, SmartProgressStorage):
        yield from _progress_writes(storage.storages[0])
    elif isinstance(storage, MultiProgressStorage):
        for child in storage.storages:
            yield from _progress_writes(child)
    elif isinstance(storage, StatusProgressStorage):
        yield StatusWrite(storage=storage, what='progress', fields=(storage.field, storage.touch_field),
                          probes=(storage.field + (None, 'started'), storage.touch_field))


def _diffbase_writes(storage: DiffBaseStorage) -> Iterator[StatusWrite]:
    if isinstance(storage, MultiDiffBaseStorage):
        for child in storage.storages:
            yield from _diffbase_writes(child)
    elif isinstance(storage, StatusDiffBaseStorage):
        yield StatusWrite(storage=storage, what='last-handled configuration', fields=(storage.field,),
                          probes=(storage.field,))


def version_schema(crd: Mapping[str, Any], version: str) -> Mapping[str, Any] | None:
    """The ``openAPIV3Schema`` of one version of a CRD; ``None`` if it has none (nothing is pruned then)."""
    spec = crd.get('spec') or {}
    for item in spec.get('versions') or []:
        if item.get('name') == version:
            schema = (item.get('schema') or {}).get('openAPIV3Schema')
            return schema if isinstance(schema, Mapping) else None
    schema = (spec.get('validation') or {}).get('openAPIV3Schema')  # the old v1beta1 form, for one schema
    return schema if isinstance(schema, Mapping) else None


def pruned_at(schema: Mapping[str, Any] | None, probe: Sequence[str | None]) -> FieldPath | None:
    """
    The first part of the path that a structural schema would prune, or ``None`` if the path is kept.

    A known property is descended into; an unknown key is kept where the
    node has ``x-kubernetes-preserve-unknown-fields: true`` (everything
    below it), or described by ``additionalProperties`` (a map); otherwise
    it is pruned. ``None`` in the probe stands for any key.
    """
    if schema is None:
        return None
    node: Mapping[str, Any] = schema
    walked: FieldPath = ()
    for part in probe:
        shown = part if part is not None else '*'
        properties = node.get('properties')
        properties = properties if isinstance(properties, Mapping) else {}
        additional = node.get('additionalProperties')
        if part is not None and isinstance(properties.get(part), Mapping):
            node = properties[part]
        elif node.get('x-kubernetes-preserve-unknown-fields') is True or additional is True:
            return None
        elif isinstance(additional, Mapping):
            node = additional
        else:
            return walked + (shown,)
        walked = walked + (shown,)
    return None
