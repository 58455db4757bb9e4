"""
Migrations between storages, object by object: in an order that loses nothing, idempotent, and with a dry run.

The "server" is a dict: a sent patch is applied to it as the API server would.
"""
import copy
import json

import pytest

import kopf
from kopf._storage import calls
from kopf._structs.bodies import Body
from kopf._structs.patches import Patch, apply
from kopf._tools import migrating
from kopf._tools.migrating import Pair

DONE = {'started': '2020-01-01T00:00:00+00:00', 'success': True}
WAITING = {'started': '2020-01-01T00:00:00+00:00', 'retries': 1, 'delayed': '2099-01-01T00:00:00+00:00'}
LAST = 'kopf.zalando.org/last-handled-configuration'


class Server:
    def __init__(self, raw):
        self.raw = raw
        self.patches = []

    async def send(self, body, patch):
        self.patches.append(copy.deepcopy(dict(patch)))
        self.raw = apply(copy.deepcopy(self.raw), dict(patch))
        return Body(self.raw)

    @property
    def body(self):
        return Body(self.raw)

    @property
    def annotations(self):
        return self.raw['metadata'].get('annotations', {})


def handled_object(**annotations):
    return {'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
            'metadata': {'name': 'ex1', 'namespace': 'ns1', 'uid': 'uid-1',
                         'annotations': {'user': 'value', **annotations}},
            'spec': {'field': 'x'}}


def in_annotations():
    return handled_object(**{'kopf.zalando.org/first': json.dumps(DONE),
                             'kopf.zalando.org/second': json.dumps(WAITING),
                             LAST: '{"spec":{"field":"x"}}'})


@pytest.fixture()
async def sqlite(tmp_path):
    progress = kopf.SQLiteProgressStorage(path=tmp_path / 'state.db')
    diffbase = kopf.SQLiteDiffBaseStorage(path=tmp_path / 'state.db')
    async with progress, diffbase:
        yield Pair(progress=progress, diffbase=diffbase)


ANNOTATIONS = Pair(progress=kopf.SmartProgressStorage(), diffbase=kopf.AnnotationsDiffBaseStorage())


async def test_annotations_to_sqlite_moves_everything_and_cleans_the_object(sqlite):
    server = Server(in_annotations())
    moved = await migrating.migrate_object(server.body, source=ANNOTATIONS, target=sqlite, ids=[], send=server.send)
    assert moved.records == ('first', 'second') and moved.essence
    assert server.annotations == {'user': 'value'}
    assert await sqlite.progress.fetch(key='first', body=server.body) == DONE
    assert await sqlite.progress.fetch(key='second', body=server.body) == WAITING
    assert await sqlite.diffbase.fetch(body=server.body) == {'spec': {'field': 'x'}}
    assert moved.describe(dry_run=False) == ("ns1/ex1: moved 2 progress record(s) (first, second) "
                                             "and the last-handled configuration")


async def test_a_dry_run_changes_nothing(sqlite):
    server = Server(in_annotations())
    moved = await migrating.migrate_object(server.body, source=ANNOTATIONS, target=sqlite, ids=[], send=server.send,
                                           dry_run=True)
    assert moved.describe(dry_run=True).startswith("ns1/ex1: would move 2 progress record(s)")
    assert server.patches == []
    assert await sqlite.progress.list_records(body=server.body) == {}


async def test_running_it_again_finds_nothing_to_move(sqlite):
    server = Server(in_annotations())
    await migrating.migrate_object(server.body, source=ANNOTATIONS, target=sqlite, ids=[], send=server.send)
    again = await migrating.migrate_object(server.body, source=ANNOTATIONS, target=sqlite, ids=[], send=server.send)
    assert again.nothing and again.describe(dry_run=False) == "ns1/ex1: nothing to move"
    assert len(server.patches) == 1


async def test_an_interruption_after_the_target_is_written_is_completed_by_a_second_run(sqlite):
    server = Server(in_annotations())

    async def crashing(body, patch):
        raise ConnectionError("the operator's machine went away")

    with pytest.raises(ConnectionError):
        await migrating.migrate_object(server.body, source=ANNOTATIONS, target=sqlite, ids=[], send=crashing)
    assert await sqlite.progress.list_records(body=server.body) == {'first': DONE, 'second': WAITING}
    assert 'kopf.zalando.org/first' in server.annotations  # not yet removed: nothing is lost

    moved = await migrating.migrate_object(server.body, source=ANNOTATIONS, target=sqlite, ids=[], send=server.send)
    assert moved.records == ('first', 'second')
    assert server.annotations == {'user': 'value'}
    assert await sqlite.progress.list_records(body=server.body) == {'first': DONE, 'second': WAITING}


async def test_sqlite_to_annotations_writes_the_object_before_forgetting_the_records(sqlite):
    server = Server(handled_object())
    await calls.call(sqlite.progress.store, key='first', record=DONE, body=server.body, patch=Patch())
    await sqlite.progress.flush()
    await sqlite.diffbase.store(body=server.body, patch=Patch(), essence={'spec': {'field': 'x'}})

    async def failing(body, patch):
        raise ConnectionError("no server")

    with pytest.raises(ConnectionError):
        await migrating.migrate_object(server.body, source=sqlite, target=ANNOTATIONS, ids=[], send=failing)
    assert await sqlite.progress.fetch(key='first', body=server.body) == DONE  # kept until the object has it

    await migrating.migrate_object(server.body, source=sqlite, target=ANNOTATIONS, ids=[], send=server.send)
    assert json.loads(server.annotations['kopf.zalando.org/first']) == DONE
    assert json.loads(server.annotations[LAST]) == {'spec': {'field': 'x'}}
    assert await sqlite.progress.list_records(body=server.body) == {}
    assert await sqlite.diffbase.fetch(body=server.body) is None


async def test_between_two_prefixes_it_is_one_atomic_patch():
    server = Server(in_annotations())
    target = Pair(progress=kopf.AnnotationsProgressStorage(prefix='new.example.com'),
                  diffbase=kopf.AnnotationsDiffBaseStorage(prefix='new.example.com'))
    await migrating.migrate_object(server.body, source=ANNOTATIONS, target=target, ids=[], send=server.send)
    assert len(server.patches) == 1
    assert set(server.annotations) == {'user', 'new.example.com/first', 'new.example.com/second',
                                       'new.example.com/last-handled-configuration'}


async def test_the_same_keys_are_never_removed_by_the_source():
    server = Server(in_annotations())
    target = Pair(progress=kopf.AnnotationsProgressStorage(), diffbase=None)
    source = Pair(progress=kopf.StatusProgressStorage(), diffbase=None)
    server.raw['status'] = {'kopf': {'progress': {'third': WAITING}}}
    await migrating.migrate_object(server.body, source=source, target=target, ids=[], send=server.send)
    assert json.loads(server.annotations['kopf.zalando.org/third']) == WAITING
    assert server.raw['status'] == {'kopf': {'progress': {}}}


async def test_records_under_names_derived_from_unknown_ids_are_not_moved(sqlite):
    server = Server(in_annotations())
    name = kopf.AnnotationsProgressStorage().make_key('fn/spec.field')
    server.raw['metadata']['annotations'][name] = json.dumps(WAITING)
    moved = await migrating.migrate_object(server.body, source=ANNOTATIONS, target=sqlite, ids=[], send=server.send)
    assert moved.skipped and 'pass the operator (-f)' in moved.skipped and server.patches == []

    moved = await migrating.migrate_object(server.body, source=ANNOTATIONS, target=sqlite,
                                           ids=['fn/spec.field', 'first'], send=server.send)
    assert 'fn/spec.field' in moved.records
    assert await sqlite.progress.fetch(key='fn/spec.field', body=server.body) == WAITING


async def test_a_source_that_cannot_list_needs_the_handler_ids(sqlite):
    class Unlisted(kopf.ProgressStorage):
        def __init__(self):
            self.records = {'fn': DONE}

        def fetch(self, *, key, body):
            return self.records.get(key)

        def store(self, *, key, record, body, patch):
            self.records[key] = record

        def purge(self, *, key, body, patch):
            self.records.pop(key, None)

    source = Pair(progress=Unlisted(), diffbase=None)
    server = Server(handled_object())
    moved = await migrating.migrate_object(server.body, source=source, target=sqlite, ids=[], send=server.send)
    assert moved.skipped and 'cannot list' in moved.skipped
    moved = await migrating.migrate_object(server.body, source=source, target=sqlite, ids=['fn'], send=server.send)
    assert moved.records == ('fn',) and source.progress.records == {}


async def test_into_the_status_the_target_lands_before_the_annotations_are_removed():
    server = Server(in_annotations())
    target = Pair(progress=kopf.StatusProgressStorage(), diffbase=kopf.StatusDiffBaseStorage())
    await migrating.migrate_object(server.body, source=ANNOTATIONS, target=target, ids=[], send=server.send)
    first, second = server.patches  # with the status subresource, a status part is a request of its own
    assert set(first) == {'status'} and first['status']['kopf']['progress']['second']['retries'] == 1
    assert set(second) == {'metadata'} and second['metadata']['annotations'][LAST] is None
    assert server.annotations == {'user': 'value'}
