"""
Daemons and timers, as a Kopf user writes them: they tick while the object exists and stop on deletion.

Every tick and every stop is recorded as a JSON line in ``$E2E_CALLS``.
"""
import asyncio
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
    settings.background.cancellation_polling = 0.5  # how often a deletion looks whether the daemons have exited


@kopf.daemon('kopfcompats')
def sync_daemon(name: str, stopped: kopf.DaemonStopped, **_: Any) -> None:
    while not stopped:
        record('sync_daemon', name)
        stopped.wait(0.3)
    record('sync_daemon_stopped', name, reason=stopped.reason.name if stopped.reason else None)


@kopf.daemon('kopfcompats', cancellation_timeout=1.0)
async def async_daemon(name: str, stopped: kopf.DaemonStopped, **_: Any) -> None:
    try:
        while True:
            record('async_daemon', name)
            await asyncio.sleep(0.3)
    except asyncio.CancelledError:
        record('async_daemon_cancelled', name, reason=stopped.reason.name if stopped.reason else None)
        raise


@kopf.timer('kopfcompats', interval=0.5)
def timer(name: str, patch: kopf.Patch, status: kopf.Status, **_: Any) -> None:
    ticks = (status.get('ticks') or 0) + 1
    record('timer', name, ticks=ticks)
    patch.status['ticks'] = ticks


@kopf.timer('kopfcompats', interval=0.3, initial_delay=10)
def delayed(name: str, **_: Any) -> None:
    record('delayed', name)
