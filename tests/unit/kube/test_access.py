import json

from kopf._kube.access import REVIEWS, denied_verbs, is_allowed


def review_handler(aresponses, received, allowed_verbs):
    async def handler(request):
        body = await request.json()
        received.append(body)
        verb = body['spec']['resourceAttributes']['verb']
        answer = {**body, 'status': {'allowed': verb in allowed_verbs}}
        return aresponses.Response(status=201, text=json.dumps(answer), content_type='application/json')
    return handler


async def test_a_review_asks_about_the_verb_resource_and_namespace(context, aresponses, host):
    received = []
    aresponses.add(host, REVIEWS, 'POST', review_handler(aresponses, received, {'get'}))
    assert await is_allowed(context=context, verb='get', group='coordination.k8s.io', resource='leases',
                            namespace='ns1') is True
    assert received[0]['spec']['resourceAttributes'] == {
        'verb': 'get', 'group': 'coordination.k8s.io', 'resource': 'leases', 'namespace': 'ns1'}


async def test_denied_verbs_are_listed_in_order(context, aresponses, host):
    received = []
    for _ in range(4):
        aresponses.add(host, REVIEWS, 'POST', review_handler(aresponses, received, {'list', 'create'}))
    denied = await denied_verbs(context=context, verbs=['list', 'create', 'update', 'delete'],
                                group='coordination.k8s.io', resource='leases', namespace='ns1')
    assert denied == ['update', 'delete']


async def test_a_server_that_cannot_tell_denies_nothing(context, aresponses, host):
    aresponses.add(host, REVIEWS, 'POST', aresponses.Response(status=403, text='{"code": 403}'))
    assert await is_allowed(context=context, verb='get', group='g', resource='r', namespace=None) is None
    aresponses.add(host, REVIEWS, 'POST', aresponses.Response(status=403, text='{"code": 403}'))
    assert await denied_verbs(context=context, verbs=['get'], group='g', resource='r', namespace=None) == []
