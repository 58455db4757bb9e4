"""Identifiers shared by the registry, the states and the storages."""
from typing import NewType

# A handler's id: ``fn``, ``parent/child`` for sub-handlers, ``fn/spec.field``
# for field handlers. Free text: storages map it to their own key formats.
HandlerId = NewType('HandlerId', str)
