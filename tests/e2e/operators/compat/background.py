"""
Daemon and timer forms from Kopf's documentation, as a Kopf user writes them: callable initial delays,
results delivered into the status, restarts by temporary errors, the error options, the stop flag's
reasons when filters stop matching, and patches from timers.

Every call is recorded as a JSON line in ``$E2E_CALLS``.
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
    settings.background.cancellation_polling = 0.5


def get_delay(body: kopf.Body, **_: Any) -> float:
    record('get_delay', body['metadata']['name'])
    return float(body.get('spec', {}).get('delay', 0))


@kopf.daemon('kopfcompats', initial_delay=get_delay)
async def delayed_daemon(name: str, stopped: kopf.DaemonStopped, **_: Any) -> None:
    record('delayed_daemon', name)
    await stopped.wait(60)


@kopf.daemon('kopfcompats')
async def finisher(name: str, **_: Any) -> Any:
    record('finisher', name)
    return {'finished': True}


@kopf.daemon('kopfcompats', errors=kopf.ErrorsMode.TEMPORARY, backoff=0.3, retries=10)
def monitor(name: str, retry: int, **_: Any) -> None:
    record('monitor', name, retry=retry)
    if retry < 2:
        raise kopf.TemporaryError("I'll be back!", delay=0.3)
    elif retry < 4:
        raise OSError("Something happened!")
    else:
        raise kopf.PermanentError("Bye-bye!")


@kopf.daemon('kopfcompats', labels={'watched': 'yes'})
async def watcher(name: str, stopped: kopf.DaemonStopped, **_: Any) -> None:
    record('watcher', name)
    while not stopped:
        await stopped.wait(60)
    record('watcher_stopped', name, reason=stopped.reason.name if stopped.reason else None)


@kopf.timer('kopfcompats', interval=0.3, initial_delay=get_delay)
def ticker(name: str, patch: kopf.Patch, status: kopf.Status, **_: Any) -> Any:
    ticks = (status.get('ticks') or 0) + 1
    patch.status['ticks'] = ticks
    if ticks == 3:
        record('ticker', name, ticks=ticks)
    return 'ticked'
