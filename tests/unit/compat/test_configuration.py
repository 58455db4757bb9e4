"""
Kopf's settings (its "Configuration" page and the settings named on the other pages).

Every documented setting exists under Kopf's name, with Kopf's default
unless it differs on purpose; the settings that act are checked by their
effect.
"""
import concurrent.futures
import logging
import threading

import pytest

import kopf
from kopf._handlers.registries import OperatorRegistry
from kopf._runtime import running
from tests.unit.conftest import RESOURCE

KOPFS_DEFAULTS = [
    ('posting.enabled', True),
    ('posting.level', logging.INFO),
    ('posting.loggers', False),
    ('posting.reporting_component', 'kopf'),
    ('posting.event_name_prefix', 'kopf-event-'),
    ('watching.server_timeout', None),
    ('watching.client_timeout', None),
    ('watching.connect_timeout', None),
    ('watching.reconnect_backoff', 0.1),
    ('networking.trust_env', False),
    ('networking.enforce_retry_after', False),
    ('execution.max_workers', None),
    ('execution.default_backoff', 60),
    ('persistence.finalizer', 'kopf.zalando.org/KopfFinalizerMarker'),
    ('persistence.consistency_timeout', 5.0),
    ('scanning.disabled', False),
    ('queueing.worker_limit', None),
    ('queueing.batch_window', 0.1),
    ('queueing.idle_timeout', 5.0),
    ('queueing.exit_timeout', 2.0),
    ('queueing.error_delays', (1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610)),
    ('background.cancellation_polling', 60),
    ('background.instant_exit_zero_time_cycles', 10),
    ('peering.priority', 0),
    ('peering.mandatory', False),
    ('peering.stealth', False),
    ('admission.server', None),
    ('admission.managed', None),
]


def setting(settings, path):
    group, name = path.split('.')
    return getattr(getattr(settings, group), name)


@pytest.mark.parametrize('path, default', KOPFS_DEFAULTS, ids=[path for path, _ in KOPFS_DEFAULTS])
def test_kopfs_settings_exist_with_kopfs_defaults(path, default):
    assert setting(kopf.OperatorSettings(), path) == default


def test_some_defaults_differ_from_kopfs_on_purpose():
    settings = kopf.OperatorSettings()
    # Every attempt of a request is limited and retried, rather than one long attempt (Kopf: 300 s, no
    # connect timeout, 8 retries over about a minute).
    assert settings.networking.request_timeout == 60
    assert settings.networking.connect_timeout == 10
    assert tuple(settings.networking.error_backoffs) == (0.5, 1, 2, 4)
    # A silent watch stream is given up after 3 missed bookmarks rather than after one (Kopf: 70 s).
    assert settings.watching.inactivity_timeout == 180
    # Events name the pod (or the host) that posted them (Kopf: 'dev').
    assert settings.posting.reporting_instance != 'dev'


@pytest.mark.parametrize('value', [1.5, 2])
def test_a_single_number_is_one_error_backoff_as_in_kopf(value):
    settings = kopf.OperatorSettings()
    settings.networking.error_backoffs = value

    context = running._api_context(kopf.ConnectionInfo(server='https://localhost'), config=settings, relogin=None)

    assert list(context.backoffs) == [value]
    assert list(context.backoffs) == [value]  # re-iterable: once per failing request


async def test_trust_env_reaches_the_credentials_of_the_built_in_logins_as_in_kopf(monkeypatch, tmp_path):
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
    settings = kopf.OperatorSettings()
    settings.networking.trust_env = True

    explicit = kopf.login_with_kubeconfig(settings=settings)
    implicit = await running._login(registry=OperatorRegistry(), config=settings, memo=None)

    assert explicit is not None and explicit.trust_env
    assert implicit.trust_env


async def test_sync_handlers_run_in_the_configured_executor_as_in_kopf(server, registry, config):
    calls = []
    config.execution.executor = concurrent.futures.ThreadPoolExecutor(thread_name_prefix='my-executor')

    @kopf.on.create(*RESOURCE, registry=registry)
    def create_fn(**kwargs):
        calls.append(threading.current_thread().name)

    await server.run()

    assert [name.split('_')[0] for name in calls] == ['my-executor']


def test_a_mandatory_peering_makes_the_replicas_coordinate_as_in_kopf():
    settings = kopf.OperatorSettings()
    assert not settings.peering.mandatory

    settings.peering.name = 'example'
    settings.peering.mandatory = True

    assert settings.peering.mode == 'ha' and settings.peering.mandatory
    settings.peering.validate()
    settings.peering.standalone = True  # Kopf's standalone mode wins over a peering
    assert settings.peering.mode == 'standalone' and not settings.peering.mandatory
