"""What is served, decided from the cluster's namespaces and CRDs: pure decisions, and the observers on fake watches."""
import asyncio
import logging

import pytest

from kopf._kube.errors import APIForbiddenError
from kopf._replicas import peering
from kopf._runtime import observation
from kopf._runtime.observation import Insights, Resolution, crd_presence, revised_resources
from kopf._structs.namespaces import NamespaceScope
from kopf._structs.resources import Resource, Selector
from kopf.config import OperatorConfig
from tests.unit.conftest import idle

KEX = Resource('kopf.dev', 'v1', 'kopfexamples', 'KopfExample')
OTHER = Resource('other.dev', 'v1', 'kopfexamples', 'KopfExample')
CMS = Resource('', 'v1', 'configmaps', 'ConfigMap')
S_KEX, S_CMS = Selector(name='kopfexamples'), Selector(name='configmaps')


def crd(*, established: bool = True, served: bool = True, terminating: bool = False) -> dict:
    conditions = [{'type': 'Established', 'status': 'True' if established else 'False'}]
    if terminating:
        conditions.append({'type': 'Terminating', 'status': 'True'})
    return {'metadata': {'name': 'kopfexamples.kopf.dev'},
            'spec': {'group': 'kopf.dev', 'names': {'plural': 'kopfexamples'},
                     'versions': [{'name': 'v1', 'served': served}]},
            'status': {'conditions': conditions}}


# --- CRDs ---------------------------------------------------------------------------------------

def test_an_established_crd_is_expected_in_discovery():
    assert crd_presence(crd()) == (('kopf.dev', 'kopfexamples'), True)


def test_a_crd_not_yet_established_is_not():
    assert crd_presence(crd(established=False)) == (('kopf.dev', 'kopfexamples'), False)


def test_a_crd_without_served_versions_is_not():
    assert crd_presence(crd(served=False)) == (('kopf.dev', 'kopfexamples'), False)


def test_a_crd_being_deleted_is_still_served_until_it_is_gone():
    assert crd_presence(crd(terminating=True)) == (('kopf.dev', 'kopfexamples'), True)
    assert crd_presence(crd(terminating=True), deleted=True) == (('kopf.dev', 'kopfexamples'), False)


def test_a_crd_without_names_is_ignored():
    assert crd_presence({'spec': {}}) is None


def test_a_resource_that_appears_or_goes_is_taken_as_resolved():
    assert revised_resources({S_CMS: CMS}, Resolution(resources={S_CMS: CMS, S_KEX: KEX})) == {
        S_CMS: CMS, S_KEX: KEX}
    assert revised_resources({S_CMS: CMS, S_KEX: KEX}, Resolution(resources={S_CMS: CMS},
                                                                  unresolved=(S_KEX,))) == {S_CMS: CMS}


def test_a_resource_that_becomes_ambiguous_stays_served_as_it_was():
    resolution = Resolution(resources={S_CMS: CMS}, ambiguous={S_KEX: "ambiguous"})
    assert revised_resources({S_CMS: CMS, S_KEX: KEX}, resolution) == {S_CMS: CMS, S_KEX: KEX}
    assert revised_resources({S_CMS: CMS}, resolution) == {S_CMS: CMS}  # and is not served if it was not


async def test_insights_say_when_they_change_and_only_then():
    insights = Insights(resources={S_CMS: CMS}, namespaces=['ns1'])
    insights.revise(resources={S_CMS: CMS}, namespaces=['ns1'])
    assert not insights.revised.is_set()
    insights.revise(namespaces=['ns1', 'ns2'])
    assert insights.revised.is_set() and insights.namespaces == {'ns1', 'ns2'}
    insights.revised.clear()
    insights.revise(resources={S_CMS: CMS, S_KEX: KEX})
    assert insights.revised.is_set() and insights.resources == {S_CMS: CMS, S_KEX: KEX}


async def test_a_404_asks_for_a_new_resolution_only_when_the_resources_are_kept_current():
    insights = Insights(resources={}, namespaces=[None])
    insights.suspect(KEX)
    assert not insights.rescan.is_set()
    insights.scanning = True
    insights.suspect(KEX)
    assert insights.rescan.is_set()


# --- the Leases' namespace ----------------------------------------------------------------------

@pytest.mark.parametrize('namespaces, expected', [
    (['ns1'], 'ns1'),
    (['myapp-*'], 'creds-ns'),
    (['!kube-*'], 'creds-ns'),
    (['a,b'], 'creds-ns'),
    (['ns1', 'ns2'], 'creds-ns'),
])
def test_the_lease_namespace_is_never_a_pattern(namespaces, expected):
    assert peering.lease_namespace(None, namespaces=namespaces, clusterwide=False,
                                   default_namespace='creds-ns') == expected


def test_the_lease_namespace_of_a_pattern_without_credentials_namespace_is_default():
    assert peering.lease_namespace(None, namespaces=['myapp-*'], clusterwide=False, default_namespace=None) == 'default'


# --- observing the namespaces, on a fake watch --------------------------------------------------

class FakeWatch:
    """infinite_watch's stand-in: yields the listing and the events put into it, or raises."""

    def __init__(self, listing: list[str], *, forbid: bool = False, forbid_after_listing: bool = False) -> None:
        self.listing = listing
        self.forbid = forbid
        self.forbid_after_listing = forbid_after_listing
        self.events: asyncio.Queue = asyncio.Queue()

    def put(self, type_: str, name: str) -> None:
        self.events.put_nowait({'type': type_, 'object': {'metadata': {'name': name}}})

    async def __call__(self, *, resource, on_listed, **_):
        if self.forbid:
            raise APIForbiddenError({'message': 'namespaces is forbidden'}, status=403)
        for name in self.listing:
            yield {'type': None, 'object': {'metadata': {'name': name}}}
        on_listed()
        if self.forbid_after_listing:
            raise APIForbiddenError({'message': 'watching namespaces is forbidden'}, status=403)
        while True:
            yield await self.events.get()


async def settled() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


@pytest.fixture()
def config() -> OperatorConfig:
    return OperatorConfig()


async def test_patterns_serve_the_matching_namespaces_as_they_come_and_go(monkeypatch, config, caplog):
    fake = FakeWatch(['myapp-1', 'myapp-pr-1', 'other', 'exact'])
    monkeypatch.setattr(observation.watching, 'infinite_watch', fake)
    scope = NamespaceScope.parse(['myapp-*,!*-pr-*', 'exact'])
    caplog.set_level(logging.INFO)
    async with _observing(monkeypatch, config, scope, asyncio.Event()) as insights:
        assert insights.namespaces == {'myapp-1', 'exact'}
        insights.revised.clear()
        fake.put('ADDED', 'myapp-2')
        fake.put('ADDED', 'myapp-pr-2')
        await settled()
        assert insights.namespaces == {'myapp-1', 'myapp-2', 'exact'}
        assert insights.revised.is_set()
        fake.put('MODIFIED', 'myapp-1')  # terminating: still served
        fake.put('DELETED', 'myapp-2')
        fake.put('DELETED', 'exact')  # named exactly: served whether it exists or not
        await settled()
        assert insights.namespaces == {'myapp-1', 'exact'}
    assert "Serving the namespace 'myapp-2'." in caplog.messages
    assert "The namespace 'myapp-2' is gone: its watches stop." in caplog.messages


async def test_without_permission_to_list_namespaces_only_exact_names_are_served_with_one_warning(
        monkeypatch, config, caplog):
    monkeypatch.setattr(observation.watching, 'infinite_watch', FakeWatch([], forbid=True))
    scope = NamespaceScope.parse(['myapp-*,!*-pr-*', 'exact', 'tools-?'])
    async with _observing(monkeypatch, config, scope, asyncio.Event()) as insights:
        assert insights.namespaces == {'exact'}
    [warning] = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "Cannot list the namespaces" in warning.message
    assert "'myapp-*,!*-pr-*', 'tools-?' are not served" in warning.message
    assert "only the exact namespace names are ('exact')" in warning.message
    assert "'list' and 'watch' on namespaces" in warning.message


async def test_without_permission_to_watch_namespaces_the_listed_ones_stay_with_one_warning(
        monkeypatch, config, caplog):
    monkeypatch.setattr(observation.watching, 'infinite_watch', FakeWatch(['myapp-1'], forbid_after_listing=True))
    async with _observing(monkeypatch, config, NamespaceScope.parse(['myapp-*']), asyncio.Event()) as insights:
        await settled()
        assert insights.namespaces == {'myapp-1'}
    [warning] = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "Cannot watch the namespaces" in warning.message


async def test_exact_names_alone_need_no_namespace_watch(monkeypatch, config):
    async def no_watch(**_):
        raise AssertionError("the namespaces must not be listed for exact names")
        yield

    monkeypatch.setattr(observation.watching, 'infinite_watch', no_watch)
    async with _observing(monkeypatch, config, NamespaceScope.parse(['ns1', 'ns2']), asyncio.Event()) as insights:
        assert insights.namespaces == {'ns1', 'ns2'}


async def test_with_scanning_disabled_patterns_are_not_served_and_said_so(monkeypatch, config, caplog):
    async def no_watch(**_):
        raise AssertionError("nothing is watched with scanning disabled")
        yield

    monkeypatch.setattr(observation.watching, 'infinite_watch', no_watch)
    config.scanning.disabled = True
    async with _observing(monkeypatch, config, NamespaceScope.parse(['myapp-*', 'ns1']), asyncio.Event()) as insights:
        assert insights.namespaces == {'ns1'}
        assert not insights.scanning
    [warning] = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "settings.scanning.disabled is set: the namespace pattern(s) 'myapp-*' are not served" in warning.message


def _observing(monkeypatch, config, scope, stop):
    """Observe the namespaces with the resources fixed (the resource observer idle)."""
    async def resolve(context, selectors):
        return Resolution(resources={S_CMS: CMS})

    monkeypatch.setattr(observation, 'resolve', resolve)
    monkeypatch.setattr(observation._ResourceObserver, 'run', _idle)
    return observation.observing(context=None, selectors=[S_CMS], config=config, scope=scope, stop=stop)


async def _idle(self) -> None:
    await asyncio.Event().wait()


# --- observing the resources, on fake CRD watches and discovery ---------------------------------

async def test_a_crd_that_appears_is_served_once_discovery_has_caught_up(monkeypatch, config, caplog, clock):
    crds: asyncio.Queue = asyncio.Queue()
    served: set = set()
    calls = []

    async def watch(*, on_listed, **_):
        on_listed()
        while True:
            yield await crds.get()

    async def resolve(*, context, selector):
        calls.append(selector)
        if ('kopf.dev', 'kopfexamples') in served:
            return KEX
        raise observation.discovery.ResourceNotFoundError("not served")

    async def serves(*, context, group, plural):
        return (group, plural) in served

    monkeypatch.setattr(observation.watching, 'infinite_watch', watch)
    monkeypatch.setattr(observation.discovery, 'resolve', resolve)
    monkeypatch.setattr(observation.discovery, 'serves', serves)
    monkeypatch.setattr(observation.discovery, 'refresh', lambda **_: None)
    caplog.set_level(logging.INFO)
    async with observation.observing(context=None, selectors=[S_KEX], config=config, scope=None,
                                     stop=asyncio.Event(), clock=clock) as insights:
        assert insights.resources == {} and insights.namespaces == {None}
        await settled()
        assert insights.scanning
        crds.put_nowait({'type': 'ADDED', 'object': crd()})
        await settled()
        assert insights.resources == {}  # discovery lags: asked again and again
        for _ in range(3):
            asked = len(calls)
            clock.advance(observation.MAX_LAG_BACKOFF)
            await idle()
            assert len(calls) > asked
        served.add(('kopf.dev', 'kopfexamples'))
        clock.advance(observation.MAX_LAG_BACKOFF)
        await idle()
        assert insights.resources == {S_KEX: KEX}
        crds.put_nowait({'type': 'DELETED', 'object': crd()})
        await settled()
        served.clear()
        clock.advance(observation.MAX_LAG_BACKOFF)
        await idle()
        assert insights.resources == {}
    assert any("Unresolved resources cannot be served yet: kopfexamples" in m for m in caplog.messages)
    assert "Serving kopfexamples as kopfexamples.v1.kopf.dev." in caplog.messages
    assert any("kopfexamples.v1.kopf.dev is not served by the cluster any more" in m for m in caplog.messages)


@pytest.mark.parametrize('resolution, level', [
    (Resolution(resources={S_CMS: CMS}, unresolved=(S_KEX,)), logging.WARNING),  # awaited: it matters
    (Resolution(resources={S_CMS: CMS}, scanned={Selector(everything=True): ()}), logging.WARNING),
    (Resolution(resources={S_CMS: CMS}), logging.INFO),  # all served: a namespaced Role cannot grant more
])
async def test_without_permission_to_watch_crds_the_resources_stay_as_at_the_start_said_once(
        monkeypatch, config, caplog, resolution, level):
    async def watch(**_):
        raise APIForbiddenError({'message': 'customresourcedefinitions is forbidden'}, status=403)
        yield

    async def resolve(context, selectors):
        return resolution

    monkeypatch.setattr(observation.watching, 'infinite_watch', watch)
    monkeypatch.setattr(observation, 'resolve', resolve)
    caplog.set_level(logging.INFO)
    async with observation.observing(context=None, selectors=[S_CMS], config=config, scope=None,
                                     stop=asyncio.Event()) as insights:
        await settled()
        assert insights.resources == {S_CMS: CMS}
        assert not insights.scanning  # a 404 then stops the watch instead of waiting for the CRD
    [record] = [r for r in caplog.records if 'CustomResourceDefinitions' in r.message]
    assert record.levelno == level
    assert "until the operator restarts" in record.message or "only after a restart" in record.message


async def test_ambiguous_resources_at_the_start_stop_the_operator_naming_them(monkeypatch, config):
    async def resolve(context, selectors):
        return Resolution(resources={}, ambiguous={S_KEX: "The resource kopfexamples is ambiguous: ..."})

    monkeypatch.setattr(observation, 'resolve', resolve)
    with pytest.raises(observation.ObservationError, match=r'Cannot serve the resource kopfexamples: .* ambiguous'):
        async with observation.observing(context=None, selectors=[S_KEX], config=config, scope=None,
                                         stop=asyncio.Event()):
            pass
