"""
Persistence: where kopf keeps the handlers' progress and the last handled
configuration, chosen in a startup handler.

Run it with EXAMPLE_STORAGE set to one of:

* `smart` (the default): progress in annotations, with the old status
  location still read and cleaned up.
* `annotations`: progress and diff-base in annotations with our own prefix.
* `status`: progress and diff-base in the status (the CRD's status schema
  must keep unknown fields; examples/crd.yaml does).
* `multi`: progress in two annotation prefixes at once (e.g. while moving
  from one prefix to another).
* `sqlite`: progress outside of the object, in a local SQLite file
  (EXAMPLE_SQLITE, `progress.sqlite` by default).

The create handler fails once, so the progress stays stored for a couple
of seconds: look at the object (or at the SQLite file) meanwhile.
"""
import json
import os
import sqlite3

import kopf

PREFIX = 'kopf-example.kopf.dev'


class DatabaseProgressStorage(kopf.ProgressStorage):
    """
    Keeps the handlers' progress in a local SQLite database, by object uid and handler id.

    Nothing is written to the objects themselves. Sync methods are fine
    here: the file is local and the queries are tiny. A storage talking
    to a remote service would define its methods with `async def`.
    (kopf has such a storage built in, kopf.SQLiteProgressStorage, which
    never blocks the event loop; this one shows how to write your own.)
    """

    def __init__(self, path: str) -> None:
        super().__init__()
        # The startup handler runs in a worker thread, the storage in the event loop's thread.
        self.db = sqlite3.connect(path, check_same_thread=False)
        self.db.execute('CREATE TABLE IF NOT EXISTS progress '
                        '(uid TEXT, key TEXT, record TEXT, PRIMARY KEY (uid, key))')
        self.db.commit()

    def fetch(self, *, key, body):
        row = self.db.execute('SELECT record FROM progress WHERE uid=? AND key=?',
                              (body.metadata.uid, key)).fetchone()
        return json.loads(row[0]) if row else None

    def store(self, *, key, record, body, patch):
        self.db.execute('INSERT OR REPLACE INTO progress VALUES (?, ?, ?)',
                        (body.metadata.uid, key, json.dumps(record)))

    def purge(self, *, key, body, patch):
        self.db.execute('DELETE FROM progress WHERE uid=? AND key=?', (body.metadata.uid, key))

    def flush(self):
        # Called after every batch of stores and purges (e.g. after each attempt of a handler).
        self.db.commit()

    def erase(self, *, body):
        # Optional: called when an object is gone, to forget what was left of it.
        self.db.execute('DELETE FROM progress WHERE uid=?', (body.metadata.uid,))
        self.db.commit()


@kopf.on.startup()
def configure(config: kopf.OperatorConfig, logger, **kwargs):
    storage = os.environ.get('EXAMPLE_STORAGE', 'smart')
    if storage == 'smart':
        config.persistence.progress_storage = kopf.SmartProgressStorage(prefix=PREFIX)
        config.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=PREFIX)
    elif storage == 'annotations':
        config.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
        config.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=PREFIX)
    elif storage == 'status':
        config.persistence.progress_storage = kopf.StatusProgressStorage(name='kopf-example')
        config.persistence.diffbase_storage = kopf.StatusDiffBaseStorage(name='kopf-example')
    elif storage == 'multi':
        config.persistence.progress_storage = kopf.MultiProgressStorage([
            kopf.AnnotationsProgressStorage(prefix=PREFIX),               # read first
            kopf.AnnotationsProgressStorage(prefix='kopf.zalando.org'),  # the old place
        ])
    elif storage == 'sqlite':
        path = os.environ.get('EXAMPLE_SQLITE', 'progress.sqlite')
        config.persistence.progress_storage = DatabaseProgressStorage(path)
    else:
        raise kopf.PermanentError(f"Unknown EXAMPLE_STORAGE={storage!r}.")
    logger.info(f"Progress storage: {type(config.persistence.progress_storage).__name__}; "
                f"diff-base storage: {type(config.persistence.diffbase_storage).__name__}.")


@kopf.on.create('kopfexamples')
def create_fn(retry, logger, **kwargs):
    if retry < 1:
        raise kopf.TemporaryError("Not yet: trying again in 2 seconds.", delay=2)
    logger.info(f"Created on attempt #{retry + 1}.")
    return {'attempts': retry + 1}


@kopf.on.update('kopfexamples')
def update_fn(diff, **kwargs):
    return {'changes': len(diff)}
