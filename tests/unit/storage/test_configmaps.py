"""
The ConfigMap storages: one ConfigMap per object, read once per cycle, written once per batch, owned by the object.

The cluster is an in-memory fake of the requests the framework gives to
storages (:class:`kopf._storage.cluster.ObjectsAPI`); it counts them.
"""
import asyncio
import copy
import json

import pytest

import kopf
from kopf._storage import calls
from kopf._storage.cluster import ClusterAccess, provide
from kopf._structs.bodies import Body
from kopf._structs.patches import Patch

RECORD = {'started': '2020-01-01T00:00:00+00:00', 'retries': 1, 'message': 'not yet'}


class FakeObjects:
    """ConfigMaps in memory, with the semantics of the API server's answers; every request is counted."""

    def __init__(self):
        self.objects = {}
        self.requests = []

    async def read(self, resource, *, namespace, name):
        self.requests.append(('GET', name))
        found = self.objects.get((namespace, name))
        return copy.deepcopy(found) if found is not None else None

    async def create(self, resource, *, namespace, obj):
        self.requests.append(('POST', obj['metadata']['name']))
        key = (namespace, obj['metadata']['name'])
        if key in self.objects:
            return None
        self.objects[key] = copy.deepcopy(dict(obj))
        return copy.deepcopy(self.objects[key])

    async def patch(self, resource, *, namespace, name, patch):
        self.requests.append(('PATCH', name))
        found = self.objects.get((namespace, name))
        if found is None:
            return None
        data = found.setdefault('data', {})
        for key, value in patch.get('data', {}).items():
            if value is None:
                data.pop(key, None)
            else:
                data[key] = value
        return copy.deepcopy(found)

    async def delete(self, resource, *, namespace, name):
        self.requests.append(('DELETE', name))
        self.objects.pop((namespace, name), None)


def obj(name='ex1', uid='uid-1', namespace='ns1'):
    return Body({'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
                 'metadata': {'name': name, 'namespace': namespace, 'uid': uid}, 'spec': {'field': 'x'}})


@pytest.fixture()
def api():
    return FakeObjects()


@pytest.fixture()
def progress(api):
    storage = kopf.ConfigMapProgressStorage()
    provide([storage], ClusterAccess(api))
    return storage


@pytest.fixture()
def both(api):
    progress, diffbase = kopf.ConfigMapProgressStorage(), kopf.ConfigMapDiffBaseStorage()
    provide([progress, diffbase], ClusterAccess(api))
    return progress, diffbase


async def test_a_configmap_per_object_is_created_at_the_first_flush(api, progress):
    body = obj()
    patch = Patch()
    await progress.store(key='parent/child', record=RECORD, body=body, patch=patch)
    assert api.objects == {}
    await progress.flush()
    assert patch == {}  # nothing in the object itself
    configmap = api.objects[('ns1', 'kopf-uid-1')]
    assert configmap['metadata']['ownerReferences'] == [
        {'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample', 'name': 'ex1', 'uid': 'uid-1'}]
    assert configmap['metadata']['labels'] == {'app.kubernetes.io/managed-by': 'kopf', 'kopf.dev/state': 'kopf'}
    assert configmap['metadata']['annotations'] == {'kopf.dev/owner': 'kopf.dev/v1 KopfExample ns1/ex1'}
    [(key, value)] = configmap['data'].items()
    assert key.startswith('progress.parent.child-')
    assert json.loads(value) == {'handler': 'parent/child', 'record': RECORD}
    assert await progress.fetch(key='parent/child', body=obj()) == RECORD  # a new cycle reads it back


async def test_a_batch_of_writes_costs_one_request(api, progress):
    body = obj()
    await progress.fetch(key='a', body=body)  # the cycle reads first
    for key in ['a', 'b', 'c']:
        await progress.store(key=key, record=RECORD, body=body, patch=Patch())
    await progress.flush()
    await progress.store(key='a', record={**RECORD, 'success': True}, body=body, patch=Patch())
    await progress.purge(key='b', body=body, patch=Patch())
    await progress.flush()
    assert api.requests == [('GET', 'kopf-uid-1'), ('POST', 'kopf-uid-1'), ('PATCH', 'kopf-uid-1')]


async def test_both_storages_read_the_configmap_once_per_cycle(api, both):
    progress, diffbase = both
    await progress.store(key='a', record=RECORD, body=obj(), patch=Patch())
    await progress.flush()
    await diffbase.store(body=obj(), patch=Patch(), essence={'spec': {'field': 'x'}})
    api.requests.clear()

    body = obj()  # one cycle: one body
    assert await diffbase.fetch(body=body) == {'spec': {'field': 'x'}}
    assert await progress.fetch(key='a', body=body) == RECORD
    assert await progress.fetch(key='b', body=body) is None
    assert api.requests == [('GET', 'kopf-uid-1')]
    await progress.fetch(key='a', body=obj())  # the next cycle reads again
    assert len(api.requests) == 2


async def test_a_configmap_without_keys_lives_as_long_as_its_object(api, progress):
    body = obj()
    await progress.store(key='a', record=RECORD, body=body, patch=Patch())
    await progress.flush()
    await progress.purge(key='a', body=body, patch=Patch())
    await progress.flush()
    assert api.objects[('ns1', 'kopf-uid-1')]['data'] == {}
    await progress.erase(body=body)
    assert api.objects == {}


async def test_the_progress_is_purged_while_the_diffbase_stays(api, both):
    progress, diffbase = both
    body = obj()
    await progress.store(key='a', record=RECORD, body=body, patch=Patch())
    await progress.flush()
    await progress.purge(key='a', body=body, patch=Patch())
    await progress.flush()
    await diffbase.store(body=body, patch=Patch(), essence={'spec': {}})
    assert api.objects[('ns1', 'kopf-uid-1')]['data'] == {'last-handled-configuration': '{"spec":{}}'}
    api.requests.clear()
    await diffbase.store(body=body, patch=Patch(), essence={'spec': {}})
    assert api.requests == []  # unchanged: not written again


async def test_erase_deletes_the_configmap_once(api, both):
    progress, diffbase = both
    await progress.store(key='a', record=RECORD, body=obj(), patch=Patch())
    await progress.flush()
    api.requests.clear()
    gone = obj()
    await calls.call(kopf.MultiProgressStorage([progress]).erase, body=gone)
    await diffbase.erase(body=gone)
    assert api.objects == {}
    assert api.requests == [('DELETE', 'kopf-uid-1')]


async def test_each_object_is_flushed_by_the_task_that_handles_it(api, progress):
    first_stored = asyncio.Event()
    second_flushed = asyncio.Event()

    async def first():
        await progress.store(key='a', record=RECORD, body=obj(uid='u1'), patch=Patch())
        first_stored.set()
        await second_flushed.wait()
        assert ('ns1', 'kopf-u1') not in api.objects  # not written by the other object's flush
        await progress.flush()

    async def second():
        await first_stored.wait()
        await progress.store(key='a', record=RECORD, body=obj(name='ex2', uid='u2'), patch=Patch())
        await progress.flush()
        second_flushed.set()

    await asyncio.gather(first(), second())
    assert set(api.objects) == {('ns1', 'kopf-u1'), ('ns1', 'kopf-u2')}


async def test_records_are_listed_by_their_handler_ids(progress):
    body = obj()
    await progress.store(key='parent/child', record=RECORD, body=body, patch=Patch())
    await progress.store(key='fn', record=RECORD, body=body, patch=Patch())
    await progress.flush()
    assert await progress.list_records(body=obj()) == {'fn': RECORD, 'parent/child': RECORD}


@pytest.mark.parametrize('value, reason', [
    ('not json', 'not valid JSON'),
    ('[' * 100_000 + ']' * 100_000, 'nested too deeply'),
    ('{"handler": "fn", "record": {"subrefs": 5}}', "field 'subrefs' has an invalid value 5"),
])
async def test_an_unreadable_record_is_reported_and_treated_as_absent(api, progress, caplog, value, reason):
    await progress.store(key='fn', record=RECORD, body=obj(), patch=Patch())
    await progress.flush()
    [key] = api.objects[('ns1', 'kopf-uid-1')]['data']
    api.objects[('ns1', 'kopf-uid-1')]['data'][key] = value
    assert await progress.fetch(key='fn', body=obj()) is None
    assert 'unreadable' in caplog.text and 'KopfExample ns1/ex1' in caplog.text
    assert reason in caplog.text


async def test_a_namespace_of_their_own_has_no_owner_reference_for_namespaced_objects(api):
    storage = kopf.ConfigMapProgressStorage(prefix='my-op', namespace='operator')
    provide([storage], ClusterAccess(api))
    await storage.store(key='a', record=RECORD, body=obj(), patch=Patch())
    await storage.flush()
    configmap = api.objects[('operator', 'my-op-uid-1')]
    assert 'ownerReferences' not in configmap['metadata']  # a foreign namespace's owner would be taken for gone


async def test_cluster_scoped_objects_need_a_namespace(api):
    storage = kopf.ConfigMapProgressStorage()
    provide([storage], ClusterAccess(api))
    cluster_scoped = Body({'apiVersion': 'kopf.dev/v1', 'kind': 'Cluster', 'metadata': {'name': 'c', 'uid': 'u'}})
    with pytest.raises(kopf.StorageError, match='needs namespace='):
        await storage.fetch(key='a', body=cluster_scoped)

    owned = kopf.ConfigMapProgressStorage(namespace='operator')
    provide([owned], ClusterAccess(api))
    await owned.store(key='a', record=RECORD, body=cluster_scoped, patch=Patch())
    await owned.flush()
    assert api.objects[('operator', 'kopf-u')]['metadata']['ownerReferences'][0]['kind'] == 'Cluster'


async def test_without_the_cluster_the_storage_says_how_it_gets_it():
    with pytest.raises(kopf.StorageError, match='no access to the cluster'):
        await kopf.ConfigMapProgressStorage().fetch(key='a', body=obj())


def test_the_prefix_must_be_usable_in_names():
    with pytest.raises(ValueError, match='prefix'):
        kopf.ConfigMapProgressStorage(prefix='Not Valid')


async def test_the_cluster_reaches_storages_inside_multi_storages(api):
    inner = kopf.ConfigMapProgressStorage()
    multi = kopf.MultiProgressStorage([kopf.AnnotationsProgressStorage(), inner])
    provide([multi, kopf.MultiDiffBaseStorage([kopf.ConfigMapDiffBaseStorage()])], ClusterAccess(api))
    await calls.call(multi.store, key='a', record=RECORD, body=obj(), patch=Patch())
    await calls.call(multi.flush)
    assert ('ns1', 'kopf-uid-1') in api.objects
