"""
One of two different operators handling the same objects, configured apart as the documentation says.

It runs under this framework and under the released Kopf alike. With
``E2E_PREFIX`` set, its progress (annotations and status), its diff-base
and its finalizer use that prefix (and ``E2E_NAME`` in the status); with
``E2E_STORE=status``, its progress and diff-base are kept in the status only
(``status.<E2E_NAME>``), out of sight of an operator that takes any foreign
annotation for a change, as the released Kopf does;
without it, everything is the framework's default. Every call is a JSON
line in ``$E2E_CALLS``: the handler, the object's name, the diff of
updates, the pid and the time.
"""
import json
import os
import pathlib
import time

import kopf

RESOURCE = os.environ['E2E_RESOURCE']
CALLS = pathlib.Path(os.environ['E2E_CALLS'])
PREFIX = os.environ.get('E2E_PREFIX')
NAME = os.environ.get('E2E_NAME', 'kopf')


def record(handler, name, **details):
    line = json.dumps({'handler': handler, 'name': name, 'pid': os.getpid(), 't': time.time(), **details})
    with CALLS.open('a') as f:
        f.write(line + '\n')


@kopf.on.startup()
def configure(settings, **_):
    settings.posting.enabled = False
    if PREFIX and os.environ.get('E2E_STORE') == 'status':
        settings.persistence.progress_storage = kopf.StatusProgressStorage(name=NAME)
        settings.persistence.diffbase_storage = kopf.StatusDiffBaseStorage(name=NAME)
        settings.persistence.finalizer = f'{PREFIX}/finalizer'
    elif PREFIX:
        settings.persistence.progress_storage = kopf.SmartProgressStorage(prefix=PREFIX, name=NAME)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=PREFIX)
        settings.persistence.finalizer = f'{PREFIX}/finalizer'


@kopf.on.create(RESOURCE)
def created(name, retry, **_):
    record('create', name, retry=retry)
    if retry < 1:
        raise kopf.TemporaryError("once more", delay=1)  # progress stays on the object for a while


@kopf.on.update(RESOURCE)
def updated(name, diff, **_):
    record('update', name, diff=[[op, list(field), old, new] for op, field, old, new in diff])


@kopf.on.delete(RESOURCE)
def deleted(name, **_):
    record('delete', name)
