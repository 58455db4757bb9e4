"""
An operator for the end-to-end tests of the generated RBAC: one feature at a time, chosen by ``$E2E_FEATURE``.

* ``plain``: create (with a result), update and delete handlers, the resource named by a string;
* ``status``: the progress in the status (``kopf.StatusProgressStorage``);
* ``daemons``: a daemon (with our finalizer) and a timer (without);
* ``shards``: a create handler, run with ``--shards``;
* ``configmaps``: the state of the objects in ConfigMaps;
* ``admission``: a validating webhook in a managed configuration (``$E2E_MANAGED``);
* ``typed``: handlers of the typed class that record the type of ``spec`` they get;
* ``reconcile``: a reconcile handler that owns a ConfigMap per widget, applied server-side (its first
  call for a widget of size 13 fails, so that its back-off is stored in the widget).

Every call is a JSON line in ``$E2E_CALLS``. An object labelled ``e2e/hold`` holds the operator in
a filter (``$E2E_GATE/<name>.held``) until ``$E2E_GATE/<name>.go`` appears: the test changes the
object meanwhile, so that the operator's next patch of its finalizers conflicts.
"""
import json
import os
import pathlib
import time

from widgets import Widget, WidgetSpec

import kopf

FEATURE = os.environ.get('E2E_FEATURE', 'plain')
CALLS = pathlib.Path(os.environ.get('E2E_CALLS', '/dev/null'))
GATE = pathlib.Path(os.environ.get('E2E_GATE', '/tmp'))
RESOURCE = 'widgets.rbac.e2e.kopf.dev' if FEATURE == 'plain' else Widget


def record(handler, name, **details):
    with CALLS.open('a') as f:
        f.write(json.dumps({'handler': handler, 'name': name, **details}, default=str) + '\n')


def hold(name, labels, **_):
    """Hold the operator (all of it: a filter blocks) once per labelled object, until the test lets it go."""
    if 'e2e/hold' in labels and not (GATE / f'{name}.go').exists():
        (GATE / f'{name}.held').touch()
        deadline = time.monotonic() + 30
        while not (GATE / f'{name}.go').exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    return True


@kopf.on.startup()
def configure(settings, **_):
    settings.watching.server_timeout = 10
    settings.peering.lease_duration = 4
    settings.peering.renew_deadline = 3
    settings.peering.retry_period = 0.5
    if FEATURE == 'status':
        settings.persistence.progress_storage = kopf.StatusProgressStorage()
    if FEATURE == 'configmaps':
        settings.persistence.progress_storage = kopf.ConfigMapProgressStorage()
        settings.persistence.diffbase_storage = kopf.ConfigMapDiffBaseStorage()
    if FEATURE == 'admission':
        settings.admission.server = kopf.WebhookServer(addr='127.0.0.1')
        settings.admission.managed = os.environ['E2E_MANAGED']


if FEATURE == 'plain':
    @kopf.on.create(RESOURCE)
    def created(name, spec, body, **_):
        record('create', name)
        kopf.info(body, reason='Created', message=f"{name} is created.")
        return {'size': spec.get('size')}

    @kopf.on.update(RESOURCE)
    def updated(name, **_):
        record('update', name)

    @kopf.on.delete(RESOURCE, when=hold)
    def deleted(name, **_):
        record('delete', name)

if FEATURE in ('status', 'shards', 'configmaps'):
    @kopf.on.create(RESOURCE)
    def created_quietly(name, **_):
        record('create', name)

if FEATURE == 'daemons':
    @kopf.daemon(RESOURCE, when=hold)
    async def watcher(name, stopped, logger, **_):
        record('daemon', name)
        logger.info("The daemon watches %s.", name)
        await stopped.wait()
        record('daemon-stopped', name)

    @kopf.timer(RESOURCE, interval=0.5, optional=True)
    def ticking(name, **_):
        record('timer', name)

if FEATURE == 'admission':
    @kopf.on.validate(RESOURCE, id='check-size')
    def check_size(spec, name, **_):
        record('validate', name)
        if (spec.get('size') or 0) > 50:
            raise kopf.AdmissionError("Widgets bigger than 50 are not allowed here.")

if FEATURE == 'typed':
    @kopf.on.create(Widget)
    def typed_create(name, spec: WidgetSpec, body, **_):
        record('create', name, type=type(spec).__name__, size=spec.size, raw=dict(body['spec']))
        return {'seen': spec.size}

if FEATURE == 'reconcile':
    @kopf.on.reconcile(Widget, owns=['configmaps'], backoff=0.5)
    def reconciled(name, body, retry, **_):
        record('reconcile', name, retry=retry)
        if body['spec'].get('size') == 13 and retry < 1:
            raise kopf.TemporaryError("13 is unlucky the first time", delay=0.5)
        kopf.apply({'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': f'{name}-child'},
                    'data': {'size': str(body['spec'].get('size'))}})
