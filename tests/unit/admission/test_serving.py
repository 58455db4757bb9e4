"""Serving the webhooks for the operator's lifetime, and the configurations derived from the handlers."""
import asyncio
import json
import logging

import aiohttp
import pytest
from aiohttp import web

import kopf
from kopf._admission import serving
from kopf._handlers.registries import OperatorRegistry
from kopf._kube.auth import APIContext
from kopf._structs.credentials import ConnectionInfo
from kopf._structs.resources import Resource, Selector
from kopf._structs.reviews import WebhookType
from kopf.config import OperatorConfig
from tests.unit.conftest import until

KEX = Selector(name='kopfexamples')
PODS = Selector(name='pods')
NODES = Selector(name='nodes')
RESOURCES = {
    KEX: Resource('kopf.dev', 'v1', 'kopfexamples', 'KopfExample', namespaced=True),
    PODS: Resource('', 'v1', 'pods', 'Pod', namespaced=True),
    NODES: Resource('', 'v1', 'nodes', 'Node', namespaced=False),
}
ENDPOINT = {'url': 'https://127.0.0.1:9443/hooks', 'caBundle': 'Q0E='}
VALIDATING = '/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations'
MUTATING = '/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations'


@pytest.fixture()
def registry():
    return OperatorRegistry()


def fn(**_):
    pass


def layout(registry, type=WebhookType.VALIDATING, namespaces=None, **kwargs):
    return serving.build_webhooks(registry, RESOURCES, type=type, endpoint=ENDPOINT, managed='auto.kopf.dev',
                                  namespaces=namespaces, **kwargs)


def test_one_webhook_per_handler_with_its_rules_and_policies(registry):
    kopf.on.validate('kopfexamples', id='check', registry=registry)(fn)
    kopf.on.validate('nodes', id='careful', operation='CREATE', subresource='status', side_effects=True,
                     ignore_failures=True, registry=registry)(fn)
    kopf.on.mutate('pods', id='defaults', registry=registry)(fn)

    validating = layout(registry)
    assert validating == [
        {
            'name': 'check.auto.kopf.dev',
            'clientConfig': {'url': 'https://127.0.0.1:9443/hooks/check', 'caBundle': 'Q0E='},
            'rules': [{'apiGroups': ['kopf.dev'], 'apiVersions': ['v1'], 'resources': ['kopfexamples'],
                       'operations': ['*'], 'scope': 'Namespaced'}],
            'sideEffects': 'None',
            'failurePolicy': 'Fail',
            'matchPolicy': 'Equivalent',
            'admissionReviewVersions': ['v1', 'v1beta1'],
        },
        {
            'name': 'careful.auto.kopf.dev',
            'clientConfig': {'url': 'https://127.0.0.1:9443/hooks/careful', 'caBundle': 'Q0E='},
            'rules': [{'apiGroups': [''], 'apiVersions': ['v1'], 'resources': ['nodes/status'],
                       'operations': ['CREATE'], 'scope': 'Cluster'}],
            'sideEffects': 'NoneOnDryRun',
            'failurePolicy': 'Ignore',
            'matchPolicy': 'Equivalent',
            'admissionReviewVersions': ['v1', 'v1beta1'],
        },
    ]
    mutating, = layout(registry, WebhookType.MUTATING)
    assert mutating['name'] == 'defaults.auto.kopf.dev'
    assert mutating['rules'][0]['resources'] == ['pods']


def test_a_handler_for_several_resources_is_one_webhook_with_a_rule_each(registry):
    kopf.on.validate('pods', id='check', registry=registry)(kopf.on.validate('kopfexamples', id='check',
                                                                             registry=registry)(fn))
    webhook, = layout(registry)
    assert [rule['resources'] for rule in webhook['rules']] == [['kopfexamples'], ['pods']]


def test_a_namespaced_operator_limits_its_webhooks_to_its_namespaces(registry):
    kopf.on.validate('kopfexamples', id='check', registry=registry)(fn)
    webhook, = layout(registry, namespaces=['ns2', 'ns1'])
    assert webhook['namespaceSelector'] == {'matchExpressions': [
        {'key': 'kubernetes.io/metadata.name', 'operator': 'In', 'values': ['ns1', 'ns2']}]}


def test_cluster_scoped_resources_get_no_namespace_selector(registry):
    kopf.on.validate('nodes', id='check', registry=registry)(fn)
    webhook, = layout(registry, namespaces=['ns1'])
    assert 'namespaceSelector' not in webhook


def test_label_filters_become_object_selectors(registry):
    kopf.on.validate('kopfexamples', id='check', labels={'app': 'demo', 'on': kopf.PRESENT, 'off': kopf.ABSENT,
                                                         'dynamic': lambda value: True}, registry=registry)(fn)
    webhook, = layout(registry)
    assert webhook['objectSelector'] == {
        'matchLabels': {'app': 'demo'},
        'matchExpressions': [{'key': 'on', 'operator': 'Exists'}, {'key': 'off', 'operator': 'DoesNotExist'}],
    }


@pytest.mark.parametrize('labels', [None, {}, {'x': lambda value: True}, {'x': 'not a label value!'},
                                    {'bad key!': 'v'}])
def test_filters_that_the_server_cannot_express_make_no_object_selector(labels):
    assert serving.object_selector(labels) is None


def test_differently_filtered_resources_of_one_webhook_get_no_object_selector(registry):
    kopf.on.validate('pods', id='check', labels={'a': 'b'}, registry=registry)(
        kopf.on.validate('kopfexamples', id='check', registry=registry)(fn))
    webhook, = layout(registry)
    assert 'objectSelector' not in webhook


def test_only_persistent_webhooks_are_kept_on_exit(registry):
    kopf.on.validate('kopfexamples', id='kept', persistent=True, registry=registry)(fn)
    kopf.on.validate('kopfexamples', id='gone', registry=registry)(fn)
    assert [webhook['name'] for webhook in layout(registry, persistent_only=True)] == ['kept.auto.kopf.dev']


@pytest.mark.parametrize('id, name', [
    ('check', 'check.auto.kopf.dev'),
    ('check-2', 'check-2.auto.kopf.dev'),
])
def test_webhook_names_of_clean_ids_are_the_ids(id, name):
    assert serving.webhook_name(id, 'auto.kopf.dev') == name


@pytest.mark.parametrize('id', ['check_spec', 'Check', 'test.<locals>.fn', 'a/b', 'x' * 100, '_'])
def test_webhook_names_of_other_ids_are_valid_dns_names_with_a_hash(id):
    name = serving.webhook_name(id, 'auto.kopf.dev')
    label, _, domain = name.partition('.')
    assert domain == 'auto.kopf.dev'
    assert 1 <= len(label) <= 63
    assert all(char in 'abcdefghijklmnopqrstuvwxyz0123456789-' for char in label)
    assert label[0] != '-' and label[-1] != '-'


def test_webhook_names_of_look_alike_ids_differ():
    assert serving.webhook_name('check_spec', 'a.b') != serving.webhook_name('check-spec', 'a.b')
    assert serving.webhook_name('check_spec', 'a.b') != serving.webhook_name('check.spec', 'a.b')


def test_the_handler_id_goes_into_a_service_path_too():
    config = serving.client_config({'service': {'namespace': 'ns', 'name': 'svc', 'path': '/hooks/'}}, 'a/b')
    assert config == {'service': {'namespace': 'ns', 'name': 'svc', 'path': '/hooks/a%2Fb'}}


def test_admission_handlers_without_a_server_fail_the_start_clearly():
    with pytest.raises(serving.AdmissionSetupError, match=r"set settings\.admission\.server"):
        serving.check_settings(server=None, managed=None)


def test_a_server_that_is_not_callable_fails_the_start_clearly():
    with pytest.raises(serving.AdmissionSetupError, match="must be a webhook server"):
        serving.check_settings(server='https://example.com', managed=None)  # type: ignore[arg-type]


@pytest.mark.parametrize('managed', ['auto', 'Auto.Kopf.Dev', 'auto..dev', '-auto.dev', 'auto_dev.x', '',
                                     'a.' * 100 + 'dev', 123])
def test_unusable_managed_names_fail_the_start_clearly(managed):
    with pytest.raises(serving.AdmissionSetupError, match=r"settings\.admission\.managed="):
        serving.check_settings(server=kopf.WebhookServer(), managed=managed)


@pytest.mark.parametrize('managed', ['auto.kopf.dev', 'a.b', 'my-op.example.com'])
def test_usable_managed_names(managed):
    serving.check_settings(server=kopf.WebhookServer(), managed=managed)


# The lifecycle, with a fake server and a fake API.

class FakeServer:
    """A webhook server without sockets: it yields endpoints as told, and can fail on start or later."""

    def __init__(self, *endpoints, fail=None, die=None):
        self.endpoints = endpoints or (ENDPOINT,)
        self.fail = fail
        self.die = die
        self.fn = None
        self.stopped = asyncio.Event()

    async def __call__(self, fn):
        self.fn = fn
        try:
            if self.fail is not None:
                raise self.fail
            for endpoint in self.endpoints:
                yield endpoint
                await asyncio.sleep(0)  # the framework takes it meanwhile
            if self.die is not None:
                raise self.die
            await asyncio.Event().wait()
        finally:
            self.stopped.set()


@pytest.fixture()
def api(aresponses, host):
    """The configurations as the fake API server holds them; every write is recorded."""
    state = {'objects': {}, 'writes': []}

    async def handler(request: web.Request) -> web.Response:
        kind, _, name = request.path.rpartition('/')
        body = json.loads(await request.text()) if request.can_read_body else None
        if request.method != 'GET':
            state['writes'].append((request.method, request.path))
        if request.method == 'POST':
            state['objects'][(request.path, body['metadata']['name'])] = body
            return web.json_response(body, status=201)
        key = (kind, name)
        if key not in state['objects']:
            return web.json_response({'kind': 'Status', 'code': 404}, status=404)
        if request.method == 'GET':
            return web.json_response(state['objects'][key])
        if request.method == 'DELETE':
            del state['objects'][key]
        else:
            merged = {**state['objects'][key], **body}
            annotations = {**state['objects'][key].get('metadata', {}).get('annotations', {}),
                           **body.get('metadata', {}).get('annotations', {})}
            merged['metadata'] = {**state['objects'][key].get('metadata', {}), 'annotations': annotations}
            state['objects'][key] = merged
        return web.json_response({})

    for path in [VALIDATING, MUTATING]:
        aresponses.add(host, path, 'POST', handler, repeat=aresponses.INFINITY)
        aresponses.add(host, f'{path}/auto.kopf.dev', aresponses.ANY, handler, repeat=aresponses.INFINITY)
    state['validating'] = lambda: state['objects'].get((VALIDATING, 'auto.kopf.dev'))
    state['mutating'] = lambda: state['objects'].get((MUTATING, 'auto.kopf.dev'))
    return state


def settings(server, managed='auto.kopf.dev'):
    config = OperatorConfig()
    config.admission.server = server
    config.admission.managed = managed
    return config


def webhooks_of(registry, context, config, stop, namespaces=None, replicas=None, clock=None):
    return serving.admission_webhooks(context=context, registry=registry, resources=RESOURCES, config=config,
                                      memo=kopf.Memo(), namespaces=namespaces, stop=stop, replicas=replicas,
                                      **({'clock': clock} if clock is not None else {}))


async def test_configurations_exist_while_serving_and_are_removed_on_exit(registry, context, api):
    kopf.on.validate('kopfexamples', id='check', registry=registry)(fn)
    kopf.on.mutate('kopfexamples', id='defaults', persistent=True, registry=registry)(fn)
    server = FakeServer()
    async with webhooks_of(registry, context, settings(server), asyncio.Event()):
        assert [w['name'] for w in api['validating']()['webhooks']] == ['check.auto.kopf.dev']
        assert [w['name'] for w in api['mutating']()['webhooks']] == ['defaults.auto.kopf.dev']
        assert not server.stopped.is_set()
    assert api['validating']() is None  # nothing persistent left: deleted
    assert [w['name'] for w in api['mutating']()['webhooks']] == ['defaults.auto.kopf.dev']
    assert server.stopped.is_set()


async def test_the_server_answers_with_the_operators_handlers(registry, context, api):
    kopf.on.validate('kopfexamples', id='check', registry=registry)(fn)
    server = FakeServer()
    async with webhooks_of(registry, context, settings(server), asyncio.Event()):
        review = await server.fn({'apiVersion': 'admission.k8s.io/v1', 'kind': 'AdmissionReview', 'request': {
            'uid': 'u', 'resource': {'group': 'kopf.dev', 'version': 'v1', 'resource': 'kopfexamples'},
            'operation': 'CREATE', 'object': {}}}, webhook='check')
    assert review['response'] == {'uid': 'u', 'allowed': True}


async def test_a_stale_configuration_of_a_type_without_handlers_is_deleted(registry, context, api):
    api['objects'][(MUTATING, 'auto.kopf.dev')] = {'webhooks': [{'name': 'old.auto.kopf.dev'}]}
    kopf.on.validate('kopfexamples', id='check', registry=registry)(fn)
    async with webhooks_of(registry, context, settings(FakeServer()), asyncio.Event()):
        assert api['mutating']() is None


async def test_new_endpoints_of_the_server_update_the_configurations(registry, context, api):
    kopf.on.validate('kopfexamples', id='check', registry=registry)(fn)
    moved = {'url': 'https://127.0.0.1:9444', 'caBundle': 'Q0E='}
    async with webhooks_of(registry, context, settings(FakeServer(ENDPOINT, moved)), asyncio.Event()):
        await until(lambda: api['validating']()['webhooks'][0]['clientConfig']['url'] ==
                    'https://127.0.0.1:9444/check')


async def test_unmanaged_webhooks_are_served_without_touching_configurations(registry, context, api, caplog):
    caplog.set_level(logging.INFO)
    kopf.on.validate('kopfexamples', id='check', registry=registry)(fn)
    server = FakeServer()
    async with webhooks_of(registry, context, settings(server, managed=None), asyncio.Event()):
        assert server.fn is not None
    assert api['writes'] == []
    assert "https://127.0.0.1:9443/hooks" in caplog.text
    assert "settings.admission.managed is not set" in caplog.text


async def test_without_admission_handlers_no_server_runs(registry, context, api):
    kopf.on.create('kopfexamples', registry=registry)(fn)
    server = FakeServer()
    async with webhooks_of(registry, context, settings(server), asyncio.Event()):
        pass
    assert server.fn is None
    assert api['writes'] == []


async def test_a_server_failing_to_start_fails_the_operator_with_its_reason(registry, context, api):
    kopf.on.validate('kopfexamples', id='check', registry=registry)(fn)
    server = FakeServer(fail=OSError("port in use"))
    with pytest.raises(serving.AdmissionSetupError, match="cannot start: OSError: port in use"):
        async with webhooks_of(registry, context, settings(server), asyncio.Event()):
            pytest.fail("The block must not run without a server.")
    assert api['writes'] == []


async def test_a_dying_server_stops_the_operator_and_cleans_up(registry, context, api):
    kopf.on.validate('kopfexamples', id='check', registry=registry)(fn)
    stop = asyncio.Event()
    with pytest.raises(serving.AdmissionSetupError, match="has stopped: RuntimeError: crashed"):
        async with webhooks_of(registry, context, settings(FakeServer(die=RuntimeError('crashed'))), stop):
            await asyncio.wait_for(stop.wait(), timeout=5)
    assert api['validating']() is None


async def test_a_stop_before_the_server_is_ready_writes_nothing(registry, context, api):
    kopf.on.validate('kopfexamples', id='check', registry=registry)(fn)

    class NeverReady:
        async def __call__(self, fn):
            await asyncio.Event().wait()
            yield ENDPOINT

    stop = asyncio.Event()
    stop.set()
    async with webhooks_of(registry, context, settings(NeverReady()), stop):
        pass
    assert api['writes'] == []


async def test_configuration_write_failures_name_the_object_and_the_permissions(registry, context, aresponses, host):
    kopf.on.validate('kopfexamples', id='check', registry=registry)(fn)

    async def forbidden(request):
        return web.json_response({'kind': 'Status', 'code': 403, 'message': 'forbidden'}, status=403)

    aresponses.add(host, f'{VALIDATING}/auto.kopf.dev', aresponses.ANY, forbidden, repeat=aresponses.INFINITY)
    aresponses.add(host, f'{MUTATING}/auto.kopf.dev', aresponses.ANY, forbidden, repeat=aresponses.INFINITY)
    with pytest.raises(serving.AdmissionSetupError) as e:
        async with webhooks_of(registry, context, settings(FakeServer()), asyncio.Event()):
            pass
    assert "ValidatingWebhookConfiguration 'auto.kopf.dev'" in str(e.value)
    assert "RBAC" in str(e.value)


async def test_a_real_server_answers_reviews_and_refuses_non_reviews_with_400(registry, caplog):
    caplog.set_level(logging.INFO)
    context = APIContext(ConnectionInfo(server='https://127.0.0.1:1'))  # unused without managed configurations

    @kopf.on.validate('kopfexamples', id='check', registry=registry)
    def check(**_):
        raise kopf.AdmissionError("No, thanks.", code=403)

    review = {'apiVersion': 'admission.k8s.io/v1', 'kind': 'AdmissionReview', 'request': {
        'uid': 'u', 'resource': {'group': 'kopf.dev', 'version': 'v1', 'resource': 'kopfexamples'},
        'operation': 'CREATE', 'object': {}}}
    server = kopf.WebhookServer(addr='127.0.0.1')
    async with webhooks_of(registry, context, settings(server, managed=None), asyncio.Event()):
        url = caplog.text.split('Admission webhooks are served at ')[1].split(';')[0]
        async with aiohttp.ClientSession() as session:
            async with session.post(f'{url}/check', json=review, ssl=False) as response:
                answer = await response.json()
            async with session.post(f'{url}/check', json={'kind': 'Pod'}, ssl=False) as response:
                status, text = response.status, await response.text()
    assert answer['response'] == {'uid': 'u', 'allowed': False, 'status': {'code': 403, 'message': "No, thanks."}}
    assert status == 400
    assert text.strip() == "Not an AdmissionReview: kind='Pod'."


# Replicas: one steward keeps the configurations.

def served(webhooks, steward='a', **extra):
    """A configuration as the server returns it: with our webhooks, the server's defaults, and the steward."""
    defaulted = [{'timeoutSeconds': 10, 'namespaceSelector': {}, 'objectSelector': {}, **webhook,
                  'clientConfig': {**webhook['clientConfig'], **extra}} for webhook in webhooks]
    return {'metadata': {'name': 'auto.kopf.dev', 'resourceVersion': '7',
                         'annotations': {serving.STEWARD_ANNOTATION: steward}}, 'webhooks': defaulted}


def test_the_servers_defaults_are_the_same_substance(registry):
    kopf.on.validate('kopfexamples', id='check', registry=registry)(fn)
    desired = layout(registry)
    assert serving.same_substance(served(desired), desired, steward='a')
    assert serving.same_substance(served(desired, port=443), desired, steward='a')  # e.g. a service's port


def test_another_endpoint_another_steward_or_other_webhooks_are_another_substance(registry):
    kopf.on.validate('kopfexamples', id='check', labels={'app': 'x'}, registry=registry)(fn)
    desired = layout(registry)
    assert not serving.same_substance(served(desired), desired, steward='b')
    moved = [{**w, 'clientConfig': {**w['clientConfig'], 'url': 'https://elsewhere/check'}} for w in desired]
    assert not serving.same_substance(served(moved), desired, steward='a')
    assert not serving.same_substance(served(desired + desired), desired, steward='a')
    unselected = [{k: v for k, v in w.items() if k != 'objectSelector'} for w in desired]
    assert not serving.same_substance(served(desired), unselected, steward='a')  # a selector was dropped


class FakeReplicas:
    """The replicas as the managed configurations see them; the test decides who keeps them and who lives."""

    def __init__(self, identity='a', *, steward=False, alone=True):
        self.identity = identity
        self.is_steward = steward
        self.is_alone = alone
        self.revision = 0
        self.looked_at = None  # the last revision that the steward has acted on and waits beyond
        self._changed = asyncio.Event()
        self.handover_timeout = 2.0

    def steward(self, key):
        assert key == 'admission:auto.kopf.dev'
        return self.is_steward

    def change(self, **kwargs):
        for name, value in kwargs.items():
            setattr(self, name, value)
        self.revision += 1
        self._changed.set()

    async def revised(self, revision):
        self.looked_at = revision
        while self.revision == revision:
            self._changed.clear()
            await self._changed.wait()

    async def alone(self):
        return self.is_alone


async def test_only_the_steward_writes_and_only_what_differs(registry, context, api, clock):
    kopf.on.validate('kopfexamples', id='check', registry=registry)(fn)
    replicas = FakeReplicas()
    async with webhooks_of(registry, context, settings(FakeServer()), asyncio.Event(), replicas=replicas,
                           clock=clock):
        await until(lambda: replicas.looked_at == replicas.revision)
        assert api['writes'] == []  # not the steward: it serves, but writes nothing
        replicas.change(is_steward=True)
        await until(lambda: api['validating']() is not None)
        assert api['validating']()['metadata']['annotations'] == {serving.STEWARD_ANNOTATION: 'a'}
        writes = len(api['writes'])
        replicas.change(is_steward=False)
        replicas.change(is_steward=True)  # the steward again: it looks, but the substance is the same
        await until(lambda: replicas.looked_at == replicas.revision)
        assert len(api['writes']) == writes
    assert api['validating']() is None  # the last replica, and the steward: removed


async def test_an_exiting_steward_leaves_the_configurations_to_the_others_once_one_keeps_them(
        registry, context, api, clock, caplog):
    caplog.set_level(logging.INFO)
    kopf.on.validate('kopfexamples', id='check', registry=registry)(fn)
    replicas = FakeReplicas(steward=True, alone=False)
    server = FakeServer()

    async def take_over():
        await until(lambda: "waiting for one of them to take them over" in caplog.text)
        for _ in range(3):  # it looks again and again, within the hand-over timeout
            await until(lambda: clock.next_deadline is not None)
            clock.advance(serving.HANDOVER_POLLING)
        await until(lambda: clock.next_deadline is not None)  # it has looked, and waits to look again
        assert not server.stopped.is_set()  # it still serves while nobody else keeps them
        api['validating']()['metadata']['annotations'][serving.STEWARD_ANNOTATION] = 'b'
        clock.advance(serving.HANDOVER_POLLING)

    async with webhooks_of(registry, context, settings(server), asyncio.Event(), replicas=replicas, clock=clock):
        await until(lambda: api['validating']() is not None)
        replicas.change(is_steward=False)  # stepping down, as at the exit
        other = asyncio.create_task(take_over())
    await other
    assert api['validating']()['metadata']['annotations'][serving.STEWARD_ANNOTATION] == 'b'
    assert api['validating']()['webhooks']


async def test_a_replica_that_does_not_keep_the_configurations_leaves_them_alone_at_exit(registry, context, api):
    kopf.on.validate('kopfexamples', id='check', registry=registry)(fn)
    api['objects'][(VALIDATING, 'auto.kopf.dev')] = served(layout(registry), steward='b')
    async with webhooks_of(registry, context, settings(FakeServer()), asyncio.Event(),
                           replicas=FakeReplicas(alone=True)):
        pass
    assert api['writes'] == []
