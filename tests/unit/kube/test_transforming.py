"""
The transformation functions of a patch (``patch.fns``): applied to the freshest body, sent as a JSON patch.

The mock API server applies JSON patches as Kubernetes does, including the
``test`` of the ``resourceVersion``, which fails (422) when the object has
changed meanwhile.
"""
import copy
import json

import jsonpatch
import pytest
from aiohttp import web

from kopf._kube.errors import APIUnprocessableError
from kopf._kube.patching import TransformationConflict, TransformationError, patch_obj, transform_obj
from kopf._structs.patches import Patch, apply
from kopf._structs.resources import Resource

WITH_STATUS = Resource('kopf.dev', 'v1', 'kopfexamples', 'KopfExample', namespaced=True,
                       subresources=frozenset({'status'}))
WITHOUT_STATUS = Resource('kopf.dev', 'v1', 'kopfexamples', 'KopfExample', namespaced=True)
MAIN = '/apis/kopf.dev/v1/namespaces/ns1/kopfexamples/kex1'
STATUS = MAIN + '/status'
JSON_PATCH = 'application/json-patch+json'


class FakeObject:
    """One object on a mock API server; ``changes`` are other clients' changes that land before our requests."""

    def __init__(self, **raw):
        self.raw = {'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
                    'metadata': {'name': 'kex1', 'namespace': 'ns1', 'resourceVersion': '1',
                                 'finalizers': ['someone.else/finalizer']},
                    'spec': {'items': ['a', 'b']}, **raw}
        self.changes = []
        self.requests = []

    def _bump(self):
        self.raw['metadata']['resourceVersion'] = str(int(self.raw['metadata']['resourceVersion']) + 1)

    async def get(self, request):
        return web.json_response(self.raw)

    async def patch(self, request):
        body = await request.json()
        self.requests.append((request.path, request.content_type, body))
        if self.changes:  # another client was quicker
            self.raw = apply(self.raw, self.changes.pop(0))
            self._bump()
        if request.content_type == JSON_PATCH:
            try:
                self.raw = jsonpatch.apply_patch(self.raw, body)
            except jsonpatch.JsonPatchTestFailed:
                return web.json_response({'kind': 'Status', 'code': 422, 'reason': 'Invalid'}, status=422)
        else:
            self.raw = apply(self.raw, body)
        self._bump()
        return web.json_response(self.raw)


@pytest.fixture()
def obj(aresponses, host):
    obj = FakeObject()
    aresponses.add(host, MAIN, 'GET', obj.get, repeat=aresponses.INFINITY)
    aresponses.add(host, MAIN, 'PATCH', obj.patch, repeat=aresponses.INFINITY)
    aresponses.add(host, STATUS, 'PATCH', obj.patch, repeat=aresponses.INFINITY)
    return obj


def add_finalizer(body):
    finalizers = body.setdefault('metadata', {}).setdefault('finalizers', [])
    if 'mine' not in finalizers:
        finalizers.append('mine')


def drop_a(body):
    if 'a' in body['spec']['items']:
        body['spec']['items'].remove('a')


async def test_the_functions_change_the_freshest_body_as_one_tested_json_patch(context, obj):
    result = await transform_obj(context=context, resource=WITHOUT_STATUS, namespace='ns1', name='kex1',
                                 fns=[add_finalizer, drop_a], body=copy.deepcopy(obj.raw))

    assert obj.raw['metadata']['finalizers'] == ['someone.else/finalizer', 'mine']
    assert obj.raw['spec']['items'] == ['b']
    assert result == obj.raw
    (path, content_type, operations), = obj.requests
    assert (path, content_type) == (MAIN, JSON_PATCH)
    assert operations[0] == {'op': 'test', 'path': '/metadata/resourceVersion', 'value': '1'}


async def test_a_concurrent_change_is_kept_and_the_functions_run_again_on_it(context, obj):
    obj.changes.append({'metadata': {'finalizers': ['someone.else/finalizer', 'third/finalizer']}})
    calls = []

    def counting(body):
        calls.append(list(body['metadata']['finalizers']))
        add_finalizer(body)

    await transform_obj(context=context, resource=WITHOUT_STATUS, namespace='ns1', name='kex1',
                        fns=[counting], body=copy.deepcopy(obj.raw))

    assert obj.raw['metadata']['finalizers'] == ['someone.else/finalizer', 'third/finalizer', 'mine']
    assert calls == [['someone.else/finalizer'], ['someone.else/finalizer', 'third/finalizer']]


async def test_an_object_that_keeps_changing_is_given_up_clearly(context, obj):
    obj.changes.extend({'spec': {'other': index}} for index in range(10))

    with pytest.raises(TransformationConflict, match="kept changing"):
        await transform_obj(context=context, resource=WITHOUT_STATUS, namespace='ns1', name='kex1',
                            fns=[add_finalizer], body=copy.deepcopy(obj.raw), attempts=3)

    assert 'mine' not in obj.raw['metadata']['finalizers']


async def test_a_refusal_that_is_no_conflict_is_raised_at_once(context, aresponses, host):
    requests = []

    async def refuse(request):
        requests.append(await request.json())
        return web.json_response({'kind': 'Status', 'code': 422, 'message': 'spec.items: Invalid value'}, status=422)

    aresponses.add(host, MAIN, 'PATCH', refuse, repeat=aresponses.INFINITY)
    aresponses.add(host, MAIN, 'GET', web.json_response(FakeObject().raw), repeat=aresponses.INFINITY)

    with pytest.raises(APIUnprocessableError):
        await transform_obj(context=context, resource=WITHOUT_STATUS, namespace='ns1', name='kex1',
                            fns=[drop_a], body=FakeObject().raw)
    assert len(requests) == 1


async def test_the_status_goes_to_its_subresource(context, obj):
    def log(body):
        body.setdefault('status', {}).setdefault('log', []).append('x')

    await transform_obj(context=context, resource=WITH_STATUS, namespace='ns1', name='kex1',
                        fns=[drop_a, log], body=copy.deepcopy(obj.raw))

    assert [(path, ops[0]['value'], [op['path'] for op in ops[1:]]) for path, _, ops in obj.requests] == [
        (MAIN, '1', ['/spec/items/0']), (STATUS, '2', ['/status'])]
    assert obj.raw['status'] == {'log': ['x']}


async def test_nothing_is_sent_when_the_functions_change_nothing(context, obj):
    result = await transform_obj(context=context, resource=WITHOUT_STATUS, namespace='ns1', name='kex1',
                                 fns=[lambda body: None], body=copy.deepcopy(obj.raw))

    assert obj.requests == []
    assert result == obj.raw


async def test_a_failing_function_sends_nothing_and_is_named(context, obj):
    def broken(body):
        raise ValueError("no way")

    with pytest.raises(TransformationError, match=r"broken of patch.fns has failed: ValueError: no way"):
        await transform_obj(context=context, resource=WITHOUT_STATUS, namespace='ns1', name='kex1',
                            fns=[add_finalizer, broken], body=copy.deepcopy(obj.raw))
    assert obj.requests == []


async def test_the_functions_follow_the_merge_patch_on_the_object_it_has_left(context, obj):
    patch = Patch({'spec': {'merged': True}})
    patch.fns.append(lambda body: body['spec'].update(seen=body['spec'].get('merged')))

    await patch_obj(context=context, resource=WITHOUT_STATUS, namespace='ns1', name='kex1', patch=patch,
                    fns=patch.fns)

    assert obj.raw['spec'] == {'items': ['a', 'b'], 'merged': True, 'seen': True}
    assert [content_type for _, content_type, _ in obj.requests] == ['application/merge-patch+json', JSON_PATCH]


async def test_a_patch_of_functions_only_reads_the_object_unless_given(context, obj):
    patch = Patch()
    patch.fns.append(add_finalizer)
    assert patch and not dict(patch)  # not empty: it has work to do, but nothing to merge

    await patch_obj(context=context, resource=WITHOUT_STATUS, namespace='ns1', name='kex1', patch=patch,
                    fns=patch.fns)

    assert [content_type for _, content_type, _ in obj.requests] == [JSON_PATCH]
    assert obj.raw['metadata']['finalizers'] == ['someone.else/finalizer', 'mine']
    assert json.loads(json.dumps(patch)) == {}
