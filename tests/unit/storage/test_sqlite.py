"""
The SQLite storages: records outside of the objects, in one local file, without blocking the event loop.
"""
import logging
import os
import sqlite3
import subprocess
import threading

import pytest

import kopf
from kopf._storage import calls
from kopf._structs.bodies import Body
from kopf._structs.patches import Patch

RECORD = {'started': '2020-01-01T00:00:00+00:00', 'retries': 1, 'message': 'not yet'}


def obj(name='ex1', uid='uid-1', namespace='ns1', **spec):
    return Body({'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
                 'metadata': {'name': name, 'namespace': namespace, 'uid': uid}, 'spec': spec or {'field': 'x'}})


@pytest.fixture()
def path(tmp_path):
    return tmp_path / 'state.db'


async def test_records_are_written_at_flush_and_read_back(path):
    body = obj()
    async with kopf.SQLiteProgressStorage(path=path) as storage:
        patch = Patch()
        await storage.store(key='fn', record=RECORD, body=body, patch=patch)
        assert await storage.fetch(key='fn', body=body) == RECORD  # seen before the flush
        assert rows(path) == []
        await storage.flush()
        assert patch == {}  # nothing goes into the object
    assert rows(path) == [('KopfExample.kopf.dev', 'ns1', 'ex1', 'uid-1', 'fn')]
    async with kopf.SQLiteProgressStorage(path=path) as reopened:
        assert await reopened.fetch(key='fn', body=body) == RECORD


async def test_purged_records_are_gone_after_the_flush(path):
    body = obj()
    async with kopf.SQLiteProgressStorage(path=path) as storage:
        await storage.store(key='fn', record=RECORD, body=body, patch=Patch())
        await storage.store(key='other', record=RECORD, body=body, patch=Patch())
        await storage.flush()
        await storage.purge(key='fn', body=body, patch=Patch())
        assert await storage.fetch(key='fn', body=body) is None
        await storage.flush()
        assert await storage.fetch(key='fn', body=body) is None
        assert await storage.fetch(key='other', body=body) == RECORD


async def test_records_belong_to_one_object_by_its_uid_too(path):
    async with kopf.SQLiteProgressStorage(path=path) as storage:
        await storage.store(key='fn', record=RECORD, body=obj(uid='old'), patch=Patch())
        await storage.flush()
        assert await storage.fetch(key='fn', body=obj(uid='new')) is None  # re-created under the same name
        assert await storage.fetch(key='fn', body=obj(name='ex2', uid='old')) is None


async def test_erase_drops_the_records_of_an_object_that_is_gone(path):
    async with kopf.SQLiteProgressStorage(path=path) as storage:
        await storage.store(key='a', record=RECORD, body=obj(uid='u1'), patch=Patch())
        await storage.store(key='a', record=RECORD, body=obj(name='ex2', uid='u2'), patch=Patch())
        await storage.flush()
        await storage.store(key='b', record=RECORD, body=obj(uid='u1'), patch=Patch())  # not flushed yet
        await storage.erase(body=obj(uid='u1'))
        await storage.flush()
        assert await storage.list_records(body=obj(uid='u1')) == {}
        assert await storage.list_records(body=obj(name='ex2', uid='u2')) == {'a': RECORD}


async def test_all_records_of_an_object_are_listed_by_their_handler_ids(path):
    body = obj()
    async with kopf.SQLiteProgressStorage(path=path) as storage:
        await storage.store(key='parent/child', record=RECORD, body=body, patch=Patch())
        await storage.flush()
        await storage.store(key='fn/spec.field', record=RECORD, body=body, patch=Patch())
        assert await storage.list_records(body=body) == {'fn/spec.field': RECORD, 'parent/child': RECORD}


async def test_the_database_work_happens_in_a_thread_of_its_own(path, monkeypatch):
    threads = []
    original = kopf.SQLiteProgressStorage._select_one

    def spy(self, *args):
        threads.append(threading.current_thread())
        return original(self, *args)

    monkeypatch.setattr(kopf.SQLiteProgressStorage, '_select_one', spy)
    async with kopf.SQLiteProgressStorage(path=path) as storage:
        await storage.fetch(key='fn', body=obj())
    assert threads and threads[0] is not threading.main_thread()


async def test_an_unreadable_record_is_reported_and_treated_as_absent(path, caplog):
    async with kopf.SQLiteProgressStorage(path=path) as storage:
        await storage.store(key='fn', record=RECORD, body=obj(), patch=Patch())
        await storage.flush()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE kopf_progress SET record = '{\"retries\": \"three\"}'")
    async with kopf.SQLiteProgressStorage(path=path) as storage:
        with caplog.at_level(logging.WARNING):
            assert await storage.fetch(key='fn', body=obj()) is None
    assert "'fn'" in caplog.text and 'KopfExample ns1/ex1' in caplog.text and str(path) in caplog.text


async def test_the_diffbase_is_kept_per_object(path):
    body = obj(field='x')
    async with kopf.SQLiteDiffBaseStorage(path=path) as storage:
        assert await storage.fetch(body=body) is None
        patch = Patch()
        await storage.store(body=body, patch=patch, essence={'spec': {'field': 'x'}})
        assert patch == {}
        assert await storage.fetch(body=body) == {'spec': {'field': 'x'}}
        assert await storage.fetch(body=obj(uid='other')) is None
        await storage.purge(body=body, patch=patch)
        assert await storage.fetch(body=body) is None
        await storage.store(body=body, patch=patch, essence={'spec': {'field': 'x'}})
        await storage.erase(body=body)
        assert await storage.fetch(body=body) is None


async def test_both_storages_share_one_file(path):
    body = obj()
    async with kopf.SQLiteProgressStorage(path=path) as progress, kopf.SQLiteDiffBaseStorage(path=path) as diffbase:
        await progress.store(key='fn', record=RECORD, body=body, patch=Patch())
        await diffbase.store(body=body, patch=Patch(), essence={'spec': {}})
        await progress.flush()
        assert await diffbase.fetch(body=body) == {'spec': {}}
        assert await progress.fetch(key='fn', body=body) == RECORD


async def test_they_work_inside_multi_storages_for_migrations(path, raw):
    raw['metadata']['uid'] = 'uid-1'
    body = Body(raw)
    multi = kopf.MultiProgressStorage([kopf.SQLiteProgressStorage(path=path), kopf.AnnotationsProgressStorage()])
    async with multi:
        patch = Patch()
        await calls.call(multi.store, key='fn', record=RECORD, body=body, patch=patch)
        await calls.call(multi.flush)
        assert 'kopf.zalando.org/fn' in patch.meta.annotations
        assert await calls.call(multi.fetch, key='fn', body=body) == RECORD
    assert len(rows(path)) == 1


@pytest.mark.parametrize('cls', [kopf.SQLiteProgressStorage, kopf.SQLiteDiffBaseStorage])
async def test_a_missing_directory_stops_the_operator_at_startup_naming_the_path(tmp_path, cls):
    path = tmp_path / 'no-such-dir' / 'state.db'
    with pytest.raises(kopf.StorageError, match='does not exist') as e:
        async with cls(path=path):
            pass
    assert str(path) in str(e.value) and cls.__name__ in str(e.value)


async def test_a_file_that_is_not_a_database_is_refused_at_startup(tmp_path):
    path = tmp_path / 'state.db'
    path.write_text('this is not a database\n' * 100)
    with pytest.raises(kopf.StorageError, match='not an SQLite database') as e:
        await kopf.SQLiteProgressStorage(path=path).__aenter__()
    assert str(path) in str(e.value)


async def test_a_directory_in_place_of_the_file_is_refused_at_startup(tmp_path):
    with pytest.raises(kopf.StorageError, match='cannot be opened') as e:
        await kopf.SQLiteDiffBaseStorage(path=tmp_path).__aenter__()
    assert str(tmp_path) in str(e.value)


async def test_a_file_locked_by_another_process_is_refused_at_startup(path, monkeypatch):
    monkeypatch.setattr('kopf._storage.sqlite.LOCK_TIMEOUT', 0.1)
    sqlite3.connect(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute('BEGIN EXCLUSIVE')
    try:
        with pytest.raises(kopf.StorageError, match='locked by another process') as e:
            await kopf.SQLiteProgressStorage(path=path).__aenter__()
    finally:
        holder.execute('ROLLBACK')
        holder.close()
    assert str(path) in str(e.value)


async def test_a_read_only_file_is_refused_at_startup(path):
    async with kopf.SQLiteProgressStorage(path=path):
        pass
    read_only(path)
    try:
        with pytest.raises(kopf.StorageError, match='read-only') as e:
            await kopf.SQLiteProgressStorage(path=path).__aenter__()
    finally:
        writable(path)
    assert str(path) in str(e.value)


def test_table_names_are_checked():
    with pytest.raises(ValueError, match='table name'):
        kopf.SQLiteProgressStorage(path='x.db', table='progress; DROP TABLE x')


def rows(path):
    with sqlite3.connect(path) as db:
        return db.execute('SELECT resource, namespace, name, uid, handler FROM kopf_progress').fetchall()


def read_only(path):
    """Read-only for this process -- also for root, whom file modes do not stop (an immutable file)."""
    os.chmod(path, 0o444)
    if os.geteuid() == 0:
        subprocess.run(['chattr', '+i', str(path)], check=True)


def writable(path):
    if os.geteuid() == 0:
        subprocess.run(['chattr', '-i', str(path)], check=True)
    os.chmod(path, 0o644)
