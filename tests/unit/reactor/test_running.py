"""The operator's start: login and resource resolution (the rest is proven end-to-end)."""
import pytest

import kopf
from kopf.config import OperatorConfig
from kopf.reactor import running
from kopf.reactor.registries import OperatorRegistry


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


async def test_conflicting_peering_arguments_stop_the_operator_at_once():
    with pytest.raises(running.OperatorError, match='standalone and ha'):
        await running.operator(registry=OperatorRegistry(), standalone=True, ha=True)
