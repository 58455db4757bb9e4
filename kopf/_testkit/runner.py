"""
:class:`KopfRunner`: ``kopf run`` in a thread of the test process, as Kopf's users know it.

On exit from its ``with`` block, it is stopped gracefully; its output, exit
code and exception are available for assertions (``registry=`` and
``settings=`` as in Kopf). Every runner reports to :mod:`.tracking`, so that
one that a test forgets to stop is stopped at the end of the session.
"""
from __future__ import annotations

import threading
import types
from collections.abc import Sequence
from typing import Any

import click.testing

from kopf import cli
from kopf._handlers.registries import OperatorRegistry
from kopf._testkit import tracking
from kopf.config import OperatorConfig

LEAKED_STOP_TIMEOUT = 30.0


class KopfRunner:
    """Runs ``kopf`` CLI commands in a thread (see the module docstring)."""

    def __init__(
            self,
            args: Sequence[str],
            *,
            reraise: bool = True,
            timeout: float | None = None,
            ready_timeout: float | None = None,
            env: dict[str, str | None] | None = None,
            registry: OperatorRegistry | None = None,
            settings: OperatorConfig | None = None,
    ) -> None:
        self.args = list(args)
        self.registry = registry
        self.settings = settings
        self.reraise = reraise
        self.timeout = timeout
        self.ready_timeout = ready_timeout
        self.env = env
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._result: click.testing.Result | None = None

    def __enter__(self) -> KopfRunner:
        self._thread = threading.Thread(target=self._target, name='kopf-runner', daemon=True)
        self._thread.start()
        tracking.started(self, self._stop_leaked)
        if self.ready_timeout is not None:
            self._ready.wait(timeout=self.ready_timeout)
        return self

    def __exit__(
            self,
            exc_type: type[BaseException] | None,
            exc_val: BaseException | None,
            exc_tb: types.TracebackType | None,
    ) -> None:
        tracking.stopped(self)
        self._stop.set()
        assert self._thread is not None
        self._thread.join(timeout=self.timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"The operator did not stop within {self.timeout} seconds.")
        if self.reraise and exc_val is None and self.exception is not None:
            if not isinstance(self.exception, SystemExit) or self.exit_code:
                raise self.exception

    def _stop_leaked(self) -> None:
        """Stop a runner that its test has left running (the pytest plugin does it at the end of the session)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout or LEAKED_STOP_TIMEOUT)  # a daemon thread: not waited for longer

    def _target(self) -> None:
        runner = click.testing.CliRunner()
        controls = cli.CLIControls(stop_flag=self._stop, ready_flag=self._ready,
                                   registry=self.registry, settings=self.settings)
        self._result = runner.invoke(cli.main, self.args, obj=controls, env=self.env, catch_exceptions=True)
        self._ready.set()  # unblock a waiting __enter__ if the operator failed early

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    @property
    def finished(self) -> bool:
        return self._result is not None

    @property
    def result(self) -> click.testing.Result:
        if self._result is None:
            raise RuntimeError("The operator is still running; its result is known after the `with` block.")
        return self._result

    @property
    def output(self) -> str:
        return self.result.output

    @property
    def exit_code(self) -> int:
        return self.result.exit_code

    @property
    def exception(self) -> BaseException | None:
        exc: Any = self.result.exception
        return exc  # type: ignore[no-any-return]
