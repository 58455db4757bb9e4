"""
An operator for end-to-end tests, configured by environment variables.

It records every handler call as a JSON line in ``$E2E_CALLS``, so that tests
can count calls across operator restarts.

* ``E2E_RESOURCE``: the resource, e.g. ``stricts.e2e.kopf.dev`` or ``configmaps``.
* ``E2E_STORAGE``: ``smart`` (default), ``status``, ``annotations``, ``file``.
* ``E2E_PREFIX``: the annotations prefix (for the smart/annotations storages).
* ``E2E_SECOND_FAILS``: how many times the 2nd create handler raises TemporaryError.
* ``E2E_SECOND_DELAY``: its retry delay in seconds.
* ``E2E_STORE``: the JSON file of the ``file`` storage (progress outside the object).
* ``E2E_POST_LOGGERS``: ``1`` to post the per-object log messages as Events too.
* ``E2E_EVENTS``: if set, every event of an object is recorded in this file as a JSON line with the value of
  the object's annotation ``kubectl.kubernetes.io/last-applied-configuration``, which tests set as a marker
  (kubectl's own annotation is in no essence: changing it runs no handler).
"""
import asyncio
import json
import os
import pathlib

import kopf

RESOURCE = os.environ['E2E_RESOURCE']
CALLS = pathlib.Path(os.environ['E2E_CALLS'])
EVENTS = os.environ.get('E2E_EVENTS')
MARKER = 'kubectl.kubernetes.io/last-applied-configuration'
PREFIX = os.environ.get('E2E_PREFIX', 'kopf.zalando.org')
SECOND_FAILS = int(os.environ.get('E2E_SECOND_FAILS', '1'))
SECOND_DELAY = float(os.environ.get('E2E_SECOND_DELAY', '1'))


def record(handler, **details):
    with CALLS.open('a') as f:
        f.write(json.dumps({'handler': handler, 'pid': os.getpid(), **details}, default=str) + '\n')


class FileProgressStorage(kopf.ProgressStorage):
    """Keeps progress in a local JSON file, asynchronously; the history of writes is kept for tests."""

    def __init__(self, path):
        self.path = pathlib.Path(path)
        self.lock = asyncio.Lock()

    async def _load(self):
        return json.loads(self.path.read_text()) if self.path.exists() else {'records': {}, 'history': []}

    async def fetch(self, *, key, body):
        async with self.lock:
            data = await self._load()
        return data['records'].get(f"{body.metadata.uid}/{key}")

    async def store(self, *, key, record, body, patch):
        async with self.lock:
            data = await self._load()
            data['records'][f"{body.metadata.uid}/{key}"] = dict(record)
            data['history'].append({'op': 'store', 'key': key, 'record': dict(record)})
            self.path.write_text(json.dumps(data))

    async def purge(self, *, key, body, patch):
        async with self.lock:
            data = await self._load()
            if data['records'].pop(f"{body.metadata.uid}/{key}", None) is not None:
                data['history'].append({'op': 'purge', 'key': key})
            self.path.write_text(json.dumps(data))


@kopf.on.startup()
def configure(config, settings, **_):
    assert config is settings
    storage = os.environ.get('E2E_STORAGE', 'smart')
    if storage == 'status':
        config.persistence.progress_storage = kopf.StatusProgressStorage()
    elif storage == 'annotations':
        config.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    elif storage == 'file':
        config.persistence.progress_storage = FileProgressStorage(os.environ['E2E_STORE'])
    else:
        config.persistence.progress_storage = kopf.SmartProgressStorage(prefix=PREFIX)
    config.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=PREFIX)
    config.persistence.finalizer = f'{PREFIX}/finalizer'
    config.watching.server_timeout = 10
    config.posting.loggers = os.environ.get('E2E_POST_LOGGERS') == '1'


@kopf.on.create(RESOURCE)
def first(retry, **_):
    record('first', retry=retry)
    return 'first-done'


@kopf.on.create(RESOURCE)
def second(retry, **_):
    record('second', retry=retry)
    if retry < SECOND_FAILS:
        raise kopf.TemporaryError("not yet", delay=SECOND_DELAY)


@kopf.on.create(RESOURCE)
async def third(retry, **_):
    record('third', retry=retry)


@kopf.on.update(RESOURCE)
def changed(diff, old, new, **_):
    record('update', diff=[list(item) for item in diff])


@kopf.on.delete(RESOURCE)
def deleted(**_):
    record('delete')


if EVENTS:
    @kopf.on.event(RESOURCE)
    def seen(annotations, **_):
        with pathlib.Path(EVENTS).open('a') as f:
            f.write(json.dumps({'marker': annotations.get(MARKER)}) + '\n')
