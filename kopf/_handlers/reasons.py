"""
Why a handling cycle runs: the cause's kind, by which handlers are declared and which they receive as ``reason``.

The handling cycle (:mod:`~kopf._cycle.causation`) decides it; the handlers
of create, update, delete and resume are registered for one of them.
"""
from __future__ import annotations

import enum


class Reason(str, enum.Enum):
    """Why a handling cycle runs; handlers receive it as ``reason``."""

    CREATE = 'create'
    UPDATE = 'update'
    DELETE = 'delete'
    RESUME = 'resume'
    NOOP = 'noop'
    GONE = 'gone'
    # A pseudo-cause: our finalizer must be added before any change handler runs.
    FINALIZER = 'finalizer'

    def __str__(self) -> str:
        return self.value
