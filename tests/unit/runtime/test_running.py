"""The operator's start: login, resource resolution, probes, tasks (the rest is proven end-to-end)."""
import asyncio
import dataclasses
import socket

import pytest

import kopf
from kopf._handlers.registries import OperatorRegistry
from kopf._kube.errors import APIConnectionError, APIForbiddenError
from kopf._runtime import observation, running
from kopf._structs.namespaces import NamespaceScope
from kopf._structs.resources import Resource, Selector
from kopf.config import OperatorConfig
from tests.unit.conftest import idle, until


async def test_login_handlers_provide_the_credentials():
    registry = OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**_):
        return kopf.ConnectionInfo(server='https://example.invalid', token='t')

    info = await running._login(registry=registry, config=OperatorConfig(), memo=None)
    assert info.server == 'https://example.invalid'
    assert info.token == 't'


async def test_login_handlers_returning_nothing_usable_stop_the_operator():
    registry = OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**_):
        return 'not credentials'

    with pytest.raises(running.OperatorError, match='ConnectionInfo'):
        await running._login(registry=registry, config=OperatorConfig(), memo=None)


async def test_without_login_handlers_the_environment_is_used(monkeypatch, tmp_path):
    kubeconfig = tmp_path / 'config'
    kubeconfig.write_text('''
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: 'https://from-kubeconfig.invalid'}}]
users: [{name: u, user: {token: abc}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
''')
    monkeypatch.setenv('KUBECONFIG', str(kubeconfig))
    monkeypatch.delenv('KUBERNETES_SERVICE_HOST', raising=False)
    info = await running._login(registry=OperatorRegistry(), config=OperatorConfig(), memo=None)
    assert info.server == 'https://from-kubeconfig.invalid'
    assert info.token == 'abc'


async def test_startup_handlers_configure_persistence_before_it_freezes(monkeypatch):
    registry = OperatorRegistry()
    config = OperatorConfig()
    storage = kopf.AnnotationsProgressStorage(prefix='my-op.example.com')

    @kopf.on.startup(registry=registry)
    def configure(config, settings, **_):
        assert config is settings
        config.persistence.progress_storage = storage

    async def no_login(**_):
        raise running.OperatorError("stop here")

    monkeypatch.setattr(running, '_login', no_login)
    with pytest.raises(running.OperatorError):
        await running.operator(registry=registry, config=config)
    assert config.persistence.progress_storage is storage
    config.persistence.progress_storage = kopf.StatusProgressStorage()  # after startup: ignored
    assert config.persistence.progress_storage is storage


# --- kopf.run_tasks ----------------------------------------------------------------------------

async def forever():
    """A task that runs until it is cancelled."""
    await asyncio.Event().wait()


async def test_run_tasks_ends_all_tasks_when_the_first_one_ends():
    async def quick():
        return 'done'

    slow = asyncio.create_task(forever())
    await kopf.run_tasks([asyncio.create_task(quick()), slow])
    assert slow.cancelled()


async def test_run_tasks_reraises_the_first_failure_after_ending_the_others():
    async def failing():
        raise ValueError('boom')

    slow = asyncio.create_task(forever())
    with pytest.raises(ValueError, match='boom'):
        await kopf.run_tasks([asyncio.create_task(failing()), slow])
    assert slow.cancelled()


async def test_run_tasks_cancelled_cancels_its_tasks():
    slow = asyncio.create_task(forever())
    runner = asyncio.create_task(kopf.run_tasks([slow]))
    await idle()  # it runs the tasks now
    runner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await runner
    assert slow.cancelled()


async def test_run_tasks_leaves_ignored_tasks_alone():
    other = asyncio.create_task(forever())
    quick = asyncio.create_task(asyncio.sleep(0))
    await kopf.run_tasks([quick, other], ignored=[other])
    assert not other.done()
    other.cancel()


async def test_run_tasks_accepts_kopfs_documented_return_when():
    await kopf.run_tasks([asyncio.create_task(asyncio.sleep(0))], return_when=asyncio.FIRST_COMPLETED)


# --- settings= and namespace= as in Kopf --------------------------------------------------------

async def test_settings_is_kopfs_name_of_config(monkeypatch):
    seen = {}

    async def serve(**kwargs):
        seen.update(kwargs)

    monkeypatch.setattr(running, '_serve', serve)
    settings = kopf.OperatorSettings()
    await kopf.operator(settings=settings, namespace='ns1', namespaces=['ns2'])
    assert seen['config'] is settings
    assert seen['namespaces'] == ('ns2', 'ns1')
    assert seen['scope'] == NamespaceScope.parse(['ns2', 'ns1'])  # not cluster-wide


async def test_settings_and_a_different_config_are_refused():
    with pytest.raises(TypeError, match='not both'):
        await kopf.spawn_tasks(settings=kopf.OperatorSettings(), config=kopf.OperatorSettings())


# --- probes ------------------------------------------------------------------------------------

async def test_a_liveness_port_in_use_stops_the_operator_before_anything_runs():
    registry = OperatorRegistry()
    started = []

    @kopf.on.startup(registry=registry)
    def startup(**_):
        started.append(1)

    with socket.socket() as busy:
        busy.bind(('127.0.0.1', 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(running.OperatorError, match=f'liveness endpoint http://127.0.0.1:{port}/healthz'):
            await kopf.operator(registry=registry, liveness_endpoint=f'http://127.0.0.1:{port}/healthz',
                                stop_flag=asyncio.Event())
    assert started == []


# --- kopf.EVERYTHING ---------------------------------------------------------------------------

PODS = Resource('', 'v1', 'pods', 'Pod', namespaced=True)
KEX = Resource('kopf.dev', 'v1', 'kopfexamples', 'KopfExample', namespaced=True)
KEX_OLD = Resource('kopf.dev', 'v1beta1', 'kopfexamples', 'KopfExample', namespaced=True)
CMS = Resource('', 'v1', 'configmaps', 'ConfigMap', namespaced=True)


async def test_everything_adds_every_other_served_resource_once(monkeypatch):
    async def resolve(*, context, selector):
        return {'kopfexamples': KEX_OLD}[selector.name]

    async def scan(*, context, all_versions=False):
        return [PODS, KEX, CMS]

    monkeypatch.setattr(observation.discovery, 'resolve', resolve)
    monkeypatch.setattr(observation.discovery, 'scan', scan)
    explicit = Selector(name='kopfexamples')
    resolution = await observation.resolve(None, [explicit, Selector(everything=True)])
    assert resolution.resources == {
        explicit: KEX_OLD,  # named explicitly: in its own version, and not watched again
        Selector(group='', version='v1', plural='pods'): PODS,
        Selector(group='', version='v1', plural='configmaps'): CMS,
    }


async def test_without_everything_nothing_is_scanned(monkeypatch):
    async def scan(*, context, all_versions=False):
        raise AssertionError("must not scan")

    async def resolve(*, context, selector):
        return PODS

    monkeypatch.setattr(observation.discovery, 'resolve', resolve)
    monkeypatch.setattr(observation.discovery, 'scan', scan)
    resolution = await observation.resolve(None, [Selector(name='pods')])
    assert resolution.resources == {Selector(name='pods'): PODS}


def test_handlers_of_everything_serve_every_watched_resource():
    registry = OperatorRegistry()
    kopf.on.event(kopf.EVERYTHING, labels={'app': 'demo'}, registry=registry)(everything_fn := lambda **_: None)
    kopf.on.event('pods', registry=registry)(pods_fn := lambda **_: None)
    by_name = Selector(name='pods')
    scanned = Selector(group='', version='v1', plural='configmaps')
    assert [h.fn for h in registry.get_watching_handlers(by_name)] == [everything_fn, pods_fn]
    assert [h.fn for h in registry.get_watching_handlers(scanned)] == [everything_fn]
    assert [h.fn for h in registry.get_watching_handlers(CMS)] == [everything_fn]


async def test_categories_and_callables_add_what_they_select(monkeypatch):
    apps = Resource('apps', 'v1', 'deployments', 'Deployment', categories=frozenset({'all'}))
    pods = Resource('', 'v1', 'pods', 'Pod', categories=frozenset({'all'}))
    scans = []

    async def scan(*, context, all_versions=False):
        scans.append(all_versions)
        return [pods, apps, KEX, dataclasses.replace(KEX_OLD, preferred=False), CMS]

    monkeypatch.setattr(observation.discovery, 'scan', scan)
    by_category, by_callable = Selector(category='all'), Selector(predicate=lambda r: r.group == 'kopf.dev')
    resolved = (await observation.resolve(None, [by_category, by_callable])).resources
    assert scans == [True]  # a callable chooses among all versions
    assert set(resolved.values()) == {pods, apps, KEX, KEX_OLD}
    assert resolved[Selector(group='kopf.dev', version='v1beta1', plural='kopfexamples')] == KEX_OLD


def test_handlers_of_categories_and_callables_serve_the_resources_they_select():
    registry = OperatorRegistry()
    kopf.on.event(category='all', registry=registry)(all_fn := lambda **_: None)
    kopf.on.event(lambda r: r.plural == 'configmaps', registry=registry)(cms_fn := lambda **_: None)
    kopf.on.event('v1', 'ConfigMap', registry=registry)(kind_fn := lambda **_: None)
    pods = Resource('', 'v1', 'pods', 'Pod', categories=frozenset({'all'}))
    assert [h.fn for h in registry.get_watching_handlers(pods)] == [all_fn]
    assert [h.fn for h in registry.get_watching_handlers(CMS)] == [cms_fn, kind_fn]
    kopf.on.event(kind='Pod', registry=registry)(pod_fn := lambda **_: None)  # a registration renews the memo
    assert [h.fn for h in registry.get_watching_handlers(pods)] == [all_fn, pod_fn]
async def test_peering_arguments_go_into_the_config_before_startup(monkeypatch):
    registry = OperatorRegistry()
    config = OperatorConfig()
    seen = []

    @kopf.on.startup(registry=registry)
    def configure(config, **_):
        seen.append((config.peering.mode, config.peering.name, config.peering.namespace, config.peering.identity))

    async def no_login(**_):
        raise running.OperatorError("stop here")

    monkeypatch.setattr(running, '_login', no_login)
    with pytest.raises(running.OperatorError, match='stop here'):
        await running.operator(registry=registry, config=config, shards=True, peering_name='op',
                               peering_namespace='ns', identity='me')
    assert seen == [('shards', 'op', 'ns', 'me')]


@pytest.mark.parametrize('name, flags, mode', [
    ('op', {}, 'ha'),  # as in Kopf: a peering name alone means coordinated replicas
    ('op', {'standalone': True}, 'standalone'),
    ('op', {'shards': True}, 'shards'),
    (None, {}, 'standalone'),
])
def test_a_peering_name_alone_means_ha_replicas_as_in_kopf(name, flags, mode):
    config = OperatorConfig()
    running._configure_peering(config, **{'standalone': False, 'ha': False, 'shards': False, **flags}, name=name,
                               namespace=None, identity=None, priority=5)
    assert (config.peering.mode, config.peering.priority) == (mode, 5)


async def test_conflicting_peering_arguments_stop_the_operator_at_once():
    with pytest.raises(running.OperatorError, match='standalone and ha'):
        await running.operator(registry=OperatorRegistry(), standalone=True, ha=True)


async def test_the_api_session_takes_the_request_limit_from_the_config():
    config = OperatorConfig()
    config.networking.max_concurrent_requests = 7
    info = kopf.ConnectionInfo(server='https://k8s:6443')
    context = running._api_context(info, config=config, relogin=None)
    assert context.slots.limit == 7


async def test_the_api_session_takes_the_idle_connection_timeout_from_the_config():
    config = OperatorConfig()
    config.networking.idle_connection_timeout = 2.5
    context = running._api_context(kopf.ConnectionInfo(server='https://k8s:6443'), config=config, relogin=None)
    assert context.idle_timeout == 2.5


@pytest.mark.parametrize('value', [0, -1, 'soon', True])
def test_a_bad_idle_connection_timeout_is_refused_with_the_setting_named(value):
    config = OperatorConfig()
    config.networking.idle_connection_timeout = value
    with pytest.raises(running.OperatorError, match=r'config\.networking\.idle_connection_timeout .* got '):
        running._api_context(kopf.ConnectionInfo(server='https://k8s:6443'), config=config, relogin=None)


def test_a_request_limit_below_one_is_refused_with_the_setting_named():
    config = OperatorConfig()
    config.networking.max_concurrent_requests = 0
    with pytest.raises(running.OperatorError, match=r'config\.networking\.max_concurrent_requests .* got 0'):
        running._api_context(kopf.ConnectionInfo(server='https://k8s:6443'), config=config, relogin=None)
# --- Indexes --------------------------------------------------------------------------------------

async def test_handlers_of_any_resource_wait_until_every_indexed_listing_is_in(monkeypatch):
    registry = OperatorRegistry()
    pods, kex = Selector.from_args('pods'), Selector.from_args('kopfexamples')
    resources = {pods: Resource('', 'v1', 'pods', 'Pod'), kex: Resource('kopf.dev', 'v1', 'kopfexamples', 'KEx')}
    kopf.index('pods', id='pod_names', registry=registry)(lambda name, **_: name)
    seen = []

    @kopf.on.event('kopfexamples', registry=registry)
    async def examples(name, pod_names, **_):  # in the event loop: nothing of it runs while the loop is idle
        seen.append((name, sorted(pod_names.get(None, []))))

    release_pods = asyncio.Event()
    listed = set()  # the namespaces whose kopfexamples are listed
    stop = asyncio.Event()

    async def fake_watch(*, resource, namespace, stop, on_listed, **_):
        def obj(name):
            return {'type': None, 'object': {'metadata': {'name': name, 'namespace': namespace, 'uid': name}}}
        if resource.plural == 'pods':
            await release_pods.wait()
            yield obj(f'pod-{namespace}')
        else:
            yield obj(f'ex-{namespace}')
            listed.add(namespace)
        on_listed()
        await stop.wait()

    monkeypatch.setattr(running.watching, 'infinite_watch', fake_watch)
    config = OperatorConfig()
    config.batching.exit_timeout = 0.1
    config.batching.batch_window = 0  # no timer between an event and its handling: only the indexes hold it back
    context = running._api_context(kopf.ConnectionInfo(server='https://k8s:6443'), config=config, relogin=None)
    task = asyncio.create_task(running._watch_all(
        context=context, insights=observation.Insights(resources=resources, namespaces=['ns1', 'ns2']),
        registry=registry, config=config, memo=None, stop=stop, ready_flag=None))
    await until(lambda: listed == {'ns1', 'ns2'})
    await idle()
    assert seen == []  # the kopfexamples are listed, but the pods are not indexed yet

    release_pods.set()
    await until(lambda: len(seen) == 2)
    stop.set()
    await asyncio.wait_for(task, timeout=5)
    assert sorted(seen) == [('ex-ns1', ['pod-ns1', 'pod-ns2']), ('ex-ns2', ['pod-ns1', 'pod-ns2'])]


def test_running_the_operator_process_lets_big_buffers_go_back_to_the_system(monkeypatch):
    steps: list[str] = []

    async def operator(**kwargs):
        steps.append(f"operator {sorted(kwargs)}")

    monkeypatch.setattr(running.allocation, 'return_big_buffers', lambda: steps.append('allocator') or True)
    monkeypatch.setattr(running, 'operator', operator)
    running.run(standalone=True)
    assert steps == ['allocator', "operator ['standalone']"]


def test_running_the_operator_process_trims_its_memory_when_quiet_until_it_ends(monkeypatch):
    steps: list[str] = []

    async def trim_when_quiet():
        steps.append('trimmer started')
        try:
            await asyncio.Event().wait()
        finally:
            steps.append('trimmer ended')

    async def operator(**kwargs):
        await asyncio.sleep(0)  # the trimmer starts meanwhile
        steps.append('operator ran')

    monkeypatch.setattr(running.allocation, 'return_big_buffers', lambda: True)
    monkeypatch.setattr(running.allocation, 'trim_when_quiet', trim_when_quiet)
    monkeypatch.setattr(running, 'operator', operator)
    running.run()
    assert steps == ['trimmer started', 'operator ran', 'trimmer ended']



# --- a watch that fails for good -----------------------------------------------------------------

KEX = Resource('kopf.dev', 'v1', 'kopfexamples', 'KopfExample', namespaced=True)


def test_a_forbidden_watch_names_the_resource_the_namespace_and_the_verbs_to_grant():
    error = APIForbiddenError('403 Forbidden: cannot list resource "kopfexamples"', status=403)
    line = running.watch_failure(error, KEX, 'ns1')
    assert line.startswith("Watching kopfexamples.v1.kopf.dev in 'ns1' is forbidden: ")
    assert 'cannot list resource "kopfexamples"' in line
    assert "the 'list' and 'watch' verbs on kopfexamples in its Role or ClusterRole" in line


def test_other_watch_failures_say_what_they_mean_or_name_the_error():
    unreachable = running.watch_failure(APIConnectionError('connection refused'), KEX, None)
    assert unreachable.startswith("Watching kopfexamples.v1.kopf.dev cluster-wide has failed: Cannot reach")
    unexpected = running.watch_failure(ValueError('odd'), KEX, 'ns1')
    assert unexpected == "Watching kopfexamples.v1.kopf.dev in 'ns1' has failed: ValueError: odd"


async def test_a_malformed_namespace_pattern_stops_the_operator_before_anything_runs():
    registry = OperatorRegistry()
    started = []
    kopf.on.startup(registry=registry)(lambda **_: started.append(1))
    with pytest.raises(running.OperatorError, match=r"Invalid namespace pattern 'myapp-\*,'"):
        await kopf.operator(registry=registry, namespaces=['ns1', 'myapp-*,'])
    assert started == []


async def test_namespace_patterns_reach_the_operator_parsed(monkeypatch):
    seen = {}

    async def serve(**kwargs):
        seen.update(kwargs)

    monkeypatch.setattr(running, '_serve', serve)
    await kopf.operator(namespaces=['myapp-*,!*-pr-*'], namespace='tools')
    assert seen['scope'].select(['myapp-live', 'myapp-pr-1', 'tools', 'other']) == {'myapp-live', 'tools'}
    await kopf.operator(namespaces=['myapp-*'], clusterwide=True)
    assert seen['scope'] is None  # cluster-wide wins, as before
