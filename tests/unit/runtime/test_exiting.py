"""Exiting ``kopf run``: stop signals before the operator runs; no waiting for idle threads after it."""
import concurrent.futures
import os
import signal

import pytest

from kopf._runtime import exiting


@pytest.mark.parametrize('sig', [signal.SIGTERM, signal.SIGINT])
def test_a_signal_before_the_operator_runs_ends_it_cleanly(sig):
    previous = signal.getsignal(sig)
    with pytest.raises(exiting.StoppedEarly) as info:
        with exiting.early_signals():
            os.kill(os.getpid(), sig)  # delivered before it returns; handled at the next call, the one below
            pytest.fail("The signal has not stopped it.")
    assert info.value.code == 0
    assert info.value.signal == sig
    assert signal.getsignal(sig) is previous  # restored


def test_idle_executor_threads_do_not_keep_the_process(monkeypatch):
    exits = []
    monkeypatch.setattr(os, '_exit', exits.append)
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=2)
    assert executor.submit(lambda: 42).result() == 42
    exiting.abandon_handlers(executor, code=0)
    assert exits == []  # nothing was running: the process ends as usual


def test_custom_executors_are_left_to_the_application(monkeypatch):
    exits = []
    monkeypatch.setattr(os, '_exit', exits.append)

    class Inline(concurrent.futures.Executor):
        pass
    exiting.abandon_handlers(Inline(), code=0)
    assert exits == []
