"""
An operator for the end-to-end tests of the storages, configured by environment variables.

Every handler call is recorded as a JSON line in ``$E2E_CALLS`` (with the
object's name), so that tests count calls across operator restarts.

* ``E2E_RESOURCE``: the resource, e.g. ``keeps.e2e.kopf.dev``.
* ``E2E_STORAGE``: ``smart`` (default), ``status``, ``sqlite:PATH``, ``configmaps``.
* ``E2E_FAIL_ON_PRUNING``: ``1`` to refuse to start when a storage's status field would be pruned.

The objects say how their 2nd create handler behaves: ``spec.fails`` (how
many times it raises a TemporaryError, default 0) and ``spec.delay`` (the
retry delay, default 1 s).
"""
import json
import os
import pathlib

import kopf

RESOURCE = os.environ['E2E_RESOURCE']
CALLS = pathlib.Path(os.environ['E2E_CALLS'])


def record(handler, name, **details):
    with CALLS.open('a') as f:
        f.write(json.dumps({'handler': handler, 'name': name, 'pid': os.getpid(), **details}, default=str) + '\n')


@kopf.on.startup()
def configure(config, **_):
    storage = os.environ.get('E2E_STORAGE', 'smart')
    if storage == 'status':
        config.persistence.progress_storage = kopf.StatusProgressStorage()
    elif storage.startswith('sqlite:'):
        path = storage.split(':', 1)[1]
        config.persistence.progress_storage = kopf.SQLiteProgressStorage(path=path)
        config.persistence.diffbase_storage = kopf.SQLiteDiffBaseStorage(path=path)
    elif storage == 'configmaps':
        config.persistence.progress_storage = kopf.ConfigMapProgressStorage()
        config.persistence.diffbase_storage = kopf.ConfigMapDiffBaseStorage()
    config.persistence.fail_on_pruning = os.environ.get('E2E_FAIL_ON_PRUNING') == '1'
    config.watching.server_timeout = 10


@kopf.on.create(RESOURCE)
def first(name, retry, **_):
    record('first', name, retry=retry)


@kopf.on.create(RESOURCE)
def second(name, spec, retry, **_):
    record('second', name, retry=retry)
    if retry < spec.get('fails', 0):
        raise kopf.TemporaryError("not yet", delay=spec.get('delay', 1))


@kopf.on.update(RESOURCE)
def changed(name, diff, **_):
    record('update', name, diff=[[str(item[0]), list(item[1]), *item[2:]] for item in diff])


@kopf.on.delete(RESOURCE)
def deleted(name, **_):
    record('delete', name)
