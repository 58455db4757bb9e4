"""
An operator for the end-to-end tests of replicas (HA and shards), configured by environment variables.

Every handler call is logged twice as JSON lines in ``$E2E_CALLS`` -- when
it starts and when it ends, with the process id and the wall-clock time --
so that tests can check from the outside which replica handled what, when,
and whether two replicas ever handled one object at the same time.

* ``E2E_RESOURCE``: the resource to serve.
* ``E2E_WORK``: how long each handler call takes (seconds, sleeping).
* ``E2E_FAILS``: how many times the ``flaky`` handler fails before it succeeds.
* ``E2E_DELAY``: its retry delay (seconds).
* ``E2E_LEASE``, ``E2E_RENEW``, ``E2E_RETRY``: the peering timing, short for tests.
* ``E2E_REQUEST_TIMEOUT``: the limit of one request (seconds), short for black-holed connections.
"""
import json
import os
import time

import kopf

RESOURCE = os.environ['E2E_RESOURCE']
CALLS = os.environ['E2E_CALLS']
WORK = float(os.environ.get('E2E_WORK', '0.1'))
FAILS = int(os.environ.get('E2E_FAILS', '1'))
DELAY = float(os.environ.get('E2E_DELAY', '1'))


def record(event, handler, name, retry, **details):
    line = json.dumps({'event': event, 'handler': handler, 'name': name, 'retry': retry, 'pid': os.getpid(),
                       't': time.time(), **details}) + '\n'
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
    config.batching.exit_timeout = 5
    if os.environ.get('E2E_REQUEST_TIMEOUT'):
        config.networking.request_timeout = float(os.environ['E2E_REQUEST_TIMEOUT'])


@kopf.on.create(RESOURCE)
def slow(name, retry, **_):
    record('start', 'slow', name, retry)
    time.sleep(WORK)
    record('end', 'slow', name, retry, outcome='success')
    return 'slow-done'


@kopf.on.create(RESOURCE)
def flaky(name, retry, **_):
    record('start', 'flaky', name, retry)
    time.sleep(WORK)
    if retry < FAILS:
        record('end', 'flaky', name, retry, outcome='failure')
        raise kopf.TemporaryError("not yet", delay=DELAY)
    record('end', 'flaky', name, retry, outcome='success')
