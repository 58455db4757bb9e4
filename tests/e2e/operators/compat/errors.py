"""
Errors and retries, as a Kopf user writes them: temporary, permanent, arbitrary errors, retries, timeouts.

Every call is recorded as a JSON line in ``$E2E_CALLS`` with its ``retry`` number.
"""
import json
import os
from typing import Any

import kopf

CALLS = os.environ['E2E_CALLS']


def record(handler: str, name: str, **details: Any) -> None:
    with open(CALLS, 'a') as f:
        f.write(json.dumps({'handler': handler, 'name': name, **details}) + '\n')


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.watching.server_timeout = 10


@kopf.on.create('kopfcompats')
def permanent(name: str, retry: int, **_: Any) -> None:
    record('permanent', name, retry=retry)
    raise kopf.PermanentError("Cannot work with this spec.")


@kopf.on.create('kopfcompats')
def temporary(name: str, retry: int, **_: Any) -> Any:
    record('temporary', name, retry=retry)
    if retry < 2:
        raise kopf.TemporaryError("Not yet.", delay=0.3)
    return {'attempts': retry + 1}


@kopf.on.create('kopfcompats', retries=3, backoff=0.3)
def exhausted(name: str, retry: int, **_: Any) -> None:
    record('exhausted', name, retry=retry)
    raise ValueError(f"Failing on attempt #{retry + 1}.")


@kopf.on.create('kopfcompats', backoff=0.3)
def arbitrary(name: str, retry: int, **_: Any) -> Any:
    record('arbitrary', name, retry=retry)
    if not retry:
        raise RuntimeError("Flaky once.")
    return 'recovered'


@kopf.on.create('kopfcompats', errors=kopf.ErrorsMode.IGNORED)
def ignored(name: str, retry: int, **_: Any) -> None:
    record('ignored', name, retry=retry)
    raise RuntimeError("Ignored.")


@kopf.on.create('kopfcompats', errors=kopf.ErrorsMode.PERMANENT)
def permanent_mode(name: str, retry: int, **_: Any) -> None:
    record('permanent_mode', name, retry=retry)
    raise RuntimeError("Permanent by mode.")


@kopf.on.create('kopfcompats', timeout=1.0)
def timed_out(name: str, retry: int, **_: Any) -> None:
    record('timed_out', name, retry=retry)
    raise kopf.TemporaryError("Slow.", delay=2.0)  # the next attempt would be after the timeout


@kopf.on.create('kopfcompats')
def last(name: str, **_: Any) -> Any:
    record('last', name)
    return 'done'
