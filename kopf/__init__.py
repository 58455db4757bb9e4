"""
kopf: a framework for writing Kubernetes operators in Python.

This module only re-exports the public API; everything lives in sub-packages.
"""
from kopf.config import OperatorConfig, OperatorSettings
from kopf.storage.diffbase import (
    AnnotationsDiffBaseStorage,
    DiffBaseStorage,
    MultiDiffBaseStorage,
    StatusDiffBaseStorage,
)
from kopf.storage.progress import (
    AnnotationsProgressStorage,
    MultiProgressStorage,
    ProgressStorage,
    SmartProgressStorage,
    StatusProgressStorage,
)
from kopf.storage.records import ProgressRecord
from kopf.structs.bodies import Body, Meta
from kopf.structs.diffs import Diff, DiffItem, DiffOperation
from kopf.structs.patches import Patch

__all__ = [
    'AnnotationsDiffBaseStorage',
    'AnnotationsProgressStorage',
    'Body',
    'Diff',
    'DiffBaseStorage',
    'DiffItem',
    'DiffOperation',
    'Meta',
    'MultiDiffBaseStorage',
    'MultiProgressStorage',
    'OperatorConfig',
    'OperatorSettings',
    'Patch',
    'ProgressRecord',
    'ProgressStorage',
    'SmartProgressStorage',
    'StatusDiffBaseStorage',
    'StatusProgressStorage',
]
