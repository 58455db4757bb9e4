"""
Errors of storages that the operator reports as such, rather than as a failure somewhere in the handling.
"""
from __future__ import annotations


class StorageError(Exception):
    """
    A storage cannot be used, e.g. its database cannot be opened when the operator starts.

    The message names the storage and the place (a file, a namespace) and
    says what to do. Storages raise it from ``__aenter__`` to stop the
    operator at startup with that one line instead of failing mid-handling.
    """
