"""
SQLite storages: the handlers' progress and the last handled configuration in a local file, outside of the objects.

For operators whose objects must not carry the framework's bookkeeping, and
that run as one process with a disk of their own (e.g. a persistent volume).
Records are kept by the object's resource (its kind and API group),
namespace, name and uid, and by handler id: an object that is re-created
under the same name has a new uid and starts afresh.

All database work happens in one thread of each storage's own, so the event
loop never waits for the disk; that one thread also runs every read after
the writes issued before it. The file is opened -- and checked to be a
database that this process can write and that no other process holds
locked -- when the operator enters the storage at startup, so that a bad
path stops the operator there, naming the path, not in the middle of
handling.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import datetime
import functools
import logging
import os
import re
import sqlite3
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TypeVar

from kopf._storage import records
from kopf._storage.diffbase import DiffBaseStorage, decode_essence, encode_essence
from kopf._storage.errors import StorageError
from kopf._storage.progress import ProgressStorage
from kopf._storage.records import ProgressRecord
from kopf._structs import dicts
from kopf._structs.bodies import Body, Essence
from kopf._structs.ids import HandlerId
from kopf._structs.patches import Patch

logger = logging.getLogger('kopf._storage')

T = TypeVar('T')

# How long a write waits for another connection's write to finish before it fails as "locked".
LOCK_TIMEOUT = 5.0
SCHEMA_VERSION = 1

_TABLE_RE = re.compile(r'^[A-Za-z_][A-Za-z0-9_]{0,62}$')

# What SQLite's error codes mean for the user, and what to do.
_REASONS = {
    'SQLITE_BUSY': "it is locked by another process; only one operator process may use the file at a time",
    'SQLITE_LOCKED': "it is locked by another process; only one operator process may use the file at a time",
    'SQLITE_READONLY': "it is read-only (the file, its directory, or the file system); "
                       "the operator must be able to write the file and to create files next to it",
    'SQLITE_NOTADB': "it is not an SQLite database (another kind of file, or corrupt); "
                     "move it away or choose another path",
    'SQLITE_CORRUPT': "the database is corrupt; restore it from a backup, or move it away to start afresh",
    'SQLITE_CANTOPEN': "it cannot be opened or created (is it a directory? may the operator create files there?)",
    'SQLITE_PERM': "the operator has no permission to use it",
    'SQLITE_FULL': "the disk is full",
    'SQLITE_IOERR': "the disk failed to read or write it",
}


@dataclasses.dataclass(frozen=True)
class _Identity:
    """Who the records belong to: the object's resource (kind and group), namespace, name and uid."""

    resource: str
    namespace: str
    name: str
    uid: str

    @classmethod
    def of(cls, body: Body) -> _Identity:
        meta = body.metadata
        if not meta.uid:
            raise ValueError(f"{body.describe()} has no uid: the SQLite storages keep records by the object's uid.")
        group = str(body.get('apiVersion') or '').rpartition('/')[0]
        kind = str(body.get('kind') or '')
        return cls(resource=f"{kind}.{group}" if group else kind, namespace=meta.namespace or '',
                   name=meta.name or '', uid=meta.uid)

    @property
    def values(self) -> tuple[str, str, str, str]:
        return self.resource, self.namespace, self.name, self.uid


class _Database:
    """One connection to one file, used only from one thread of its own."""

    def __init__(self, path: str | os.PathLike[str], *, schema: Sequence[str], what: str) -> None:
        self.path = os.fspath(path)
        self._schema = tuple(schema)
        self._what = what
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._connection: sqlite3.Connection | None = None
        self._opening = asyncio.Lock()

    async def open(self) -> None:
        """Open the file and prepare the tables; a clear :class:`StorageError` if that is not possible."""
        async with self._opening:
            if self._executor is not None:
                return
            executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix='kopf-sqlite')
            try:
                self._connection = await asyncio.get_running_loop().run_in_executor(executor, self._connect)
            except BaseException:
                executor.shutdown(wait=False)
                raise
            self._executor = executor

    async def close(self) -> None:
        executor, connection = self._executor, self._connection
        self._executor, self._connection = None, None
        if executor is not None and connection is not None:
            await asyncio.get_running_loop().run_in_executor(executor, connection.close)
        if executor is not None:
            executor.shutdown(wait=False)

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run a function with the connection in the storage's thread; opens the file on first use."""
        await self.open()
        executor, connection = self._executor, self._connection
        assert executor is not None and connection is not None
        try:
            return await asyncio.get_running_loop().run_in_executor(executor, fn, connection)
        except sqlite3.Error as e:
            raise self._error(e) from e

    def _connect(self) -> sqlite3.Connection:
        directory = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(directory):
            raise StorageError(f"{self._what} cannot use the SQLite file {self.path!r}: its directory "
                               f"{directory!r} does not exist. Create it (e.g. mount a volume there), "
                               f"or choose another path.")
        try:
            connection = sqlite3.connect(self.path, timeout=LOCK_TIMEOUT, isolation_level=None)
        except sqlite3.Error as e:
            raise self._error(e) from e
        try:
            # A write at once: a read-only, locked or corrupt file fails here, at startup, not later.
            connection.execute('BEGIN IMMEDIATE')
            for statement in self._schema:
                connection.execute(statement)
            connection.execute(f'PRAGMA user_version = {SCHEMA_VERSION}')
            connection.execute('COMMIT')
        except sqlite3.Error as e:
            connection.close()
            raise self._error(e) from e
        return connection

    def _error(self, error: sqlite3.Error) -> StorageError:
        code = getattr(error, 'sqlite_errorname', None) or _guess_code(str(error))
        reason = _REASONS.get(code or '', 'it cannot be used')
        return StorageError(f"{self._what} cannot use the SQLite file {self.path!r}: {reason} ({error}).")


def _guess_code(message: str) -> str | None:
    """SQLite's error code by its message, where Python does not tell it (before 3.11)."""
    texts = {'locked': 'SQLITE_BUSY', 'readonly': 'SQLITE_READONLY', 'not a database': 'SQLITE_NOTADB',
             'malformed': 'SQLITE_CORRUPT', 'unable to open': 'SQLITE_CANTOPEN', 'disk is full': 'SQLITE_FULL'}
    return next((code for text, code in texts.items() if text in message), None)


def _table(name: str) -> str:
    if not _TABLE_RE.match(name):
        raise ValueError(f"Not a usable SQLite table name: {name!r} (letters, digits and '_', "
                         f"not starting with a digit, at most 63 characters).")
    return name


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


_KEY = 'resource=? AND namespace=? AND name=? AND uid=?'


class SQLiteProgressStorage(ProgressStorage):
    """
    The handlers' progress in a local SQLite file, one row per object and handler.

    Stores and purges are collected and written at :meth:`flush` in one
    transaction (the framework flushes after each batch: the start of the
    handlers, each attempt, the end of the cause); :meth:`erase` drops the
    records of an object that is gone. Safe for one operator process.
    """

    def __init__(self, *, path: str | os.PathLike[str], table: str = 'kopf_progress') -> None:
        super().__init__()
        self.path = os.fspath(path)
        self.table = _table(table)
        self._db = _Database(path, what='kopf.SQLiteProgressStorage', schema=[
            f'CREATE TABLE IF NOT EXISTS {self.table} ('
            f'resource TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL, uid TEXT NOT NULL, '
            f'handler TEXT NOT NULL, record TEXT NOT NULL, updated TEXT NOT NULL, '
            f'PRIMARY KEY (resource, namespace, name, uid, handler))',
            f'CREATE INDEX IF NOT EXISTS {self.table}_uid ON {self.table} (uid)',
        ])
        self._pending: dict[tuple[_Identity, HandlerId], str | None] = {}  # None: to be deleted

    def __repr__(self) -> str:
        return f"{type(self).__name__}(path={self.path!r})"

    async def fetch(self, *, key: HandlerId, body: Body) -> ProgressRecord | None:
        identity = _Identity.of(body)
        if (identity, key) in self._pending:
            value = self._pending[(identity, key)]
        else:
            value = await self._db.run(functools.partial(self._select_one, identity, key))
        return None if value is None else _decode(value, key=key, body=body, path=self.path)

    async def store(self, *, key: HandlerId, record: ProgressRecord, body: Body, patch: Patch) -> None:
        self._pending[(_Identity.of(body), key)] = records.encode_record(record)

    async def purge(self, *, key: HandlerId, body: Body, patch: Patch) -> None:
        self._pending[(_Identity.of(body), key)] = None

    async def flush(self) -> None:
        if self._pending:
            pending, self._pending = self._pending, {}
            await self._db.run(functools.partial(self._write, pending))

    async def erase(self, *, body: Body) -> None:
        identity = _Identity.of(body)
        self._pending = {(i, k): v for (i, k), v in self._pending.items() if i.uid != identity.uid}
        await self._db.run(functools.partial(self._delete_object, identity))

    async def list_records(self, *, body: Body, ids: Collection[HandlerId] = ()) -> dict[str, ProgressRecord]:
        """Every record of the object: the handler ids are kept as they are."""
        identity = _Identity.of(body)
        rows: dict[str, str | None] = dict(await self._db.run(functools.partial(self._select_all, identity)))
        rows.update({key: value for (i, key), value in self._pending.items() if i == identity})
        decoded = {key: _decode(value, key=HandlerId(key), body=body, path=self.path)
                   for key, value in sorted(rows.items()) if value is not None}
        return {key: record for key, record in decoded.items() if record is not None}

    async def _enter(self) -> None:
        await self._db.open()

    async def _exit(self) -> None:
        try:
            await self.flush()
        finally:
            await self._db.close()

    # In the storage's thread:

    def _select_one(self, identity: _Identity, key: HandlerId, db: sqlite3.Connection) -> str | None:
        row = db.execute(f'SELECT record FROM {self.table} WHERE {_KEY} AND handler=?',
                         (*identity.values, key)).fetchone()
        return None if row is None else str(row[0])

    def _select_all(self, identity: _Identity, db: sqlite3.Connection) -> list[tuple[str, str]]:
        return [(str(handler), str(record)) for handler, record in
                db.execute(f'SELECT handler, record FROM {self.table} WHERE {_KEY}', identity.values)]

    def _write(self, pending: Mapping[tuple[_Identity, HandlerId], str | None], db: sqlite3.Connection) -> None:
        updated = _now()
        with _transaction(db):
            for (identity, key), value in pending.items():
                if value is None:
                    db.execute(f'DELETE FROM {self.table} WHERE {_KEY} AND handler=?', (*identity.values, key))
                else:
                    db.execute(f'INSERT OR REPLACE INTO {self.table} VALUES (?, ?, ?, ?, ?, ?, ?)',
                               (*identity.values, key, value, updated))

    def _delete_object(self, identity: _Identity, db: sqlite3.Connection) -> None:
        db.execute(f'DELETE FROM {self.table} WHERE uid=?', (identity.uid,))


class SQLiteDiffBaseStorage(DiffBaseStorage):
    """
    The last handled configuration in a local SQLite file, one row per object.

    Written at once when the framework stores it (at the end of a cause);
    :meth:`erase` drops the row of an object that is gone. Safe for one
    operator process. Essences have no size limit here (unlike annotations).
    """

    def __init__(
            self,
            *,
            path: str | os.PathLike[str],
            table: str = 'kopf_diffbase',
            ignored_fields: Iterable[dicts.FieldSpec] | None = None,
    ) -> None:
        super().__init__()
        self.path = os.fspath(path)
        self.table = _table(table)
        self.ignored_fields = tuple(p for p in (dicts.parse_field(f) for f in ignored_fields or ()) if p)
        self._db = _Database(path, what='kopf.SQLiteDiffBaseStorage', schema=[
            f'CREATE TABLE IF NOT EXISTS {self.table} ('
            f'resource TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL, uid TEXT NOT NULL, '
            f'essence TEXT NOT NULL, updated TEXT NOT NULL, '
            f'PRIMARY KEY (resource, namespace, name, uid))',
            f'CREATE INDEX IF NOT EXISTS {self.table}_uid ON {self.table} (uid)',
        ])

    def __repr__(self) -> str:
        return f"{type(self).__name__}(path={self.path!r})"

    async def fetch(self, *, body: Body) -> Essence | None:
        identity = _Identity.of(body)
        value = await self._db.run(functools.partial(self._select, identity))
        if value is None:
            return None
        return self.restore(decode_essence(value, where=f"the SQLite file {self.path!r}", body=body), body=body)

    async def store(self, *, body: Body, patch: Patch, essence: Essence) -> None:
        identity = _Identity.of(body)
        await self._db.run(functools.partial(self._upsert, identity, encode_essence(essence)))

    async def purge(self, *, body: Body, patch: Patch) -> None:
        await self._db.run(functools.partial(self._delete, _Identity.of(body)))

    async def erase(self, *, body: Body) -> None:
        await self._db.run(functools.partial(self._delete, _Identity.of(body)))

    async def _enter(self) -> None:
        await self._db.open()

    async def _exit(self) -> None:
        await self._db.close()

    # In the storage's thread:

    def _select(self, identity: _Identity, db: sqlite3.Connection) -> str | None:
        row = db.execute(f'SELECT essence FROM {self.table} WHERE {_KEY}', identity.values).fetchone()
        return None if row is None else str(row[0])

    def _upsert(self, identity: _Identity, encoded: str, db: sqlite3.Connection) -> None:
        db.execute(f'INSERT OR REPLACE INTO {self.table} VALUES (?, ?, ?, ?, ?, ?)',
                   (*identity.values, encoded, _now()))

    def _delete(self, identity: _Identity, db: sqlite3.Connection) -> None:
        db.execute(f'DELETE FROM {self.table} WHERE uid=?', (identity.uid,))


class _transaction:
    """One transaction: committed if the block succeeds, rolled back if it fails."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute('BEGIN IMMEDIATE')

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self.db.execute('COMMIT' if exc_type is None else 'ROLLBACK')


def _decode(value: str, *, key: HandlerId, body: Body, path: str) -> ProgressRecord | None:
    try:
        return records.decode_record(value)
    except ValueError as e:
        logger.warning("Ignoring the unreadable progress record of %r of %s in the SQLite file %r: %s. "
                       "The handler will be treated as not yet started.", key, body.describe(), path, e)
        return None
