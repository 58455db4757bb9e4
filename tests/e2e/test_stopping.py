"""
Stopping ``kopf run`` and failing it at startup, as Kubernetes and new users do it.

SIGTERM (what Kubernetes sends to a pod) and SIGINT (Ctrl+C) stop the
operator within seconds, whatever it is doing: importing the operator's
code, running or retrying a startup handler, running a plain (synchronous)
handler that takes long. A configuration error in a startup handler fails
the operator at once, with one ``Error:`` line and exit code 1.
"""
from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.harness import OPERATORS, OperatorProcess, read_calls

SCRIPT = OPERATORS / 'stopping.py'


def kopf_run(namespace: str = 'default') -> list[str]:
    return [sys.executable, '-m', 'kopf', 'run', str(SCRIPT), '--verbose', '-n', namespace]


@pytest.fixture()
def start(tmp_path):
    """Start ``kopf run`` of the stopping operator; the kubeconfig is not needed before the startup is over."""
    started: list[OperatorProcess] = []
    calls = tmp_path / 'calls.jsonl'

    def start(kubeconfig: Path = tmp_path / 'no-kubeconfig', namespace: str = 'default',
              **env: str) -> OperatorProcess:
        process = OperatorProcess(kopf_run(namespace), kubeconfig=kubeconfig, log=tmp_path / f'op{len(started)}.log',
                                  env={'E2E_CALLS': str(calls), **env})
        started.append(process)
        return process

    start.calls = calls  # type: ignore[attr-defined]
    yield start
    for process in started:
        process.kill()


def stop(operator: OperatorProcess, sig: signal.Signals = signal.SIGTERM) -> tuple[int, float]:
    """Send the signal; the exit code and how long the exit took."""
    began = time.monotonic()
    operator.process.send_signal(sig)
    code = operator.process.wait(timeout=30)
    return code, time.monotonic() - began


def called(start, handler: str) -> bool:
    return any(call['handler'] == handler for call in read_calls(start.calls))


@pytest.mark.parametrize('sig', [signal.SIGTERM, signal.SIGINT], ids=['SIGTERM', 'SIGINT'])
def test_a_signal_stops_an_operator_whose_startup_handler_waits_for_a_retry(start, sig):
    operator = start(E2E_STARTUP='retry')
    operator.wait_for_output("Handler 'configure' failed temporarily: the database is not ready")
    code, took = stop(operator, sig)
    assert code == 0, operator.output
    assert took < 5, operator.output
    assert 'The operator was stopped while its startup handlers were running or waiting for a retry' \
           in operator.output
    assert 'The operator has stopped.' in operator.output
    assert [call['retry'] for call in read_calls(start.calls)] == [0]


def test_sigterm_stops_an_operator_whose_plain_startup_handler_is_still_running(start):
    operator = start(E2E_STARTUP='sleep')
    operator.wait(lambda: called(start, 'startup'), what="the startup handler to run")
    code, took = stop(operator)
    assert code == 0, operator.output
    assert took < 5, operator.output
    assert 'The operator has stopped.' in operator.output
    assert '1 synchronous handler(s) still running after the operator has stopped' in operator.output


def test_a_configuration_error_at_startup_fails_at_once_with_one_line(start):
    operator = start(E2E_STARTUP='bad-setting')
    code = operator.process.wait(timeout=30)
    output = operator.output
    assert code == 1, output
    errors = [line for line in output.splitlines() if line.startswith('Error:')]
    line = next(number for number, text in enumerate(SCRIPT.read_text().splitlines(), 1)
                if "progress_storage = 'annotations'" in text)
    assert errors == [
        f"Error: Startup handlers have failed: configure: config.persistence.progress_storage must be a "
        f"kopf.ProgressStorage, got str: 'annotations'. (stopping.py, line {line}, in configure) This is a "
        f"configuration error, not retried: fix it and start the operator again."], output
    assert 'Traceback' not in output
    assert len(read_calls(start.calls)) == 1  # not retried


def test_sigterm_while_the_operator_code_is_imported_exits_cleanly(start):
    operator = start(E2E_IMPORT_SLEEP='30')
    operator.wait(lambda: called(start, 'import'), what="the import of the operator code")
    code, took = stop(operator)
    assert code == 0, operator.output
    assert took < 5
    assert 'Stopped by SIGTERM before the operator has started.' in operator.output
    assert 'Traceback' not in operator.output


def test_sigterm_during_a_plain_handler_exits_within_the_grace_period(start, kube, kubeconfig, namespace):
    operator = start(kubeconfig=kubeconfig, namespace=namespace, E2E_HANDLER_SLEEP='600', E2E_EXIT_TIMEOUT='1')
    kube.create(f'/api/v1/namespaces/{namespace}/configmaps', {
        'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': 'cm', 'labels': {'e2e': 'stopping'}}})
    operator.wait(lambda: called(start, 'slow'), what="the slow handler to start")
    code, took = stop(operator)
    assert code == 0, operator.output
    assert took < 1 + 4, operator.output  # the grace period (exit_timeout) and a little for the rest
    assert 'The operator has stopped.' in operator.output
    assert '1 synchronous handler(s) still running after the operator has stopped' in operator.output
