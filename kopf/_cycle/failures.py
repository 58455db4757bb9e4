"""
Repeated failures: reported once, then again only now and then, with a count.

A failure that comes back on every event of an object (a broken storage, a
permission missing, a bug) would otherwise flood the log with the same
traceback many times a minute and bury everything else. A
:class:`RepeatLimiter` lets the first report of a failure through, keeps
quiet about the same failure of the same object for a while, and then lets
one report through again, saying how often it has happened meanwhile.

The limiter remembers a bounded number of failures (the least recently
reported ones are forgotten first), so that an operator with many failing
objects does not grow without bound.
"""
from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable, Hashable

# How long the same failure of the same object is not reported again.
REPEAT_INTERVAL = 600.0
# How many distinct failures are remembered at most.
CAPACITY = 1000


@dataclasses.dataclass
class _Seen:
    reported: float
    suppressed: int = 0


class RepeatLimiter:
    """Decides which reports of repeated failures are logged; see the module docstring."""

    def __init__(
            self,
            *,
            interval: float = REPEAT_INTERVAL,
            capacity: int = CAPACITY,
            clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval = interval
        self.capacity = capacity
        self.clock = clock
        self._seen: collections.OrderedDict[Hashable, _Seen] = collections.OrderedDict()

    def admit(self, key: Hashable) -> int | None:
        """
        Whether to report this failure now: ``None`` if not; else how many reports were held back since the last.

        ``key`` identifies "the same failure", e.g. the object and the
        exception's type and message.
        """
        now = self.clock()
        seen = self._seen.get(key)
        if seen is not None and now - seen.reported < self.interval:
            seen.suppressed += 1
            return None
        suppressed = seen.suppressed if seen is not None else 0
        self._seen[key] = _Seen(reported=now)
        self._seen.move_to_end(key)
        while len(self._seen) > self.capacity:
            self._seen.popitem(last=False)
        return suppressed

    def __len__(self) -> int:
        return len(self._seen)


def signature(error: BaseException) -> tuple[str, str]:
    """What makes two failures "the same": the exception's type and message."""
    return type(error).__name__, str(error)


def repeated(suppressed: int, interval: float = REPEAT_INTERVAL) -> str:
    """A suffix for a report after held-back repeats (empty if none were held back)."""
    if not suppressed:
        return ''
    return f" (the same failure {suppressed} more time(s) before, not logged; reported at most every {interval:g}s)"
