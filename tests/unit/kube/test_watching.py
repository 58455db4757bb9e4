import asyncio
import contextlib
import json
import logging
import time

import pytest
from aiohttp import web

from kopf._kube.auth import APIContext
from kopf._kube.errors import APIForbiddenError
from kopf._kube.watching import LineSplitter, _Tracker, infinite_watch
from kopf._structs import dormancy
from kopf._structs.credentials import ConnectionInfo
from kopf._structs.resources import Resource
from kopf.config import WatchingConfig
from tests.unit.kube.conftest import GUARD, until

KEX = Resource('kopf.dev', 'v1', 'kopfexamples', 'KopfExample', namespaced=True)
PATH = '/apis/kopf.dev/v1/kopfexamples'


def obj(name, rv, uid=None, **extra):
    return {'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
            'metadata': {'name': name, 'namespace': 'ns1', 'uid': uid or f'uid-{name}', 'resourceVersion': rv},
            **extra}


def listing(*objs, rv):
    return {'kind': 'KopfExampleList', 'metadata': {'resourceVersion': rv}, 'items': list(objs)}


def event(type_, o):
    return {'type': type_, 'object': o}


def gone():
    return {'type': 'ERROR', 'object': {'kind': 'Status', 'apiVersion': 'v1', 'status': 'Failure',
                                        'code': 410, 'reason': 'Expired', 'message': 'too old resource version'}}


def status_response(aresponses, code, message='failed'):
    return aresponses.Response(status=code, content_type='application/json',
                               text=json.dumps({'kind': 'Status', 'code': code, 'message': message}))


def summary(events):
    """The events as (type, name) pairs: what a test usually cares about."""
    return [(e['type'], e['object']['metadata']['name']) for e in events]


def watch_queries(history):
    return [dict(r.query) for r in history(PATH) if r.query.get('watch') == 'true']


def list_requests(history):
    return [r for r in history(PATH) if 'watch' not in r.query]


async def take(stream, count, *, timeout=5.0):
    """The first `count` events of a watch; then the watch is closed."""
    events = []

    async def consume():
        async with contextlib.aclosing(stream):
            async for e in stream:
                events.append(e)
                if len(events) >= count:
                    break

    await asyncio.wait_for(consume(), timeout=timeout)
    return events


@pytest.fixture()
def settings():
    return WatchingConfig(reconnect_backoff=0.01)


@pytest.fixture()
def watch(context, settings):
    def factory(namespace=None, stop=None):
        return infinite_watch(context=context, resource=KEX, namespace=namespace, settings=settings, stop=stop)
    return factory


# --- Listing, then watching -----------------------------------------------------------------------

async def test_lists_first_then_watches_from_the_lists_version(aresponses, host, watch, history, stream_response):
    aresponses.add(host, PATH, 'GET', listing(obj('a', '5'), obj('b', '6'), rv='10'))
    aresponses.add(host, PATH, 'GET', stream_response(
        event('ADDED', obj('c', '11')), event('MODIFIED', obj('a', '12')), event('DELETED', obj('b', '13'))))
    events = await take(watch(), 5)
    assert summary(events) == [(None, 'a'), (None, 'b'), ('ADDED', 'c'), ('MODIFIED', 'a'), ('DELETED', 'b')]
    assert events[0]['object'] == obj('a', '5')
    assert watch_queries(history) == [{'watch': 'true', 'allowWatchBookmarks': 'true', 'resourceVersion': '10'}]


async def test_listed_objects_have_their_kind_even_if_the_list_has_not(aresponses, host, watch):
    aresponses.add(host, PATH, 'GET', listing({'metadata': {'name': 'a', 'resourceVersion': '1'}}, rv='10'))
    [listed] = await take(watch(), 1)
    assert listed == {'type': None, 'object': {'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
                                               'metadata': {'name': 'a', 'resourceVersion': '1'}}}


async def test_namespace_and_timeouts_are_passed(aresponses, host, context, history, stream_response):
    aresponses.add(host, '/apis/kopf.dev/v1/namespaces/ns1/kopfexamples', 'GET', listing(rv='10'))
    aresponses.add(host, '/apis/kopf.dev/v1/namespaces/ns1/kopfexamples', 'GET',
                   stream_response(event('ADDED', obj('a', '11'))))
    settings = WatchingConfig(server_timeout=29.5, client_timeout=60, connect_timeout=5)
    await take(infinite_watch(context=context, resource=KEX, namespace='ns1', settings=settings), 1)
    [watch_request] = [r for r in history() if r.query.get('watch')]
    assert watch_request.query['timeoutSeconds'] == '30'
    assert watch_request.query['resourceVersion'] == '10'


# --- Stream parsing -------------------------------------------------------------------------------

async def test_lines_split_across_chunks(aresponses, host, watch, stream_response):
    line1 = json.dumps(event('ADDED', obj('c', '11'))).encode()
    line2 = json.dumps(event('MODIFIED', obj('c', '12'))).encode()
    aresponses.add(host, PATH, 'GET', listing(rv='10'))
    aresponses.add(host, PATH, 'GET', stream_response(
        line1[:7], line1[7:30], line1[30:] + b'\n' + line2[:5], line2[5:] + b'\n'))
    events = await take(watch(), 2)
    assert events == [event('ADDED', obj('c', '11')), event('MODIFIED', obj('c', '12'))]


async def test_the_last_line_without_a_newline(aresponses, host, watch, stream_response):
    aresponses.add(host, PATH, 'GET', listing(rv='10'))
    aresponses.add(host, PATH, 'GET', stream_response(json.dumps(event('ADDED', obj('c', '11'))).encode()))
    assert summary(await take(watch(), 1)) == [('ADDED', 'c')]


async def test_large_lines(aresponses, host, watch, stream_response):
    big = obj('big', '11', spec={'data': 'x' * 3_000_000})
    aresponses.add(host, PATH, 'GET', listing(rv='10'))
    aresponses.add(host, PATH, 'GET', stream_response(event('ADDED', big), event('ADDED', obj('small', '12'))))
    events = await take(watch(), 2)
    assert events[0]['object'] == big
    assert summary(events) == [('ADDED', 'big'), ('ADDED', 'small')]


async def test_unparseable_lines_end_the_stream_with_a_warning(aresponses, host, watch, history, stream_response,
                                                               caplog):
    aresponses.add(host, PATH, 'GET', listing(rv='10'))
    aresponses.add(host, PATH, 'GET', stream_response(b'{not json\n', event('ADDED', obj('c', '11'))))
    aresponses.add(host, PATH, 'GET', stream_response(event('ADDED', obj('c', '11'))))
    assert summary(await take(watch(), 1)) == [('ADDED', 'c')]
    assert [q['resourceVersion'] for q in watch_queries(history)] == ['10', '10']  # again from the same version
    assert any('unreadable line' in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


def test_line_splitter():
    splitter = LineSplitter()
    assert splitter.feed(b'{"a"') == []
    assert splitter.feed(b': 1}\n{"b": 2}\n\n{"c"') == [b'{"a": 1}', b'{"b": 2}']
    assert splitter.feed(b': 3') == []
    assert splitter.feed(b'}\n') == [b'{"c": 3}']
    assert splitter.flush() == []
    assert splitter.feed(b'{"d": 4}') == []
    assert splitter.flush() == [b'{"d": 4}']


# --- Continuity of resourceVersions -----------------------------------------------------------------

async def test_server_side_end_rewatches_from_the_last_version(aresponses, host, watch, history, stream_response):
    aresponses.add(host, PATH, 'GET', listing(obj('a', '5'), rv='10'))
    aresponses.add(host, PATH, 'GET', stream_response(
        event('ADDED', obj('b', '11')), event('MODIFIED', obj('b', '12'))))
    aresponses.add(host, PATH, 'GET', stream_response(event('MODIFIED', obj('b', '13'))))
    events = await take(watch(), 4)
    assert summary(events) == [(None, 'a'), ('ADDED', 'b'), ('MODIFIED', 'b'), ('MODIFIED', 'b')]
    assert [q['resourceVersion'] for q in watch_queries(history)] == ['10', '12']
    assert len(list_requests(history)) == 1  # no relisting after a normal end


async def test_bookmarks_advance_the_version_but_are_not_yielded(aresponses, host, watch, history, stream_response):
    bookmark = {'type': 'BOOKMARK', 'object': {'kind': 'KopfExample', 'apiVersion': 'kopf.dev/v1',
                                               'metadata': {'resourceVersion': '20'}}}
    aresponses.add(host, PATH, 'GET', listing(rv='10'))
    aresponses.add(host, PATH, 'GET', stream_response(event('ADDED', obj('a', '11')), bookmark))
    aresponses.add(host, PATH, 'GET', stream_response(event('MODIFIED', obj('a', '21'))))
    events = await take(watch(), 2)
    assert summary(events) == [('ADDED', 'a'), ('MODIFIED', 'a')]
    assert [q['resourceVersion'] for q in watch_queries(history)] == ['10', '20']


async def test_client_side_timeout_rewatches_from_the_last_version(aresponses, host, context, history,
                                                                   stream_response):
    aresponses.add(host, PATH, 'GET', listing(rv='10'))
    aresponses.add(host, PATH, 'GET', stream_response(event('ADDED', obj('a', '11')), hang=True))
    aresponses.add(host, PATH, 'GET', stream_response(event('MODIFIED', obj('a', '12'))))
    settings = WatchingConfig(client_timeout=0.3, reconnect_backoff=0.01)
    stream = infinite_watch(context=context, resource=KEX, namespace=None, settings=settings)
    events = await take(stream, 2)
    assert summary(events) == [('ADDED', 'a'), ('MODIFIED', 'a')]
    assert [q['resourceVersion'] for q in watch_queries(history)] == ['10', '11']
    assert len(list_requests(history)) == 1


async def test_the_end_of_every_listing_is_reported_after_its_objects_are_consumed(aresponses, host, context,
                                                                                    settings, stream_response):
    aresponses.add(host, PATH, 'GET', listing(obj('a', '5'), obj('b', '6'), rv='10'))
    aresponses.add(host, PATH, 'GET', stream_response(event('ADDED', obj('c', '11')), gone()))
    aresponses.add(host, PATH, 'GET', listing(rv='70'))
    seen = []
    stop = asyncio.Event()

    def listed():
        seen.append('listed')
        if seen.count('listed') == 2:
            stop.set()

    stream = infinite_watch(context=context, resource=KEX, namespace=None, settings=settings, stop=stop,
                            on_listed=listed)
    async with contextlib.aclosing(stream):
        async for e in stream:
            seen.append(e['type'] or e['object']['metadata']['name'])

    # Once per listing, even an empty one; only after its last object has been taken.
    assert seen == ['a', 'b', 'listed', 'ADDED', 'DELETED', 'DELETED', 'DELETED', 'listed']


# --- 410 Gone and relisting -------------------------------------------------------------------------

async def test_http_410_relists(aresponses, host, watch, history):
    aresponses.add(host, PATH, 'GET', listing(obj('a', '5'), rv='10'))
    aresponses.add(host, PATH, 'GET', status_response(aresponses, 410, 'too old resource version'))
    aresponses.add(host, PATH, 'GET', listing(obj('a', '5'), obj('b', '40'), rv='50'))
    events = await take(watch(), 3)
    assert summary(events) == [(None, 'a'), (None, 'a'), (None, 'b')]
    assert len(list_requests(history)) == 2


async def test_error_event_410_relists_and_continues_from_the_new_version(aresponses, host, watch, history,
                                                                          stream_response):
    aresponses.add(host, PATH, 'GET', listing(obj('a', '5'), rv='10'))
    aresponses.add(host, PATH, 'GET', stream_response(event('MODIFIED', obj('a', '11')), gone()))
    aresponses.add(host, PATH, 'GET', listing(obj('a', '60'), rv='70'))
    aresponses.add(host, PATH, 'GET', stream_response(event('MODIFIED', obj('a', '71'))))
    events = await take(watch(), 4)
    assert summary(events) == [(None, 'a'), ('MODIFIED', 'a'), (None, 'a'), ('MODIFIED', 'a')]
    assert [q['resourceVersion'] for q in watch_queries(history)] == ['10', '70']


async def test_relist_reports_vanished_objects_as_deleted_before_the_listing(aresponses, host, watch,
                                                                            stream_response):
    aresponses.add(host, PATH, 'GET', listing(obj('a', '5', spec={'x': 1}), obj('b', '6'), rv='10'))
    aresponses.add(host, PATH, 'GET', stream_response(event('ADDED', obj('c', '11')), gone()))
    aresponses.add(host, PATH, 'GET', listing(obj('b', '6'), obj('d', '60'), rv='70'))
    events = await take(watch(), 7)
    assert sorted(summary(events[3:5])) == [('DELETED', 'a'), ('DELETED', 'c')]
    assert summary(events) == [
        (None, 'a'), (None, 'b'), ('ADDED', 'c'),
        *summary(events[3:5]),
        (None, 'b'), (None, 'd'),
    ]
    deleted_a = next(e['object'] for e in events[3:5] if e['object']['metadata']['name'] == 'a')
    assert deleted_a['metadata'] == obj('a', '5')['metadata']
    assert deleted_a['kind'] == 'KopfExample'
    assert 'spec' not in deleted_a  # identity only


async def test_relist_reports_the_last_seen_identity_and_labels_only(aresponses, host, watch, stream_response):
    annotated = obj('a', '5', spec={'x': 1})
    annotated['metadata'].update(labels={'app': 'x'}, annotations={'big': 'y' * 1000}, finalizers=['f'],
                                 managedFields=[{'manager': 'm'}])
    modified = json.loads(json.dumps(annotated))
    modified['metadata'].update(resourceVersion='11', labels={'app': 'z'})
    aresponses.add(host, PATH, 'GET', listing(annotated, rv='10'))
    aresponses.add(host, PATH, 'GET', stream_response(event('MODIFIED', modified), gone()))
    aresponses.add(host, PATH, 'GET', listing(rv='70'))
    events = await take(watch(), 3)
    assert events[2]['type'] == 'DELETED'
    assert events[2]['object'] == {
        'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
        'metadata': {'name': 'a', 'namespace': 'ns1', 'uid': 'uid-a', 'resourceVersion': '11', 'labels': {'app': 'z'}},
    }


async def test_the_remembered_identity_keeps_the_first_strings_of_an_unchanged_object(
        aresponses, host, watch, stream_response):
    # Kept for the object's lifetime: equal strings of later events are not kept instead (they would pin memory).
    labelled = obj('a', '5', spec={'x': 1})
    labelled['metadata']['labels'] = {'app': 'x'}
    modified = json.loads(json.dumps(labelled))
    modified['metadata']['resourceVersion'] = '11'
    aresponses.add(host, PATH, 'GET', listing(labelled, rv='10'))
    aresponses.add(host, PATH, 'GET', stream_response(event('MODIFIED', modified), gone()))
    aresponses.add(host, PATH, 'GET', listing(rv='70'))
    events = await take(watch(), 3)
    listed, deleted = events[0]['object']['metadata'], events[2]['object']['metadata']
    assert deleted == {**listed, 'resourceVersion': '11'}
    assert deleted['uid'] is listed['uid'] and deleted['name'] is listed['name']
    assert deleted['labels'] is listed['labels']


async def test_relist_reports_objects_of_many_namespaces_and_without_uids(aresponses, host, watch, stream_response):
    objs = [obj(f'o{i}', str(i)) for i in range(5)]
    for i, o in enumerate(objs):
        o['metadata']['namespace'] = f'ns{i % 2}'
    del objs[0]['metadata']['uid']
    aresponses.add(host, PATH, 'GET', listing(*objs, rv='10'))
    aresponses.add(host, PATH, 'GET', status_response(aresponses, 410))
    aresponses.add(host, PATH, 'GET', listing(rv='70'))
    events = await take(watch(), 10)
    assert {e['type'] for e in events[5:]} == {'DELETED'}
    assert sorted((e['object']['metadata'] for e in events[5:]), key=lambda m: m['name']) == [
        o['metadata'] for o in objs]


async def test_relist_does_not_report_already_deleted_objects_again(aresponses, host, watch, stream_response):
    aresponses.add(host, PATH, 'GET', listing(obj('a', '5'), obj('b', '6'), rv='10'))
    aresponses.add(host, PATH, 'GET', stream_response(event('DELETED', obj('a', '11')), gone()))
    aresponses.add(host, PATH, 'GET', listing(obj('b', '6'), rv='70'))
    events = await take(watch(), 4)
    assert summary(events) == [(None, 'a'), (None, 'b'), ('DELETED', 'a'), (None, 'b')]


async def test_relist_reports_a_recreated_object_as_deleted_and_listed(aresponses, host, watch):
    aresponses.add(host, PATH, 'GET', listing(obj('a', '5', uid='uid-old'), rv='10'))
    aresponses.add(host, PATH, 'GET', status_response(aresponses, 410))
    aresponses.add(host, PATH, 'GET', listing(obj('a', '60', uid='uid-new'), rv='70'))
    events = await take(watch(), 3)
    assert [(e['type'], e['object']['metadata']['uid']) for e in events] == [
        (None, 'uid-old'), ('DELETED', 'uid-old'), (None, 'uid-new')]


# --- Failures and back-off ------------------------------------------------------------------------

async def test_5xx_backs_off_growing_and_retries_from_the_same_version(aresponses, host, watch, history,
                                                                       stream_response, caplog):
    aresponses.add(host, PATH, 'GET', listing(rv='10'))
    aresponses.add(host, PATH, 'GET', status_response(aresponses, 500, 'etcd is sad'))
    aresponses.add(host, PATH, 'GET', status_response(aresponses, 503, 'etcd is still sad'))
    aresponses.add(host, PATH, 'GET', stream_response(event('ADDED', obj('a', '11'))))
    with caplog.at_level(logging.WARNING):
        events = await take(watch(), 1)
    assert summary(events) == [('ADDED', 'a')]
    assert [q['resourceVersion'] for q in watch_queries(history)] == ['10', '10', '10']
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    # A 500 is the watch's own failure; a 503 says that the server is away: said once for all requests.
    assert len(messages) == 3, messages
    assert 'etcd is sad' in messages[0] and 'reconnecting in 0.01s' in messages[0]
    assert 'The Kubernetes API is unreachable: the watch of' in messages[1] and 'etcd is still sad' in messages[1]
    assert 'The Kubernetes API is reachable again' in messages[2]


async def test_connection_errors_are_retried(aresponses, host, watch, history, stream_response):
    aresponses.add(host, PATH, 'GET', listing(rv='10'))
    aresponses.add(host, PATH, 'GET', aresponses.RawResponse(b''), repeat=2)
    aresponses.add(host, PATH, 'GET', stream_response(event('ADDED', obj('a', '11'))))
    assert summary(await take(watch(), 1)) == [('ADDED', 'a')]
    assert len(list_requests(history)) == 1


async def test_broken_stream_is_retried_from_the_last_version(aresponses, host, watch, history, stream_response,
                                                              caplog):
    aresponses.add(host, PATH, 'GET', listing(rv='10'))
    line = json.dumps(event('ADDED', obj('a', '11'))).encode() + b'\n'
    aresponses.add(host, PATH, 'GET', aresponses.RawResponse(  # a chunked body cut off in the middle
        b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n'
        + f'{len(line):x}\r\n'.encode() + line + b'\r\n' + b'ff\r\n{"type": "MOD'))
    aresponses.add(host, PATH, 'GET', stream_response(event('MODIFIED', obj('a', '12'))))
    with caplog.at_level(logging.WARNING, logger='kopf._kube.watching'):
        events = await take(watch(), 2)
    assert summary(events) == [('ADDED', 'a'), ('MODIFIED', 'a')]
    assert [q['resourceVersion'] for q in watch_queries(history)] == ['10', '11']
    assert len(list_requests(history)) == 1
    assert any('reconnecting' in r.getMessage() for r in caplog.records if r.name == 'kopf._kube.watching')


async def test_list_failures_are_retried_too(aresponses, host, watch, history):
    aresponses.add(host, PATH, 'GET', status_response(aresponses, 500, 'not yet'), repeat=3)  # 1 + 2 retries
    aresponses.add(host, PATH, 'GET', listing(obj('a', '5'), rv='10'))
    assert summary(await take(watch(), 1)) == [(None, 'a')]
    assert len(list_requests(history)) == 4


async def test_forbidden_is_raised_not_retried(aresponses, host, watch, history):
    aresponses.add(host, PATH, 'GET', status_response(aresponses, 403, 'cannot list kopfexamples'))
    with pytest.raises(APIForbiddenError, match='cannot list kopfexamples'):
        await take(watch(), 1)
    assert len(history()) == 1


# --- Stopping -------------------------------------------------------------------------------------

def held_stream(*events, release: asyncio.Event):
    """A watch stream that sends the events, then stays open (silent) until released."""
    async def handler(request: web.BaseRequest) -> web.StreamResponse:
        response = web.StreamResponse()
        response.content_type = 'application/json'
        await response.prepare(request)
        for item in events:
            await response.write(json.dumps(item).encode() + b'\n')
        await release.wait()
        return response
    return handler


async def test_stop_ends_a_hanging_watch_promptly(aresponses, host, watch):
    release = asyncio.Event()  # the server never ends the stream while the watch runs
    aresponses.add(host, PATH, 'GET', listing(obj('a', '5'), rv='10'))
    aresponses.add(host, PATH, 'GET', held_stream(event('ADDED', obj('b', '11')), release=release))
    stop = asyncio.Event()
    events = []
    try:
        async with asyncio.timeout(GUARD):
            async for e in watch(stop=stop):
                events.append(e)
                if e['type'] == 'ADDED':
                    asyncio.get_running_loop().call_soon(stop.set)  # once the watch waits for more
    finally:
        release.set()
    assert summary(events) == [(None, 'a'), ('ADDED', 'b')]


async def test_stop_ends_the_back_off_sleep_promptly(aresponses, host, history, clock):
    aresponses.add(host, PATH, 'GET', listing(rv='10'))
    aresponses.add(host, PATH, 'GET', status_response(aresponses, 500))
    stop = asyncio.Event()
    settings = WatchingConfig(reconnect_backoff=60)
    async with APIContext(ConnectionInfo(server=f'http://{host}'), clock=clock) as context:
        watching = asyncio.create_task(_collect(infinite_watch(context=context, resource=KEX, namespace=None,
                                                               settings=settings, stop=stop)))
        await clock.until_sleeping()
        assert clock.pending == [60]
        stop.set()
        assert await asyncio.wait_for(watching, timeout=GUARD) == []
    assert clock.pending == []  # the back-off has ended early: the clock has not been moved
    assert len(history()) == 2


async def _collect(stream):
    return [e async for e in stream]


async def test_stop_set_in_advance_makes_no_requests(aresponses, watch, history):
    stop = asyncio.Event()
    stop.set()
    assert [e async for e in watch(stop=stop)] == []
    assert history() == []


async def test_stop_between_events_ends_after_the_current_one(aresponses, host, watch, stream_response):
    aresponses.add(host, PATH, 'GET', listing(obj('a', '5'), obj('b', '6'), rv='10'))
    stop = asyncio.Event()
    events = []
    async for e in watch(stop=stop):
        events.append(e)
        stop.set()
    assert summary(events) == [(None, 'a')]


# --- Dead connections, throttling, and the back-off reset -----------------------------------------

def messages(caplog):
    return [r.getMessage() for r in caplog.records if r.name == 'kopf._kube.watching']


async def test_the_backoff_resets_once_a_stream_is_established_even_without_events(
        aresponses, host, watch, stream_response, caplog):
    aresponses.add(host, PATH, 'GET', listing(rv='10'))
    aresponses.add(host, PATH, 'GET', status_response(aresponses, 500, 'one'))
    aresponses.add(host, PATH, 'GET', status_response(aresponses, 500, 'two'))
    aresponses.add(host, PATH, 'GET', stream_response())  # established (200), idle, then closed by the server
    aresponses.add(host, PATH, 'GET', status_response(aresponses, 500, 'three'))
    aresponses.add(host, PATH, 'GET', stream_response(event('ADDED', obj('a', '11'))))
    with caplog.at_level(logging.WARNING, logger='kopf._kube.watching'):
        assert summary(await take(watch(), 1)) == [('ADDED', 'a')]
    delays = [m.rsplit('reconnecting in ', 1)[1] for m in messages(caplog)]
    assert delays == ['0.01s.', '0.02s.', '0.01s.']


async def test_a_silent_stream_is_reported_and_reopened_from_the_last_version(
        aresponses, host, context, history, stream_response, caplog):
    aresponses.add(host, PATH, 'GET', listing(rv='10'))
    aresponses.add(host, PATH, 'GET', stream_response(event('ADDED', obj('a', '11')), hang=True))
    aresponses.add(host, PATH, 'GET', stream_response(event('MODIFIED', obj('a', '12'))))
    settings = WatchingConfig(reconnect_backoff=0.01, inactivity_timeout=0.3)
    started = time.monotonic()  # the silence is aiohttp's read timeout, on the event loop's time
    with caplog.at_level(logging.WARNING, logger='kopf._kube.watching'):
        events = await take(infinite_watch(context=context, resource=KEX, namespace=None, settings=settings), 2)
    assert summary(events) == [('ADDED', 'a'), ('MODIFIED', 'a')]
    assert time.monotonic() - started >= 0.3  # not reopened before the silence has lasted (a timer is never early)
    assert [q['resourceVersion'] for q in watch_queries(history)] == ['10', '11']
    assert messages(caplog) == [
        "The watch of kopfexamples.v1.kopf.dev has been silent for 0.3s, not even a bookmark: "
        "the connection is probably dead; reconnecting from resourceVersion '11' in 0.01s."]


async def test_a_watch_request_without_an_answer_is_reported(
        aresponses, host, history, stream_response, caplog, lapse):
    answer = asyncio.Event()  # the server answers only after the test: the client gives up by itself

    async def never_answers(request):
        await answer.wait()

    aresponses.add(host, PATH, 'GET', listing(rv='10'))
    aresponses.add(host, PATH, 'GET', never_answers)
    aresponses.add(host, PATH, 'GET', stream_response(event('ADDED', obj('a', '11'))))
    settings = WatchingConfig(reconnect_backoff=0.01, inactivity_timeout=None)
    try:
        async with APIContext(ConnectionInfo(server=f'http://{host}'), timeout=0.3, clock=lapse) as context:
            with caplog.at_level(logging.WARNING, logger='kopf._kube.watching'):
                events = await take(infinite_watch(context=context, resource=KEX, namespace=None,
                                                   settings=settings), 1)
    finally:
        answer.set()
    assert summary(events) == [('ADDED', 'a')]
    assert messages(caplog) == [
        "The watch of kopfexamples.v1.kopf.dev got no answer to the watch request in time: "
        "the connection is probably dead; reconnecting from resourceVersion '10' in 0.01s."]
    assert lapse.slept == [0.01]


async def test_a_throttled_watch_waits_as_the_server_asks(aresponses, host, history, stream_response, caplog, clock):
    aresponses.add(host, PATH, 'GET', listing(rv='10'))
    aresponses.add(host, PATH, 'GET', aresponses.Response(
        status=429, headers={'Retry-After': '1'}, content_type='application/json',
        text='{"kind": "Status", "code": 429, "reason": "TooManyRequests", "message": "slow down"}'))
    aresponses.add(host, PATH, 'GET', stream_response(event('ADDED', obj('a', '11'))))
    settings = WatchingConfig(reconnect_backoff=0.01)
    async with APIContext(ConnectionInfo(server=f'http://{host}'), clock=clock) as context:
        with caplog.at_level(logging.WARNING, logger='kopf._kube.watching'):
            watching = asyncio.create_task(take(infinite_watch(context=context, resource=KEX, namespace=None,
                                                               settings=settings), 1))
            await clock.until_sleeping()
            assert clock.pending == [1.0]
            assert len(watch_queries(history)) == 1  # not reconnected before the clock has moved
            clock.advance(1.0)
            assert summary(await asyncio.wait_for(watching, timeout=GUARD)) == [('ADDED', 'a')]
    assert messages(caplog) == ["The watch of kopfexamples.v1.kopf.dev is throttled by the server "
                                "(429 Too Many Requests); reconnecting in 1.00s."]
    assert [q['resourceVersion'] for q in watch_queries(history)] == ['10', '10']


async def test_the_listing_is_paginated(aresponses, host, context, history, stream_response):
    first = listing(obj('a', '5'), rv='10')
    first['metadata']['continue'] = 'next'
    aresponses.add(host, PATH, 'GET', first)
    aresponses.add(host, PATH, 'GET', listing(obj('b', '6'), rv='10'))
    aresponses.add(host, PATH, 'GET', stream_response(event('ADDED', obj('c', '11'))))
    settings = WatchingConfig(list_limit=1)
    events = await take(infinite_watch(context=context, resource=KEX, namespace=None, settings=settings), 3)
    assert summary(events) == [(None, 'a'), (None, 'b'), ('ADDED', 'c')]
    assert [dict(r.query) for r in list_requests(history)] == [{'limit': '1'}, {'limit': '1', 'continue': 'next'}]


# --- The watch's memory, packed while quiet -------------------------------------------------------

async def test_a_quiet_watch_packs_its_memory_and_still_reports_vanished_objects(monkeypatch):
    monkeypatch.setattr(dormancy, 'QUIET', 0)  # packed at the next turn of the event loop after the last use
    monkeypatch.setattr(dormancy, 'MIN_PACKED', 2)
    tracker = _Tracker(logging.getLogger('test'))
    labelled = obj('a', '5')
    labelled['metadata']['labels'] = {'app': 'x'}
    tracker.relisted([labelled, obj('b', '6'), obj('c', '7', spec={'x': 1})], '10')
    tracker.watched(event('MODIFIED', obj('b', '11')))
    assert tracker._known is not None
    await until(lambda: tracker._known.packed)

    events = tracker.relisted([obj('c', '12')], '20')
    assert summary(events) == [('DELETED', 'a'), ('DELETED', 'b'), (None, 'c')]
    assert events[0]['object'] == {'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
                                   'metadata': {**obj('a', '5')['metadata'], 'labels': {'app': 'x'}}}
    assert events[1]['object']['metadata'] == obj('b', '11')['metadata']


# --- Nonsense from the server (a proxy's page, cut-off JSON, missing versions) ----------------------

HTML = '<html><body><h1>Bad Gateway</h1><p>a proxy in between</p></body></html>'


@pytest.mark.parametrize('answer', [
    pytest.param(lambda ar: ar.Response(status=200, content_type='text/html', text=HTML), id='html'),
    pytest.param(lambda ar: ar.Response(status=200, content_type='application/json',
                                        text='{"kind": "KopfExampleList", "items": [{"metad'), id='truncated'),
    pytest.param(lambda ar: {'kind': 'KopfExampleList', 'metadata': {}, 'items': [obj('a', '5')]},
                 id='no-resource-version'),
])
async def test_a_nonsense_listing_is_one_warning_and_listed_again(aresponses, host, watch, history, stream_response,
                                                                 caplog, answer):
    aresponses.add(host, PATH, 'GET', answer(aresponses), repeat=1)
    aresponses.add(host, PATH, 'GET', listing(obj('a', '5'), rv='10'))
    aresponses.add(host, PATH, 'GET', stream_response(event('ADDED', obj('c', '11'))))
    with caplog.at_level(logging.WARNING):
        events = await take(watch(), 2)
    assert summary(events) == [(None, 'a'), ('ADDED', 'c')]
    assert watch_queries(history) == [{'watch': 'true', 'allowWatchBookmarks': 'true', 'resourceVersion': '10'}]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert 'Traceback' not in caplog.text


async def test_an_unreadable_line_is_watched_again_from_the_last_good_version(aresponses, host, watch, history,
                                                                               stream_response, caplog):
    aresponses.add(host, PATH, 'GET', listing(rv='10'))
    aresponses.add(host, PATH, 'GET', aresponses.Response(
        status=200, content_type='application/json',
        text=json.dumps(event('ADDED', obj('a', '11'))) + '\n{"type": "ADDED", "object": {"metad\n'
        + json.dumps(event('ADDED', obj('c', '13'))) + '\n'))
    aresponses.add(host, PATH, 'GET', stream_response(event('ADDED', obj('b', '12')), event('ADDED', obj('c', '13'))))
    with caplog.at_level(logging.WARNING):
        events = await take(watch(), 3)
    assert summary(events) == [('ADDED', 'a'), ('ADDED', 'b'), ('ADDED', 'c')]  # nothing lost, nothing skipped
    assert [q['resourceVersion'] for q in watch_queries(history)] == ['10', '11']
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and 'has sent an unreadable line' in warnings[0], warnings


# --- The first listing, page by page ----------------------------------------------------------------

async def test_the_first_listing_hands_out_each_page_before_requesting_the_next(aresponses, host, context,
                                                                               history, stream_response):
    first = listing(obj('a', '5'), rv='10')
    first['metadata']['continue'] = 'next'
    aresponses.add(host, PATH, 'GET', first)
    aresponses.add(host, PATH, 'GET', listing(obj('b', '6'), rv='10'))
    aresponses.add(host, PATH, 'GET', stream_response(event('ADDED', obj('c', '11'))))
    stream = infinite_watch(context=context, resource=KEX, namespace=None, settings=WatchingConfig(list_limit=1))
    async with contextlib.aclosing(stream):
        first_event = await asyncio.wait_for(anext(stream), timeout=5)
        requested_meanwhile = len(list_requests(history))  # while the consumer holds the first page's object
        rest = [await asyncio.wait_for(anext(stream), timeout=5) for _ in range(2)]
    assert summary([first_event, *rest]) == [(None, 'a'), (None, 'b'), ('ADDED', 'c')]
    assert requested_meanwhile == 1


async def test_an_expired_first_listing_reports_the_objects_of_its_void_pages_that_are_gone(
        aresponses, host, context, history, stream_response):
    first = listing(obj('a', '5'), obj('x', '6'), rv='10')
    first['metadata']['continue'] = 't1'
    aresponses.add(host, PATH, 'GET', first)
    aresponses.add(host, PATH, 'GET', status_response(aresponses, 410, 'The provided continue parameter is too old'))
    aresponses.add(host, PATH, 'GET', listing(obj('a', '5'), obj('b', '30'), rv='40'))
    aresponses.add(host, PATH, 'GET', stream_response(event('MODIFIED', obj('b', '41'))))
    settings = WatchingConfig(list_limit=2)
    events = await take(infinite_watch(context=context, resource=KEX, namespace=None, settings=settings), 6)
    # x was listed, then deleted while the listing started over: no watch will ever tell of it.
    assert summary(events) == [(None, 'a'), (None, 'x'), (None, 'a'), (None, 'b'), ('DELETED', 'x'),
                               ('MODIFIED', 'b')]
    assert events[4]['object']['metadata'] == obj('x', '6')['metadata']
    assert [q['resourceVersion'] for q in watch_queries(history)] == ['40']
