"""Running real operators as subprocesses (``kopf run`` or a script) in end-to-end tests."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from kopf.testing import wait_for

T = TypeVar('T')

OPERATORS = Path(__file__).parent / 'operators'
REPO = Path(__file__).parents[2]
TIMEOUT = 30.0
# A 403 as the server says it, not the milliseconds of a log line's time (``12:34:56,403``).
FORBIDDEN = r'(?<![,.])\b403\b|[Ff]orbidden'


def kopf_run(script: Path, *, namespace: str) -> list[str]:
    """The command line of ``kopf run`` for one script in one namespace."""
    return [sys.executable, '-m', 'kopf', 'run', str(script), '--verbose', '-n', namespace]


class OperatorProcess:
    """One operator process with its output captured in a file."""

    def __init__(self, argv: list[str], *, kubeconfig: Path, log: Path, env: dict[str, str] | None = None,
                 cwd: Path = REPO) -> None:
        self.log = log
        self._log_file = log.open('ab')
        self.process = subprocess.Popen(
            argv, env={**os.environ, 'KUBECONFIG': str(kubeconfig), 'PYTHONPATH': str(REPO), **(env or {})},
            stdout=self._log_file, stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True)

    @property
    def output(self) -> str:
        return self.log.read_text(errors='replace')

    def wait_for_output(self, text: str, *, timeout: float = TIMEOUT) -> None:
        self.wait(lambda: text in self.output, what=f"{text!r} in the output", timeout=timeout)

    def wait(self, condition: Callable[[], T | None], *, what: str, timeout: float = TIMEOUT) -> T:
        """Wait for a condition; on failure, show the operator's output (and fail early if it died)."""
        def check() -> T | bool | None:
            result = condition()
            if not result and self.process.poll() is not None:
                return True  # stop waiting: it will never come true now
            return result

        try:
            result = wait_for(check, timeout=timeout, what=what)
        except AssertionError as e:
            raise AssertionError(f"{e}\n--- operator output ---\n{self.output}") from None
        if self.process.poll() is not None and not condition():
            raise AssertionError(f"The operator exited with {self.process.returncode} before {what}.\n"
                                 f"--- operator output ---\n{self.output}")
        return result  # type: ignore[return-value]

    def stop(self, *, timeout: float = 20) -> int:
        """Stop gracefully (SIGTERM), as a user would; kill and fail if it hangs."""
        try:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    self.kill()
                    raise AssertionError(f"Not stopped by SIGTERM within {timeout}s:\n{self.output}") from None
        finally:
            self._log_file.close()
        return self.process.returncode

    def kill(self) -> None:
        """Kill abruptly (SIGKILL), as a crash or an evicted pod would end it."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        self._log_file.close()


def read_calls(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def handlers_called(path: Path) -> list[str]:
    return [call['handler'] for call in read_calls(path)]
