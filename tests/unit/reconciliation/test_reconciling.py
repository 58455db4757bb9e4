"""
The reconciliation of an operator: children from the watch streams reach their owners' reconcilers.

The owners become known as the handling cycle shows them (a reconciler's
stage); the children's events are seen as the streams pass them. The clock
is fake and never moved: no call is made, only the routing is looked at.
"""
import logging

import pytest
from aiohttp import web

import kopf
from kopf._cycle.causation import Cause
from kopf._handlers.arguments import Arguments, ObjectArguments, OperatorArguments
from kopf._handlers.reasons import Reason
from kopf._handlers.registries import OperatorRegistry
from kopf._reconciliation.reconciling import OperatorReconciliation, ReconciliationError
from kopf._structs.bodies import Body
from kopf._structs.patches import Patch
from kopf._structs.resources import Resource
from kopf.config import OperatorConfig
from tests.unit.conftest import FakeClock

KEX = Resource('kopf.dev', 'v1', 'kopfexamples', 'KopfExample', namespaced=True)
CONFIGMAPS = Resource('', 'v1', 'configmaps', 'ConfigMap', namespaced=True)
SECRETS = Resource('', 'v1', 'secrets', 'Secret', namespaced=True)
OWNER = {'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
         'metadata': {'name': 'owner', 'namespace': 'ns', 'uid': 'uid-owner', 'resourceVersion': '1'}}


def child(name='c1', *, owner_uid='uid-owner', kind='KopfExample', api_version='kopf.dev/v1', rv='1', labels=None):
    return {'apiVersion': 'v1', 'kind': 'ConfigMap',
            'metadata': {'name': name, 'namespace': 'ns', 'uid': f'uid-{name}', 'resourceVersion': rv,
                         'labels': labels or {},
                         'ownerReferences': [{'apiVersion': api_version, 'kind': kind, 'name': 'owner',
                                              'uid': owner_uid}]}}


@pytest.fixture()
def registry():
    registry = OperatorRegistry()

    @kopf.on.reconcile('kopfexamples', id='fn', registry=registry, owns=['configmaps'],
                       watches={'secrets': lambda labels, **_: labels.get('for')})
    def fn(**_):
        pass

    return registry


@pytest.fixture()
async def reconciliation(registry):
    reconciliation = OperatorReconciliation(registry, config=OperatorConfig(), clock=FakeClock())
    reconciliation.serve(context=object(), gate=None)  # nothing is sent: the clock never moves
    yield reconciliation
    await reconciliation.close()


@pytest.fixture()
async def pokes(reconciliation, registry, monkeypatch):
    """The owner, known to its reconciler; and every poke that the reconciler gets."""
    stage = reconciliation.stage(KEX)
    reconciler = stage.__self__
    arguments = Arguments(operator=OperatorArguments(logger=logging.getLogger('test'), memo=None,
                                                     config=OperatorConfig()),
                          object=ObjectArguments(body=Body(OWNER), patch=Patch(), resource=KEX))
    await stage(registry, KEX, Cause(Reason.NOOP), arguments)
    received = []
    original = reconciler.poke
    monkeypatch.setattr(reconciler, 'poke', lambda *args: (received.append(args), original(*args)))
    return received


def handler_of(registry):
    return registry.get_reconciling_handlers(KEX)[0]


async def test_an_owned_child_reaches_its_owner_and_is_among_its_children(reconciliation, registry, pokes):
    assert reconciliation.relates(CONFIGMAPS) and reconciliation.relates(SECRETS) and not reconciliation.relates(KEX)
    await reconciliation.see(CONFIGMAPS, {'type': 'ADDED', 'object': child()})
    assert pokes == [('uid-owner', ['fn'], (CONFIGMAPS, 'uid-c1'), '1')]
    children = reconciliation.children('uid-owner', OWNER, handler_of(registry))
    assert [body.metadata.name for body in children['configmaps']] == ['c1']
    assert children['secrets'] == ()


async def test_a_child_owned_by_an_object_of_another_resource_is_ignored_with_a_debug_line(
        reconciliation, registry, pokes, caplog):
    caplog.set_level(logging.DEBUG)
    await reconciliation.see(CONFIGMAPS, {'type': 'ADDED', 'object': child(kind='Deployment', api_version='apps/v1')})
    assert pokes == []
    assert "ConfigMap ns/c1 is owned by Deployment owner, not by the resources that reconcile handlers own it " \
           "for: it is ignored." in caplog.text
    assert reconciliation.children('uid-owner', OWNER, handler_of(registry))['configmaps'] == ()


async def test_the_same_state_of_a_child_again_is_no_news(reconciliation, pokes):
    await reconciliation.see(CONFIGMAPS, {'type': 'ADDED', 'object': child()})
    await reconciliation.see(CONFIGMAPS, {'type': None, 'object': child()})  # a relisting
    assert len(pokes) == 1
    await reconciliation.see(CONFIGMAPS, {'type': 'MODIFIED', 'object': child(rv='2')})
    assert len(pokes) == 2


async def test_a_child_that_leaves_its_owner_or_goes_is_news_for_the_owner(reconciliation, registry, pokes):
    await reconciliation.see(CONFIGMAPS, {'type': 'ADDED', 'object': child()})
    await reconciliation.see(CONFIGMAPS, {'type': 'MODIFIED', 'object': child(owner_uid='uid-other', rv='2')})
    assert sorted(poke[0] for poke in pokes[1:]) == ['uid-other', 'uid-owner']  # the one it left, the one it joined
    assert reconciliation.children('uid-owner', OWNER, handler_of(registry))['configmaps'] == ()
    await reconciliation.see(CONFIGMAPS, {'type': 'ADDED', 'object': child('c2')})
    await reconciliation.see(CONFIGMAPS, {'type': 'DELETED', 'object': child('c2', rv='3')})
    assert [poke[0] for poke in pokes[3:]] == ['uid-owner', 'uid-owner']
    assert pokes[-1][3] is None  # gone: no version of it can be our own apply's


async def test_a_relisting_that_lacks_a_child_tells_its_owner_that_it_is_gone(reconciliation, registry, pokes):
    async def stream(*events):
        for event in events:
            yield event

    listing = ('configmaps', 'ns')
    async for _ in reconciliation.watched(stream({'type': None, 'object': child()}), resource=CONFIGMAPS,
                                          listing=listing):
        pass
    reconciliation.listed(listing, CONFIGMAPS)
    async for _ in reconciliation.watched(stream(), resource=CONFIGMAPS, listing=listing):  # re-opened: empty
        pass
    reconciliation.listed(listing, CONFIGMAPS)
    assert [poke[2] for poke in pokes] == [(CONFIGMAPS, 'uid-c1'), (CONFIGMAPS, 'uid-c1')]
    assert reconciliation.children('uid-owner', OWNER, handler_of(registry))['configmaps'] == ()


async def test_a_related_object_reaches_the_owners_that_its_mapper_names(reconciliation, registry, pokes):
    secret = {'apiVersion': 'v1', 'kind': 'Secret',
              'metadata': {'name': 's1', 'namespace': 'ns', 'uid': 'uid-s1', 'resourceVersion': '5',
                           'labels': {'for': 'owner'}}}
    await reconciliation.see(SECRETS, {'type': 'ADDED', 'object': secret})
    assert pokes == [('uid-owner', ['fn'], (SECRETS, 'uid-s1'), '5')]
    children = reconciliation.children('uid-owner', OWNER, handler_of(registry))
    assert [body.metadata.name for body in children['secrets']] == ['s1']
    unrelated = {**secret, 'metadata': {**secret['metadata'], 'labels': {}, 'resourceVersion': '6'}}
    await reconciliation.see(SECRETS, {'type': 'MODIFIED', 'object': unrelated})
    assert len(pokes) == 2  # the owner it has left is told
    assert reconciliation.children('uid-owner', OWNER, handler_of(registry))['secrets'] == ()


async def test_a_failing_mapper_is_reported_and_keeps_the_owners_it_named(reconciliation, caplog, pokes):
    registry = OperatorRegistry()
    failing = {'fail': False}

    def mapper(labels, **_):
        if failing['fail']:
            raise ValueError('no idea')
        return labels.get('for')

    @kopf.on.reconcile('kopfexamples', id='fn', registry=registry, watches={'secrets': mapper})
    def fn(**_):
        pass

    reconciliation = OperatorReconciliation(registry, config=OperatorConfig(), clock=FakeClock())
    reconciliation.serve(context=object(), gate=None)
    reconciliation.stage(KEX)
    secret = {'apiVersion': 'v1', 'kind': 'Secret',
              'metadata': {'name': 's1', 'namespace': 'ns', 'uid': 'uid-s1', 'labels': {'for': 'owner'}}}
    try:
        await reconciliation.see(SECRETS, {'type': 'ADDED', 'object': secret})
        failing['fail'] = True
        await reconciliation.see(SECRETS, {'type': 'MODIFIED', 'object': {**secret, 'spec': 1}})
        handler = registry.get_reconciling_handlers(KEX)[0]
        assert len(reconciliation.children('uid-owner', OWNER, handler)['secrets']) == 1
        assert "The mapper of Reconciler 'fn' for 'secrets' has failed: no idea" in caplog.text
    finally:
        await reconciliation.close()


# The start.

@pytest.fixture()
def cluster(aresponses, host):
    """Discovery of the core API, and access reviews that deny what ``denied`` lists."""
    denied = set()
    aresponses.add(host, '/api/v1', 'GET', web.json_response({'kind': 'APIResourceList', 'resources': [
        {'name': 'configmaps', 'singularName': 'configmap', 'namespaced': True, 'kind': 'ConfigMap'},
        {'name': 'secrets', 'singularName': 'secret', 'namespaced': True, 'kind': 'Secret'}]}),
        repeat=aresponses.INFINITY)
    aresponses.add(host, '/apis', 'GET', web.json_response({'kind': 'APIGroupList', 'groups': []}),
                   repeat=aresponses.INFINITY)

    async def review(request):
        attributes = (await request.json())['spec']['resourceAttributes']
        allowed = (attributes['verb'], attributes['resource'], attributes.get('namespace')) not in denied
        return web.json_response({'status': {'allowed': allowed}})

    aresponses.add(host, '/apis/authorization.k8s.io/v1/selfsubjectaccessreviews', 'POST', review,
                   repeat=aresponses.INFINITY)
    return denied


async def test_the_start_checks_that_every_related_resource_may_be_watched(registry, context, cluster):
    reconciliation = OperatorReconciliation(registry, config=OperatorConfig())
    await reconciliation.check(context=context, namespaces=['ns1', 'ns2'])


async def test_a_related_resource_that_may_not_be_watched_stops_the_start_naming_the_rule(registry, context,
                                                                                            cluster):
    cluster.add(('watch', 'secrets', 'ns2'))
    reconciliation = OperatorReconciliation(registry, config=OperatorConfig())
    with pytest.raises(ReconciliationError) as info:
        await reconciliation.check(context=context, namespaces=['ns1', 'ns2'])
    assert str(info.value) == (
        "Reconciler 'fn' of kopfexamples watches 'secrets', but the operator may not watch secrets in the "
        "namespace 'ns2': grant it in a Role in that namespace (or a ClusterRole) the rule "
        "{apiGroups: [\"\"], resources: [\"secrets\"], verbs: [\"list\", \"watch\"]}.")


async def test_cluster_wide_the_rule_goes_into_a_cluster_role(registry, context, cluster):
    cluster.add(('list', 'configmaps', None))
    reconciliation = OperatorReconciliation(registry, config=OperatorConfig())
    with pytest.raises(ReconciliationError, match=r"may not list configmaps cluster-wide: grant it in a ClusterRole"):
        await reconciliation.check(context=context, namespaces=[None])


async def test_a_related_resource_that_the_cluster_does_not_serve_stops_the_start(context, cluster):
    registry = OperatorRegistry()
    kopf.on.reconcile('kopfexamples', id='fn', registry=registry, owns=['bookcases'])(lambda **_: None)
    reconciliation = OperatorReconciliation(registry, config=OperatorConfig())
    with pytest.raises(ReconciliationError, match=r"Reconciler 'fn' of kopfexamples owns 'bookcases', which the "
                                                  r"cluster does not serve: is the name spelled right"):
        await reconciliation.check(context=context, namespaces=[None])


async def test_a_mapper_names_a_cluster_scoped_owner_by_its_name_alone():
    things = Resource('kopf.dev', 'v1', 'clusterthings', 'ClusterThing', namespaced=False)
    registry = OperatorRegistry()
    kopf.on.reconcile('clusterthings', id='fn', registry=registry,
                      watches={'secrets': lambda labels, **_: labels.get('for')})(lambda **_: None)
    reconciliation = OperatorReconciliation(registry, config=OperatorConfig(), clock=FakeClock())
    reconciliation.serve(context=object(), gate=None)
    stage = reconciliation.stage(things)
    owner = {'apiVersion': 'kopf.dev/v1', 'kind': 'ClusterThing', 'metadata': {'name': 'owner', 'uid': 'uid-owner'}}
    arguments = Arguments(operator=OperatorArguments(logger=logging.getLogger('test'), memo=None,
                                                     config=OperatorConfig()),
                          object=ObjectArguments(body=Body(owner), patch=Patch(), resource=things))
    try:
        await stage(registry, things, Cause(Reason.NOOP), arguments)
        received = []
        stage.__self__.poke = lambda *args: received.append(args)
        secret = {'apiVersion': 'v1', 'kind': 'Secret',
                  'metadata': {'name': 's1', 'namespace': 'ns', 'uid': 'uid-s1', 'labels': {'for': 'owner'}}}
        await reconciliation.see(SECRETS, {'type': 'ADDED', 'object': secret})
        assert [poke[0] for poke in received] == ['uid-owner']
        handler = registry.get_reconciling_handlers(things)[0]
        assert len(reconciliation.children('uid-owner', owner, handler)['secrets']) == 1
    finally:
        await reconciliation.close()
