"""
The handling cycle, as a specification: cause -> action, one patch per cycle.

Each test lets an object live on the simulated server (see ``conftest.py``)
and looks at what the cycles leave on it.
"""
import asyncio
import gc
import json
import logging
import weakref

import pytest

import kopf.on
from kopf._cycle import cycle as cycle_module
from kopf._cycle.cycle import handle_object, touch
from kopf._handlers.registries import OperatorRegistry
from kopf._storage.diffbase import StatusDiffBaseStorage
from kopf._storage.progress import (
    AnnotationsProgressStorage,
    MultiProgressStorage,
    ProgressStorage,
    StatusProgressStorage,
)
from kopf._structs.bodies import Body
from kopf.config import OperatorConfig
from kopf.errors import PermanentError, TemporaryError
from tests.unit.conftest import FINALIZER, LAST_HANDLED, RESOURCE, SELECTOR, idle, logger, make_handler, names


@pytest.fixture()
def per_handler(config):
    """Persist after every handler: each cycle runs one handler, and the progress between them is visible."""
    config.persistence.max_unpersisted_time = 0


# Progress between cycles.

async def test_progress_is_kept_in_annotations_between_cycles_and_purged_at_the_end(server, registry, per_handler):
    calls = []
    kopf.on.create(*RESOURCE, id='first', registry=registry)(make_handler(calls, 'first', result={'msg': 'hi'}))
    kopf.on.create(*RESOURCE, id='second', registry=registry)(make_handler(calls, 'second'))

    result = await server.cycle()
    assert result.cause == 'create'
    assert not result.done
    assert result.delay == 0
    assert names(calls) == ['first']
    first = json.loads(server.annotations['kopf.zalando.org/first'])
    second = json.loads(server.annotations['kopf.zalando.org/second'])
    assert first['success'] is True and first['retries'] == 1
    assert 'success' not in second and second['started']
    assert LAST_HANDLED not in server.annotations
    assert server.raw['status']['first'] == {'msg': 'hi'}

    result = await server.cycle()
    assert result.cause == 'create'
    assert result.done
    assert result.delay is None
    assert names(calls) == ['first', 'second']
    assert server.annotations == {LAST_HANDLED: '{"spec":{"field":"x","other":1}}'}
    assert 'kopf' not in server.raw.get('status', {})

    result = await server.cycle()
    assert result.cause == 'noop'
    assert result.done
    assert result.patch == {}
    assert names(calls) == ['first', 'second']


async def test_quick_handlers_share_one_patch_that_concludes_the_cause(server, registry):
    calls = []
    for name in ['a', 'b', 'c']:
        kopf.on.create(*RESOURCE, id=name, registry=registry)(make_handler(calls, name, result=name.upper()))

    results = await server.run()

    assert len(results) == 1
    assert names(calls) == ['a', 'b', 'c']
    assert len(server.patches) == 1
    assert server.patches[0]['status'] == {'a': 'A', 'b': 'B', 'c': 'C'}
    # Records of handlers that finished within the concluding cycle are never written at all.
    assert server.patches[0]['metadata']['annotations'] == {LAST_HANDLED: '{"spec":{"field":"x","other":1}}'}


async def test_a_slow_handler_is_persisted_before_the_next_one_starts(server, registry, clock):
    calls = []
    kopf.on.create(*RESOURCE, id='quick', registry=registry)(make_handler(calls, 'quick'))
    kopf.on.create(*RESOURCE, id='slow', registry=registry)(make_handler(calls, 'slow', duration=1.5, clock=clock))
    kopf.on.create(*RESOURCE, id='last', registry=registry)(make_handler(calls, 'last'))

    result = await server.cycle()

    assert names(calls) == ['quick', 'slow']
    assert not result.done
    assert result.delay == 0
    assert json.loads(server.annotations['kopf.zalando.org/quick'])['success'] is True
    assert json.loads(server.annotations['kopf.zalando.org/slow'])['success'] is True
    assert 'success' not in json.loads(server.annotations['kopf.zalando.org/last'])

    results = await server.run()
    assert names(calls) == ['quick', 'slow', 'last']
    assert len(results) == 1
    assert len(server.patches) == 2


async def test_the_budget_counts_the_handlers_of_the_cycle_together(server, registry, clock, config):
    config.persistence.max_unpersisted_time = 1.0
    calls = []
    for name in ['a', 'b', 'c', 'd', 'e']:
        kopf.on.create(*RESOURCE, id=name, registry=registry)(make_handler(calls, name, duration=0.4, clock=clock))

    results = await server.run()

    # 0.4 + 0.4 < 1.0 <= 0.4 * 3: three handlers per cycle, then the outcomes are persisted.
    assert [len(r.patch) and r.cause for r in results] == ['create', 'create']
    assert names(calls) == ['a', 'b', 'c', 'd', 'e']
    assert len(server.patches) == 2


async def test_a_cycle_without_changes_writes_nothing(server, registry, clock):
    calls = []
    kopf.on.create(*RESOURCE, id='h', registry=registry)(
        make_handler(calls, 'h', failures=[TemporaryError('not yet', delay=10)]))

    result = await server.cycle()
    assert result.delay == 10
    clock.advance(9)
    result = await server.cycle()
    assert not result.done
    assert result.delay == 1
    assert result.patch == {}
    assert names(calls) == ['h']


# Objects that no handler selects are not ours: never written to.

async def test_an_object_that_no_handler_selects_is_never_written_to(server, registry):
    calls = []
    kopf.on.update(*RESOURCE, labels={'rp': 'filtered'}, registry=registry)(make_handler(calls, 'upd'))
    kopf.on.event(*RESOURCE, registry=registry)(make_handler(calls, 'event'))
    kopf.on.delete(*RESOURCE, optional=True, labels={'rp': 'filtered'}, registry=registry)(make_handler(calls, 'del'))

    await server.cycle(first_seen=True, event_type=None)
    server.change({'spec': {'field': 'changed'}})
    await server.cycle()
    await server.cycle()
    assert server.patches == []
    assert names(calls) == ['event', 'event', 'event']


async def test_an_object_becomes_a_creation_when_a_handler_starts_to_select_it(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, labels={'rp': 'filtered'}, registry=registry)(make_handler(calls, 'created'))
    kopf.on.update(*RESOURCE, labels={'rp': 'filtered'}, registry=registry)(make_handler(calls, 'updated'))
    await server.cycle(first_seen=True)
    assert server.patches == []

    server.change({'metadata': {'labels': {'rp': 'filtered'}}})
    await server.run()
    assert names(calls) == ['created']
    assert LAST_HANDLED in server.annotations


@pytest.mark.parametrize('decorate', [
    pytest.param(lambda registry, fn: kopf.on.field(*RESOURCE, field='spec.field', registry=registry)(fn),
                 id='field'),
    pytest.param(lambda registry, fn: kopf.on.update(*RESOURCE, field='spec.absent', registry=registry)(fn),
                 id='update-of-a-field'),
    pytest.param(lambda registry, fn: kopf.on.create(*RESOURCE, when=lambda spec, **_: spec['other'] == 1,
                                                     registry=registry)(fn), id='when'),
    pytest.param(lambda registry, fn: kopf.on.create(*RESOURCE, field='spec.other', value=1,
                                                     registry=registry)(fn), id='field-value'),
])
async def test_objects_that_a_handler_selects_get_their_diff_base(server, registry, decorate):
    decorate(registry, make_handler([], 'h'))
    await server.run()
    assert LAST_HANDLED in server.annotations  # so that their changes are detected later


async def test_a_filter_that_fails_does_not_make_the_object_unselected(server, registry, caplog):
    def broken(**_):
        raise RuntimeError("broken filter")

    kopf.on.create(*RESOURCE, when=broken, registry=registry)(make_handler([], 'h'))
    await server.run()
    assert LAST_HANDLED in server.annotations
    failures = [record for record in caplog.records if 'have failed' in record.getMessage()]
    assert len(failures) == 1  # reported once, by the handler's own selection


# The table: cause -> action.

async def test_deleted_objects_are_gone_and_never_patched(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, id='c', registry=registry)(make_handler(calls, 'c'))

    result = await server.cycle(event_type='DELETED')

    assert result.cause == 'gone'
    assert result.done
    assert result.patch == {}
    assert calls == []


async def test_gone_objects_are_erased_from_storages_outside_of_them(server, registry, config):
    erased = []

    class External(DictStorage):
        def erase(self, *, body):
            erased.append(body.metadata.uid)
    config.persistence.progress_storage = External()
    kopf.on.create(*RESOURCE, id='c', registry=registry)(lambda **_: None)

    result = await server.cycle(event_type='DELETED')

    assert result.cause == 'gone'
    assert erased == ['uid1']


async def test_the_finalizer_is_added_alone_before_any_handler(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, id='c', registry=registry)(make_handler(calls, 'c'))
    kopf.on.delete(*RESOURCE, id='d', registry=registry)(make_handler(calls, 'd'))
    server.raw['metadata']['finalizers'] = ['other/finalizer']

    result = await server.cycle()

    assert result.cause == 'finalizer'
    assert not result.done
    assert calls == []
    assert server.patches == [{'metadata': {'finalizers': ['other/finalizer', FINALIZER], 'resourceVersion': '1'}}]


async def test_finalizer_is_removed_after_the_delete_handlers(server, registry, clock):
    calls = []
    kopf.on.create(*RESOURCE, id='c', registry=registry)(make_handler(calls, 'c'))
    kopf.on.delete(*RESOURCE, id='d', registry=registry)(
        make_handler(calls, 'd', failures=[TemporaryError('wait', delay=5)]))
    server.raw['metadata']['finalizers'] = ['other/finalizer']

    assert [r.cause for r in await server.run()] == ['finalizer', 'create']
    assert names(calls) == ['c']

    server.change({'metadata': {'deletionTimestamp': '2020-01-01T00:00:00Z'}})
    results = await server.run()

    assert [r.cause for r in results] == ['delete', 'delete']
    assert names(calls) == ['c', 'd', 'd']
    assert server.raw['metadata']['finalizers'] == ['other/finalizer']
    assert not server.gone  # the other finalizer still holds it
    assert list(server.annotations) == [LAST_HANDLED]


async def test_object_is_released_when_delete_handlers_are_done(server, registry):
    calls = []
    kopf.on.delete(*RESOURCE, id='d', registry=registry)(make_handler(calls, 'd'))
    await server.run()  # the finalizer
    await server.run()  # the creation

    server.change({'metadata': {'deletionTimestamp': '2020-01-01T00:00:00Z'}})
    await server.run()

    assert names(calls) == ['d']
    assert server.gone


async def test_optional_delete_handlers_do_not_add_the_finalizer(server, registry):
    calls = []
    kopf.on.delete(*RESOURCE, id='d', optional=True, registry=registry)(make_handler(calls, 'd'))

    results = await server.run()

    assert [r.cause for r in results] == ['create']
    assert 'finalizers' not in server.raw['metadata']

    server.change({'metadata': {'deletionTimestamp': '2020-01-01T00:00:00Z'}})
    result = await server.cycle()
    assert result.cause == 'noop'  # without our finalizer, nothing can be done reliably
    assert calls == []


async def test_our_finalizer_is_released_even_without_handlers(server, registry):
    kopf.on.event(*RESOURCE, id='e', registry=registry)(lambda **_: None)
    server.raw['metadata'].update(finalizers=[FINALIZER], deletionTimestamp='2020-01-01T00:00:00Z')

    result = await server.cycle()

    assert result.cause == 'delete'
    assert server.gone


async def test_leftovers_of_a_reverted_update_do_not_skip_the_next_update(server, registry):
    calls = []
    kopf.on.update(*RESOURCE, id='u1', registry=registry)(make_handler(calls, 'u1'))
    kopf.on.update(*RESOURCE, id='u2', registry=registry)(
        make_handler(calls, 'u2', failures=[TemporaryError('later', delay=100)]))
    await server.run()

    server.change({'spec': {'field': 'y'}})
    await server.cycle()
    await server.cycle()
    assert names(calls) == ['u1', 'u2']
    server.change({'spec': {'field': 'x'}})  # reverted before u2 could finish
    result = await server.cycle()
    assert result.cause == 'noop'
    assert list(server.annotations) == [LAST_HANDLED]

    server.change({'spec': {'field': 'z'}})
    await server.run()
    assert names(calls) == ['u1', 'u2', 'u1', 'u2']


# Results and the essential part of the patch.

async def test_results_and_changes_travel_beside_the_essential_part(server, registry, per_handler):
    def fn(patch, **_):
        patch.meta.labels['handled'] = 'yes'
        return {'ok': True}
    kopf.on.create(*RESOURCE, id='first', registry=registry)(fn)
    kopf.on.create(*RESOURCE, id='second', registry=registry)(lambda **_: None)

    result = await server.cycle()

    assert result.patch['status'] == {'first': {'ok': True}}
    assert result.patch['metadata']['labels'] == {'handled': 'yes'}
    assert result.extras == ('status.first', 'metadata.labels.handled')
    assert result.essential is not None
    assert 'status' not in result.essential and 'labels' not in result.essential['metadata']
    assert json.loads(result.essential['metadata']['annotations']['kopf.zalando.org/first'])['success'] is True
    assert result.essential['metadata']['annotations'] == result.patch['metadata']['annotations']


async def test_a_patch_of_progress_alone_has_no_separate_essential_part(server, registry, per_handler):
    kopf.on.create(*RESOURCE, id='first', registry=registry)(lambda **_: None)
    kopf.on.create(*RESOURCE, id='second', registry=registry)(lambda **_: None)

    result = await server.cycle()

    assert result.patch
    assert result.essential is None
    assert result.extras == ()


async def test_handlers_write_into_the_patch(server, registry):
    def fn(patch, **_):
        patch.status['phase'] = 'ready'
        patch.meta.labels['handled'] = 'yes'
    kopf.on.create(*RESOURCE, registry=registry)(fn)

    await server.run()

    assert server.raw['status']['phase'] == 'ready'
    assert server.raw['metadata']['labels'] == {'handled': 'yes'}


# Legacy and custom storages.

async def test_legacy_status_progress_is_honoured_and_purged(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, id='done-before', registry=registry)(make_handler(calls, 'done-before'))
    kopf.on.create(*RESOURCE, id='pending', registry=registry)(make_handler(calls, 'pending'))
    server.raw['status'] = {'kopf': {'progress': {
        'done-before': {'started': '2019-12-31T23:00:00.000000', 'stopped': '2019-12-31T23:01:00.000000',
                        'success': True, 'retries': 1},
        'pending': {'started': '2019-12-31T23:00:00.000000', 'retries': 1, 'message': 'old error'},
    }}}

    results = await server.run()

    assert names(calls) == ['pending']
    assert calls[0][1]['retry'] == 1  # continued, not restarted
    assert results[-1].done
    assert server.raw['status'].get('kopf', {}).get('progress', {}) == {}
    assert list(server.annotations) == [LAST_HANDLED]


class DictStorage(ProgressStorage):
    """A custom storage outside of the object, implementing only what is required."""

    def __init__(self):
        self.data = {}

    def fetch(self, *, key, body):
        return self.data.get((body.metadata.uid, key))

    def store(self, *, key, record, body, patch):
        self.data[(body.metadata.uid, key)] = dict(record)

    def purge(self, *, key, body, patch):
        self.data.pop((body.metadata.uid, key), None)


class AsyncDictStorage(ProgressStorage):
    def __init__(self):
        self.data = {}

    async def fetch(self, *, key, body):
        await asyncio.sleep(0)
        return self.data.get((body.metadata.uid, key))

    async def store(self, *, key, record, body, patch):
        await asyncio.sleep(0)
        self.data[(body.metadata.uid, key)] = dict(record)

    async def purge(self, *, key, body, patch):
        await asyncio.sleep(0)
        self.data.pop((body.metadata.uid, key), None)


@pytest.mark.parametrize('storage_class', [DictStorage, AsyncDictStorage])
async def test_custom_storages_keep_the_progress(server, registry, config, storage_class):
    storage = storage_class()
    config.persistence.progress_storage = storage
    calls = []
    kopf.on.create(*RESOURCE, id='h1', registry=registry)(make_handler(calls, 'h1'))
    kopf.on.create(*RESOURCE, id='h2', registry=registry)(
        make_handler(calls, 'h2', failures=[TemporaryError('later', delay=1)]))

    await server.cycle()
    assert storage.data[('uid1', 'h1')]['success'] is True
    assert ('uid1', 'h2') in storage.data
    assert list(server.annotations) == []

    results = await server.run()

    assert names(calls) == ['h1', 'h2', 'h2']
    assert results[-1].done
    assert storage.data == {}
    assert list(server.annotations) == [LAST_HANDLED]


async def test_multi_storage_writes_everywhere_and_cleans_everywhere(server, registry, config, per_handler):
    config.persistence.progress_storage = MultiProgressStorage([
        AnnotationsProgressStorage(prefix='my-op.example.com'), StatusProgressStorage(field='status.my-op')])
    calls = []
    kopf.on.create(*RESOURCE, id='h1', registry=registry)(make_handler(calls, 'h1'))
    kopf.on.create(*RESOURCE, id='h2', registry=registry)(make_handler(calls, 'h2'))

    await server.cycle()
    assert 'my-op.example.com/h1' in server.annotations
    assert server.raw['status']['my-op']['h1']['success'] is True

    await server.run()
    assert names(calls) == ['h1', 'h2']
    assert server.annotations == {LAST_HANDLED: '{"spec":{"field":"x","other":1}}'}
    assert server.raw['status'].get('my-op', {}) == {}
    assert (await server.cycle()).cause == 'noop'


async def test_status_progress_storage_with_a_custom_field(server, registry, config, per_handler):
    config.persistence.progress_storage = StatusProgressStorage(field='status.my-op')
    calls = []
    kopf.on.create(*RESOURCE, id='h1', registry=registry)(make_handler(calls, 'h1'))
    kopf.on.create(*RESOURCE, id='h2', registry=registry)(make_handler(calls, 'h2'))

    await server.cycle()
    assert server.raw['status']['my-op']['h1']['success'] is True
    assert server.raw['status']['my-op']['h2']['started']
    assert not any(key.startswith('kopf.zalando.org/h') for key in server.annotations)

    await server.run()

    assert names(calls) == ['h1', 'h2']
    assert server.raw['status'].get('my-op', {}) == {}


async def test_annotations_storage_with_a_custom_prefix_and_status_diffbase(server, registry, config, per_handler):
    config.persistence.progress_storage = AnnotationsProgressStorage(prefix='my-op.example.com')
    config.persistence.diffbase_storage = StatusDiffBaseStorage()
    calls = []
    kopf.on.create(*RESOURCE, id='h1', registry=registry)(make_handler(calls, 'h1'))
    kopf.on.create(*RESOURCE, id='h2', registry=registry)(make_handler(calls, 'h2'))

    await server.cycle()
    assert 'my-op.example.com/h1' in server.annotations

    await server.run()
    assert server.annotations == {}
    assert json.loads(server.raw['status']['kopf']['last-handled-configuration']) == {
        'spec': {'field': 'x', 'other': 1}}
    assert (await server.cycle()).cause == 'noop'


# Restarts and resuming.

async def test_a_restarted_operator_does_not_rerun_succeeded_handlers(server, registry, per_handler):
    calls = []
    kopf.on.create(*RESOURCE, id='h1', registry=registry)(make_handler(calls, 'h1'))
    kopf.on.create(*RESOURCE, id='h2', registry=registry)(make_handler(calls, 'h2'))
    await server.cycle()
    assert names(calls) == ['h1']

    # A new process: new registry, new config, new functions, the same object.
    calls2 = []
    server.registry = OperatorRegistry()
    server.config = OperatorConfig()
    kopf.on.create(*RESOURCE, id='h1', registry=server.registry)(make_handler(calls2, 'h1'))
    kopf.on.create(*RESOURCE, id='h2', registry=server.registry)(make_handler(calls2, 'h2'))
    results = await server.run(first_seen=True)

    assert names(calls2) == ['h2']
    assert results[-1].done


async def test_resume_handlers_run_on_the_first_sight_of_a_handled_object(server, registry, clock):
    calls = []
    kopf.on.create(*RESOURCE, id='c', registry=registry)(make_handler(calls, 'c'))
    kopf.on.resume(*RESOURCE, id='r', registry=registry)(
        make_handler(calls, 'r', failures=[TemporaryError('later', delay=1)]))
    await server.run()
    assert names(calls) == ['c']

    results = await server.run(first_seen=True)  # only the first cycle is the first sight

    assert [r.cause for r in results] == ['resume', 'resume']
    assert names(calls) == ['c', 'r', 'r']
    assert calls[-1][1]['reason'] == 'resume'
    assert (await server.cycle()).cause == 'noop'
    assert names(calls) == ['c', 'r', 'r']


async def test_resume_handlers_join_the_update_of_an_object_changed_while_away(server, registry):
    calls = []
    kopf.on.update(*RESOURCE, id='u', registry=registry)(make_handler(calls, 'u'))
    kopf.on.resume(*RESOURCE, id='r', registry=registry)(make_handler(calls, 'r'))
    await server.run()
    server.change({'spec': {'field': 'y'}})

    results = await server.run(first_seen=True)

    assert {r.cause for r in results} == {'update'}
    assert sorted(names(calls)) == ['r', 'u']


async def test_resuming_an_update_lasts_beyond_the_first_cycle(server, registry, per_handler):
    calls = []
    kopf.on.update(*RESOURCE, id='u', registry=registry)(make_handler(calls, 'u'))
    kopf.on.resume(*RESOURCE, id='r', registry=registry)(make_handler(calls, 'r'))
    await server.run()
    server.change({'spec': {'field': 'y'}})

    results = await server.run(first_seen=True)

    assert [r.cause for r in results] == ['update', 'update']
    assert names(calls) == ['u', 'r']
    assert calls[-1][1]['reason'] == 'update'


async def test_new_objects_are_created_not_resumed(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, id='c', registry=registry)(make_handler(calls, 'c'))
    kopf.on.resume(*RESOURCE, id='r', registry=registry)(make_handler(calls, 'r'))

    results = await server.run(first_seen=True)

    assert [r.cause for r in results] == ['create']
    assert names(calls) == ['c']


async def test_resuming_survives_the_finalizer_cycle(server, registry):
    calls = []
    kopf.on.resume(*RESOURCE, id='r', registry=registry)(make_handler(calls, 'r'))
    await server.run()  # handled by an older version without delete handlers
    kopf.on.delete(*RESOURCE, id='d', registry=registry)(make_handler(calls, 'd'))

    first = await server.cycle(first_seen=True)
    results = await server.run()

    assert first.cause == 'finalizer'
    assert [r.cause for r in results] == ['resume']
    assert names(calls) == ['r']


async def test_resume_handlers_with_deleted_join_a_deletion_found_at_the_start_until_they_finish(server, registry):
    calls = []
    kopf.on.delete(*RESOURCE, id='d', registry=registry)(make_handler(calls, 'd'))
    kopf.on.resume(*RESOURCE, id='r', registry=registry)(make_handler(calls, 'r'))
    kopf.on.resume(*RESOURCE, id='rd', deleted=True, registry=registry)(
        make_handler(calls, 'rd', failures=[TemporaryError('later', delay=1)]))
    await server.run()
    server.change({'metadata': {'deletionTimestamp': '2020-01-01T00:00:00Z'}})  # while the operator is away

    results = await server.run(first_seen=True)  # only the first cycle is the first sight

    assert [r.cause for r in results] == ['delete', 'delete']
    assert names(calls) == ['d', 'rd', 'rd']  # retried after the first sight: its progress says it is due
    assert calls[-1][1]['reason'] == 'delete'
    assert server.gone


async def test_resume_handlers_with_deleted_do_not_run_for_a_deletion_while_the_operator_runs(server, registry):
    calls = []
    kopf.on.delete(*RESOURCE, id='d', registry=registry)(make_handler(calls, 'd'))
    kopf.on.resume(*RESOURCE, id='rd', deleted=True, registry=registry)(make_handler(calls, 'rd'))
    await server.run()
    server.change({'metadata': {'deletionTimestamp': '2020-01-01T00:00:00Z'}})

    await server.run()

    assert names(calls) == ['d']
    assert server.gone


# The wake-up marker.

async def test_touch_makes_a_unique_dummy_change(server, config, clock):
    patch1 = await touch(config=config, body=server.body, clock=clock)
    clock.advance(1)
    patch2 = await touch(config=config, body=server.body, clock=clock)

    key = 'kopf.zalando.org/touch-dummy'
    assert patch1['metadata']['annotations'][key]
    assert patch1['metadata']['annotations'][key] != patch2['metadata']['annotations'][key]


async def test_touch_goes_through_async_storages(server, config):
    touched = []

    class Storage(AsyncDictStorage):
        async def touch(self, *, body, patch, value):
            touched.append(value)
    config.persistence.progress_storage = Storage()

    patch = await touch(config=config, body=server.body)

    assert patch == {}
    assert len(touched) == 1 and touched[0]


async def test_the_marker_is_purged_with_the_progress(server, registry, clock):
    calls = []
    kopf.on.create(*RESOURCE, id='h', registry=registry)(
        make_handler(calls, 'h', failures=[TemporaryError('later', delay=5)]))
    await server.cycle()
    clock.advance(5)
    server.change(await touch(config=server.config, body=server.body, clock=clock))
    assert 'kopf.zalando.org/touch-dummy' in server.annotations

    results = await server.run()

    assert results[-1].done
    assert list(server.annotations) == [LAST_HANDLED]


# New kinds of handlers: stages.

async def test_stages_see_every_event_with_its_cause_and_may_ask_for_a_wake_up(server, registry, config):
    seen = []

    async def stage(registry, resource, cause, arguments):
        seen.append((cause.reason.value, arguments.event.type, arguments.object.body['metadata']['name']))
        return 30.0
    kopf.on.create(*RESOURCE, id='c', registry=registry)(lambda **_: None)

    async def cycle(event_type):
        return await handle_object(registry=registry, config=config, resource=SELECTOR, event_type=event_type,
                                   body=server.body, first_seen=False, memo=None, logger=logger,
                                   stages=[*cycle_module.STAGES, stage])

    created = await cycle('ADDED')
    gone = await cycle('DELETED')

    assert seen == [('create', 'ADDED', 'ex1'), ('gone', 'DELETED', 'ex1')]
    assert created.delay == 30.0  # the cause is done, but the stage wants a wake-up
    assert gone.delay == 30.0


async def test_a_holding_stage_keeps_the_finalizer_and_the_delete_handlers_progress(server, registry, config):
    calls = []
    kopf.on.delete(*RESOURCE, id='cleanup', registry=registry)(make_handler(calls, 'cleanup'))
    holding = [True]

    async def stage(registry, resource, cause, arguments):
        return cycle_module.Holding(delay=7.0) if holding[0] else None

    async def cycle():
        result = await handle_object(registry=registry, config=config, resource=SELECTOR, event_type='MODIFIED',
                                     body=server.body, first_seen=False, memo=None, logger=logger,
                                     stages=[*cycle_module.STAGES, stage])
        server._apply(json.loads(json.dumps(result.patch)))
        return result

    await cycle()  # the finalizer
    await cycle()  # created
    server.change({'metadata': {'deletionTimestamp': '2020-01-01T00:00:00Z'}})
    held = await cycle()
    assert held.cause == 'delete' and not held.done and held.delay == 7.0
    assert FINALIZER in server.raw['metadata']['finalizers']
    assert json.loads(server.annotations['kopf.zalando.org/cleanup'])['success'] is True
    holding[0] = False
    released = await cycle()
    assert released.done and server.gone
    assert names(calls) == ['cleanup']


# Memory.

async def test_nothing_of_a_cycle_outlives_it(server, registry):
    refs = []

    def fn(body, patch, logger, **_):
        refs.extend([weakref.ref(body), weakref.ref(patch), weakref.ref(logger)])
        kopf.on.register(lambda **_: None, id='child')
        return 'done'
    kopf.on.create(*RESOURCE, id='parent', registry=registry)(fn)
    def failing(**_):
        raise ValueError('boom')  # the traceback holds the handler's frames, and its kwargs in them
    kopf.on.create(*RESOURCE, id='failing', registry=registry)(failing)
    kopf.on.event(*RESOURCE, id='event', registry=registry)(lambda body, **_: refs.append(weakref.ref(body)))

    # A logger that keeps no records (the test's log capture would keep the tracebacks, and the frames in them).
    isolated = logging.getLogger('kopf.test.isolated')
    isolated.propagate = False
    object_logger = logging.LoggerAdapter(isolated, {})
    body = Body({'metadata': {'name': 'n', 'uid': 'u'}, 'spec': {}})
    result = await handle_object(registry=registry, config=server.config, resource=SELECTOR, event_type='ADDED',
                                 body=body, first_seen=True, memo=None, logger=object_logger)
    assert result.patch and not result.done
    assert len(refs) == 4  # the handler and the event handler have run
    refs.extend([weakref.ref(body), weakref.ref(object_logger), weakref.ref(result.patch)])
    del body, object_logger, result

    # The executor's thread lets go of its last call only after the result is delivered: wait until it has ended.
    server.config.execution.executor.shutdown(wait=True)
    await idle()  # and what it has sent to the event loop is done with, too
    gc.collect()
    assert [ref() for ref in refs] == [None] * len(refs)


# Errors of the handling itself.

async def test_a_failing_handler_does_not_stop_the_others(server, registry, caplog):
    calls = []
    kopf.on.create(*RESOURCE, id='bad', registry=registry)(
        make_handler(calls, 'bad', failures=[PermanentError('no way')]))
    kopf.on.create(*RESOURCE, id='good', registry=registry)(make_handler(calls, 'good'))

    results = await server.run()

    assert names(calls) == ['bad', 'good']
    assert len(results) == 1
    assert list(server.annotations) == [LAST_HANDLED]  # the cause counts as handled


# The log lines that tests written for Kopf look for.

async def test_the_cause_in_progress_and_event_handlers_are_logged_in_kopfs_words(server, registry, caplog):
    kopf.on.create(*RESOURCE, id='created', registry=registry)(lambda **_: None)
    kopf.on.event(*RESOURCE, id='watched', registry=registry)(lambda **_: None)
    with caplog.at_level(logging.DEBUG, logger='test-object'):
        await server.run()
    messages = [record.getMessage() for record in caplog.records if record.name == 'test-object']
    in_progress = [message for message in messages if 'is in progress:' in message]
    assert len(in_progress) == 1
    assert in_progress[0].startswith("Creation is in progress: ")  # the object follows, as in Kopf
    assert "Handler 'watched' succeeded." in messages


async def test_the_finalizer_goes_when_no_handler_needs_it_any_more(server, registry):
    calls = []
    kopf.on.delete(*RESOURCE, id='d', labels={'guarded': 'yes'}, registry=registry)(make_handler(calls, 'd'))
    server.change({'metadata': {'labels': {'guarded': 'yes'}}})
    await server.run()
    assert server.raw['metadata']['finalizers'] == [FINALIZER]

    server.change({'metadata': {'labels': {'guarded': None}}})  # no delete handler is interested now
    await server.run()  # the update, concluded
    result = await server.cycle()  # the event of that conclusion
    assert result.cause == 'noop'
    assert not server.raw['metadata'].get('finalizers')

    server.change({'metadata': {'labels': {'guarded': 'yes'}}})  # and interested again
    await server.run()
    assert server.raw['metadata']['finalizers'] == [FINALIZER]
    assert calls == []


async def test_other_finalizers_stay_when_ours_goes(server, registry):
    kopf.on.create(*RESOURCE, id='c', registry=registry)(lambda **_: None)
    server.raw['metadata'].update(finalizers=['other/finalizer', FINALIZER])
    await server.run()
    await server.cycle()
    assert server.raw['metadata']['finalizers'] == ['other/finalizer']
