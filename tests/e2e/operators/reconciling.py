"""
A level-based operator for the end-to-end tests of reconciliation: a ``Shelf`` owns one ConfigMap of books.

Every reconcile call is recorded as a JSON line in ``$E2E_CALLS`` (the
shelf, the process id, the time, ``retry``, ``triggers``, and the labels of
the child as ``children`` showed it), so that tests see from the outside
when, why and where it was called.

A create handler beside it says ``welcome`` once per shelf (recorded too).

The desired child is ``<shelf>-books`` with ``data.books`` from
``spec.books``, applied server-side (taking the field back from whoever
edited it by hand: ``force=True``, unless ``E2E_FORCE`` is not ``1``). ``spec.failUntil`` makes a call fail
while its ``retry`` is below that number. The call sets the ``Ready``
condition.

* ``E2E_OWNS``: the resource of the children (``configmaps``; another one for the tests of bad input).
* ``E2E_FORCE``: whether to take the managed fields back from other managers (``1``, the default).
* ``E2E_RESYNC``: the resync period (seconds; none if unset).
* ``E2E_BACKOFF``, ``E2E_MAX_BACKOFF``: the back-off (seconds).
* ``E2E_LEASE``, ``E2E_RENEW``, ``E2E_RETRY``: the peering timing of replicas.
"""
import json
import os
import time

import kopf

CALLS = os.environ['E2E_CALLS']
RESYNC = float(os.environ['E2E_RESYNC']) if os.environ.get('E2E_RESYNC') else None
BACKOFF = float(os.environ.get('E2E_BACKOFF', '1'))
MAX_BACKOFF = float(os.environ.get('E2E_MAX_BACKOFF', '60'))
OWNS = os.environ.get('E2E_OWNS', 'configmaps')
FORCE = os.environ.get('E2E_FORCE', '1') == '1'


def record(**details):
    line = json.dumps({'pid': os.getpid(), 't': time.time(), **details}) + '\n'
    fd = os.open(CALLS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())  # one write of one line: replicas never interleave
    finally:
        os.close(fd)


@kopf.on.startup()
def configure(config, **_):
    config.peering.lease_duration = int(os.environ.get('E2E_LEASE', '4'))
    config.peering.renew_deadline = float(os.environ.get('E2E_RENEW', '3'))
    config.peering.retry_period = float(os.environ.get('E2E_RETRY', '0.5'))


@kopf.on.create('shelves.reconcile.e2e.kopf.dev')
def created(name, **_):
    record(name=name, handler='created')
    return 'welcome'  # status.created: a write of the status, and kopf's annotations, which call no reconciliation


@kopf.on.reconcile('shelves.reconcile.e2e.kopf.dev', owns=[OWNS],
                   resync=RESYNC, backoff=BACKOFF, max_backoff=MAX_BACKOFF)
def shelf(name, spec, body, patch, children, triggers, retry, **_):
    books = children[OWNS]
    record(name=name, handler='shelf', retry=retry, triggers=sorted(triggers),
           generation=body.metadata.get('generation'),
           children={child.metadata.name: dict(child.metadata.labels) for child in books})
    if retry < spec.get('failUntil', 0):
        raise kopf.TemporaryError(f"failing on purpose (retry {retry})", delay=None)
    kopf.apply({'apiVersion': 'v1', 'kind': 'ConfigMap',
                'metadata': {'name': f'{name}-books', 'labels': {'shelf': name}},
                'data': {'books': ','.join(spec.get('books', []))}}, force=FORCE)  # the books are ours
    kopf.set_condition(body, patch, type='Ready', status=True, reason='BooksShelved',
                       message=f"{len(spec.get('books', []))} book(s) on the shelf")
