"""
An operator for the tests of gaps in the watch (compaction, 410 Gone): create, update and delete handlers.

Every call is a JSON line in ``$E2E_CALLS`` with the handler, the object's
name, the diff (for updates) and the pid. ``E2E_INACTIVITY``: seconds of
silence after which a watch stream is taken for dead (short, so that a
black-holed stream is given up quickly).
"""
import json
import os
import pathlib

import kopf

RESOURCE = os.environ['E2E_RESOURCE']
CALLS = pathlib.Path(os.environ['E2E_CALLS'])


def record(handler, name, **details):
    with CALLS.open('a') as f:
        f.write(json.dumps({'handler': handler, 'name': name, 'pid': os.getpid(), **details}) + '\n')


@kopf.on.startup()
def configure(settings, **_):
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage()
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage()
    settings.posting.enabled = False
    settings.watching.server_timeout = 60
    settings.watching.inactivity_timeout = float(os.environ.get('E2E_INACTIVITY', '2'))


@kopf.on.create(RESOURCE)
def created(name, **_):
    record('create', name)


@kopf.on.update(RESOURCE)
def updated(name, diff, **_):
    record('update', name, diff=[[op, list(field), old, new] for op, field, old, new in diff])


@kopf.on.delete(RESOURCE)
def deleted(name, **_):
    record('delete', name)
