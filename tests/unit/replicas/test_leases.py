import datetime
import json

import pytest

from kopf._kube.errors import APIConflictError, APIForbiddenError
from kopf._replicas.leases import (
    Lease,
    LeaseSpec,
    create_lease,
    delete_lease,
    list_leases,
    microtime,
    parse_microtime,
    read_lease,
    replace_lease,
)

LEASES = '/apis/coordination.k8s.io/v1/namespaces/ns1/leases'


def lease_json(name='op', rv='10', holder='me', **extra):
    return {'apiVersion': 'coordination.k8s.io/v1', 'kind': 'Lease',
            'metadata': {'name': name, 'namespace': 'ns1', 'resourceVersion': rv, **extra},
            'spec': {'holderIdentity': holder, 'leaseDurationSeconds': 15, 'leaseTransitions': 2,
                     'renewTime': '2020-01-01T00:00:00.000000Z'}}


def seen(name='op', rv='10', holder='me'):
    return Lease.from_json(lease_json(name, rv, holder, labels={'kopf.dev/shards': 'op'},
                                      annotations={'kopf.dev/ring': 'a,b'}))


async def test_reading_parses_the_spec_and_metadata(context, aresponses, host):
    aresponses.add(host, f'{LEASES}/op', 'GET', lease_json(annotations={'x': 'y'}))
    lease = await read_lease(context=context, namespace='ns1', name='op')
    assert lease is not None
    assert (lease.name, lease.namespace, lease.resource_version) == ('op', 'ns1', '10')
    assert lease.spec.holder == 'me' and lease.spec.duration == 15 and lease.spec.transitions == 2
    assert lease.annotations == {'x': 'y'}


async def test_reading_a_missing_lease_gives_none(context, aresponses, host):
    aresponses.add(host, f'{LEASES}/op', 'GET', aresponses.Response(status=404, text='{}'))
    assert await read_lease(context=context, namespace='ns1', name='op') is None


async def test_listing_selects_by_labels(context, aresponses, host, history):
    aresponses.add(host, LEASES, 'GET', {'items': [lease_json('a'), lease_json('b')]}, match_querystring=False)
    listed = await list_leases(context=context, namespace='ns1', labels={'kopf.dev/shards': 'op'})
    assert [lease.name for lease in listed] == ['a', 'b']
    assert history(LEASES)[0].query['labelSelector'] == 'kopf.dev/shards=op'


async def test_creating_sends_the_whole_lease(context, aresponses, host):
    received = []

    async def handler(request):
        received.append(await request.json())
        return aresponses.Response(status=201, text=json.dumps(lease_json()), content_type='application/json')

    aresponses.add(host, LEASES, 'POST', handler)
    spec = LeaseSpec(holder='me', duration=15, acquired='t1', renewed='t1')
    lease = await create_lease(context=context, namespace='ns1', name='op', spec=spec,
                               labels={'l': 'v'}, annotations={'a': 'v'})
    assert lease.resource_version == '10'
    assert received[0]['metadata'] == {'name': 'op', 'namespace': 'ns1', 'labels': {'l': 'v'},
                                       'annotations': {'a': 'v'}}
    assert received[0]['spec'] == {'holderIdentity': 'me', 'leaseDurationSeconds': 15, 'acquireTime': 't1',
                                   'renewTime': 't1', 'leaseTransitions': 0}


async def test_creating_an_existing_lease_is_a_conflict(context, aresponses, host):
    aresponses.add(host, LEASES, 'POST', aresponses.Response(status=409, text='{"code": 409}'))
    with pytest.raises(APIConflictError):
        await create_lease(context=context, namespace='ns1', name='op', spec=LeaseSpec(holder='me'))


async def test_replacing_sends_the_seen_version_and_keeps_labels_unless_given(context, aresponses, host):
    received = []

    async def handler(request):
        received.append(await request.json())
        return aresponses.Response(status=200, text=json.dumps(lease_json(rv='11')), content_type='application/json')

    aresponses.add(host, f'{LEASES}/op', 'PUT', handler)
    renewed = await replace_lease(lease=seen(), context=context, spec=LeaseSpec(holder='me', duration=15))
    assert renewed.resource_version == '11'
    meta = received[0]['metadata']
    assert meta['resourceVersion'] == '10'
    assert meta['labels'] == {'kopf.dev/shards': 'op'} and meta['annotations'] == {'kopf.dev/ring': 'a,b'}


async def test_replacing_without_a_holder_releases_the_lease(context, aresponses, host):
    received = []

    async def handler(request):
        received.append(await request.json())
        return aresponses.Response(status=200, text=json.dumps(lease_json(rv='11')), content_type='application/json')

    aresponses.add(host, f'{LEASES}/op', 'PUT', handler)
    await replace_lease(lease=seen(), context=context, spec=LeaseSpec(holder=None, duration=1))
    assert 'holderIdentity' not in received[0]['spec']


async def test_replacing_a_changed_lease_is_a_conflict(context, aresponses, host):
    aresponses.add(host, f'{LEASES}/op', 'PUT', aresponses.Response(status=409, text='{"code": 409}'))
    with pytest.raises(APIConflictError):
        await replace_lease(lease=seen(), context=context, spec=LeaseSpec(holder='me'))


async def test_deleting_is_conditional_on_the_seen_version(context, aresponses, host):
    received = []

    async def handler(request):
        received.append(await request.json())
        return aresponses.Response(status=200, text='{}', content_type='application/json')

    aresponses.add(host, f'{LEASES}/op', 'DELETE', handler)
    assert await delete_lease(lease=seen(), context=context) is True
    assert received[0]['preconditions'] == {'resourceVersion': '10'}


async def test_deleting_a_gone_lease_is_not_an_error(context, aresponses, host):
    aresponses.add(host, f'{LEASES}/op', 'DELETE', aresponses.Response(status=404, text='{}'))
    assert await delete_lease(lease=seen(), context=context) is False


async def test_forbidden_requests_raise_for_the_caller_to_name_the_verb(context, aresponses, host):
    aresponses.add(host, LEASES, 'GET', aresponses.Response(status=403, text='{"code": 403}'),
                   match_querystring=False)
    with pytest.raises(APIForbiddenError):
        await list_leases(context=context, namespace='ns1', labels={'a': 'b'})


def test_times_are_written_and_read_in_the_microtime_format_of_lease_fields():
    moment = datetime.datetime(2020, 1, 2, 3, 4, 5, 678901, tzinfo=datetime.timezone(datetime.timedelta(hours=2)))
    assert microtime(moment) == '2020-01-02T01:04:05.678901Z'
    assert parse_microtime('2020-01-02T01:04:05.678901Z') == moment
    naive = parse_microtime('2020-01-02T01:04:05')
    assert naive == datetime.datetime(2020, 1, 2, 1, 4, 5, tzinfo=datetime.timezone.utc)
    assert parse_microtime(None) is None and parse_microtime('') is None and parse_microtime('yesterday') is None
