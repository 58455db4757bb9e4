import pytest

from kopf.clients.errors import APIForbiddenError
from kopf.clients.fetching import list_objs, read_obj
from kopf.structs.resources import Resource

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
