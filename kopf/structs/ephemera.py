"""Operator-scoped memory that handlers share, and which does not survive restarts."""
from __future__ import annotations

from typing import Any


class Memo(dict[str, Any]):
    """A dict with attribute access: ``memo.counter = 1`` is ``memo['counter'] = 1``."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def __delattr__(self, name: str) -> None:
        try:
            del self[name]
        except KeyError:
            raise AttributeError(name) from None
