"""
Indexing: index functions keep in-memory indexes from the events of objects; every handler gets them.
"""
import asyncio
import logging

import pytest

import kopf
from kopf._cycle.cycle import handle_object
from kopf._cycle.queueing import event_key
from kopf._handlers.registries import Activity, OperatorRegistry
from kopf._indexing.indexing import OperatorIndexes
from kopf._runtime import activities
from kopf._structs.bodies import Body
from kopf._structs.resources import Resource, Selector
from kopf.config import OperatorConfig
from kopf.errors import DuplicateHandlerError
from tests.unit.conftest import RESOURCE, SELECTOR, FakeClock, logger

RESOLVED = Resource('kopf.dev', 'v1', 'kopfexamples', 'KopfExample')


def obj(name, *, uid=None, labels=None, spec=None):
    return {'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
            'metadata': {'name': name, 'namespace': 'ns1', 'uid': uid or f'uid-{name}', 'labels': labels or {}},
            'spec': spec or {}}


def ev(type_, name, **kwargs):
    return {'type': type_, 'object': obj(name, **kwargs)}


def contents(index):
    return {key: sorted(store, key=repr) for key, store in index.items()}


@pytest.fixture()
def registry():
    return OperatorRegistry()


@pytest.fixture()
def clock():
    return FakeClock()


@pytest.fixture()
def indexes(registry, clock):
    # Created lazily: the index functions are declared in the tests first.
    return lambda: OperatorIndexes(registry, clock=clock)


@pytest.fixture()
def feed(registry):
    """Index events as the watch stream of the resource would."""
    async def feed(indexes, *events, memo=None, config=None):
        handlers = registry.get_indexing_handlers(SELECTOR)
        for raw_event in events:
            await indexes.index_event(raw_event, handlers=handlers, resource=RESOLVED,
                                      config=config or OperatorConfig(), memo=memo)
    return feed


# What an index holds.

async def test_every_index_exists_from_the_start_and_is_named_by_its_function_or_id(registry):
    kopf.index(*RESOURCE, registry=registry)(named_by_function)
    kopf.index(*RESOURCE, id='named_by_id', registry=registry)(lambda **_: None)
    result = OperatorIndexes(registry)
    assert sorted(result) == ['named_by_function', 'named_by_id']
    assert all(isinstance(index, kopf.Index) and not index for index in result.values())


def named_by_function(**_):
    return None


async def test_results_go_under_their_keys_and_other_values_under_none(registry, indexes, feed):
    kopf.index(*RESOURCE, id='by_ns', registry=registry)(lambda namespace, name, **_: {namespace: name})
    kopf.index(*RESOURCE, id='names', registry=registry)(lambda name, **_: name)
    kopf.index(*RESOURCE, id='pairs', registry=registry)(lambda namespace, name, **_: {(namespace, name): None})
    idx = indexes()
    await feed(idx, ev(None, 'a'), ev(None, 'b'), ev('ADDED', 'c'))
    assert contents(idx['by_ns']) == {'ns1': ['a', 'b', 'c']}
    assert contents(idx['names']) == {None: ['a', 'b', 'c']}
    assert contents(idx['pairs']) == {('ns1', 'a'): [None], ('ns1', 'b'): [None], ('ns1', 'c'): [None]}


async def test_a_changed_object_replaces_its_values_and_a_deleted_one_removes_them(registry, indexes, feed):
    kopf.index(*RESOURCE, id='by_label', registry=registry)(
        lambda labels, name, **_: {(label, value): name for label, value in labels.items()})
    idx = indexes()
    await feed(idx, ev(None, 'a', labels={'app': 'x', 'tier': 'web'}), ev(None, 'b', labels={'app': 'x'}))
    assert contents(idx['by_label']) == {('app', 'x'): ['a', 'b'], ('tier', 'web'): ['a']}

    await feed(idx, ev('MODIFIED', 'a', labels={'app': 'y'}))
    assert contents(idx['by_label']) == {('app', 'x'): ['b'], ('app', 'y'): ['a']}

    await feed(idx, ev('DELETED', 'b'))
    assert contents(idx['by_label']) == {('app', 'y'): ['a']}


async def test_none_keeps_what_the_object_has_put_into_the_index(registry, indexes, feed):
    kopf.index(*RESOURCE, id='idx', registry=registry)(
        lambda spec, name, **_: {name: spec['mode']} if 'mode' in spec else None)
    idx = indexes()
    await feed(idx, ev(None, 'a', spec={'mode': 'on'}), ev(None, 'b', spec={}))
    assert contents(idx['idx']) == {'a': ['on']}
    await feed(idx, ev('MODIFIED', 'a', spec={}))
    assert contents(idx['idx']) == {'a': ['on']}


async def test_objects_are_told_apart_by_uid(registry, indexes, feed):
    kopf.index(*RESOURCE, id='names', registry=registry)(lambda name, **_: name)
    idx = indexes()
    await feed(idx, ev(None, 'a', uid='old'), ev('ADDED', 'a', uid='new'), ev('DELETED', 'a', uid='old'))
    assert contents(idx['names']) == {None: ['a']}


async def test_async_and_sync_index_functions(registry, indexes, feed):
    async def async_fn(name, **_):
        await asyncio.sleep(0)
        return {'async': name}

    kopf.index(*RESOURCE, id='a', registry=registry)(async_fn)
    kopf.index(*RESOURCE, id='s', registry=registry)(lambda name, **_: {'sync': name})
    idx = indexes()
    await feed(idx, ev(None, 'x'))
    assert contents(idx['a']) == {'async': ['x']}
    assert contents(idx['s']) == {'sync': ['x']}


async def test_index_functions_get_the_handler_kwargs_and_the_other_indexes(registry, indexes, feed):
    seen = {}

    def capture(**kwargs):
        seen.update(kwargs)
        return kwargs['name']

    kopf.index(*RESOURCE, id='first', registry=registry)(lambda name, **_: name)
    kopf.index(*RESOURCE, id='second', param='p', registry=registry)(capture)
    idx = indexes()
    memo = kopf.Memo()
    await feed(idx, ev(None, 'a', spec={'x': 1}), memo=memo)
    assert seen['name'] == 'a' and seen['namespace'] == 'ns1' and seen['uid'] == 'uid-a'
    assert seen['spec'] == {'x': 1} and seen['body']['kind'] == 'KopfExample'
    assert seen['memo'] is memo
    assert seen['resource'] == RESOLVED
    assert seen['param'] == 'p'
    assert seen['retry'] == 0
    assert isinstance(seen['logger'], logging.LoggerAdapter)
    assert list(seen['first'][None]) == ['a']  # indexed just before, in the order of declaration
    assert seen['second'] is idx['second']


# Filters.

async def test_filtered_index_functions_index_only_the_objects_they_accept(registry, indexes, feed):
    kopf.index(*RESOURCE, id='labelled', labels={'sel': 'yes'}, registry=registry)(lambda name, **_: name)
    kopf.index(*RESOURCE, id='valued', field='spec.mode', value='on', registry=registry)(lambda name, **_: name)
    kopf.index(*RESOURCE, id='present', field='spec.mode', registry=registry)(lambda name, **_: name)
    kopf.index(*RESOURCE, id='when', when=lambda spec, **_: spec.get('n', 0) > 1,
               registry=registry)(lambda name, **_: name)
    idx = indexes()
    await feed(idx, ev(None, 'a', labels={'sel': 'yes'}, spec={'mode': 'on', 'n': 2}),
               ev(None, 'b', labels={'sel': 'no'}, spec={'mode': 'off', 'n': 1}),
               ev(None, 'c', spec={}))
    assert contents(idx['labelled']) == {None: ['a']}
    assert contents(idx['valued']) == {None: ['a']}
    assert contents(idx['present']) == {None: ['a', 'b']}
    assert contents(idx['when']) == {None: ['a']}

    # Objects that stop matching lose their values; those that start matching gain them.
    await feed(idx, ev('MODIFIED', 'a', labels={}, spec={}), ev('MODIFIED', 'c', labels={'sel': 'yes'}))
    assert contents(idx['labelled']) == {None: ['c']}
    assert dict(idx['valued']) == {}
    assert contents(idx['present']) == {None: ['b']}
    assert dict(idx['when']) == {}


# Errors.

def explode(mode):
    """An index function that fails while the object's spec says so."""
    def fn(spec, name, **_):
        if spec.get('fail') == 'exception':
            raise ValueError(f"{name} is broken")
        if spec.get('fail') == 'temporary':
            raise kopf.TemporaryError("not now", delay=spec.get('delay', 10))
        if spec.get('fail') == 'permanent':
            raise kopf.PermanentError("never")
        return {name: spec.get('value', 'ok')}
    return fn


def failures(caplog, level=logging.ERROR):
    return [r for r in caplog.records if r.levelno >= level and 'Index' in r.getMessage()]


async def test_an_ignored_error_keeps_the_values_and_is_logged_once_per_object(registry, indexes, feed, caplog):
    kopf.index(*RESOURCE, id='idx', registry=registry)(explode(None))
    idx = indexes()
    await feed(idx, ev(None, 'a', spec={'value': 'v1'}), ev(None, 'b', spec={'value': 'v1'}))
    caplog.set_level(logging.DEBUG)

    for _ in range(3):
        await feed(idx, ev('MODIFIED', 'a', spec={'fail': 'exception'}))
    assert contents(idx['idx']) == {'a': ['v1'], 'b': ['v1']}  # stale, but kept
    [logged] = failures(caplog)
    assert logged.getMessage().startswith("Index 'idx' has failed for the object: a is broken; "
                                          "its values in the index stay as they were.")
    assert logged.exc_info is not None  # an unexpected error: with its traceback
    assert len(failures(caplog, logging.DEBUG)) == 3

    await feed(idx, ev('MODIFIED', 'b', spec={'fail': 'exception'}))
    assert len(failures(caplog)) == 2  # another object: logged once again

    await feed(idx, ev('MODIFIED', 'a', spec={'value': 'v2'}))
    assert contents(idx['idx']) == {'a': ['v2'], 'b': ['v1']}
    assert "Index 'idx' has indexed the object again." in caplog.messages
    await feed(idx, ev('MODIFIED', 'a', spec={'fail': 'exception'}))
    assert len(failures(caplog)) == 3  # a new failure after a success is news


async def test_a_temporary_error_removes_the_values_until_the_delay_is_over(registry, indexes, feed, clock,
                                                                           caplog):
    calls = []
    fn = explode(None)
    kopf.index(*RESOURCE, id='idx', registry=registry)(lambda **kw: calls.append(kw['retry']) or fn(**kw))
    idx = indexes()
    await feed(idx, ev(None, 'a'), ev(None, 'b'))

    await feed(idx, ev('MODIFIED', 'a', spec={'fail': 'temporary', 'delay': 10}))
    assert contents(idx['idx']) == {'b': ['ok']}
    [logged] = failures(caplog)
    assert "not now; its values are removed from the index until it is indexed again " \
           "(on its first event after 10s)" in logged.getMessage()
    assert logged.exc_info is None  # an expected error: no traceback

    clock.advance(9)
    await feed(idx, ev('MODIFIED', 'a', spec={}))
    assert contents(idx['idx']) == {'b': ['ok']}  # excluded: not even called
    assert calls == [0, 0, 0]

    clock.advance(2)
    await feed(idx, ev('MODIFIED', 'a', spec={}))
    assert contents(idx['idx']) == {'a': ['ok'], 'b': ['ok']}
    assert calls == [0, 0, 0, 1]  # told how many times it has failed for the object


async def test_exceptions_in_the_temporary_mode_wait_for_the_backoff(registry, indexes, feed, clock):
    kopf.index(*RESOURCE, id='idx', errors=kopf.ErrorsMode.TEMPORARY, backoff=5, registry=registry)(explode(None))
    idx = indexes()
    await feed(idx, ev(None, 'a'), ev('MODIFIED', 'a', spec={'fail': 'exception'}))
    assert dict(idx['idx']) == {}
    clock.advance(4)
    await feed(idx, ev('MODIFIED', 'a'))
    assert dict(idx['idx']) == {}
    clock.advance(1)
    await feed(idx, ev('MODIFIED', 'a'))
    assert contents(idx['idx']) == {'a': ['ok']}


async def test_without_a_backoff_the_setting_is_the_backoff(registry, indexes, feed, clock):
    config = OperatorConfig()
    config.execution.default_backoff = 5
    kopf.index(*RESOURCE, id='idx', errors=kopf.ErrorsMode.TEMPORARY, registry=registry)(explode(None))
    idx = indexes()
    await feed(idx, ev(None, 'a'), ev('MODIFIED', 'a', spec={'fail': 'exception'}), config=config)
    clock.advance(4)
    await feed(idx, ev('MODIFIED', 'a'), config=config)
    assert dict(idx['idx']) == {}
    clock.advance(1)
    await feed(idx, ev('MODIFIED', 'a'), config=config)
    assert contents(idx['idx']) == {'a': ['ok']}


@pytest.mark.parametrize('options, failure', [
    ({}, 'permanent'),
    ({'errors': kopf.ErrorsMode.PERMANENT}, 'exception'),
    ({'retries': 2}, 'temporary'),
    ({'timeout': 15}, 'temporary'),
])
async def test_permanent_failures_exclude_the_object_until_it_is_gone(registry, indexes, feed, clock, caplog,
                                                                      options, failure):
    kopf.index(*RESOURCE, id='idx', registry=registry, **options)(explode(None))
    idx = indexes()
    await feed(idx, ev(None, 'a'), ev(None, 'b'))
    for _ in range(3):
        await feed(idx, ev('MODIFIED', 'a', spec={'fail': failure, 'delay': 10}))
        clock.advance(11)
    assert contents(idx['idx']) == {'b': ['ok']}
    await feed(idx, ev('MODIFIED', 'a', spec={}))
    assert contents(idx['idx']) == {'b': ['ok']}  # for good
    assert "its values are removed from the index, and it is not indexed again" in failures(caplog)[-1].getMessage()
    assert len(failures(caplog)) <= 2  # the first failure, and the exclusion for good

    # A new object (even of the same name) starts afresh.
    await feed(idx, ev('DELETED', 'a'), ev('ADDED', 'a', spec={'value': 'again'}))
    assert contents(idx['idx']) == {'a': ['again'], 'b': ['ok']}


# Readiness.

async def test_ready_once_every_expected_listing_has_been_indexed(registry):
    idx = OperatorIndexes(registry)
    assert idx.is_ready  # nothing to wait for
    idx.expect(('pods', 'ns1'))
    idx.expect(('pods', 'ns2'))
    waiter = asyncio.create_task(idx.ready())
    idx.listed(('pods', 'ns1'))
    await asyncio.sleep(0)
    assert not waiter.done()
    idx.listed(('pods', 'ns2'))
    await asyncio.wait_for(waiter, timeout=1)
    idx.listed(('pods', 'ns2'))  # a relisting later changes nothing
    assert idx.is_ready


async def test_the_stream_is_indexed_event_by_event_before_it_is_passed_on(registry):
    kopf.index(*RESOURCE, id='names', registry=registry)(lambda name, **_: name)
    idx = OperatorIndexes(registry)

    async def stream():
        yield ev(None, 'a')
        yield ev('ADDED', 'b')
        yield ev('DELETED', 'a')

    seen = []
    async for _ in idx.indexed(stream(), listing='kex', registry=registry, selector=SELECTOR, resource=RESOLVED,
                               config=OperatorConfig(), memo=None):
        seen.append(sorted(idx['names'].get(None, [])))
    assert seen == [['a'], ['a', 'b'], ['b']]


async def test_a_new_listing_forgets_what_it_does_not_list_any_more(registry):
    kopf.index(*RESOURCE, id='names', registry=registry)(lambda name, **_: name)
    idx = OperatorIndexes(registry)
    idx.expect('kex')

    async def stream():
        # One stream, then another one for the same objects (as replicas re-open them after a hand-over),
        # which does not say that a and c were deleted while there was no stream.
        yield ev(None, 'a')
        yield ev(None, 'b')
        idx.listed('kex')
        yield ev('ADDED', 'c')
        yield ev(None, 'b')
        yield ev(None, 'd')
        idx.listed('kex')
        yield ev('ADDED', 'e')

    seen = []
    async for _ in idx.indexed(stream(), listing='kex', registry=registry, selector=SELECTOR, resource=RESOLVED,
                               config=OperatorConfig(), memo=None):
        seen.append(sorted(idx['names'].get(None, [])))
    assert seen == [['a'], ['a', 'b'], ['a', 'b', 'c'], ['a', 'b', 'c'], ['a', 'b', 'c', 'd'], ['b', 'd', 'e']]
    assert idx.is_ready


async def test_index_functions_get_each_objects_own_memo(registry):
    from kopf._structs.ephemera import ObjectMemos

    @kopf.index(*RESOURCE, id='counts', registry=registry)
    def counts(name, memo, **_):
        memo.indexed = memo.get('indexed', 0) + 1
        return memo.indexed

    memos = ObjectMemos(kopf.Memo())
    idx = OperatorIndexes(registry)

    async def stream():
        yield ev(None, 'a')
        yield ev(None, 'b')
        yield ev('MODIFIED', 'a')

    async for _ in idx.indexed(stream(), listing='kex', registry=registry, selector=SELECTOR, resource=RESOLVED,
                               config=OperatorConfig(), memo=kopf.Memo(), memos=memos):
        pass

    assert contents(idx['counts']) == {None: [1, 2]}  # a: indexed twice with its memo; b: once with its own
    assert memos.get(event_key(ev(None, 'a'))).indexed == 2  # the handlers of a get the same memo


async def test_an_empty_listing_forgets_everything_the_stream_has_indexed(registry):
    kopf.index(*RESOURCE, id='names', registry=registry)(lambda name, **_: name)
    idx = OperatorIndexes(registry)

    async def stream():
        yield ev(None, 'a')
        idx.listed('kex')
        yield ev('ADDED', 'b')
        idx.listed('kex')  # relisted: nothing there

    async for _ in idx.indexed(stream(), listing='kex', registry=registry, selector=SELECTOR, resource=RESOLVED,
                               config=OperatorConfig(), memo=None):
        pass
    assert dict(idx['names']) == {}


async def test_index_names_are_unique_across_resources(registry):
    kopf.index('pods', id='same', registry=registry)(lambda **_: None)
    with pytest.raises(DuplicateHandlerError, match="Two indexes are named 'same'"):
        kopf.index('services', id='same', registry=registry)(lambda **_: None)


def test_kopf_index_is_kopf_on_index():
    assert kopf.index is kopf.on.index


# Every handler gets the indexes.

async def test_handlers_wait_for_the_indexes_and_get_them_by_name(registry, server):
    calls = []
    kopf.index('pods', id='pod_names', registry=registry)(lambda name, **_: name)
    kopf.on.create(*RESOURCE, id='c', registry=registry)(lambda **kw: calls.append(('c', kw)))
    kopf.on.event(*RESOURCE, id='e', registry=registry)(lambda **kw: calls.append(('e', kw)))
    idx = WatchedIndexes(registry)
    idx.expect('pods')
    pods = Selector.from_args('pods')
    handling = asyncio.create_task(server_cycle(server, idx))
    await asyncio.wait_for(idx.awaited.wait(), timeout=1)
    await asyncio.sleep(0)
    assert not idx.passed and not calls  # waiting for the pods' listing

    await idx.index_event(ev(None, 'pod1'), handlers=registry.get_indexing_handlers(pods), resource=None,
                          config=OperatorConfig(), memo=None)
    idx.listed('pods')
    await asyncio.wait_for(handling, timeout=1)
    assert idx.passed
    assert [name for name, _ in calls] == ['e', 'c']
    assert all(kwargs['pod_names'] is idx['pod_names'] for _, kwargs in calls)
    assert all(list(kwargs['pod_names'][None]) == ['pod1'] for _, kwargs in calls)


class WatchedIndexes(OperatorIndexes):
    """Indexes that tell when someone has started to wait for them to be ready."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.awaited = asyncio.Event()
        self.passed = False

    async def ready(self):
        self.awaited.set()
        await super().ready()
        self.passed = True


async def server_cycle(server, indexes):
    return await handle_object(registry=server.registry, config=server.config, resource=SELECTOR,
                               event_type='ADDED', body=Body(server.raw), first_seen=True, memo=server.memo,
                               logger=logger, clock=server.clock, indexes=indexes, resolved=RESOLVED)


async def test_indexes_win_over_other_kwargs_of_the_same_name(registry, server):
    calls = []
    kopf.index(*RESOURCE, id='memo', registry=registry)(lambda name, **_: name)
    kopf.on.create(*RESOURCE, id='c', registry=registry)(lambda **kw: calls.append(kw))
    idx = OperatorIndexes(registry)
    await idx.index_event(ev(None, 'ex1'), handlers=registry.get_indexing_handlers(SELECTOR), resource=None,
                          config=OperatorConfig(), memo=None)
    await server_cycle(server, idx)
    assert calls[0]['memo'] is idx['memo']
    assert calls[0]['resource'] == RESOLVED


async def test_activity_handlers_get_the_indexes_as_they_are(registry):
    seen = []
    kopf.index('pods', id='pod_names', registry=registry)(lambda name, **_: name)
    kopf.on.startup(registry=registry)(lambda pod_names, **_: seen.append(pod_names))
    idx = OperatorIndexes(registry)
    await activities.run_activity(registry=registry, activity=Activity.STARTUP, config=OperatorConfig(),
                                  memo=None, logger=logging.getLogger('test'), indexes=idx)
    assert seen == [idx['pod_names']]
