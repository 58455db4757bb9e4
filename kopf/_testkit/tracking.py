"""
The operators that tests run in their process, and the test that started each: to stop what a test leaks.

:class:`kopf.testing.KopfRunner` reports here when it starts and stops; the
pytest plugin says which test runs (:data:`current_test`), and at the end
of the session stops the runners still running, naming the tests that
started them.
"""
from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable

current_test: str | None = None  # the node id of the running test, set by the pytest plugin


@dataclasses.dataclass(frozen=True)
class Running:
    """A runner still running: who started it, and how to stop it."""

    test: str | None
    stop: Callable[[], None]


_running: dict[int, Running] = {}
_lock = threading.Lock()


def started(runner: object, stop: Callable[[], None]) -> None:
    with _lock:
        _running[id(runner)] = Running(test=current_test, stop=stop)


def stopped(runner: object) -> None:
    with _lock:
        _running.pop(id(runner), None)


def leaked() -> list[Running]:
    """The runners still running (and forgotten here from now on: the caller stops them)."""
    with _lock:
        found = list(_running.values())
        _running.clear()
    return found
