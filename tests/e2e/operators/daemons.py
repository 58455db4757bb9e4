"""
Daemons and timers for end-to-end tests, on ConfigMaps labelled ``e2e-daemons: on``.

Every start, tick and stop is recorded as a JSON line in ``$E2E_CALLS``
(handler, event, object name, stop reason, time).

* ``watcher``: an ``async`` daemon that ticks until it is asked to stop.
* ``worker``: a plain (threaded) daemon that ticks, and tidies up for a second after its stop:
  the object's deletion must wait for it.
* ``stubborn``: a plain daemon that ignores its stop flag (on objects also labelled ``stubborn: yes``);
  it is abandoned after its ``cancellation_timeout``.
* ``pinger``: a timer that counts its ticks in an annotation of the object, through ``patch``.
"""
import json
import os
import pathlib
import time

import kopf

CALLS = pathlib.Path(os.environ['E2E_CALLS'])
ON = {'e2e-daemons': 'on'}


def record(handler, event, name, **details):
    with CALLS.open('a') as f:
        f.write(json.dumps({'handler': handler, 'event': event, 'name': name, 't': time.time(),
                            'pid': os.getpid(), **details}) + '\n')


@kopf.on.startup()
def configure(settings, **_):
    settings.background.exit_timeout = 3.0


@kopf.daemon('configmaps', labels=ON)
async def watcher(stopped, name, **_):
    record('watcher', 'start', name)
    while not stopped:
        record('watcher', 'tick', name)
        await stopped.wait(0.3)
    record('watcher', 'stop', name, reason=stopped.reason.name)


@kopf.daemon('configmaps', labels=ON)
def worker(stopped, name, **_):
    record('worker', 'start', name)
    while not stopped:
        record('worker', 'tick', name)
        stopped.wait(0.3)
    time.sleep(1.0)  # tidying up: the deletion waits for it
    record('worker', 'stop', name, reason=stopped.reason.name)


@kopf.daemon('configmaps', labels={**ON, 'stubborn': 'yes'}, cancellation_timeout=1.0)
def stubborn(name, **_):
    record('stubborn', 'start', name)
    while True:
        time.sleep(0.2)


@kopf.timer('configmaps', labels=ON, interval=0.5)
def pinger(patch, annotations, name, **_):
    count = int(annotations.get('e2e-pings', '0')) + 1
    record('pinger', 'tick', name, count=count)
    patch.metadata.annotations['e2e-pings'] = str(count)
