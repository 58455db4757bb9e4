"""
Kopf's peering options on the Lease-based replicas: which replica handles, and when.

Every creation and every timer tick is recorded as a JSON line in
``$E2E_CALLS`` with the process id and the wall-clock time. The creation
handler also returns its process id into the object's status.
"""
import json
import os
import time

import kopf

CALLS = os.environ['E2E_CALLS']


def record(handler: str, name: str) -> None:
    line = json.dumps({'handler': handler, 'name': name, 'pid': os.getpid(), 't': time.time()}) + '\n'
    fd = os.open(CALLS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())  # one write per line: the replicas never interleave
    finally:
        os.close(fd)


@kopf.on.startup()
def quick_leases(settings: kopf.OperatorSettings, **_: object) -> None:
    settings.peering.lease_duration = 3
    settings.peering.renew_deadline = 2
    settings.peering.retry_period = 0.3
    settings.watching.server_timeout = 10


@kopf.on.create('kopfcompats')
def created(name: str, **_: object) -> dict[str, int]:
    record('created', name)
    return {'pid': os.getpid()}


@kopf.timer('kopfcompats', interval=0.3, field='spec.ticking', value=kopf.PRESENT)
def ticking(name: str, **_: object) -> None:
    record('tick', name)
