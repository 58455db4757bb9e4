"""
An operator for the fault-injection and credential tests: three create handlers on ConfigMaps.

Every handler call is recorded as a JSON line in ``$E2E_CALLS`` (with the
object's uid, the handler, the pid and the time), so that tests count calls
across kills and restarts. The progress is kept in annotations (ConfigMaps
have no status). Settings come from the environment, so that tests can make
timeouts short:

* ``E2E_REQUEST_TIMEOUT``, ``E2E_INACTIVITY``, ``E2E_SERVER_TIMEOUT``: seconds.
* ``E2E_LIST_LIMIT``: the page size of listings.
* ``E2E_BACKOFFS``: comma-separated retry delays of requests (empty: no retries).
* ``E2E_HANDLER_SLEEP``: seconds each handler works.
* ``E2E_LOGIN_FILE``: if set, a login handler reads the server, CA and token from this JSON file
  (as a login to an external identity service would), and records its calls too.
"""
import json
import os
import pathlib
import time

import kopf

CALLS = pathlib.Path(os.environ['E2E_CALLS'])
SLEEP = float(os.environ.get('E2E_HANDLER_SLEEP', '0'))
LOGIN_FILE = os.environ.get('E2E_LOGIN_FILE')


def record(handler, **details):
    with CALLS.open('a') as f:
        f.write(json.dumps({'handler': handler, 'pid': os.getpid(), 'time': time.time(), **details}) + '\n')


def _seconds(name):
    value = os.environ.get(name)
    return float(value) if value else None


@kopf.on.startup()
def configure(settings, **_):
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage()
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage()
    settings.posting.enabled = False
    settings.watching.server_timeout = _seconds('E2E_SERVER_TIMEOUT') or 30
    if os.environ.get('E2E_INACTIVITY'):
        settings.watching.inactivity_timeout = _seconds('E2E_INACTIVITY')
    if os.environ.get('E2E_REQUEST_TIMEOUT'):
        settings.networking.request_timeout = _seconds('E2E_REQUEST_TIMEOUT')
    if os.environ.get('E2E_LIST_LIMIT'):
        settings.watching.list_limit = int(os.environ['E2E_LIST_LIMIT'])
    if 'E2E_BACKOFFS' in os.environ:
        settings.networking.error_backoffs = [float(x) for x in os.environ['E2E_BACKOFFS'].split(',') if x]


if LOGIN_FILE:
    @kopf.on.login()
    def login(**_):
        data = json.loads(pathlib.Path(LOGIN_FILE).read_text())
        record('login')
        return kopf.ConnectionInfo(server=data['server'], ca_path=data['ca_path'], token=data['token'])


def _handler(handler_id):
    def handler(uid, **_):
        record(handler_id, uid=uid)
        if SLEEP:
            time.sleep(SLEEP)
    return kopf.on.create('configmaps', labels={'e2e': 'resilient'}, id=handler_id)(handler)


HANDLERS = ['alpha', 'beta', 'gamma']
for _handler_id in HANDLERS:
    _handler(_handler_id)
