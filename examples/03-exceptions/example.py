"""
Errors and retries: how a handler's exceptions decide what happens next.

* `kopf.TemporaryError` -- try again after `delay` seconds.
* `kopf.PermanentError` -- give up; the handler is not called again for this cause.
* any other exception -- as the handler's `errors=` says: by default, like a
  temporary error with the handler's `backoff=` as the delay.
* `retries=` and `timeout=` limit how long a handler is retried.

Create an object and watch the log: each handler ends up succeeded or failed,
and the other handlers are not blocked by a failing one.
"""
import kopf


@kopf.on.create('kopfexamples')
def eventually_succeeds(retry, logger, **kwargs):
    if retry < 1:
        raise kopf.TemporaryError("The backing service is not ready yet.", delay=2)
    logger.info(f"Succeeded on attempt #{retry + 1}.")
    return {'attempts': retry + 1}


@kopf.on.create('kopfexamples')
def fails_permanently(**kwargs):
    raise kopf.PermanentError("The spec cannot work: giving up.")


@kopf.on.create('kopfexamples', retries=3, backoff=1)
def runs_out_of_retries(retry, **kwargs):
    raise ValueError(f"Something unexpected (attempt #{retry + 1}).")


@kopf.on.create('kopfexamples', errors=kopf.ErrorsMode.IGNORED)
def errors_ignored(**kwargs):
    raise RuntimeError("Logged, but treated as done.")
