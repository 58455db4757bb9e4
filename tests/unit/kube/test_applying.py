"""Server-side apply (``kopf.apply``): what is sent, with which owner, and a conflict in words."""
import asyncio
import contextvars
import json

import pytest
from aiohttp import web

import kopf
from kopf._kube import applying
from kopf._kube.applying import ApplyConflictError, apply, apply_async, prepare
from kopf._structs import hierarchies

CHILD = '/api/v1/namespaces/ns/configmaps/child'
OWNER = {'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
         'metadata': {'name': 'owner', 'namespace': 'ns', 'uid': 'uid-owner'}}
DESIRED = {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': 'child'}, 'data': {'a': '1'}}
REFERENCE = {'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample', 'name': 'owner', 'uid': 'uid-owner',
             'controller': True, 'blockOwnerDeletion': True}
CORE = {'kind': 'APIResourceList', 'groupVersion': 'v1', 'resources': [
    {'name': 'configmaps', 'singularName': 'configmap', 'namespaced': True, 'kind': 'ConfigMap', 'verbs': []}]}
CONFLICT = {
    'kind': 'Status', 'apiVersion': 'v1', 'status': 'Failure', 'reason': 'Conflict', 'code': 409,
    'message': 'Apply failed with 2 conflicts: conflicts with "kubectl-edit" using v1:\n- .data.a\n- .data.b',
    'details': {'name': 'child', 'kind': 'configmaps', 'causes': [
        {'reason': 'FieldManagerConflict', 'message': 'conflict with "kubectl-edit" using v1', 'field': '.data.a'},
        {'reason': 'FieldManagerConflict', 'message': 'conflict with "kubectl-edit" using v1', 'field': '.data.b'},
    ]}}


@pytest.fixture()
def server(aresponses, host):
    """The discovery of the core API, and an apply endpoint that answers with what it got (or a conflict)."""
    state = {'conflict': False, 'received': []}
    aresponses.add(host, '/api/v1', 'GET', web.json_response(CORE), repeat=aresponses.INFINITY)

    async def applied(request):
        state['received'].append((request.headers['Content-Type'], dict(request.query), await request.json()))
        if state['conflict']:
            return web.json_response(CONFLICT, status=409)
        obj = await request.json()
        obj['metadata'].update(uid='uid-child', resourceVersion='42')
        return web.json_response(obj)

    aresponses.add(host, CHILD, 'PATCH', applied, repeat=aresponses.INFINITY)
    return state


async def test_the_desired_object_is_applied_owned_by_the_handled_object(context, server):
    token = hierarchies.owner_var.set(OWNER)
    try:
        result = await apply_async(DESIRED, context=context)
    finally:
        hierarchies.owner_var.reset(token)
    (content_type, query, sent), = server['received']
    assert content_type == 'application/apply-patch+yaml'
    assert query == {'fieldManager': 'kopf'}
    assert sent == {**DESIRED, 'metadata': {'name': 'child', 'namespace': 'ns', 'ownerReferences': [REFERENCE]}}
    assert result['metadata']['resourceVersion'] == '42'
    assert DESIRED['metadata'] == {'name': 'child'}  # the caller's object stays as it was


async def test_the_field_manager_and_forcing_are_as_told(context, server):
    await apply_async({**DESIRED, 'metadata': {'name': 'child', 'namespace': 'ns'}}, owner=None,
                      field_manager='my-operator', force=True, context=context)
    (_, query, sent), = server['received']
    assert query == {'fieldManager': 'my-operator', 'force': 'true'}
    assert 'ownerReferences' not in sent['metadata']


async def test_a_conflict_names_the_fields_and_the_other_manager(context, server):
    server['conflict'] = True
    with pytest.raises(ApplyConflictError) as info:
        await apply_async(DESIRED, owner=OWNER, context=context)
    assert info.value.fields == ['.data.a', '.data.b'] and info.value.managers == ['kubectl-edit']
    assert str(info.value).startswith(
        "Applying ConfigMap ns/child as the field manager 'kopf' conflicts with 'kubectl-edit' on .data.a, .data.b: "
        "leave these fields out of the desired object, or pass force=True to take them over.")
    assert isinstance(info.value, kopf.ApplyConflictError)


async def test_the_applied_object_is_told_to_the_listener(context, server):
    heard = []
    token = applying.listener_var.set(lambda resource, obj: heard.append((resource.plural, obj['metadata'])))
    try:
        await apply_async(DESIRED, owner=OWNER, context=context)
    finally:
        applying.listener_var.reset(token)
    assert heard == [('configmaps', {'name': 'child', 'namespace': 'ns', 'uid': 'uid-child', 'resourceVersion': '42',
                                     'ownerReferences': [REFERENCE]})]


async def test_the_blocking_form_applies_through_the_operators_loop_from_a_handlers_thread(context, server):
    loop = asyncio.get_running_loop()
    results = []

    def handler():
        hierarchies.owner_var.set(OWNER)
        results.append(apply(DESIRED, timeout=10))

    def in_thread():
        applying.context_var.set(context)
        applying.loop_var.set(loop)
        handler()

    await loop.run_in_executor(None, contextvars.Context().run, in_thread)  # a thread with a context of its own
    assert results and results[0]['metadata']['ownerReferences'] == [REFERENCE]


async def test_the_blocking_form_in_the_event_loop_says_to_await_the_async_one():
    with pytest.raises(RuntimeError, match=r"in async handlers, use `await kopf.apply_async\(...\)` instead"):
        apply(DESIRED, owner=OWNER)


def test_the_blocking_form_outside_an_operator_says_what_it_needs():
    with pytest.raises(RuntimeError, match="needs the operator's API session: call it from a handler"):
        apply(DESIRED, owner=OWNER)


async def test_the_async_form_outside_an_operator_says_what_it_needs():
    with pytest.raises(RuntimeError, match="needs the operator's API session"):
        await apply_async(DESIRED, owner=OWNER)


def test_without_a_handled_object_the_owner_must_be_given():
    with pytest.raises(LookupError, match=r"pass owner=\.\.\. \(or owner=None\)"):
        applying._owner(applying.HANDLED)


@pytest.mark.parametrize('body, message', [
    ({'kind': 'ConfigMap', 'metadata': {'name': 'x'}}, "needs apiVersion, kind and metadata.name"),
    ({'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'generateName': 'x-'}}, "cannot generate names"),
    ({**DESIRED, 'metadata': {'name': 'x', 'namespace': 'other'}}, "cannot be owned by an object in the namespace"),
])
def test_a_desired_object_that_cannot_be_applied_is_refused_in_words(body, message):
    with pytest.raises(ValueError, match=message):
        prepare(body, owner=OWNER)


def test_server_kept_fields_are_not_sent():
    prepared = prepare({**DESIRED, 'metadata': {'name': 'child', 'managedFields': [{}]}}, owner=None)
    assert prepared['metadata'] == {'name': 'child'}


def test_the_sent_body_is_json():
    assert json.loads(json.dumps(prepare(DESIRED, owner=OWNER)))['metadata']['namespace'] == 'ns'
