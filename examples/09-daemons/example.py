"""
Daemons and timers: background work beside every KopfExample, for as long as it exists.

* `monitor` -- an async daemon: it logs the object's field every 2 seconds
  and stops when the object is deleted (or the operator exits); its
  `spec` is live: it shows every change of the object. Were it still
  running a second after its stop, it would be cancelled.
* `tidy` -- a plain (threaded) daemon: it sleeps with `stopped.wait()`, so
  that it wakes up at once when it must stop, and takes a second to tidy
  up; the object's deletion waits for it.
* `heartbeat` -- a timer: every 3 seconds, it counts its beats in the
  object's status.
"""
import time

import kopf


# With a cancellation_timeout, an async daemon is cancelled once its cancellation_backoff is over:
# give it the time to exit on its own first.
@kopf.daemon('kopfexamples', cancellation_backoff=1, cancellation_timeout=5)
async def monitor(stopped, name, spec, logger, **kwargs):
    while not stopped:
        logger.info(f"{name}: the field is {spec.get('field')!r}.")
        await stopped.wait(2)
    logger.info(f"{name}: the monitor has stopped ({stopped.reason.name}).")


@kopf.daemon('kopfexamples')
def tidy(stopped, name, logger, **kwargs):
    while not stopped:
        stopped.wait(10)
    time.sleep(1)  # the deletion waits for this
    logger.info(f"{name}: tidied up after {stopped.reason.name}.")


@kopf.timer('kopfexamples', interval=3)
def heartbeat(status, patch, **kwargs):
    patch.status['beats'] = status.get('beats', 0) + 1
