"""
An operator for the tests of stopping and failing at startup, configured by environment variables.

Every handler call is recorded as a JSON line in ``$E2E_CALLS`` as it starts.

* ``E2E_IMPORT_SLEEP``: seconds the import of this file takes (after recording ``import``).
* ``E2E_STARTUP``: what the startup handler does: ``retry`` (fails temporarily, again in 60s),
  ``sleep`` (a plain function that sleeps for 10 minutes), ``bad-setting`` (assigns a string to
  ``config.persistence.progress_storage``); by default, it configures short timeouts.
* ``E2E_HANDLER_SLEEP``: seconds the (plain) create handler of ConfigMaps sleeps.
* ``E2E_EXIT_TIMEOUT``: ``config.batching.exit_timeout``.
"""
import json
import os
import pathlib
import time

import kopf

CALLS = pathlib.Path(os.environ['E2E_CALLS'])


def record(handler, **details):
    with CALLS.open('a') as f:
        f.write(json.dumps({'handler': handler, 'pid': os.getpid(), 'time': time.time(), **details}) + '\n')


if os.environ.get('E2E_IMPORT_SLEEP'):
    record('import')
    time.sleep(float(os.environ['E2E_IMPORT_SLEEP']))


@kopf.on.startup()
def configure(settings, retry, **_):
    record('startup', retry=retry)
    mode = os.environ.get('E2E_STARTUP')
    if mode == 'retry':
        raise kopf.TemporaryError("the database is not ready", delay=60)
    if mode == 'sleep':
        time.sleep(600)
    if mode == 'bad-setting':
        settings.persistence.progress_storage = 'annotations'
    settings.posting.enabled = False
    settings.watching.server_timeout = 10
    if os.environ.get('E2E_EXIT_TIMEOUT'):
        settings.batching.exit_timeout = float(os.environ['E2E_EXIT_TIMEOUT'])


@kopf.on.create('configmaps', labels={'e2e': 'stopping'})
def slow(name, **_):
    record('slow', name=name)
    time.sleep(float(os.environ.get('E2E_HANDLER_SLEEP', '0')))
