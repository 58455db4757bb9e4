import json

import pytest
from aiohttp import web

from kopf._admission.configurations import apply_configuration, delete_configuration
from kopf._kube.errors import APIForbiddenError
from kopf._structs.reviews import WebhookType

VALIDATING = '/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations'
MUTATING = '/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations'
WEBHOOKS = [{'name': 'check.auto.kopf.dev', 'clientConfig': {'url': 'https://127.0.0.1:1/check'}}]
NOT_FOUND = '{"kind": "Status", "code": 404, "reason": "NotFound"}'


def recording(status=200, body='{}'):
    received = []

    async def handler(request: web.Request) -> web.Response:
        received.append((request.method, request.path, request.headers.get('Content-Type'), await request.text()))
        return web.Response(status=status, text=body, content_type='application/json')

    return handler, received


async def test_an_existing_configuration_gets_its_webhooks_replaced(aresponses, host, context):
    handler, received = recording()
    aresponses.add(host, f'{VALIDATING}/auto.kopf.dev', 'PATCH', handler)
    await apply_configuration(context=context, type=WebhookType.VALIDATING, name='auto.kopf.dev', webhooks=WEBHOOKS)
    (_, _, content_type, body), = received
    assert content_type == 'application/merge-patch+json'
    assert json.loads(body) == {'webhooks': WEBHOOKS}


async def test_a_missing_configuration_is_created(aresponses, host, context):
    patched, patches = recording(404, NOT_FOUND)
    created, creations = recording(201)
    aresponses.add(host, f'{MUTATING}/auto.kopf.dev', 'PATCH', patched)
    aresponses.add(host, MUTATING, 'POST', created)
    await apply_configuration(context=context, type=WebhookType.MUTATING, name='auto.kopf.dev', webhooks=WEBHOOKS)
    assert len(patches) == 1
    (_, _, _, body), = creations
    assert json.loads(body) == {'apiVersion': 'admissionregistration.k8s.io/v1',
                                'kind': 'MutatingWebhookConfiguration',
                                'metadata': {'name': 'auto.kopf.dev'}, 'webhooks': WEBHOOKS}


async def test_a_configuration_created_meanwhile_is_patched(aresponses, host, context):
    missing, _ = recording(404, NOT_FOUND)
    conflict, _ = recording(409, '{"kind": "Status", "code": 409, "reason": "AlreadyExists"}')
    patched, patches = recording()
    aresponses.add(host, f'{VALIDATING}/auto.kopf.dev', 'PATCH', missing)
    aresponses.add(host, VALIDATING, 'POST', conflict)
    aresponses.add(host, f'{VALIDATING}/auto.kopf.dev', 'PATCH', patched)
    await apply_configuration(context=context, type=WebhookType.VALIDATING, name='auto.kopf.dev', webhooks=WEBHOOKS)
    assert [json.loads(body) for *_, body in patches] == [{'webhooks': WEBHOOKS}]


async def test_no_webhooks_delete_the_configuration(aresponses, host, context):
    deleted, deletions = recording()
    aresponses.add(host, f'{VALIDATING}/auto.kopf.dev', 'DELETE', deleted)
    await apply_configuration(context=context, type=WebhookType.VALIDATING, name='auto.kopf.dev', webhooks=[])
    assert [(method, path) for method, path, *_ in deletions] == [('DELETE', f'{VALIDATING}/auto.kopf.dev')]


async def test_deleting_a_missing_configuration_is_fine(aresponses, host, context):
    aresponses.add(host, f'{MUTATING}/auto.kopf.dev', 'DELETE', aresponses.Response(status=404, text=NOT_FOUND))
    assert await delete_configuration(context=context, type=WebhookType.MUTATING, name='auto.kopf.dev') is False


async def test_forbidden_writes_are_raised(aresponses, host, context):
    aresponses.add(host, f'{VALIDATING}/auto.kopf.dev', 'PATCH',
                   aresponses.Response(status=403, text='{"kind": "Status", "code": 403, "message": "no"}'))
    with pytest.raises(APIForbiddenError):
        await apply_configuration(context=context, type=WebhookType.VALIDATING, name='auto.kopf.dev',
                                  webhooks=WEBHOOKS)
