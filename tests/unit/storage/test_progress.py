import copy
import json
import logging

import pytest

import kopf
from kopf._storage import calls
from kopf._storage.progress import (
    AnnotationsProgressStorage,
    MultiProgressStorage,
    ProgressStorage,
    SmartProgressStorage,
    StatusProgressStorage,
)
from kopf._structs.bodies import Body
from kopf._structs.ids import HandlerId
from kopf._structs.patches import Patch

from .conftest import applied

RECORD = {'started': '2020-01-01T00:00:00+00:00', 'retries': 1, 'message': 'oops'}
SUCCESS = {'started': '2020-01-01T00:00:00+00:00', 'stopped': '2020-01-01T00:00:01+00:00',
           'retries': 1, 'success': True}
FN = HandlerId('fn')

ALL_STORAGES = [
    AnnotationsProgressStorage,
    StatusProgressStorage,
    SmartProgressStorage,
    lambda: MultiProgressStorage([AnnotationsProgressStorage(), StatusProgressStorage()]),
]


def test_all_storages_are_exported():
    assert kopf.ProgressStorage is ProgressStorage
    assert kopf.AnnotationsProgressStorage is AnnotationsProgressStorage
    assert kopf.StatusProgressStorage is StatusProgressStorage
    assert kopf.SmartProgressStorage is SmartProgressStorage
    assert kopf.MultiProgressStorage is MultiProgressStorage


@pytest.mark.parametrize('factory', ALL_STORAGES)
async def test_store_then_fetch_round_trips(factory, body):
    storage = factory()
    patch = Patch()
    await calls.call(storage.store, key=FN, record=RECORD, body=body, patch=patch)
    assert patch
    fetched = await calls.call(storage.fetch, key=FN, body=applied(body, patch))
    assert fetched == RECORD


@pytest.mark.parametrize('factory', ALL_STORAGES)
async def test_nothing_stored_fetches_none(factory, body):
    assert await calls.call(factory().fetch, key=FN, body=body) is None


@pytest.mark.parametrize('factory', ALL_STORAGES)
async def test_purge_after_store_removes_the_record(factory, body):
    storage = factory()
    patch = Patch()
    await calls.call(storage.store, key=FN, record=RECORD, body=body, patch=patch)
    stored = applied(body, patch)
    patch = Patch()
    await calls.call(storage.purge, key=FN, body=stored, patch=patch)
    assert await calls.call(storage.fetch, key=FN, body=applied(stored, patch)) is None


@pytest.mark.parametrize('factory', ALL_STORAGES)
async def test_purge_of_a_never_stored_record_leaves_the_patch_empty(factory, body):
    patch = Patch()
    await calls.call(factory().purge, key=FN, body=body, patch=patch)
    assert patch == {}


@pytest.mark.parametrize('factory', ALL_STORAGES)
async def test_purge_of_a_record_stored_in_the_same_patch_drops_it_from_the_patch(factory, body):
    storage = factory()
    patch = Patch()
    await calls.call(storage.store, key=FN, record=RECORD, body=body, patch=patch)
    await calls.call(storage.purge, key=FN, body=body, patch=patch)
    assert await calls.call(storage.fetch, key=FN, body=applied(body, patch)) is None


@pytest.mark.parametrize('factory', ALL_STORAGES)
async def test_storages_never_mutate_the_body(factory, raw):
    original = copy.deepcopy(raw)
    body = Body(raw)
    storage = factory()
    patch = Patch()
    await calls.call(storage.store, key=FN, record=RECORD, body=body, patch=patch)
    await calls.call(storage.purge, key=FN, body=body, patch=patch)
    await calls.call(storage.touch, body=body, patch=patch, value='1')
    await calls.call(storage.clear, essence=copy.deepcopy(raw))
    assert raw == original


# Annotations

def test_annotations_one_compact_annotation_per_handler(body):
    patch = Patch()
    AnnotationsProgressStorage().store(key=FN, record={**RECORD, 'stopped': None}, body=body, patch=patch)
    AnnotationsProgressStorage().store(key=HandlerId('other'), record=RECORD, body=body, patch=patch)
    value = patch['metadata']['annotations']['kopf.zalando.org/fn']
    assert value == '{"message":"oops","retries":1,"started":"2020-01-01T00:00:00+00:00"}'
    assert set(patch['metadata']['annotations']) == {'kopf.zalando.org/fn', 'kopf.zalando.org/other'}
    assert 'status' not in patch


def test_annotations_verbose_keeps_nulls(body):
    patch = Patch()
    AnnotationsProgressStorage(verbose=True).store(key=FN, record={**RECORD, 'stopped': None}, body=body, patch=patch)
    assert json.loads(patch['metadata']['annotations']['kopf.zalando.org/fn'])['stopped'] is None


def test_annotations_custom_prefix(body):
    patch = Patch()
    AnnotationsProgressStorage(prefix='my-op.example.com').store(key=FN, record=RECORD, body=body, patch=patch)
    assert list(patch['metadata']['annotations']) == ['my-op.example.com/fn']


def test_annotations_map_unusual_handler_ids_to_valid_keys(body):
    storage = AnnotationsProgressStorage()
    patch = Patch()
    for handler_id in ['parent/child', 'fn/spec.field', 'ünï', 'x' * 200]:
        storage.store(key=HandlerId(handler_id), record=RECORD, body=body, patch=patch)
    keys = list(patch['metadata']['annotations'])
    assert len(keys) == 4
    assert all(len(key.split('/', 1)[1]) <= 63 for key in keys)
    for handler_id in ['parent/child', 'fn/spec.field', 'ünï', 'x' * 200]:
        assert storage.fetch(key=HandlerId(handler_id), body=applied(body, patch)) == RECORD


def test_annotations_reject_an_invalid_prefix():
    with pytest.raises(ValueError, match='not a DNS subdomain'):
        AnnotationsProgressStorage(prefix='Not_Valid')


@pytest.mark.parametrize('value', ['{not json', '[1,2]', '{"retries":"many"}', '{"started":"never"}'])
def test_annotations_corrupt_record_warns_and_counts_as_absent(value, raw, caplog):
    raw['metadata']['annotations']['kopf.zalando.org/fn'] = value
    with caplog.at_level(logging.WARNING, logger='kopf._storage'):
        assert AnnotationsProgressStorage().fetch(key=FN, body=Body(raw)) is None
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    assert 'kopf.zalando.org/fn' in message
    assert 'ns1/ex1' in message


def test_annotations_touch_writes_only_when_the_value_differs(raw):
    storage = AnnotationsProgressStorage()
    patch = Patch()
    storage.touch(body=Body(raw), patch=patch, value='v1')
    assert patch == {'metadata': {'annotations': {'kopf.zalando.org/touch-dummy': 'v1'}}}
    raw['metadata']['annotations']['kopf.zalando.org/touch-dummy'] = 'v1'
    patch = Patch()
    storage.touch(body=Body(raw), patch=patch, value='v1')
    assert patch == {}


def test_annotations_clear_removes_records_of_any_prefix_and_our_marker():
    storage = AnnotationsProgressStorage(prefix='my.op')
    essence = {'metadata': {'annotations': {
        'my.op/fn': json.dumps(RECORD),
        'my.op/touch-dummy': 'x',
        'my.op/config': 'user-defined value',
        'other.op/fn': json.dumps(RECORD),
        'other.op/touch-dummy': 'x',
        'user': 'value',
    }}}
    assert storage.clear(essence=essence) == {'metadata': {'annotations': {
        'my.op/config': 'user-defined value',
        'user': 'value',
    }}}


def test_annotations_clear_removes_a_custom_touch_key():
    storage = AnnotationsProgressStorage(prefix='my.op', touch_key='poke')
    essence = {'metadata': {'annotations': {'my.op/poke': '2020-01-01T00:00:00', 'user': 'value'}}}
    assert storage.clear(essence=essence) == {'metadata': {'annotations': {'user': 'value'}}}


def test_annotations_clear_prunes_emptied_metadata():
    essence = {'spec': {}, 'metadata': {'annotations': {'kopf.zalando.org/fn': json.dumps(RECORD)}}}
    assert AnnotationsProgressStorage().clear(essence=essence) == {'spec': {}}


# Status

def test_status_one_dict_per_handler_under_the_field(body):
    patch = Patch()
    StatusProgressStorage().store(key=FN, record=RECORD, body=body, patch=patch)
    assert patch['status']['kopf']['progress']['fn']['retries'] == 1
    assert 'metadata' not in patch


def test_status_store_sends_nulls_to_erase_old_fields(raw):
    raw['status'] = {'kopf': {'progress': {'fn': {**RECORD, 'delayed': '2020-01-01T00:00:00'}}}}
    patch = Patch()
    StatusProgressStorage().store(key=FN, record=RECORD, body=Body(raw), patch=patch)
    assert patch['status']['kopf']['progress']['fn']['delayed'] is None
    assert StatusProgressStorage().fetch(key=FN, body=applied(Body(raw), patch)) == RECORD


def test_status_custom_field_as_in_the_seed_example(body):
    storage = StatusProgressStorage(field='status.my-op')
    patch = Patch()
    storage.store(key=HandlerId('fn/spec.field'), record=RECORD, body=body, patch=patch)
    assert list(patch['status']['my-op']) == ['fn/spec.field']
    assert storage.fetch(key=HandlerId('fn/spec.field'), body=applied(body, patch)) == RECORD


def test_status_custom_name(body):
    patch = Patch()
    StatusProgressStorage(name='my-op').store(key=FN, record=RECORD, body=body, patch=patch)
    assert 'fn' in patch['status']['my-op']['progress']


def test_status_corrupt_record_warns_and_counts_as_absent(raw, caplog):
    raw['status'] = {'kopf': {'progress': {'fn': 'garbage'}}}
    with caplog.at_level(logging.WARNING, logger='kopf._storage'):
        assert StatusProgressStorage().fetch(key=FN, body=Body(raw)) is None
    assert 'status.kopf.progress.fn' in caplog.text


def test_status_touch_and_clear(raw):
    storage = StatusProgressStorage()
    patch = Patch()
    storage.touch(body=Body(raw), patch=patch, value='v1')
    assert patch == {'status': {'kopf': {'dummy': 'v1'}}}
    essence = {'spec': 1, 'status': {'kopf': {'progress': {'fn': {}}, 'dummy': 'v1'}, 'other': 2}}
    assert storage.clear(essence=essence) == {'spec': 1, 'status': {'other': 2}}


# Smart

def legacy(raw, record):
    raw['status'] = {'kopf': {'progress': {'fn': record}}}
    return Body(raw)


def test_smart_reads_legacy_status_records(raw):
    assert SmartProgressStorage().fetch(key=FN, body=legacy(raw, SUCCESS)) == SUCCESS


def test_smart_prefers_annotations_when_both_exist(raw):
    raw['metadata']['annotations']['kopf.zalando.org/fn'] = json.dumps(RECORD)
    assert SmartProgressStorage().fetch(key=FN, body=legacy(raw, SUCCESS)) == RECORD


def test_smart_writes_annotations_only(body):
    patch = Patch()
    SmartProgressStorage().store(key=FN, record=RECORD, body=body, patch=patch)
    assert patch == {'metadata': {'annotations': {'kopf.zalando.org/fn': json.dumps(
        RECORD, separators=(',', ':'), sort_keys=True)}}}


def test_smart_store_moves_a_legacy_record_to_annotations(raw):
    body = legacy(raw, RECORD)
    patch = Patch()
    SmartProgressStorage().store(key=FN, record=SUCCESS, body=body, patch=patch)
    after = applied(body, patch)
    assert after.status['kopf']['progress'] == {}
    assert SmartProgressStorage().fetch(key=FN, body=after) == SUCCESS


def test_smart_purge_cleans_both_places(raw):
    raw['metadata']['annotations']['kopf.zalando.org/fn'] = json.dumps(RECORD)
    body = legacy(raw, SUCCESS)
    patch = Patch()
    SmartProgressStorage().purge(key=FN, body=body, patch=patch)
    assert patch == {
        'metadata': {'annotations': {'kopf.zalando.org/fn': None}},
        'status': {'kopf': {'progress': {'fn': None}}},
    }


def test_smart_passes_its_parameters_on(body):
    storage = SmartProgressStorage(prefix='my.op', field='status.my-op', touch_key='poke', verbose=True)
    patch = Patch()
    storage.store(key=FN, record=RECORD, body=body, patch=patch)
    storage.touch(body=body, patch=patch, value='1')
    assert set(patch['metadata']['annotations']) == {'my.op/fn', 'my.op/poke'}
    assert storage.status.field == ('status', 'my-op')


def test_smart_clear_removes_both_kinds_of_traces():
    essence = {
        'metadata': {'annotations': {'kopf.zalando.org/fn': json.dumps(RECORD), 'u': 'v'}},
        'status': {'kopf': {'progress': {'fn': RECORD}}},
    }
    assert SmartProgressStorage().clear(essence=essence) == {'metadata': {'annotations': {'u': 'v'}}}


# Multi

class MemoryStorage(ProgressStorage):
    """A custom storage implementing only the three required methods."""

    def __init__(self, records=None):
        self.records = dict(records or {})
        self.flushes = 0

    def fetch(self, *, key, body):
        return self.records.get(key)

    def store(self, *, key, record, body, patch):
        self.records[key] = record

    def purge(self, *, key, body, patch):
        self.records.pop(key, None)

    def flush(self):
        self.flushes += 1


def test_multi_fetches_the_first_non_empty_record(body):
    first, second = MemoryStorage(), MemoryStorage({FN: SUCCESS})
    multi = MultiProgressStorage([first, second])
    assert multi.fetch(key=FN, body=body) == SUCCESS
    first.records[FN] = RECORD
    assert multi.fetch(key=FN, body=body) == RECORD


def test_multi_writes_purges_and_flushes_all(body):
    first, second = MemoryStorage(), MemoryStorage()
    multi = MultiProgressStorage([first, second])
    multi.store(key=FN, record=RECORD, body=body, patch=Patch())
    assert first.records == second.records == {FN: RECORD}
    multi.flush()
    assert first.flushes == second.flushes == 1
    multi.purge(key=FN, body=body, patch=Patch())
    assert first.records == second.records == {}


def test_multi_touches_and_clears_through_all(body):
    multi = MultiProgressStorage([AnnotationsProgressStorage(prefix='a.b'), StatusProgressStorage()])
    patch = Patch()
    multi.touch(body=body, patch=patch, value='x')
    assert patch == {'metadata': {'annotations': {'a.b/touch-dummy': 'x'}}, 'status': {'kopf': {'dummy': 'x'}}}
    essence = {'metadata': {'annotations': {'a.b/touch-dummy': 'x'}}, 'status': {'kopf': {'dummy': 'x'}}}
    assert multi.clear(essence=essence) == {}


def test_multi_rejects_non_storages():
    with pytest.raises(TypeError, match=r'kopf\.ProgressStorage'):
        MultiProgressStorage([object()])
    with pytest.raises(ValueError):
        MultiProgressStorage([])


# Custom storages

def test_a_subclass_with_only_fetch_store_purge_is_complete(body):
    storage = MemoryStorage()
    patch = Patch()
    storage.touch(body=body, patch=patch, value='x')
    assert patch == {}
    assert storage.clear(essence={'a': 1}) == {'a': 1}


def test_a_subclass_missing_a_required_method_is_not_instantiable():
    class Incomplete(ProgressStorage):
        def fetch(self, *, key, body):
            return None

    with pytest.raises(TypeError):
        Incomplete()


class AsyncStorage(ProgressStorage):
    def __init__(self):
        self.records = {}
        self.calls = []

    async def fetch(self, *, key, body):
        self.calls.append('fetch')
        return self.records.get(key)

    async def store(self, *, key, record, body, patch):
        self.calls.append('store')
        self.records[key] = record

    async def purge(self, *, key, body, patch):
        self.calls.append('purge')
        self.records.pop(key, None)

    async def flush(self):
        self.calls.append('flush')


async def test_async_storage_methods_are_awaited_by_the_framework_helper(body):
    storage = AsyncStorage()
    await calls.call(storage.store, key=FN, record=RECORD, body=body, patch=Patch())
    assert await calls.call(storage.fetch, key=FN, body=body) == RECORD
    await calls.call(storage.flush)
    await calls.call(storage.purge, key=FN, body=body, patch=Patch())
    assert storage.records == {}
    assert storage.calls == ['store', 'fetch', 'flush', 'purge']


async def test_multi_awaits_async_children(body):
    async_child = AsyncStorage()
    multi = MultiProgressStorage([async_child, AnnotationsProgressStorage()])
    patch = Patch()
    await multi.store(key=FN, record=RECORD, body=body, patch=patch)
    assert async_child.records == {FN: RECORD}
    assert 'kopf.zalando.org/fn' in patch['metadata']['annotations']
    assert await multi.fetch(key=FN, body=body) == RECORD


async def test_multi_passes_erase_on_to_children_that_have_it(body):
    erased = []

    class Erasable(MemoryStorage):
        async def erase(self, *, body):
            erased.append(body.metadata.name)

    await MultiProgressStorage([Erasable(), MemoryStorage()]).erase(body=body)
    assert erased == ['ex1']
