"""Running real operators as ``kopf run`` subprocesses in end-to-end tests."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.e2e.kubeapi import wait_for

OPERATORS = Path(__file__).parent / 'operators'
REPO = Path(__file__).parents[2]


class OperatorProcess:
    """One ``kopf run`` process with its output captured in a file."""

    def __init__(self, script: Path, *, kubeconfig: Path, namespace: str, env: dict[str, str], log: Path) -> None:
        self.log = log
        self._log_file = log.open('ab')
        self.process = subprocess.Popen(
            [sys.executable, '-m', 'kopf', 'run', str(script), '--verbose', '-n', namespace],
            env={**os.environ, 'KUBECONFIG': str(kubeconfig), 'PYTHONPATH': str(REPO), **env},
            stdout=self._log_file, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)

    @property
    def output(self) -> str:
        return self.log.read_text(errors='replace')

    def wait_for_output(self, text: str, *, timeout: float = 30) -> None:
        wait_for(lambda: text in self.output or self.process.poll() is not None, timeout=timeout,
                 what=f"{text!r} in the operator's output")
        assert text in self.output, f"The operator exited with {self.process.returncode}:\n{self.output}"

    def stop(self, *, timeout: float = 20) -> int:
        """Stop gracefully (SIGTERM), as a user would; kill if it hangs."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"The operator did not stop within {timeout}s:\n{self.output}") from None
        self._log_file.close()
        return self.process.returncode

    def kill(self) -> None:
        """Kill abruptly (SIGKILL), as a crash or an evicted pod would end."""
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
