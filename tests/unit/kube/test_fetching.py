import asyncio
import gc
import json
import logging

import pytest
from aiohttp import web

from kopf._kube import fetching
from kopf._kube.errors import APIForbiddenError, APIGoneError
from kopf._kube.fetching import list_objs, read_obj
from kopf._structs.resources import Resource
from tests.unit.conftest import until

KEX = Resource('kopf.dev', 'v1', 'kopfexamples', 'KopfExample', namespaced=True)
NAMESPACES = Resource('', 'v1', 'namespaces', 'Namespace', namespaced=False)


def listing(*names, resource_version='100'):
    return {'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExampleList',
            'metadata': {'resourceVersion': resource_version},
            'items': [{'metadata': {'name': name, 'namespace': 'ns1'}} for name in names]}


async def test_list_in_a_namespace(context, aresponses, host, history):
    aresponses.add(host, '/apis/kopf.dev/v1/namespaces/ns1/kopfexamples', 'GET', listing('a', 'b'))
    items, resource_version = await list_objs(context=context, resource=KEX, namespace='ns1')
    assert [item['metadata']['name'] for item in items] == ['a', 'b']
    assert resource_version == '100'
    assert history()[0].method == 'GET'


async def test_list_cluster_wide(context, aresponses, host):
    aresponses.add(host, '/apis/kopf.dev/v1/kopfexamples', 'GET', listing('a', resource_version='7'))
    items, resource_version = await list_objs(context=context, resource=KEX, namespace=None)
    assert len(items) == 1
    assert resource_version == '7'


async def test_listed_items_get_their_api_version_and_kind(context, aresponses, host):
    aresponses.add(host, '/apis/kopf.dev/v1/kopfexamples', 'GET', listing('a'))
    items, _ = await list_objs(context=context, resource=KEX, namespace=None)
    assert items[0]['apiVersion'] == 'kopf.dev/v1'
    assert items[0]['kind'] == 'KopfExample'


async def test_list_of_nothing(context, aresponses, host):
    aresponses.add(host, '/api/v1/namespaces', 'GET', {'metadata': {'resourceVersion': '5'}, 'items': None})
    assert await list_objs(context=context, resource=NAMESPACES, namespace=None) == ([], '5')


async def test_list_errors_are_raised(context, aresponses, host):
    aresponses.add(host, '/apis/kopf.dev/v1/kopfexamples', 'GET', aresponses.Response(status=403, text='{}'))
    with pytest.raises(APIForbiddenError):
        await list_objs(context=context, resource=KEX, namespace=None)


async def test_read_an_object(context, aresponses, host):
    aresponses.add(host, '/apis/kopf.dev/v1/namespaces/ns1/kopfexamples/kex1', 'GET',
                   {'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample', 'metadata': {'name': 'kex1'}, 'spec': {}})
    obj = await read_obj(context=context, resource=KEX, namespace='ns1', name='kex1')
    assert obj == {'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample', 'metadata': {'name': 'kex1'}, 'spec': {}}


async def test_read_a_cluster_scoped_object(context, aresponses, host):
    aresponses.add(host, '/api/v1/namespaces/ns1', 'GET', {'metadata': {'name': 'ns1'}})
    obj = await read_obj(context=context, resource=NAMESPACES, namespace=None, name='ns1')
    assert obj is not None
    assert obj['metadata'] == {'name': 'ns1'}
    assert obj['kind'] == 'Namespace'


async def test_read_a_missing_object_gives_none(context, aresponses, host):
    aresponses.add(host, '/apis/kopf.dev/v1/namespaces/ns1/kopfexamples/gone', 'GET',
                   aresponses.Response(status=404, text='{"kind": "Status", "code": 404}'))
    assert await read_obj(context=context, resource=KEX, namespace='ns1', name='gone') is None


# --- Paginated listing ------------------------------------------------------------------------------

def page(*names, token=None, resource_version='100'):
    document = listing(*names, resource_version=resource_version)
    if token is not None:
        document['metadata']['continue'] = token
    return document


def expired():
    return {'kind': 'Status', 'code': 410, 'reason': 'Expired',
            'message': 'The provided continue parameter is too old to display a consistent list result.'}


async def test_pages_are_listed_with_limit_and_continue(context, aresponses, host, history):
    path = '/apis/kopf.dev/v1/kopfexamples'
    aresponses.add(host, path, 'GET', page('a', 'b', token='t1'))
    aresponses.add(host, path, 'GET', page('c', 'd', token='t2'))
    aresponses.add(host, path, 'GET', page('e'))
    items, resource_version = await list_objs(context=context, resource=KEX, namespace=None, limit=2)
    assert [item['metadata']['name'] for item in items] == ['a', 'b', 'c', 'd', 'e']
    assert resource_version == '100'
    assert [dict(r.query) for r in history()] == [{'limit': '2'}, {'limit': '2', 'continue': 't1'},
                                                 {'limit': '2', 'continue': 't2'}]


async def test_the_next_page_is_requested_while_the_caller_handles_this_one(context, aresponses, host, history):
    path = '/apis/kopf.dev/v1/kopfexamples'
    aresponses.add(host, path, 'GET', page('a', token='t1'))
    aresponses.add(host, path, 'GET', page('b', token='t2'))
    aresponses.add(host, path, 'GET', page('c'))
    pages = fetching.list_pages(context=context, resource=KEX, namespace=None, limit=1)
    first = await anext(pages)
    assert [item['metadata']['name'] for item in first.items] == ['a']
    await until(lambda: len(history()) == 2)  # not asked for yet: requested while 'a' is handled
    second = await anext(pages)
    assert [item['metadata']['name'] for item in second.items] == ['b']
    await until(lambda: len(history()) == 3)
    last = await anext(pages)
    assert last.resource_version == '100'
    assert [r.query.get('continue') for r in history()] == [None, 't1', 't2']
    await pages.aclose()


def requested_ahead():
    return [task for task in asyncio.all_tasks() if task.get_name().startswith('listing of')]


async def test_a_listing_that_is_left_cancels_the_page_requested_ahead(context, aresponses, host):
    path = '/apis/kopf.dev/v1/kopfexamples'
    release = asyncio.Event()

    async def slow(request):
        await release.wait()
        return web.json_response(page('b'))
    aresponses.add(host, path, 'GET', page('a', token='t1'))
    aresponses.add(host, path, 'GET', slow)
    pages = fetching.list_pages(context=context, resource=KEX, namespace=None, limit=1)
    await anext(pages)
    [ahead] = requested_ahead()
    await pages.aclose()
    await until(ahead.done)
    assert ahead.cancelled()
    release.set()


async def test_a_failure_of_a_page_that_nobody_asks_for_goes_unreported(context, aresponses, host, caplog):
    path = '/apis/kopf.dev/v1/kopfexamples'
    aresponses.add(host, path, 'GET', page('a', token='t1'))
    aresponses.add(host, path, 'GET', aresponses.Response(status=410, content_type='application/json',
                                                          text=json.dumps(expired())))
    pages = fetching.list_pages(context=context, resource=KEX, namespace=None, limit=1)
    await anext(pages)
    [ahead] = requested_ahead()
    await until(ahead.done)  # failed (410) before the caller asked for it; the caller leaves
    await pages.aclose()
    del ahead
    with caplog.at_level(logging.ERROR, logger='asyncio'):
        gc.collect()
    assert 'never retrieved' not in caplog.text


async def test_without_a_limit_there_is_one_request(context, aresponses, host, history):
    aresponses.add(host, '/apis/kopf.dev/v1/kopfexamples', 'GET', page('a'))
    await list_objs(context=context, resource=KEX, namespace=None)
    assert [dict(r.query) for r in history()] == [{}]


async def test_an_expired_continue_token_starts_a_fresh_listing(context, aresponses, host, history, caplog):
    path = '/apis/kopf.dev/v1/kopfexamples'
    aresponses.add(host, path, 'GET', page('a', 'b', token='t1', resource_version='100'))
    aresponses.add(host, path, 'GET', aresponses.Response(status=410, content_type='application/json',
                                                          text=json.dumps(expired())))
    aresponses.add(host, path, 'GET', page('a', 'c', token='t9', resource_version='200'))
    aresponses.add(host, path, 'GET', page('d', resource_version='200'))
    with caplog.at_level(logging.INFO, logger='kopf._kube.fetching'):
        items, resource_version = await list_objs(context=context, resource=KEX, namespace=None, limit=2)
    assert [item['metadata']['name'] for item in items] == ['a', 'c', 'd']  # nothing from the stale pages
    assert resource_version == '200'
    assert [r.query.get('continue') for r in history()] == [None, 't1', None, 't9']
    assert 'continue token of the listing of kopfexamples.v1.kopf.dev has expired after 2 objects' in caplog.text


async def test_a_first_page_410_is_raised(context, aresponses, host):
    aresponses.add(host, '/apis/kopf.dev/v1/kopfexamples', 'GET',
                   aresponses.Response(status=410, content_type='application/json', text=json.dumps(expired())))
    with pytest.raises(APIGoneError):
        await list_objs(context=context, resource=KEX, namespace=None, limit=2)


async def test_endlessly_expiring_tokens_give_up(context, aresponses, host):
    path = '/apis/kopf.dev/v1/kopfexamples'
    for _ in range(fetching.MAX_LIST_RESTARTS + 1):
        aresponses.add(host, path, 'GET', page('a', token='t'))
        aresponses.add(host, path, 'GET', aresponses.Response(status=410, content_type='application/json',
                                                              text=json.dumps(expired())))
    with pytest.raises(APIGoneError):
        await list_objs(context=context, resource=KEX, namespace=None, limit=1)


async def test_a_throttled_page_is_waited_for(context, aresponses, host, history, lapse):
    path = '/apis/kopf.dev/v1/kopfexamples'
    aresponses.add(host, path, 'GET', page('a', token='t1'))
    aresponses.add(host, path, 'GET', aresponses.Response(
        status=429, headers={'Retry-After': '3'}, content_type='application/json',
        text='{"kind": "Status", "code": 429, "reason": "TooManyRequests"}'))
    aresponses.add(host, path, 'GET', page('b'))
    items, _ = await list_objs(context=context, resource=KEX, namespace=None, limit=1)
    assert [item['metadata']['name'] for item in items] == ['a', 'b']
    assert lapse.slept == [3.0]
    assert [r.query.get('continue') for r in history()] == [None, 't1', 't1']
