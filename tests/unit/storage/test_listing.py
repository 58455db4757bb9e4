"""
The optional parts of the storage interface that the tools use: listing the records of an object, and forgetting
its essence.
"""
import json

import pytest

import kopf
from kopf._storage import calls, conventions
from kopf._structs.bodies import Body
from kopf._structs.patches import Patch

from .conftest import applied

DONE = {'started': '2020-01-01T00:00:00+00:00', 'success': True}
WAITING = {'started': '2020-01-01T00:00:00+00:00', 'retries': 1, 'delayed': '2099-01-01T00:00:00+00:00'}


def with_records(raw, storage, records):
    body = Body(raw)
    patch = Patch()
    for key, record in records.items():
        storage.store(key=key, record=record, body=body, patch=patch)
    return applied(body, patch)


def test_annotations_are_listed_by_handler_id_where_the_id_can_be_told(raw):
    storage = kopf.AnnotationsProgressStorage()
    parent = {**WAITING, 'subrefs': ['parent/child']}
    body = with_records(raw, storage, {'fn': DONE, 'parent': parent, 'parent/child': WAITING,
                                       'fn/spec.field': WAITING})
    listed = storage.list_records(body=body)
    assert listed['fn'] == DONE and listed['parent/child'] == WAITING  # the sub-handler by its parent's subrefs
    hashed = conventions.make_name('fn/spec.field')
    assert listed[hashed] == WAITING  # an id unknown to anyone: only its name is known
    assert storage.list_records(body=body, ids=['fn/spec.field'])['fn/spec.field'] == WAITING
    assert set(storage.list_records(body=body, ids=['fn/spec.field'])) == {'fn', 'parent', 'parent/child',
                                                                          'fn/spec.field'}


def test_annotations_of_other_prefixes_markers_and_user_values_are_not_listed(raw):
    raw['metadata']['annotations'].update({
        'other.example.com/fn': json.dumps(DONE),
        'kopf.zalando.org/touch-dummy': '2020-01-01',
        'kopf.zalando.org/last-handled-configuration': '{"spec":{}}',
        'kopf.zalando.org/note': 'not a record',
    })
    assert kopf.AnnotationsProgressStorage().list_records(body=Body(raw)) == {}


def test_kopfs_key_forms_are_listed_under_the_ids(raw):
    raw['metadata']['annotations']['kopf.zalando.org/parent.child'] = json.dumps({**WAITING, 'purpose': 'create'})
    listed = kopf.AnnotationsProgressStorage().list_records(body=Body(raw), ids=['parent/child'])
    assert list(listed) == ['parent/child']


def test_status_records_are_listed_as_they_are(raw):
    storage = kopf.StatusProgressStorage()
    raw['status'] = {'kopf': {'progress': {'fn': DONE, 'parent/child': WAITING, 'bad': {'retries': 'x'}}}}
    assert storage.list_records(body=Body(raw)) == {'fn': DONE, 'parent/child': WAITING}


def test_multi_storages_list_all_children_the_first_one_winning(raw):
    first, second = kopf.AnnotationsProgressStorage(), kopf.StatusProgressStorage()
    raw['status'] = {'kopf': {'progress': {'fn': WAITING, 'old': WAITING}}}
    body = with_records(raw, first, {'fn': DONE})
    assert kopf.SmartProgressStorage().list_records(body=body) == {'fn': DONE, 'old': WAITING}
    assert kopf.MultiProgressStorage([first, second]).list_records(body=body) == {'fn': DONE, 'old': WAITING}


async def test_storages_that_cannot_list_say_so(raw):
    class Custom(kopf.ProgressStorage):
        def fetch(self, *, key, body):
            return None

        def store(self, *, key, record, body, patch):
            pass

        def purge(self, *, key, body, patch):
            pass

    with pytest.raises(NotImplementedError):
        Custom().list_records(body=Body(raw))
    with pytest.raises(NotImplementedError):
        await calls.call(kopf.MultiProgressStorage([Custom()]).list_records, body=Body(raw))
    assert await calls.call(kopf.MultiProgressStorage([Custom(), kopf.StatusProgressStorage()]).list_records,
                            body=Body(raw)) == {}


@pytest.mark.parametrize('storage, where', [
    (kopf.AnnotationsDiffBaseStorage(), ('metadata', 'annotations', 'kopf.zalando.org/last-handled-configuration')),
    (kopf.StatusDiffBaseStorage(), ('status', 'kopf', 'last-handled-configuration')),
])
def test_diffbase_storages_forget_the_essence(raw, storage, where):
    patch = Patch()
    storage.store(body=Body(raw), patch=patch, essence={'spec': {}})
    body = applied(Body(raw), patch)
    assert storage.fetch(body=body) == {'spec': {}}
    removal = Patch()
    kopf.MultiDiffBaseStorage([storage]).purge(body=body, patch=removal)
    assert storage.fetch(body=applied(body, removal)) is None
    node = removal
    for key in where:
        node = node[key]
    assert node is None


def test_a_custom_diffbase_storage_cannot_forget_by_default(raw):
    class Custom(kopf.DiffBaseStorage):
        def fetch(self, *, body):
            return None

        def store(self, *, body, patch, essence):
            pass

    with pytest.raises(NotImplementedError):
        Custom().purge(body=Body(raw), patch=Patch())
