"""
An operator for the observability tests: three create handlers on labelled ConfigMaps, with known outcomes.

``fine`` succeeds; ``flaky`` fails temporarily at its first attempt and
succeeds at its second; ``broken`` fails permanently. Every call is recorded
as a JSON line in ``$E2E_CALLS`` with the outcome it is about to have, so
that the test compares the metrics with what really happened. Timeouts come
from the environment (``E2E_REQUEST_TIMEOUT``, ``E2E_SERVER_TIMEOUT``).
"""
import json
import os
import pathlib
import time

import kopf

CALLS = pathlib.Path(os.environ['E2E_CALLS'])
LABELS = {'e2e': 'observed'}


def record(handler, outcome, **details):
    with CALLS.open('a') as f:
        f.write(json.dumps({'handler': handler, 'outcome': outcome, 'time': time.time(), **details}) + '\n')


@kopf.on.startup()
def configure(settings, **_):
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage()
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage()
    settings.posting.enabled = False
    settings.watching.server_timeout = float(os.environ.get('E2E_SERVER_TIMEOUT', '60'))
    settings.networking.request_timeout = float(os.environ.get('E2E_REQUEST_TIMEOUT', '10'))
    settings.networking.error_backoffs = [0.2, 0.2, 0.2]


@kopf.on.create('configmaps', labels=LABELS)
def fine(uid, **_):
    record('fine', 'success', uid=uid)


@kopf.on.create('configmaps', labels=LABELS)
def flaky(uid, retry, **_):
    if retry == 0:
        record('flaky', 'temporary_error', uid=uid)
        raise kopf.TemporaryError("not yet", delay=0.2)
    record('flaky', 'success', uid=uid)


@kopf.on.create('configmaps', labels=LABELS)
def broken(uid, **_):
    record('broken', 'permanent_error', uid=uid)
    raise kopf.PermanentError("never")
