"""
Kopf's patching (its "Patching" page): the merge-patch dict and the transformation functions.

The merge-patch is checked through the handling cycle on a simulated object;
the transformation functions through the processing of an event against a
mock API server that applies both kinds of patches the way Kubernetes does,
so that only their effect on the object is asserted.
"""
import copy

import jsonpatch
from aiohttp import web

import kopf
from kopf._cycle import processing
from kopf._handlers.registries import OperatorRegistry
from kopf._structs.patches import apply
from kopf._structs.resources import Resource, Selector
from kopf.config import OperatorConfig
from tests.unit.conftest import RESOURCE


async def test_the_patch_merges_dicts_and_none_deletes_a_field_as_in_kopf(server, registry):
    @kopf.on.create(*RESOURCE, registry=registry)
    def ensure_defaults(spec, patch, **_):
        if 'greeting' not in spec:
            patch.spec['greeting'] = 'hello'
        patch.spec['other'] = None  # deletes the field
        patch.status['state'] = 'initialized'
        patch.metadata.annotations['never-again'] = 'yes'
        patch.meta.labels['touched'] = 'yes'

    await server.run()

    assert server.raw['spec'] == {'field': 'x', 'greeting': 'hello'}
    assert server.raw['status'] == {'state': 'initialized'}
    assert server.raw['metadata']['annotations']['never-again'] == 'yes'
    assert server.raw['metadata']['labels'] == {'touched': 'yes'}


KEX = Resource(group='kopf.dev', version='v1', plural='kopfexamples', kind='KopfExample')
PATH = '/apis/kopf.dev/v1/namespaces/ns/kopfexamples/ex'


class FakeObject:
    """One object on a mock API server: merge-patches and JSON-patches are applied as Kubernetes applies them."""

    def __init__(self, raw):
        self.raw = raw

    async def get(self, request):
        return web.json_response(self.raw)

    async def patch(self, request):
        body = await request.json()
        if request.content_type == 'application/json-patch+json':
            self.raw = jsonpatch.apply_patch(self.raw, body)
        else:
            self.raw = apply(self.raw, body)
        self.raw['metadata']['resourceVersion'] = str(int(self.raw['metadata']['resourceVersion']) + 1)
        return web.json_response(self.raw)


async def test_transformation_functions_change_the_object_as_in_kopf(aresponses, host, context):
    registry = OperatorRegistry()
    obj = FakeObject({'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
                      'metadata': {'name': 'ex', 'namespace': 'ns', 'uid': 'u', 'resourceVersion': '1',
                                   'finalizers': ['someone.else/finalizer']},
                      'spec': {'items': ['a', 'b']}})

    def add_finalizer(body):
        finalizers = body.setdefault('metadata', {}).setdefault('finalizers', [])
        if 'my-operator/cleanup' not in finalizers:
            finalizers.append('my-operator/cleanup')

    def drop_item(body, item):
        body['spec']['items'].remove(item)

    calls = []

    @kopf.on.create('kopfexamples', registry=registry)
    def create_fn(patch, **_):
        calls.append('create_fn')
        patch.fns.append(add_finalizer)
        patch.fns.append(lambda body: drop_item(body, 'a'))

    aresponses.add(host, PATH, 'GET', obj.get, repeat=aresponses.INFINITY)
    aresponses.add(host, PATH, 'PATCH', obj.patch, repeat=aresponses.INFINITY)
    watch = processing.ResourceWatch(context=context, resource=KEX, selector=Selector.from_args('kopfexamples'),
                                     registry=registry, config=OperatorConfig(), memo=None)

    await processing.process_event(watch, {'type': 'ADDED', 'object': copy.deepcopy(obj.raw)}, False)

    assert calls == ['create_fn']
    assert obj.raw['metadata']['finalizers'] == ['someone.else/finalizer', 'my-operator/cleanup']
    assert obj.raw['spec']['items'] == ['b']
