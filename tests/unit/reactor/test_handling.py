"""
The handling cycle, as a specification.

An object lives on a simulated API server: every cycle handles the object as
the server holds it, and the returned patch is applied to it the way the
server would (JSON merge-patch). The clock is frozen and moved explicitly,
so that delays are exact.
"""
import asyncio
import copy
import datetime
import json
import logging
import threading

import pytest

import kopf.on
from kopf.config import OperatorConfig
from kopf.errors import (
    ActivityError,
    ErrorsMode,
    PermanentError,
    TemporaryError,
)
from kopf.reactor import lifecycles
from kopf.reactor.filters import ABSENT, PRESENT
from kopf.reactor.handling import HandlingResult, handle_object, run_activity, touch
from kopf.reactor.registries import OperatorRegistry
from kopf.storage import states
from kopf.storage.diffbase import StatusDiffBaseStorage
from kopf.storage.progress import (
    AnnotationsProgressStorage,
    MultiProgressStorage,
    ProgressStorage,
    SmartProgressStorage,
    StatusProgressStorage,
)
from kopf.structs.bodies import Body
from kopf.structs.patches import Patch, apply
from kopf.structs.resources import Selector

UTC = datetime.timezone.utc
T0 = datetime.datetime(2020, 1, 1, 0, 0, 0, tzinfo=UTC)
RESOURCE = ('kopf.dev', 'v1', 'kopfexamples')
SELECTOR = Selector.from_args(*RESOURCE)
LAST_HANDLED = 'kopf.zalando.org/last-handled-configuration'
FINALIZER = 'kopf.zalando.org/KopfFinalizerMarker'
logger = logging.getLogger('test-object')


class Clock:
    now = T0

    def advance(self, seconds):
        self.now += datetime.timedelta(seconds=seconds)


@pytest.fixture()
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(states, 'utcnow', lambda: clock.now)
    return clock


@pytest.fixture()
def registry():
    return OperatorRegistry()


@pytest.fixture()
def config():
    return OperatorConfig()


@pytest.fixture()
def raw():
    return {
        'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
        'metadata': {'name': 'ex1', 'namespace': 'ns1', 'uid': 'uid1', 'resourceVersion': '1'},
        'spec': {'field': 'x', 'other': 1},
    }


class Server:
    """One object on a simulated API server, handled cycle by cycle."""

    def __init__(self, raw, *, registry, config, clock):
        self.raw = copy.deepcopy(raw)
        self.registry = registry
        self.config = config
        self.clock = clock
        self.memo = object()
        self.gone = False

    @property
    def body(self):
        return Body(self.raw)

    @property
    def annotations(self):
        return dict(self.body.metadata.annotations)

    def change(self, patch):
        """A user's change to the object."""
        self._apply(patch)

    def _apply(self, patch):
        self.raw = apply(self.raw, patch)
        self.raw['metadata']['resourceVersion'] = str(int(self.raw['metadata']['resourceVersion']) + 1)
        if self.raw['metadata'].get('deletionTimestamp') and not self.raw['metadata'].get('finalizers'):
            self.gone = True

    async def cycle(self, *, first_seen=False, event_type='MODIFIED') -> HandlingResult:
        result = await handle_object(
            registry=self.registry, config=self.config, resource=SELECTOR, event_type=event_type,
            body=Body(copy.deepcopy(self.raw)), first_seen=first_seen, memo=self.memo, logger=logger)
        assert isinstance(result.patch, Patch)
        wire = json.loads(json.dumps(result.patch))  # what would be sent: it must be JSON
        if wire:
            self._apply(wire)
        return result

    async def run(self, *, first_seen=False, limit=20) -> list[HandlingResult]:
        """Cycles until the cause is handled; the clock moves by the delays asked for."""
        results = []
        for index in range(limit):
            result = await self.cycle(first_seen=first_seen and index == 0)
            results.append(result)
            if result.done:
                return results
            if result.delay:
                self.clock.advance(result.delay)
        raise AssertionError(f"Not done after {limit} cycles: {results}")


@pytest.fixture()
def server(raw, registry, config, clock):
    return Server(raw, registry=registry, config=config, clock=clock)


def make_handler(calls, name, *, result=None, failures=()):
    """A handler that records its calls and raises the given exceptions on its first calls."""
    failures = list(failures)

    def fn(**kwargs):
        calls.append((name, kwargs))
        if failures:
            raise failures.pop(0)
        return result
    fn.__qualname__ = name
    return fn


def names(calls):
    return [name for name, _ in calls]


# Multi-step handling and persistence of progress.

async def test_progress_is_kept_in_annotations_between_cycles_and_purged_at_the_end(server, registry):
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


async def test_temporary_error_retries_only_that_handler_after_its_delay(server, registry, clock):
    calls = []
    kopf.on.create(*RESOURCE, id='h1', registry=registry)(make_handler(calls, 'h1'))
    kopf.on.create(*RESOURCE, id='h2', registry=registry)(
        make_handler(calls, 'h2', failures=[TemporaryError('not yet', delay=1)]))
    kopf.on.create(*RESOURCE, id='h3', registry=registry)(make_handler(calls, 'h3'))

    results = await server.run()

    assert names(calls) == ['h1', 'h2', 'h3', 'h2']
    assert [kwargs['retry'] for name, kwargs in calls if name == 'h2'] == [0, 1]
    assert any(result.delay == 1 for result in results)  # the sleep was asked for, not skipped
    assert results[-1].done
    assert list(server.annotations) == [LAST_HANDLED]


async def test_sleeping_handler_is_not_called_before_its_delay(server, registry, clock):
    calls = []
    kopf.on.create(*RESOURCE, id='h', registry=registry)(
        make_handler(calls, 'h', failures=[TemporaryError('not yet', delay=10)]))

    result = await server.cycle()
    assert result.delay == 10
    clock.advance(9)
    result = await server.cycle()
    assert not result.done
    assert result.delay == 1
    assert result.patch == {}  # an idle cycle costs nothing
    assert names(calls) == ['h']

    clock.advance(1)
    result = await server.cycle()
    assert result.done
    assert names(calls) == ['h', 'h']


async def test_permanent_error_finishes_the_handler_without_retries(server, registry, caplog):
    calls = []
    kopf.on.create(*RESOURCE, id='bad', registry=registry)(
        make_handler(calls, 'bad', failures=[PermanentError('no way')]))
    kopf.on.create(*RESOURCE, id='good', registry=registry)(make_handler(calls, 'good'))

    results = await server.run()

    assert names(calls) == ['bad', 'good']
    assert results[-1].done
    assert 'bad' not in server.raw.get('status', {})
    assert list(server.annotations) == [LAST_HANDLED]  # the cause counts as handled
    assert any(r.levelno == logging.ERROR and 'no way' in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize('mode, expected_calls, expected_delay', [
    (ErrorsMode.TEMPORARY, 2, 7),
    (ErrorsMode.PERMANENT, 1, None),
    (ErrorsMode.IGNORED, 1, None),
])
async def test_errors_mode_decides_the_fate_of_arbitrary_exceptions(
        server, registry, mode, expected_calls, expected_delay):
    calls = []
    kopf.on.create(*RESOURCE, id='h', errors=mode, backoff=7, registry=registry)(
        make_handler(calls, 'h', result='ok', failures=[ValueError('boom')]))

    results = await server.run()

    assert len(calls) == expected_calls
    assert results[0].delay == expected_delay
    if mode == ErrorsMode.TEMPORARY:
        assert server.raw['status']['h'] == 'ok'
    else:
        assert 'h' not in server.raw.get('status', {})  # ignored or failed: no result


@pytest.mark.parametrize('mode, expected', [
    (ErrorsMode.IGNORED, {'success': True}),
    (ErrorsMode.PERMANENT, {'failure': True, 'message': 'boom'}),
])
async def test_ignored_errors_count_as_success_and_permanent_ones_as_failure(server, registry, mode, expected):
    calls = []
    kopf.on.create(*RESOURCE, id='h', errors=mode, registry=registry)(
        make_handler(calls, 'h', failures=[ValueError('boom')]))
    kopf.on.create(*RESOURCE, id='next', registry=registry)(make_handler(calls, 'next'))

    await server.cycle()

    record = json.loads(server.annotations['kopf.zalando.org/h'])
    assert {k: record.get(k) for k in expected} == expected
    assert record.get('success' if mode == ErrorsMode.PERMANENT else 'failure') is None


async def test_unexpected_exception_is_retried_with_the_default_backoff(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, id='h', registry=registry)(make_handler(calls, 'h', failures=[ValueError('boom')]))

    result = await server.cycle()

    assert result.delay == 60
    record = json.loads(server.annotations['kopf.zalando.org/h'])
    assert record['message'] == 'boom'
    assert record['retries'] == 1
    assert record['delayed'] == (T0 + datetime.timedelta(seconds=60)).isoformat()


async def test_timeout_fails_the_handler_once_its_runtime_is_over(server, registry, clock, caplog):
    calls = []
    kopf.on.create(*RESOURCE, id='slow', timeout=30, registry=registry)(
        make_handler(calls, 'slow', failures=[TemporaryError('later', delay=1)] * 10))

    result = await server.cycle()
    assert not result.done
    clock.advance(60)
    result = await server.cycle()

    assert result.done
    assert names(calls) == ['slow']  # not called again once the time is over
    errors = [r for r in caplog.records if r.levelno == logging.ERROR and 'slow' in r.getMessage()]
    assert any('30 seconds' in r.getMessage() for r in errors)


async def test_timeout_does_not_wait_for_a_retry_that_would_be_too_late(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, id='slow', timeout=30, registry=registry)(
        make_handler(calls, 'slow', failures=[TemporaryError('later', delay=100)]))

    results = await server.run()

    assert len(results) == 1
    assert names(calls) == ['slow']


async def test_retries_limit_the_number_of_attempts(server, registry, caplog):
    calls = []
    kopf.on.create(*RESOURCE, id='flaky', retries=3, registry=registry)(
        make_handler(calls, 'flaky', failures=[TemporaryError('again', delay=0)] * 10))

    results = await server.run()

    assert names(calls) == ['flaky'] * 3
    assert results[-1].done
    assert any('3 attempt' in r.getMessage() and 'again' in r.getMessage() for r in caplog.records)


# Lifecycles.

async def test_all_at_once_runs_every_due_handler_in_one_cycle(server, registry, config):
    calls = []
    for name in ['a', 'b', 'c']:
        kopf.on.create(*RESOURCE, id=name, registry=registry)(make_handler(calls, name))

    result = await handle_object(
        registry=registry, config=config, resource=SELECTOR, event_type=None, body=server.body,
        first_seen=False, memo=None, logger=logger, lifecycle=lifecycles.all_at_once)

    assert names(calls) == ['a', 'b', 'c']
    assert result.done


async def test_default_lifecycle_is_used(server, registry, monkeypatch):
    calls = []
    for name in ['a', 'b']:
        kopf.on.create(*RESOURCE, id=name, registry=registry)(make_handler(calls, name))
    monkeypatch.setattr(lifecycles, '_default_lifecycle', lifecycles.all_at_once)

    result = await server.cycle()

    assert result.done
    assert names(calls) == ['a', 'b']


# Handler keyword arguments and results.

async def test_handlers_receive_the_standard_kwargs(server, registry, config, clock, raw):
    calls = []
    kopf.on.create(*RESOURCE, id='h', param={'p': 1}, registry=registry)(make_handler(calls, 'h'))

    await server.cycle()

    (_, kwargs), = calls
    assert isinstance(kwargs['body'], Body)
    assert kwargs['body'].raw == raw
    assert kwargs['spec'] == {'field': 'x', 'other': 1}
    assert kwargs['meta']['name'] == 'ex1'
    assert kwargs['name'] == 'ex1'
    assert kwargs['namespace'] == 'ns1'
    assert kwargs['uid'] == 'uid1'
    assert kwargs['labels'] == {}
    assert kwargs['annotations'] == {}
    assert kwargs['status'] == {}
    assert isinstance(kwargs['patch'], Patch)
    assert kwargs['logger'] is logger
    assert kwargs['reason'] == 'create'
    assert kwargs['old'] is None
    assert kwargs['new'] == {'spec': {'field': 'x', 'other': 1}}
    assert kwargs['diff'] == [('add', (), None, {'spec': {'field': 'x', 'other': 1}})]
    assert kwargs['retry'] == 0
    assert kwargs['started'] == T0
    assert kwargs['runtime'] == datetime.timedelta(0)
    assert kwargs['memo'] is server.memo
    assert kwargs['config'] is config
    assert kwargs['settings'] is config
    assert kwargs['param'] == {'p': 1}
    assert kwargs['resource'] == SELECTOR


async def test_handlers_write_into_the_patch(server, registry):
    def fn(patch, **_):
        patch.status['phase'] = 'ready'
        patch.meta.labels['handled'] = 'yes'
    kopf.on.create(*RESOURCE, registry=registry)(fn)

    await server.run()

    assert server.raw['status']['phase'] == 'ready'
    assert server.raw['metadata']['labels'] == {'handled': 'yes'}


async def test_async_and_sync_handlers_run_where_they_should(server, registry):
    threads = {}

    async def async_fn(**_):
        threads['async'] = threading.get_ident()

    def sync_fn(**_):
        threads['sync'] = threading.get_ident()
    kopf.on.create(*RESOURCE, id='a', registry=registry)(async_fn)
    kopf.on.create(*RESOURCE, id='s', registry=registry)(sync_fn)

    await server.run()

    assert threads['async'] == threading.get_ident()
    assert threads['sync'] != threading.get_ident()


# Updates and field handlers.

async def test_update_handlers_receive_the_diff_since_the_last_handling(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, id='c', registry=registry)(make_handler(calls, 'c'))
    kopf.on.update(*RESOURCE, id='u', registry=registry)(make_handler(calls, 'u'))
    await server.run()

    server.change({'spec': {'field': 'y', 'new': True}, 'metadata': {'labels': {'l': '1'}}})
    results = await server.run()

    assert results[0].cause == 'update'
    assert names(calls) == ['c', 'u']
    kwargs = calls[-1][1]
    assert kwargs['reason'] == 'update'
    assert kwargs['old'] == {'spec': {'field': 'x', 'other': 1}}
    assert kwargs['new'] == {'spec': {'field': 'y', 'other': 1, 'new': True}, 'metadata': {'labels': {'l': '1'}}}
    assert kwargs['diff'] == [
        ('add', ('metadata',), None, {'labels': {'l': '1'}}),
        ('change', ('spec', 'field'), 'x', 'y'),
        ('add', ('spec', 'new'), None, True),
    ]
    assert json.loads(server.annotations[LAST_HANDLED]) == kwargs['new']

    assert (await server.cycle()).cause == 'noop'


async def test_status_changes_and_our_own_progress_are_not_updates(server, registry):
    calls = []
    kopf.on.update(*RESOURCE, id='u', registry=registry)(make_handler(calls, 'u'))
    await server.run()

    server.change({'status': {'phase': 'x'}, 'metadata': {'annotations': {'kopf.zalando.org/touch-dummy': 't'}}})
    result = await server.cycle()

    assert result.cause == 'noop'
    assert calls == []


async def test_field_handlers_see_only_their_field(server, registry):
    calls = []
    kopf.on.field(*RESOURCE, field='spec.field', registry=registry)(make_handler(calls, 'f'))
    await server.run()
    assert calls[0][1]['old'] is None
    assert calls[0][1]['new'] == 'x'
    assert calls[0][1]['diff'] == [('add', (), None, 'x')]

    server.change({'spec': {'other': 2}})
    await server.run()
    assert len(calls) == 1  # another field changed

    server.change({'spec': {'field': 'y'}})
    results = await server.run()
    assert results[0].cause == 'update'
    assert len(calls) == 2
    kwargs = calls[-1][1]
    assert kwargs['old'] == 'x'
    assert kwargs['new'] == 'y'
    assert kwargs['diff'] == [('change', (), 'x', 'y')]


async def test_field_handler_ids_include_the_field(server, registry):
    calls = []
    fn = make_handler(calls, 'fn', failures=[TemporaryError('later', delay=1)])
    kopf.on.field(*RESOURCE, field='spec.field', registry=registry)(fn)

    await server.cycle()

    stored = await_fetch(server, 'fn/spec.field')
    assert stored['retries'] == 1


async def test_field_handlers_can_watch_the_status(server, registry):
    calls = []
    kopf.on.field(*RESOURCE, field='status.phase', registry=registry)(make_handler(calls, 'f'))
    server.change({'status': {'phase': 'new'}})
    await server.run()
    assert calls[-1][1]['new'] == 'new'

    server.change({'status': {'phase': 'done'}})
    await server.run()

    assert len(calls) == 2
    assert calls[-1][1]['old'] == 'new'
    assert calls[-1][1]['new'] == 'done'


def await_fetch(server, key):
    return server.config.persistence.progress_storage.fetch(key=key, body=server.body)


# Deletion and finalizers.

async def test_finalizer_is_added_before_any_handler_and_removed_after_delete_handlers(server, registry, clock):
    calls = []
    kopf.on.create(*RESOURCE, id='c', registry=registry)(make_handler(calls, 'c'))
    kopf.on.delete(*RESOURCE, id='d', registry=registry)(
        make_handler(calls, 'd', failures=[TemporaryError('wait', delay=5)]))
    server.raw['metadata']['finalizers'] = ['other/finalizer']

    result = await server.cycle()
    assert result.cause == 'finalizer'
    assert not result.done
    assert calls == []
    assert server.raw['metadata']['finalizers'] == ['other/finalizer', FINALIZER]

    results = await server.run()
    assert [r.cause for r in results] == ['create']
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


async def test_deleted_objects_are_gone_and_never_patched(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, id='c', registry=registry)(make_handler(calls, 'c'))

    result = await server.cycle(event_type='DELETED')

    assert result.cause == 'gone'
    assert result.done
    assert result.patch == {}
    assert calls == []


async def test_our_finalizer_is_released_even_without_handlers(server, registry):
    kopf.on.event(*RESOURCE, id='e', registry=registry)(lambda **_: None)
    server.raw['metadata'].update(finalizers=[FINALIZER], deletionTimestamp='2020-01-01T00:00:00Z')

    result = await server.cycle()

    assert result.cause == 'delete'
    assert server.gone


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


async def test_multi_storage_writes_everywhere_and_cleans_everywhere(server, registry, config):
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


async def test_status_progress_storage_with_a_custom_field(server, registry, config):
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


async def test_annotations_storage_with_a_custom_prefix_and_status_diffbase(server, registry, config):
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

async def test_a_restarted_operator_does_not_rerun_succeeded_handlers(server, registry, config):
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


async def test_same_function_for_update_and_resume_runs_once(server, registry):
    calls = []
    fn = make_handler(calls, 'fn')
    kopf.on.update(*RESOURCE, registry=registry)(fn)
    kopf.on.resume(*RESOURCE, registry=registry)(fn)
    await server.run()
    server.change({'spec': {'field': 'y'}})

    await server.run(first_seen=True)

    assert names(calls) == ['fn']


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


# Sub-handlers.

async def test_subhandlers_keep_their_own_progress_and_the_parent_waits(server, registry, clock):
    calls = []
    child1 = make_handler(calls, 'child1')
    child2 = make_handler(calls, 'child2', result='c2', failures=[TemporaryError('later', delay=3)])

    async def parent(**_):
        calls.append(('parent', {}))
        kopf.on.register(child1, id='c1')
        kopf.on.register(child2, id='c2')
    kopf.on.create(*RESOURCE, id='parent', registry=registry)(parent)

    result = await server.cycle()
    assert not result.done
    assert names(calls) == ['parent', 'child1']
    assert await_fetch(server, 'parent/c1')['success'] is True
    assert 'success' not in await_fetch(server, 'parent/c2')
    assert 'success' not in await_fetch(server, 'parent')

    result = await server.cycle()
    assert names(calls) == ['parent', 'child1', 'parent', 'child2']
    assert result.delay == 3

    clock.advance(3)
    result = await server.cycle()

    assert result.done
    assert names(calls) == ['parent', 'child1', 'parent', 'child2', 'parent', 'child2']
    assert server.raw['status']['parent/c2'] == 'c2'
    assert list(server.annotations) == [LAST_HANDLED]


async def test_execute_runs_subhandlers_inside_an_async_handler(server, registry):
    calls = []
    seen = []

    async def parent(**_):
        await kopf.on.execute(fns={'a': make_handler(calls, 'a'), 'b': make_handler(calls, 'b')},
                              lifecycle=lifecycles.all_at_once)
        seen.append('after-execute')
        return 'parent-done'
    kopf.on.create(*RESOURCE, id='parent', registry=registry)(parent)

    results = await server.run()

    assert len(results) == 1
    assert names(calls) == ['a', 'b']
    assert seen == ['after-execute']
    assert server.raw['status']['parent'] == 'parent-done'


async def test_execute_raises_until_subhandlers_are_done_and_never_reruns_them(server, registry, clock):
    calls = []
    outcomes = []
    flaky = make_handler(calls, 'flaky', failures=[TemporaryError('later', delay=2)])
    steady = make_handler(calls, 'steady')

    async def parent(**_):
        try:
            await kopf.on.execute(fns=[steady, flaky], lifecycle=lifecycles.all_at_once)
        except BaseException as e:
            outcomes.append(type(e).__name__)
            raise
        outcomes.append('ok')
    kopf.on.create(*RESOURCE, id='parent', registry=registry)(parent)

    results = await server.run()

    assert names(calls) == ['steady', 'flaky', 'flaky']
    assert outcomes == ['HandlerChildrenRetry', 'ok']
    assert results[0].delay == 2


async def test_subhandlers_of_sync_handlers(server, registry):
    calls = []

    def parent(**_):
        for index in range(3):
            kopf.on.register(make_handler(calls, f'item{index}'), id=f'item{index}')
    kopf.on.create(*RESOURCE, id='parent', registry=registry)(parent)

    results = await server.run()

    assert names(calls) == ['item0', 'item1', 'item2']
    assert len(results) == 3  # the default lifecycle: one sub-handler per cycle


async def test_failed_subhandler_fails_its_parent(server, registry, caplog):
    calls = []

    async def parent(**_):
        kopf.on.register(make_handler(calls, 'bad', failures=[PermanentError('broken')]), id='bad')
    kopf.on.create(*RESOURCE, id='parent', registry=registry)(parent)

    results = await server.run()

    assert results[-1].done
    assert len(results) == 1
    assert any('parent/bad' in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)


async def test_register_outside_of_a_handler_is_an_error():
    with pytest.raises(RuntimeError, match='inside'):
        kopf.on.register(lambda **_: None)


# Event handlers and filters.

async def test_event_handlers_run_for_every_event_without_state(server, registry):
    events = []

    def on_event(type, event, body, **_):
        events.append((type, event['type'], body['metadata']['name']))
        raise ValueError("errors are only logged")
    kopf.on.event(*RESOURCE, registry=registry)(on_event)

    await server.cycle(event_type='ADDED')
    await server.cycle(event_type='MODIFIED')
    await server.cycle(event_type='MODIFIED')
    result = await server.cycle(event_type='DELETED')

    assert events == [('ADDED', 'ADDED', 'ex1'), ('MODIFIED', 'MODIFIED', 'ex1'),
                      ('MODIFIED', 'MODIFIED', 'ex1'), ('DELETED', 'DELETED', 'ex1')]
    assert result.cause == 'gone'
    assert server.annotations == {}  # no progress, no diff-base for event-only resources


@pytest.mark.parametrize('labels, matches', [
    ({'app': 'demo'}, True),
    ({'app': 'other'}, False),
    ({'app': PRESENT}, True),
    ({'app': ABSENT}, False),
    ({'missing': ABSENT}, True),
    ({'missing': PRESENT}, False),
    ({'app': lambda value: value.startswith('de')}, True),
])
async def test_label_filters(server, registry, labels, matches):
    calls = []
    server.raw['metadata']['labels'] = {'app': 'demo'}
    kopf.on.create(*RESOURCE, id='h', labels=labels, registry=registry)(make_handler(calls, 'h'))

    results = await server.run()

    assert bool(calls) == matches
    assert results[-1].done


async def test_annotation_and_when_filters(server, registry):
    calls = []
    server.raw['metadata']['annotations'] = {'mode': 'on'}
    kopf.on.create(*RESOURCE, id='yes', annotations={'mode': 'on'}, registry=registry)(make_handler(calls, 'yes'))
    kopf.on.create(*RESOURCE, id='no', annotations={'mode': 'off'}, registry=registry)(make_handler(calls, 'no'))
    kopf.on.create(*RESOURCE, id='when-yes', when=lambda spec, **_: spec['field'] == 'x',
                   registry=registry)(make_handler(calls, 'when-yes'))
    kopf.on.create(*RESOURCE, id='when-no', when=lambda reason, **_: reason == 'update',
                   registry=registry)(make_handler(calls, 'when-no'))

    await server.run()

    assert names(calls) == ['yes', 'when-yes']


async def test_failing_filters_skip_the_handler_loudly(server, registry, caplog):
    calls = []
    kopf.on.create(*RESOURCE, id='broken', when=lambda **_: 1 / 0, registry=registry)(make_handler(calls, 'broken'))
    kopf.on.create(*RESOURCE, id='fine', registry=registry)(make_handler(calls, 'fine'))

    results = await server.run()

    assert names(calls) == ['fine']
    assert results[-1].done
    assert any("'broken'" in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)


async def test_filters_decide_about_the_finalizer(server, registry):
    kopf.on.delete(*RESOURCE, id='d', labels={'app': 'demo'}, registry=registry)(lambda **_: None)

    results = await server.run()

    assert [r.cause for r in results] == ['create']
    assert 'finalizers' not in server.raw['metadata']


# Helpers for the glue.

async def test_touch_makes_a_unique_dummy_change(server, config, clock):
    patch1, patch2 = Patch(), Patch()
    await touch(config=config, body=server.body, patch=patch1)
    clock.advance(1)
    await touch(config=config, body=server.body, patch=patch2)

    key = 'kopf.zalando.org/touch-dummy'
    assert patch1['metadata']['annotations'][key]
    assert patch1['metadata']['annotations'][key] != patch2['metadata']['annotations'][key]


async def test_touch_goes_through_async_storages(server, config):
    touched = []

    class Storage(AsyncDictStorage):
        async def touch(self, *, body, patch, value):
            touched.append(value)
    config.persistence.progress_storage = Storage()

    await touch(config=config, body=server.body, patch=Patch())

    assert len(touched) == 1 and touched[0]


# Activities.

async def test_startup_handlers_receive_the_config_as_config_and_settings(registry, config):
    seen = []

    @kopf.on.startup(registry=registry)
    def configure(config, settings, memo, **_):
        seen.append((config, settings, memo))
        config.persistence.progress_storage = AnnotationsProgressStorage(prefix='my-op.example.com')
        return 'configured'

    results = await run_activity(registry=registry, activity='startup', config=config, memo='m', logger=logger)

    assert results == {configure.__qualname__: 'configured'}
    assert seen == [(config, config, 'm')]
    assert isinstance(config.persistence.progress_storage, AnnotationsProgressStorage)
    assert not isinstance(config.persistence.progress_storage, SmartProgressStorage)


async def test_activity_handlers_are_retried_in_memory(registry, config):
    calls = []
    kopf.on.startup(id='flaky', backoff=0.01, registry=registry)(
        make_handler(calls, 'flaky', result=1, failures=[TemporaryError('later', delay=0.01), ValueError('x')]))
    kopf.on.cleanup(id='other', registry=registry)(make_handler(calls, 'other'))

    results = await run_activity(registry=registry, activity='startup', config=config, memo=None, logger=logger)

    assert results == {'flaky': 1}
    assert names(calls) == ['flaky', 'flaky', 'flaky']


async def test_activity_failures_are_raised_after_all_handlers(registry, config):
    calls = []
    kopf.on.startup(id='bad', registry=registry)(make_handler(calls, 'bad', failures=[PermanentError('no')]))
    kopf.on.startup(id='good', registry=registry)(make_handler(calls, 'good', result='ok'))

    with pytest.raises(ActivityError) as info:
        await run_activity(registry=registry, activity='startup', config=config, memo=None, logger=logger)

    assert names(calls) == ['bad', 'good']
    assert set(info.value.errors) == {'bad'}
    assert isinstance(info.value.errors['bad'], PermanentError)
