"""
Storages named on the command line: ``KIND[:ARGUMENT...]``, one name for a progress and a diff-base storage.

==================================  =====================================  ======================================
Spec                                Progress storage                       Diff-base storage
==================================  =====================================  ======================================
``smart[:PREFIX]``                  ``SmartProgressStorage(prefix=)``      ``AnnotationsDiffBaseStorage(prefix=)``
``annotations[:PREFIX]``            ``AnnotationsProgressStorage(prefix=)``  ``AnnotationsDiffBaseStorage(prefix=)``
``status[:NAME]``                   ``StatusProgressStorage(name=)``       ``StatusDiffBaseStorage(name=)``
``sqlite:PATH``                     ``SQLiteProgressStorage(path=)``       ``SQLiteDiffBaseStorage(path=)``
``configmaps[:PREFIX[:NAMESPACE]]``  ``ConfigMapProgressStorage(...)``      ``ConfigMapDiffBaseStorage(...)``
==================================  =====================================  ======================================

The defaults are those of the framework: ``smart`` and ``kopf.zalando.org``.
"""
from __future__ import annotations

from kopf._storage.configmaps import ConfigMapDiffBaseStorage, ConfigMapProgressStorage
from kopf._storage.diffbase import AnnotationsDiffBaseStorage, DiffBaseStorage, StatusDiffBaseStorage
from kopf._storage.progress import (
    AnnotationsProgressStorage,
    ProgressStorage,
    SmartProgressStorage,
    StatusProgressStorage,
)
from kopf._storage.sqlite import SQLiteDiffBaseStorage, SQLiteProgressStorage

DEFAULT = 'smart'
KINDS = ('smart', 'annotations', 'status', 'sqlite', 'configmaps')
USAGE = ("a storage is one of: smart[:PREFIX], annotations[:PREFIX], status[:NAME], sqlite:PATH, "
         "configmaps[:PREFIX[:NAMESPACE]]")


class SpecError(ValueError):
    """A storage spec that cannot be understood; the message says what is accepted."""


def progress_storage(spec: str) -> ProgressStorage:
    """The progress storage that a spec names."""
    kind, args = _split(spec)
    try:
        if kind == 'smart':
            return SmartProgressStorage(prefix=_one(spec, args) or 'kopf.zalando.org')
        if kind == 'annotations':
            return AnnotationsProgressStorage(prefix=_one(spec, args) or 'kopf.zalando.org')
        if kind == 'status':
            return StatusProgressStorage(name=_one(spec, args) or 'kopf')
        if kind == 'sqlite':
            return SQLiteProgressStorage(path=_path(spec, args))
        prefix, namespace = _configmaps(spec, args)
        return ConfigMapProgressStorage(prefix=prefix, namespace=namespace)
    except ValueError as e:
        raise SpecError(f"Cannot use the storage {spec!r}: {e}") from None


def diffbase_storage(spec: str) -> DiffBaseStorage:
    """The diff-base storage that a spec names."""
    kind, args = _split(spec)
    try:
        if kind in ('smart', 'annotations'):
            return AnnotationsDiffBaseStorage(prefix=_one(spec, args) or 'kopf.zalando.org')
        if kind == 'status':
            return StatusDiffBaseStorage(name=_one(spec, args) or 'kopf')
        if kind == 'sqlite':
            return SQLiteDiffBaseStorage(path=_path(spec, args))
        prefix, namespace = _configmaps(spec, args)
        return ConfigMapDiffBaseStorage(prefix=prefix, namespace=namespace)
    except ValueError as e:
        raise SpecError(f"Cannot use the storage {spec!r}: {e}") from None


def _split(spec: str) -> tuple[str, list[str]]:
    kind, _, rest = spec.partition(':')
    if kind not in KINDS:
        raise SpecError(f"Unknown storage {spec!r}: {USAGE}.")
    if kind == 'sqlite':
        return kind, [rest] if rest else []  # paths may contain colons
    return kind, rest.split(':') if rest else []


def _one(spec: str, args: list[str]) -> str | None:
    if len(args) > 1:
        raise SpecError(f"Too many parts in the storage {spec!r}: {USAGE}.")
    return args[0] if args and args[0] else None


def _path(spec: str, args: list[str]) -> str:
    if not args:
        raise SpecError(f"The storage {spec!r} needs a path: sqlite:PATH.")
    return args[0]


def _configmaps(spec: str, args: list[str]) -> tuple[str, str | None]:
    if len(args) > 2:
        raise SpecError(f"Too many parts in the storage {spec!r}: configmaps[:PREFIX[:NAMESPACE]].")
    prefix = args[0] if args and args[0] else 'kopf'
    namespace = args[1] if len(args) > 1 and args[1] else None
    return prefix, namespace
