"""
The persistence of one cycle: read once, read nothing where nothing is stored, write once.
"""
import collections
import json

import pytest

from kopf._storage import persistence
from kopf._storage.diffbase import AnnotationsDiffBaseStorage, DiffBaseStorage, MultiDiffBaseStorage
from kopf._storage.persistence import Persistence
from kopf._storage.progress import (
    AnnotationsProgressStorage,
    MultiProgressStorage,
    ProgressStorage,
    SmartProgressStorage,
    StatusProgressStorage,
)
from kopf._structs.bodies import Body
from kopf._structs.ids import HandlerId

from .conftest import applied

A, B, C = HandlerId('a'), HandlerId('b'), HandlerId('c')
RECORD = {'started': '2020-01-01T00:00:00+00:00', 'retries': 1}
DONE = {'started': '2020-01-01T00:00:00+00:00', 'stopped': '2020-01-01T00:00:01+00:00', 'success': True}


class Counting(SmartProgressStorage):
    """The default storage, counting its calls."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.calls = collections.Counter()

    def fetch(self, **kwargs):
        self.calls['fetch'] += 1
        return super().fetch(**kwargs)

    def store(self, **kwargs):
        self.calls['store'] += 1
        return super().store(**kwargs)

    def purge(self, **kwargs):
        self.calls['purge'] += 1
        return super().purge(**kwargs)

    def touch(self, **kwargs):
        self.calls['touch'] += 1
        return super().touch(**kwargs)

    def clear(self, **kwargs):
        self.calls['clear'] += 1
        return super().clear(**kwargs)

    def flush(self):
        self.calls['flush'] += 1


class External(ProgressStorage):
    """A storage outside of the object (e.g. a database), async, counting its calls."""

    def __init__(self, data=None):
        self.data = dict(data or {})
        self.calls = collections.Counter()

    async def fetch(self, *, key, body):
        self.calls['fetch'] += 1
        return self.data.get(key)

    async def store(self, *, key, record, body, patch):
        self.calls['store'] += 1
        self.data[key] = dict(record)

    async def purge(self, *, key, body, patch):
        self.calls['purge'] += 1
        self.data.pop(key, None)

    async def flush(self):
        self.calls['flush'] += 1

    async def erase(self, *, body):
        self.calls['erase'] += 1


def make(storage, raw=None):
    return Persistence(progress=storage, diffbase=AnnotationsDiffBaseStorage(),
                       body=Body(raw or {'metadata': {'name': 'n', 'annotations': {'user': 'u'}},
                                         'spec': {'x': 1}}))


def with_records(**records):
    annotations = {f'kopf.zalando.org/{key}': json.dumps(record) for key, record in records.items()}
    return {'metadata': {'name': 'n', 'annotations': {'user': 'u', **annotations}}, 'spec': {'x': 1}}


# Reading.

async def test_essences_are_computed_once():
    storage = Counting()
    raw = {'metadata': {'name': 'n', 'annotations': {
        'kopf.zalando.org/last-handled-configuration': '{"spec":{"x":0}}'}}, 'spec': {'x': 1}}
    facade = make(storage, raw)
    first = await facade.essences()
    second = await facade.essences()
    assert first is second
    assert first.old == {'spec': {'x': 0}}
    assert first.new == {'spec': {'x': 1}}
    assert [tuple(item) for item in first.diff] == [('change', ('spec', 'x'), 0, 1)]
    # One look at the object's annotations and status (no records there), and the old essence; the new one
    # is taken from the same annotations, so it holds no trace of the storage to clear either.
    assert storage.calls['clear'] == 2


async def test_the_new_essence_of_an_object_with_records_is_cleared_of_them():
    storage = Counting()
    raw = with_records(a={'started': '2026-12-01T00:00:00+00:00'})
    raw['metadata']['annotations']['kopf.zalando.org/last-handled-configuration'] = '{"spec":{"x":0}}'
    essences = await make(storage, raw).essences()
    assert essences.new == {'metadata': {'annotations': {'user': 'u'}}, 'spec': {'x': 1}}
    assert storage.calls['clear'] == 3  # the look, the new essence, the old one


class CountingDiffBase(AnnotationsDiffBaseStorage):
    def __init__(self):
        super().__init__()
        self.calls = collections.Counter()

    def fetch(self, **kwargs):
        self.calls['fetch'] += 1
        return super().fetch(**kwargs)

    def build(self, **kwargs):
        self.calls['build'] += 1
        return super().build(**kwargs)


HANDLED = {'metadata': {'name': 'n', 'annotations': {
    'user': 'u', 'kopf.zalando.org/last-handled-configuration': '{"metadata":{"annotations":{"user":"u"}},'
                                                              '"spec":{"x":1}}'}}, 'spec': {'x': 1}}


async def test_an_object_as_last_handled_without_records_is_at_rest():
    diffbase = CountingDiffBase()
    facade = Persistence(progress=Counting(), diffbase=diffbase, body=Body(HANDLED))
    assert await facade.at_rest()
    essences = await facade.essences()  # from the same reads
    assert not essences.diff and essences.old == essences.new == {'metadata': {'annotations': {'user': 'u'}},
                                                                  'spec': {'x': 1}}
    assert diffbase.calls == {'fetch': 1, 'build': 1}


@pytest.mark.parametrize('raw', [
    pytest.param({**HANDLED, 'spec': {'x': 2}}, id='changed'),
    pytest.param({'metadata': {'name': 'n'}, 'spec': {'x': 1}}, id='never-handled'),
    pytest.param({**HANDLED, 'metadata': {**HANDLED['metadata'], 'annotations': {
        **HANDLED['metadata']['annotations'], 'kopf.zalando.org/a': json.dumps(RECORD)}}}, id='with-a-record'),
    pytest.param({**HANDLED, 'status': {'kopf': {'progress': {'a': RECORD}}}}, id='with-a-legacy-record'),
    pytest.param({**HANDLED, 'metadata': {**HANDLED['metadata'], 'annotations': {
        **HANDLED['metadata']['annotations'], 'kopf.zalando.org/touch-dummy': 'x'}}}, id='touched'),
])
async def test_an_object_changed_or_with_progress_is_not_at_rest(raw):
    diffbase = CountingDiffBase()
    facade = Persistence(progress=Counting(), diffbase=diffbase, body=Body(raw), handler_ids=[A])
    assert not await facade.at_rest()
    await facade.essences()
    assert diffbase.calls['fetch'] == 1 and diffbase.calls['build'] <= 1  # read once, also when it is not at rest


async def test_a_storage_outside_of_the_object_is_never_at_rest():
    storage = External()
    facade = Persistence(progress=storage, diffbase=AnnotationsDiffBaseStorage(), body=Body(HANDLED))
    assert not await facade.at_rest()
    assert storage.calls == {}  # not even asked: it cannot tell from the object


async def test_a_diffbase_outside_of_the_object_is_not_asked_whether_at_rest():
    class Elsewhere(DiffBaseStorage):
        def __init__(self):
            super().__init__()
            self.fetched = 0

        async def fetch(self, *, body):
            self.fetched += 1
            return {'metadata': {'annotations': {'user': 'u'}}, 'spec': {'x': 1}}

        async def store(self, *, body, patch, essence):
            pass

    elsewhere = Elsewhere()
    facade = Persistence(progress=Counting(), diffbase=MultiDiffBaseStorage([AnnotationsDiffBaseStorage(), elsewhere]),
                         body=Body(HANDLED))
    assert not await facade.at_rest()
    assert elsewhere.fetched == 0


async def test_an_object_without_records_is_read_without_fetching():
    storage = Counting()
    facade = make(storage)
    assert await facade.fetch([A, B]) == {A: None, B: None}
    assert await facade.stored([A, B, C]) == []
    assert not await facade.holds_any([A, B, C])
    assert storage.calls['fetch'] == 0
    assert storage.calls['clear'] == 1  # the one look at the object's annotations and status


async def test_a_fresh_object_holds_nothing_without_a_look_by_the_storage():
    storage = Counting()
    facade = make(storage, {'metadata': {'name': 'n'}, 'spec': {'x': 1}})  # no annotations, no status
    assert not await facade.holds_any([A, B])
    assert (await facade.essences()).new == {'spec': {'x': 1}}
    assert storage.calls == {}  # nowhere in it to keep a record: nothing to fetch, nothing to clear


async def test_records_are_fetched_once_per_id():
    storage = Counting()
    facade = make(storage, with_records(a=RECORD))
    assert await facade.fetch([A, B]) == {A: RECORD, B: None}
    assert await facade.fetch([B, A, C]) == {B: None, A: RECORD, C: None}
    assert await facade.stored([A, B, C]) == [A]
    assert storage.calls['fetch'] == 3


async def test_holds_any_stops_at_the_first_record():
    storage = Counting()
    facade = make(storage, with_records(a=RECORD))
    assert await facade.holds_any([A, B, C])
    assert storage.calls['fetch'] == 1


async def test_a_touch_marker_alone_means_there_may_be_records():
    storage = Counting()
    facade = make(storage, {'metadata': {'annotations': {'kopf.zalando.org/touch-dummy': 't'}}})
    assert await facade.fetch([A]) == {A: None}
    assert storage.calls['fetch'] == 1


async def test_legacy_records_in_the_status_are_seen():
    storage = Counting()
    facade = make(storage, {'metadata': {}, 'status': {'kopf': {'progress': {'a': RECORD}}}})
    assert await facade.stored([A, B]) == [A]


async def test_other_annotations_and_status_fields_do_not_count_as_records():
    storage = Counting()
    raw = {'metadata': {'annotations': {'user': 'u', 'kopf.zalando.org/last-handled-configuration': '{}'}},
           'status': {'phase': 'ok', 'create_fn': {'message': 'hi'}}}
    facade = make(storage, raw)
    assert await facade.fetch([A]) == {A: None}
    assert storage.calls['fetch'] == 0


async def test_looking_for_records_leaves_the_object_intact():
    raw = {'metadata': {'annotations': {'user': 'u', 'odd': {'not': 'a string'},
                                        'kopf.zalando.org/touch-dummy': 't'}},
           'status': {'kopf': {'progress': {'a': RECORD}, 'dummy': 't'}, 'phase': 'ok'}}
    original = json.loads(json.dumps(raw))
    facade = make(Counting(), raw)
    assert await facade.stored([A]) == [A]
    assert raw == original


async def test_another_operators_records_are_looked_at_but_never_taken_for_ours():
    # clear() strips every framework's bookkeeping from essences, so the object
    # cannot be judged empty by it; the records are read (in memory), not found.
    storage = Counting()
    raw = {'metadata': {'annotations': {'other.example.com/a': '{"started":"2020-01-01T00:00:00"}'}}}
    facade = make(storage, raw)
    assert await facade.fetch([A]) == {A: None}
    assert storage.calls['fetch'] == 1


async def test_a_storage_outside_of_the_object_is_always_asked():
    storage = External({A: RECORD})
    facade = make(storage)
    assert await facade.stored([A, B]) == [A]
    assert await facade.fetch([A, B]) == {A: RECORD, B: None}
    assert storage.calls['fetch'] == 2


@pytest.mark.parametrize('storage, expected', [
    (AnnotationsProgressStorage(), True),
    (StatusProgressStorage(), True),
    (SmartProgressStorage(), True),
    (MultiProgressStorage([AnnotationsProgressStorage(prefix='a.example.com'), StatusProgressStorage()]), True),
    (External(), False),
    (MultiProgressStorage([AnnotationsProgressStorage(), External()]), False),
])
def test_which_storages_keep_everything_in_the_object(storage, expected):
    assert persistence.in_body(storage) is expected


class Unhashable(StatusProgressStorage):
    """A user's storage that compares by value, as some do: it cannot be hashed (nor cached by identity)."""

    def __eq__(self, other):
        return isinstance(other, Unhashable) and other.field == self.field

    __hash__ = None


async def test_a_storage_that_cannot_be_hashed_is_judged_anew_each_time():
    storage = Unhashable(field='status.my-op.progress')
    assert persistence.in_body(storage) is True
    facade = make(storage, {'status': {'my-op': {'progress': {'a': RECORD}}}})
    assert await facade.stored([A, B]) == [A]
    assert not await make(Unhashable(field='status.my-op.progress')).holds_any([A, B])


# Writing.

async def test_writes_are_collected_and_applied_once_at_commit():
    storage = Counting()
    facade = make(storage, with_records(b=RECORD))
    await facade.keep(A, DONE)
    await facade.keep(A, RECORD)
    facade.forget(B)
    assert storage.calls['store'] == storage.calls['purge'] == 0
    patch = await facade.commit()
    assert storage.calls['store'] == 1
    assert storage.calls['purge'] == 1
    assert storage.calls['flush'] == 1
    annotations = applied(facade.body, patch).metadata.annotations
    assert json.loads(annotations['kopf.zalando.org/a']) == RECORD
    assert 'kopf.zalando.org/b' not in annotations


async def test_a_storage_outside_of_the_object_is_written_at_once_and_flushed_on_sync():
    storage = External({A: RECORD})
    facade = make(storage)
    await facade.fetch([A])
    await facade.keep(A, RECORD)  # unchanged: not stored again
    assert storage.calls['store'] == 0
    await facade.keep(B, DONE)
    assert storage.calls['store'] == 1 and storage.data[B] == DONE
    assert storage.calls['flush'] == 0
    await facade.sync()
    await facade.sync()
    assert storage.calls['flush'] == 1
    facade.forget(A)
    assert storage.calls['purge'] == 0  # purges wait for the end of the cycle
    assert await facade.commit() == {}
    assert storage.calls['purge'] == 1 and storage.calls['flush'] == 2
    assert storage.data == {B: DONE}


async def test_a_record_kept_and_forgotten_in_one_cycle_is_never_written():
    storage = Counting()
    facade = make(storage)
    await facade.keep(A, RECORD)
    facade.forget(A)
    patch = await facade.commit()
    assert patch == {}
    assert storage.calls['store'] == storage.calls['purge'] == storage.calls['flush'] == 0


async def test_nothing_to_write_means_no_flush():
    storage = External()
    facade = make(storage)
    patch = await facade.commit()
    assert patch == {}
    assert storage.calls['flush'] == 0


async def test_purges_of_records_known_to_be_absent_are_skipped():
    storage = External({A: RECORD})
    facade = make(storage)
    await facade.fetch([A, B])
    facade.forget(A)
    facade.forget(B)  # fetched: absent
    facade.forget(C)  # never fetched: cannot be known
    await facade.commit()
    assert storage.calls['purge'] == 2
    assert storage.data == {}


async def test_in_body_storages_purge_unfetched_and_unreadable_records_too():
    storage = Counting()
    raw = with_records(a=RECORD)
    raw['metadata']['annotations']['kopf.zalando.org/b'] = 'not json'
    facade = make(storage, raw)
    assert await facade.fetch([B]) == {B: None}  # unreadable: reported, treated as absent
    facade.forget(A)
    facade.forget(B)
    patch = await facade.commit()
    assert patch['metadata']['annotations'] == {'kopf.zalando.org/a': None, 'kopf.zalando.org/b': None}


async def test_what_is_decided_is_seen_by_later_reads():
    storage = External({A: RECORD})
    facade = make(storage)
    await facade.keep(B, DONE)
    facade.forget(A)
    assert await facade.fetch([A, B]) == {A: None, B: DONE}
    assert storage.calls['fetch'] == 0


async def test_the_touch_marker_is_removed_only_where_it_can_be():
    storage = Counting()
    facade = make(storage, {'metadata': {'annotations': {'kopf.zalando.org/touch-dummy': 't', 'user': 'u'}}})
    facade.remove_touch()
    patch = await facade.commit()
    assert applied(facade.body, patch).metadata.annotations == {'user': 'u'}

    storage = Counting()
    facade = make(storage)
    facade.remove_touch()
    assert await facade.commit() == {}
    assert storage.calls['touch'] == 0


async def test_the_essence_is_stored_as_the_diffbase_at_commit():
    facade = make(Counting())
    facade.keep_essence({'spec': {'x': 1}})
    patch = await facade.commit()
    assert patch == {'metadata': {'annotations': {'kopf.zalando.org/last-handled-configuration': '{"spec":{"x":1}}'}}}


async def test_storages_that_keep_data_outside_are_told_when_the_object_is_gone():
    storage = External()
    await make(storage).erase()
    assert storage.calls['erase'] == 1


async def test_touch_makes_a_patch_with_the_marker():
    patch = await persistence.touch(SmartProgressStorage(), body=Body({'metadata': {}}), value='2020')
    assert patch == {'metadata': {'annotations': {'kopf.zalando.org/touch-dummy': '2020'}}}
    assert await persistence.touch(External(), body=Body({'metadata': {}}), value='2020') == {}


async def test_a_multi_cycle_handling_through_a_real_storage():
    """First cycle: a is stored; second: it is read back, then purged along with the marker."""
    storage = SmartProgressStorage()
    facade = make(storage)
    await facade.keep(A, RECORD)
    body = applied(facade.body, await facade.commit())
    assert 'kopf.zalando.org/a' in body.metadata.annotations

    facade = Persistence(progress=storage, diffbase=AnnotationsDiffBaseStorage(), body=body)
    assert await facade.fetch([A]) == {A: RECORD}
    await facade.keep(A, RECORD)  # unchanged: a rewrite is harmless and idempotent
    facade.forget(A)
    facade.remove_touch()
    body = applied(body, await facade.commit())
    assert dict(body.metadata.annotations) == {'user': 'u'}
