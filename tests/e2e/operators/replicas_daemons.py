"""
An operator with one daemon per object, for the end-to-end tests of hand-overs between replicas.

Every daemon run appends two JSON lines to ``$E2E_CALLS`` -- when it starts
and when it has stopped, with the process id, a run id and the wall-clock
time -- each with one ``write()`` to a file opened for appending, so that the
lines of all replicas on one machine are in the order in which they were
written. When asked to stop, a daemon takes ``$E2E_CLEANUP`` seconds to clean
up before it exits (unless it is cancelled meanwhile): a replica that does
not wait for its daemons to exit before it hands their objects over lets
two daemons of one object run at the same time.

* ``E2E_RESOURCE``: the resource to serve.
* ``E2E_CLEANUP``: how long a daemon takes to exit after it was asked to stop (seconds).
* ``E2E_LEASE``, ``E2E_RENEW``, ``E2E_RETRY``: the peering timing, short for tests.
"""
import asyncio
import json
import os
import secrets
import time

import kopf

RESOURCE = os.environ['E2E_RESOURCE']
CALLS = os.environ['E2E_CALLS']
CLEANUP = float(os.environ.get('E2E_CLEANUP', '1'))


def record(event, name, run, **details):
    line = json.dumps({'event': event, 'name': name, 'run': run, 'pid': os.getpid(), 't': time.time(),
                       **details}) + '\n'
    fd = os.open(CALLS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())  # one write of one line: concurrent writers never interleave
    finally:
        os.close(fd)


@kopf.on.startup()
def configure(config, **_):
    config.persistence.progress_storage = kopf.AnnotationsProgressStorage()
    config.peering.lease_duration = int(os.environ.get('E2E_LEASE', '4'))
    config.peering.renew_deadline = float(os.environ.get('E2E_RENEW', '3'))
    config.peering.retry_period = float(os.environ.get('E2E_RETRY', '0.5'))
    config.watching.server_timeout = 30
    config.background.exit_timeout = 10


@kopf.daemon(RESOURCE)
async def monitor(name, stopped, **_):
    run = secrets.token_hex(4)
    record('start', name, run)
    how = 'exited'
    try:
        await stopped.wait()
        await asyncio.sleep(CLEANUP)
    except asyncio.CancelledError:
        how = 'cancelled'
        raise
    finally:
        record('stop', name, run, how=how, reason=str(stopped.reason))
