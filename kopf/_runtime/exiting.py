"""
Exiting the process of ``kopf run``: stop signals before the operator runs, and threads left behind after it.

Once running, the operator handles SIGINT and SIGTERM itself (it stops
gracefully: see :mod:`~kopf._runtime.running`). Two moments are outside of
that:

* **Before it runs**, while the operator's code is imported and the event
  loop starts: a stop signal ends the process at once, cleanly (exit code 0)
  instead of killing it (the default action of SIGTERM, exit code -15).
  Only the start of the Python interpreter itself, before kopf is imported,
  is still without this.
* **After it has stopped**: synchronous handlers run in the threads of the
  executor (``config.execution.executor``), and a thread cannot be
  cancelled. The handlers' workers give them ``config.batching.exit_timeout``
  seconds to finish; one that still runs then is abandoned: the process
  exits without waiting for it, with a warning. Its outcome is lost, as in
  a crash; the handler runs again after the restart.

Both apply to the process that ``kopf run`` owns, never to an application
that embeds the operator (e.g. ``kopf.testing.KopfRunner``).
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType

logger = logging.getLogger('kopf._runtime.exiting')

# How long idle executor threads are given to end, to tell them from those still running a handler.
IDLE_THREADS_TIMEOUT = 0.5


class StoppedEarly(SystemExit):
    """A stop signal has come before the operator has started: the process exits cleanly (code 0)."""

    def __init__(self, signum: int) -> None:
        super().__init__(0)
        self.signal = signal.Signals(signum)


@contextlib.contextmanager
def early_signals() -> Iterator[None]:
    """Until the operator handles signals itself, SIGINT and SIGTERM end the process cleanly."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        raise StoppedEarly(signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(sig, handler)


def abandon_handlers(executor: concurrent.futures.Executor, *, code: int, error: str | None = None) -> None:
    """
    If synchronous handlers still run in the executor's threads, exit the process now, without them.

    Otherwise (the usual case), return: the process ends as usual. ``code``
    is the exit code; ``error`` the message to show as ``Error: ...`` (as the
    command line would have shown it).
    """
    if not isinstance(executor, concurrent.futures.ThreadPoolExecutor):
        return  # a custom executor is the application's to shut down
    threads = list(getattr(executor, '_threads', ()))
    executor.shutdown(wait=False, cancel_futures=True)  # idle threads end, queued handlers never start
    deadline = time.monotonic() + IDLE_THREADS_TIMEOUT
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    busy = [thread for thread in threads if thread.is_alive()]
    if not busy:
        return
    logger.warning("%d synchronous handler(s) still running after the operator has stopped (in threads %s); "
                   "exiting without waiting for them. Their outcomes are lost: they run again after a restart.",
                   len(busy), ', '.join(thread.name for thread in busy))
    if error is not None:
        print(f"Error: {error}", file=sys.stderr)
    logging.shutdown()  # flush the log handlers: os._exit() skips everything else
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
