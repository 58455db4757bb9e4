"""
The type names that operators annotate their handlers' arguments with.

``def create_fn(spec: kopf.Spec, labels: kopf.Labels, logger: kopf.Logger, **_)``:
these names only describe what the framework passes; they carry no behaviour.
The references are those of the Kubernetes API (``metadata.ownerReferences``
items and ``involvedObject``-style object references).
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeAlias, TypedDict

from kopf._structs.bodies import RawBody

Labels: TypeAlias = Mapping[str, str]
Annotations: TypeAlias = Mapping[str, str]

# What handlers receive as ``logger``: a per-object logger adapter, or a plain logger in activities.
Logger: TypeAlias = logging.Logger | logging.LoggerAdapter[Any]

# The ``type`` of a watch event; ``None`` for the objects of the initial listing.
RawEventType: TypeAlias = Literal[None, 'ADDED', 'MODIFIED', 'DELETED', 'BOOKMARK']

# A function that modifies a raw body in place: a transformation function of ``patch.fns``.
PatchFn: TypeAlias = Callable[[dict[str, Any]], None]


class RawEvent(TypedDict):
    """A watch event as the API server sends it: what happened and the object."""

    type: RawEventType
    object: RawBody


class _OwnerReferenceBase(TypedDict):
    apiVersion: str
    kind: str
    name: str
    uid: str


class OwnerReference(_OwnerReferenceBase, total=False):
    """An item of ``metadata.ownerReferences``: the owner, and how it owns."""

    controller: bool
    blockOwnerDeletion: bool


class ObjectReference(TypedDict, total=False):
    """Which object something is about: as in an Event's ``involvedObject``."""

    apiVersion: str
    kind: str
    namespace: str | None
    name: str
    uid: str

