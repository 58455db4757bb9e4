import copy
import json
import logging

import pytest

import kopf
from kopf._storage import calls
from kopf._storage.diffbase import (
    AnnotationsDiffBaseStorage,
    DiffBaseStorage,
    MultiDiffBaseStorage,
    StatusDiffBaseStorage,
)
from kopf._storage.progress import SmartProgressStorage
from kopf._structs.bodies import Body
from kopf._structs.patches import Patch

from .conftest import applied

FULL = {
    'apiVersion': 'kopf.dev/v1',
    'kind': 'KopfExample',
    'metadata': {
        'name': 'ex1', 'namespace': 'ns1', 'uid': 'u', 'resourceVersion': '5', 'generation': 2,
        'creationTimestamp': '2020-01-01T00:00:00Z', 'managedFields': [{}], 'finalizers': ['f'],
        'labels': {'app': 'x'},
        'annotations': {
            'user': 'value',
            'kubectl.kubernetes.io/last-applied-configuration': '{}',
            'kopf.zalando.org/last-handled-configuration': '{"spec":{}}',
            'other.op/last-handled-configuration': '{"spec":{}}',
            'other.op/fn': '{"started":"2020-01-01T00:00:00"}',
            'other.op/touch-dummy': '2020-01-01T00:00:00',
        },
    },
    'spec': {'field': 'value'},
    'data': {'k': 'v'},
    'status': {'x': 1, 'kopf': {'progress': {}}},
}


def test_all_storages_are_exported():
    assert kopf.DiffBaseStorage is DiffBaseStorage
    assert kopf.AnnotationsDiffBaseStorage is AnnotationsDiffBaseStorage
    assert kopf.StatusDiffBaseStorage is StatusDiffBaseStorage
    assert kopf.MultiDiffBaseStorage is MultiDiffBaseStorage


def test_essence_keeps_only_what_users_define():
    essence = SmartProgressStorage().clear(essence=AnnotationsDiffBaseStorage().build(body=Body(FULL)))
    assert essence == {
        'metadata': {'labels': {'app': 'x'}, 'annotations': {'user': 'value'}},
        'spec': {'field': 'value'},
        'data': {'k': 'v'},
    }


def test_essence_leaves_progress_bookkeeping_to_the_progress_storage():
    # Diff-base storages know nothing of progress records: the framework clears them with the progress storage.
    annotations = AnnotationsDiffBaseStorage().build(body=Body(FULL))['metadata']['annotations']
    assert annotations == {'user': 'value', 'other.op/fn': '{"started":"2020-01-01T00:00:00"}',
                           'other.op/touch-dummy': '2020-01-01T00:00:00'}


def test_ignored_fields_are_not_part_of_the_essence():
    storage = AnnotationsDiffBaseStorage(ignored_fields=['spec.field', ('data', 'k')])
    assert 'field' not in storage.build(body=Body(FULL)).get('spec', {})
    assert 'data' not in storage.build(body=Body(FULL))


def test_essence_without_labels_and_annotations_has_no_metadata():
    assert AnnotationsDiffBaseStorage().build(body=Body({'metadata': {'name': 'n'}, 'spec': {}})) == {'spec': {}}


def test_essence_restores_extra_fields():
    essence = AnnotationsDiffBaseStorage().build(body=Body(FULL), extra_fields=['status.x', 'status.absent'])
    assert essence['status'] == {'x': 1}


def test_essence_is_a_copy():
    raw = copy.deepcopy(FULL)
    essence = AnnotationsDiffBaseStorage().build(body=Body(raw))
    essence['spec']['field'] = 'changed'
    assert raw == FULL


def test_essence_shares_nothing_mutable_with_the_object():
    raw = copy.deepcopy(FULL)
    essence = AnnotationsDiffBaseStorage().build(body=Body(raw), extra_fields=['status.kopf'])
    essence['metadata']['labels']['app'] = 'changed'
    essence['metadata']['annotations']['user'] = 'changed'
    essence['data']['k'] = 'changed'
    essence['status']['kopf']['progress']['x'] = 'added'
    assert raw == FULL


def test_essence_copies_labels_and_annotations_of_unusual_values_deeply():
    raw = {'metadata': {'labels': {'a': {'nested': 'x'}}, 'annotations': {'b': ['y']}}, 'spec': {}}
    essence = AnnotationsDiffBaseStorage().build(body=Body(raw))
    assert essence['metadata'] == {'labels': {'a': {'nested': 'x'}}, 'annotations': {'b': ['y']}}
    essence['metadata']['labels']['a']['nested'] = 'changed'
    essence['metadata']['annotations']['b'].append('z')
    assert raw['metadata'] == {'labels': {'a': {'nested': 'x'}}, 'annotations': {'b': ['y']}}


@pytest.mark.parametrize('factory', [AnnotationsDiffBaseStorage, StatusDiffBaseStorage,
                                     lambda: MultiDiffBaseStorage([AnnotationsDiffBaseStorage(),
                                                                   StatusDiffBaseStorage()])])
async def test_store_then_fetch_round_trips(factory):
    storage = factory()
    body = Body(FULL)
    essence = storage.build(body=body)
    patch = Patch()
    await calls.call(storage.store, body=body, patch=patch, essence=essence)
    stored = applied(body, patch)
    assert await calls.call(storage.fetch, body=stored) == essence
    # The stored diff-base is not part of the next essence: no endless self-triggering.
    assert storage.build(body=stored) == essence


def test_annotations_store_compact_json_under_the_default_key():
    patch = Patch()
    AnnotationsDiffBaseStorage().store(body=Body({}), patch=patch, essence={'spec': {'b': 1, 'a': 2}})
    assert patch == {'metadata': {'annotations': {
        'kopf.zalando.org/last-handled-configuration': '{"spec":{"a":2,"b":1}}'}}}


def test_annotations_store_nothing_when_unchanged():
    body = Body({'metadata': {'annotations': {'kopf.zalando.org/last-handled-configuration': '{"spec":{}}'}}})
    patch = Patch()
    AnnotationsDiffBaseStorage().store(body=body, patch=patch, essence={'spec': {}})
    assert patch == {}


def test_annotations_custom_prefix_key_and_full_name():
    # As in Kopf: .prefix and .key are the parts, .name the whole; name= sets both parts (Kopf 0.27/0.28).
    storage = AnnotationsDiffBaseStorage(prefix='my.op', key='last')
    assert (storage.prefix, storage.key, storage.name) == ('my.op', 'last', 'my.op/last')
    storage = AnnotationsDiffBaseStorage(name='my.op/handled')
    assert (storage.prefix, storage.key, storage.name) == ('my.op', 'handled', 'my.op/handled')
    assert AnnotationsDiffBaseStorage(prefix=None).name == 'last-handled-configuration'
    with pytest.raises(ValueError, match='DNS subdomain'):
        AnnotationsDiffBaseStorage(prefix='Bad_Prefix')
    with pytest.raises(ValueError, match='not a valid annotation name'):
        AnnotationsDiffBaseStorage(key='-bad-')


def test_never_handled_fetches_none():
    assert AnnotationsDiffBaseStorage().fetch(body=Body({})) is None
    assert StatusDiffBaseStorage().fetch(body=Body({})) is None


@pytest.mark.parametrize('value', ['{corrupt', '[1]', '"str"'])
def test_corrupt_diffbase_warns_and_counts_as_never_handled(value, caplog):
    body = Body({'metadata': {'name': 'n', 'annotations': {'kopf.zalando.org/last-handled-configuration': value}}})
    with caplog.at_level(logging.WARNING, logger='kopf._storage'):
        assert AnnotationsDiffBaseStorage().fetch(body=body) is None
    assert 'last-handled-configuration' in caplog.text
    assert 'never handled' in caplog.text


def test_status_stores_json_text_so_removed_keys_do_not_survive_a_merge():
    patch = Patch()
    StatusDiffBaseStorage().store(body=Body({}), patch=patch, essence={'spec': {'a': 1}})
    assert patch == {'status': {'kopf': {'last-handled-configuration': '{"spec":{"a":1}}'}}}


def test_status_custom_field():
    storage = StatusDiffBaseStorage(field='status.my-op.base')
    patch = Patch()
    storage.store(body=Body({}), patch=patch, essence={'spec': {}})
    assert patch == {'status': {'my-op': {'base': '{"spec":{}}'}}}


def test_status_essence_excludes_its_own_field_even_when_restored():
    storage = StatusDiffBaseStorage()
    body = Body({'spec': {}, 'status': {'kopf': {'last-handled-configuration': '{}'}}})
    assert storage.build(body=body, extra_fields=['status.kopf']) == {'spec': {}}


class MemoryDiffBase(DiffBaseStorage):
    def __init__(self, essence=None):
        self.essence = essence

    async def fetch(self, *, body):
        return self.essence

    async def store(self, *, body, patch, essence):
        self.essence = essence


async def test_multi_fetches_the_first_stored_and_stores_to_all():
    first, second = MemoryDiffBase(), MemoryDiffBase({'spec': 2})
    multi = MultiDiffBaseStorage([first, second])
    assert await multi.fetch(body=Body({})) == {'spec': 2}
    await multi.store(body=Body({}), patch=Patch(), essence={'spec': 3})
    assert first.essence == second.essence == {'spec': 3}
    assert await multi.fetch(body=Body({})) == {'spec': 3}


def test_multi_build_excludes_every_childs_own_traces():
    multi = MultiDiffBaseStorage([AnnotationsDiffBaseStorage(prefix='a.b'), StatusDiffBaseStorage()])
    body = Body({'metadata': {'annotations': {'a.b/last-handled-configuration': json.dumps({}), 'u': 'v'}},
                 'spec': {}})
    assert multi.build(body=body) == {'metadata': {'annotations': {'u': 'v'}}}


def test_multi_rejects_non_storages():
    with pytest.raises(TypeError, match=r'kopf\.DiffBaseStorage'):
        MultiDiffBaseStorage([object()])
