import datetime
import logging
import re

from kopf._kube.events import post_event

REF = {'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample', 'name': 'kex1', 'namespace': 'ns1', 'uid': 'uid-1'}


async def test_event_body(context, aresponses, host, history, lapse):
    aresponses.add(host, '/api/v1/namespaces/ns1/events', 'POST', {})
    lapse.advance(12.5)  # the context's clock: the event happens at its time
    await post_event(context=context, ref=REF, type='Normal', reason='Logging', message='Hello.')

    [request] = history()
    assert request.method == 'POST'
    assert request.path == '/api/v1/namespaces/ns1/events'
    body = await request.json()
    assert body['apiVersion'] == 'v1'
    assert body['kind'] == 'Event'
    assert body['metadata']['namespace'] == 'ns1'
    assert body['metadata'] == {'namespace': 'ns1', 'generateName': 'kopf-event-'}  # as Kopf names them
    assert body['involvedObject'] == REF
    assert body['type'] == 'Normal'
    assert body['reason'] == 'Logging'
    assert body['message'] == 'Hello.'
    assert body['source'] == {'component': 'kopf'}
    assert body['reportingComponent'] == 'kopf'
    assert body['count'] == 1
    assert body['firstTimestamp'] == body['lastTimestamp']
    assert re.fullmatch(r'\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ', body['firstTimestamp'])
    stamp = datetime.datetime.strptime(body['firstTimestamp'], '%Y-%m-%dT%H:%M:%SZ').replace(
        tzinfo=datetime.timezone.utc)
    assert stamp == lapse.now().replace(microsecond=0)


async def test_the_reporter_and_the_name_prefix_are_configurable(context, aresponses, host, history):
    aresponses.add(host, '/api/v1/namespaces/ns1/events', 'POST', {})
    await post_event(context=context, ref=REF, type='Normal', reason='R', message='one', component='my-operator',
                     instance='pod-1', name_prefix='my-event-')
    body = await history()[0].json()
    assert body['metadata']['generateName'] == 'my-event-'
    assert body['source'] == {'component': 'my-operator'}
    assert (body['reportingComponent'], body['reportingInstance']) == ('my-operator', 'pod-1')


async def test_cluster_scoped_objects_get_events_in_the_default_namespace(context, aresponses, host, history):
    aresponses.add(host, '/api/v1/namespaces/default/events', 'POST', {})
    ref = {'apiVersion': 'v1', 'kind': 'Namespace', 'name': 'ns1', 'uid': 'uid-ns'}
    await post_event(context=context, ref=ref, type='Warning', reason='Failed', message='Oops.')
    [request] = history()
    body = await request.json()
    assert request.path == '/api/v1/namespaces/default/events'
    assert body['metadata']['namespace'] == 'default'
    assert body['involvedObject'] == ref
    assert body['type'] == 'Warning'


async def test_long_messages_are_cut_to_1024_characters(context, aresponses, host, history):
    aresponses.add(host, '/api/v1/namespaces/ns1/events', 'POST', {})
    await post_event(context=context, ref=REF, type='Normal', reason='R', message='x' * 5000)
    body = await history()[0].json()
    assert len(body['message']) == 1024
    assert body['message'].startswith('x' * 1000)


async def test_short_messages_are_kept_whole(context, aresponses, host, history):
    aresponses.add(host, '/api/v1/namespaces/ns1/events', 'POST', {})
    await post_event(context=context, ref=REF, type='Normal', reason='R', message='y' * 1024)
    assert (await history()[0].json())['message'] == 'y' * 1024


async def test_failures_are_logged_not_raised(context, aresponses, host, caplog):
    aresponses.add(host, '/api/v1/namespaces/ns1/events', 'POST',
                   aresponses.Response(status=403, text='{"kind": "Status", "message": "events are forbidden"}'))
    with caplog.at_level(logging.WARNING, logger='kopf._kube.events'):
        await post_event(context=context, ref=REF, type='Normal', reason='R', message='Hello.')
    [record] = [r for r in caplog.records if r.name == 'kopf._kube.events']
    assert record.levelno == logging.WARNING
    assert 'events are forbidden' in record.getMessage()
    assert 'kex1' in record.getMessage()


async def test_server_errors_are_logged_not_raised(context, aresponses, host, caplog):
    aresponses.add(host, '/api/v1/namespaces/ns1/events', 'POST',
                   aresponses.Response(status=500, text='{}'), repeat=aresponses.INFINITY)
    await post_event(context=context, ref=REF, type='Normal', reason='R', message='Hello.')
    assert any(r.name == 'kopf._kube.events' for r in caplog.records)


async def test_connection_errors_are_logged_not_raised(context, aresponses, host, caplog):
    aresponses.add(host, '/api/v1/namespaces/ns1/events', 'POST',
                   aresponses.RawResponse(b''), repeat=aresponses.INFINITY)
    logger = logging.getLogger('kopf.test.events')
    await post_event(context=context, ref=REF, type='Normal', reason='R', message='Hello.', logger=logger)
    assert any(r.name == 'kopf.test.events' and r.levelno == logging.WARNING for r in caplog.records)
