"""
The storage API as operators written for Kopf 1.x use it: their code runs here unchanged.
"""
import inspect

import pytest

import kopf
from kopf._structs.bodies import Body
from kopf._structs.ids import HandlerId
from kopf._structs.patches import Patch
from tests.unit.conftest import idle

from .conftest import applied

FN = HandlerId('fn')
RECORD = {'started': '2020-01-01T00:00:00+00:00', 'retries': 1}


def test_smart_storage_is_a_multi_storage_of_annotations_then_status():
    storage = kopf.SmartProgressStorage(prefix='my-op.example.com', field='status.my-op')
    assert isinstance(storage, kopf.MultiProgressStorage)
    first, second = storage.storages
    assert isinstance(first, kopf.AnnotationsProgressStorage) and first.prefix == 'my-op.example.com'
    assert isinstance(second, kopf.StatusProgressStorage) and second.field == ('status', 'my-op')


def test_builtin_storages_are_callable_directly_and_synchronously(body):
    # E.g. in a user's own tooling or tests: no event loop, no awaiting.
    for storage in [kopf.SmartProgressStorage(), kopf.AnnotationsProgressStorage(), kopf.StatusProgressStorage(),
                    kopf.MultiProgressStorage([kopf.AnnotationsProgressStorage(), kopf.StatusProgressStorage()])]:
        patch = Patch()
        assert storage.store(key=FN, record=RECORD, body=body, patch=patch) is None
        assert storage.fetch(key=FN, body=applied(body, patch)) == RECORD
        assert storage.clear(essence={'spec': {}}) == {'spec': {}}
        assert storage.flush() is None
    diffbase = kopf.MultiDiffBaseStorage([kopf.AnnotationsDiffBaseStorage(), kopf.StatusDiffBaseStorage()])
    patch = Patch()
    assert diffbase.store(body=body, patch=patch, essence={'spec': {'x': 1}}) is None
    assert diffbase.fetch(body=applied(body, patch)) == {'spec': {'x': 1}}


def test_a_subclass_of_a_multi_storage_calls_super(body):
    class AuditedStorage(kopf.MultiProgressStorage):
        def __init__(self):
            super().__init__([kopf.AnnotationsProgressStorage(), kopf.StatusProgressStorage()])
            self.seen = []

        def fetch(self, *, key, body):
            record = super().fetch(key=key, body=body)
            self.seen.append((key, record and record.get('retries')))  # would fail on a coroutine
            return record

    storage = AuditedStorage()
    raw = dict(body.raw)
    record = '{"started":"2020-01-01T00:00:00","retries":3}'
    raw['metadata'] = {**raw['metadata'], 'annotations': {'kopf.zalando.org/fn': record}}
    assert storage.fetch(key=FN, body=Body(raw)) == {'started': '2020-01-01T00:00:00', 'retries': 3}
    assert storage.seen == [(FN, 3)]


class AsyncMemory(kopf.ProgressStorage):
    def __init__(self):
        self.records = {}

    async def fetch(self, *, key, body):
        return self.records.get(key)

    async def store(self, *, key, record, body, patch):
        self.records[key] = record

    async def purge(self, *, key, body, patch):
        self.records.pop(key, None)


async def test_a_multi_storage_with_an_async_child_returns_awaitables(body):
    child = AsyncMemory()
    multi = kopf.MultiProgressStorage([kopf.AnnotationsProgressStorage(), child])
    patch = Patch()
    result = multi.store(key=FN, record=RECORD, body=body, patch=patch)
    assert inspect.isawaitable(result)
    await result
    assert child.records == {FN: RECORD} and 'kopf.zalando.org/fn' in patch['metadata']['annotations']
    # Found in the sync child first: no need to wait for anything.
    assert multi.fetch(key=FN, body=applied(body, patch)) == RECORD
    # Not found there: the async child is asked, so the result is to be awaited.
    pending = multi.fetch(key=FN, body=body)
    assert inspect.isawaitable(pending)
    assert await pending == RECORD


async def test_a_multi_storage_calls_its_children_in_order_even_when_async(body):
    order = []

    class Slow(AsyncMemory):
        async def store(self, *, key, record, body, patch):
            await idle()  # everything else that could run runs meanwhile: a child called concurrently, too
            order.append('slow')

    class Quick(AsyncMemory):
        def store(self, *, key, record, body, patch):
            order.append('quick')

    await kopf.MultiProgressStorage([Slow(), Quick()]).store(key=FN, record=RECORD, body=body, patch=Patch())
    assert order == ['slow', 'quick']


def test_annotations_storage_without_a_prefix(body):
    # Kopf 0.27/0.28 accepted prefix=None for keys without a prefix.
    storage = kopf.AnnotationsProgressStorage(prefix=None)
    patch = Patch()
    storage.store(key=FN, record=RECORD, body=body, patch=patch)
    storage.touch(body=body, patch=patch, value='x')
    assert set(patch['metadata']['annotations']) == {'fn', 'touch-dummy'}
    assert storage.fetch(key=FN, body=applied(body, patch)) == RECORD


@pytest.mark.parametrize('cls', [kopf.StatusProgressStorage, kopf.StatusDiffBaseStorage])
def test_status_fields_as_tuples_and_assigned_after_construction(cls):
    storage = cls(field=('status', 'my-op'))
    assert storage.field == ('status', 'my-op')
    storage.field = 'status.x'
    assert storage.field == ('status', 'x')
    storage.field = ['status', 'y', 'z']
    assert storage.field == ('status', 'y', 'z')
    with pytest.raises(ValueError, match='must not be empty'):
        storage.field = ''


def test_assigned_status_fields_are_used(body):
    storage = kopf.StatusProgressStorage()
    storage.field = 'status.my-op'
    storage.touch_field = ('status', 'poke')
    patch = Patch()
    storage.store(key=FN, record=RECORD, body=body, patch=patch)
    storage.touch(body=body, patch=patch, value='1')
    assert set(patch['status']) == {'my-op', 'poke'}


def test_smart_storage_accepts_kopfs_v1_flag():
    assert kopf.SmartProgressStorage(v1=False).storages[0].v1 is False
    assert kopf.AnnotationsDiffBaseStorage(v1=False).v1 is False


def test_body_essence_is_public():
    essence: kopf.BodyEssence = {'spec': {'x': 1}, 'metadata': {'labels': {'a': 'b'}}}
    assert kopf.BodyEssence.__annotations__.keys() >= {'metadata', 'spec', 'status'}
    assert essence['spec'] == {'x': 1}
