"""
Kopf's authentication forms (its "Authentication" page): login handlers and the credentials' helpers.
"""
import datetime
import importlib.metadata

import aiohttp

import kopf
from kopf._handlers.registries import OperatorRegistry
from kopf._runtime import running

KUBECONFIG = '''
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: 'https://from-kubeconfig.invalid'}}]
users: [{name: u, user: {token: abc}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
'''


def test_the_version_is_public_for_user_agents_as_in_kopf():
    user_agent = f'myoperator/1.2.3 kopf/{kopf.__version__}'

    assert user_agent == f"myoperator/1.2.3 kopf/{importlib.metadata.version('kopf')}"


async def test_a_login_handler_gives_every_documented_field_as_in_kopf():
    registry = OperatorRegistry()
    given = kopf.ConnectionInfo(
        server='https://localhost', proxy_url='http://localhost:8080', ca_path='/etc/ssl/ca.crt', ca_data=b'...',
        insecure=True, username='user', password='pass', scheme='Bearer', token='token',
        certificate_path='~/.minikube/client.crt', private_key_path='~/.minikube/client.key',
        certificate_data=b'...', private_key_data=b'...', trust_env=True,
        expiration=datetime.datetime(2099, 12, 31, 23, 59, 59))

    @kopf.on.login(registry=registry)
    async def login_fn(**_):
        return given

    info = await running._login(registry=registry, config=kopf.OperatorSettings(), memo=None)

    assert info == given
    # A naive expiration is UTC, as in Kopf.
    assert info.expires_at == datetime.datetime(2099, 12, 31, 23, 59, 59, tzinfo=datetime.timezone.utc)


async def test_the_rudimentary_logins_combine_as_in_kopf(monkeypatch, tmp_path):
    kubeconfig = tmp_path / 'config'
    kubeconfig.write_text(KUBECONFIG)
    monkeypatch.setenv('KUBECONFIG', str(kubeconfig))
    monkeypatch.delenv('KUBERNETES_SERVICE_HOST', raising=False)
    registry = OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login_fn(**kwargs):
        return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

    info = await running._login(registry=registry, config=kopf.OperatorSettings(), memo=None)

    assert (info.server, info.token) == ('https://from-kubeconfig.invalid', 'abc')


def test_the_credentials_make_a_custom_session_as_in_kopf():
    for info in [kopf.ConnectionInfo(server='https://localhost', username='user', password='pass'),
                 kopf.ConnectionInfo(server='https://localhost', token='token')]:
        headers = info.as_http_headers()
        auth = info.as_aiohttp_basic_auth()

        # Both go into the session as Kopf's example puts them; they never authenticate twice.
        assert auth is None or isinstance(auth, aiohttp.BasicAuth)
        assert ('Authorization' in headers) != (auth is not None)
