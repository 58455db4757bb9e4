import asyncio
import base64
import logging
import os
import subprocess
import sys
import textwrap

import pytest
import yaml

import kopf
from kopf._kube import auth
from kopf._kube.auth import LoginError, login_default, login_via_incluster, login_via_kubeconfig
from kopf._structs.credentials import ConnectionInfo


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    """No test may see the real kubeconfig or the real pod environment of the machine."""
    monkeypatch.delenv('KUBECONFIG', raising=False)
    monkeypatch.delenv('KUBERNETES_SERVICE_HOST', raising=False)
    monkeypatch.delenv('KUBERNETES_SERVICE_PORT', raising=False)
    monkeypatch.setenv('HOME', str(tmp_path / 'home'))
    monkeypatch.setattr(auth, 'SERVICE_ACCOUNT_DIR', str(tmp_path / 'no-service-account'))


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode('ascii')


def write_kubeconfig(path, *, clusters, users, contexts, current=None):
    doc = {
        'apiVersion': 'v1',
        'kind': 'Config',
        'clusters': [{'name': name, 'cluster': cluster} for name, cluster in clusters.items()],
        'users': [{'name': name, 'user': user} for name, user in users.items()],
        'contexts': [{'name': name, 'context': context} for name, context in contexts.items()],
    }
    if current is not None:
        doc['current-context'] = current
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return path


def simple_kubeconfig(path, *, server='https://k8s:6443', user=None, cluster_extra=None, namespace=None):
    context = {'cluster': 'c1', 'user': 'u1'}
    if namespace:
        context['namespace'] = namespace
    return write_kubeconfig(
        path,
        clusters={'c1': {'server': server, **(cluster_extra or {})}},
        users={'u1': user or {'token': 'tkn'}},
        contexts={'ctx1': context},
        current='ctx1',
    )


# --- Kubeconfig ----------------------------------------------------------------------------------

def test_kubeconfig_with_a_bearer_token(tmp_path):
    path = simple_kubeconfig(tmp_path / 'kubeconfig', user={'token': 'secret-token'}, namespace='ns1')
    info = login_via_kubeconfig(path)
    assert info == ConnectionInfo(server='https://k8s:6443', token='secret-token', default_namespace='ns1')


def test_kubeconfig_with_basic_auth(tmp_path):
    path = simple_kubeconfig(tmp_path / 'kubeconfig', user={'username': 'admin', 'password': 'pw'})
    info = login_via_kubeconfig(path)
    assert info.username == 'admin'
    assert info.password == 'pw'
    assert info.token is None


def test_kubeconfig_with_certificates_as_files_relative_to_the_kubeconfig(tmp_path, tls):
    (tmp_path / 'certs').mkdir()
    (tmp_path / 'certs' / 'ca.crt').write_bytes(tls.ca_cert)
    (tmp_path / 'certs' / 'client.crt').write_bytes(tls.client_cert)
    (tmp_path / 'certs' / 'client.key').write_bytes(tls.client_key)
    path = simple_kubeconfig(
        tmp_path / 'kubeconfig',
        cluster_extra={'certificate-authority': 'certs/ca.crt'},
        user={'client-certificate': 'certs/client.crt', 'client-key': str(tmp_path / 'certs' / 'client.key')},
    )
    info = login_via_kubeconfig(path)
    assert info.ca_path == str(tmp_path / 'certs' / 'ca.crt')
    assert info.certificate_path == str(tmp_path / 'certs' / 'client.crt')
    assert info.private_key_path == str(tmp_path / 'certs' / 'client.key')
    assert info.ca_data is None
    assert info.certificate_data is None
    assert info.private_key_data is None
    assert info.token is None


def test_kubeconfig_with_inline_certificate_data(tmp_path, tls):
    path = simple_kubeconfig(
        tmp_path / 'kubeconfig',
        cluster_extra={'certificate-authority-data': b64(tls.ca_cert)},
        user={'client-certificate-data': b64(tls.client_cert), 'client-key-data': b64(tls.client_key)},
    )
    info = login_via_kubeconfig(path)
    assert info.ca_data == tls.ca_cert
    assert info.certificate_data == tls.client_cert
    assert info.private_key_data == tls.client_key
    assert info.ca_path is None
    assert info.certificate_path is None
    assert info.private_key_path is None


def test_kubeconfig_insecure_skip_tls_verify(tmp_path):
    path = simple_kubeconfig(tmp_path / 'kubeconfig', cluster_extra={'insecure-skip-tls-verify': True})
    assert login_via_kubeconfig(path).insecure is True


def test_kubeconfig_is_secure_by_default(tmp_path):
    path = simple_kubeconfig(tmp_path / 'kubeconfig')
    assert login_via_kubeconfig(path).insecure is False


def test_kubeconfig_token_file(tmp_path):
    (tmp_path / 'token.txt').write_text('file-token\n')
    path = simple_kubeconfig(tmp_path / 'kubeconfig', user={'tokenFile': 'token.txt'})
    assert login_via_kubeconfig(path).token == 'file-token'


def test_kubeconfig_oidc_provider_token(tmp_path):
    path = simple_kubeconfig(tmp_path / 'kubeconfig', user={
        'auth-provider': {'name': 'oidc', 'config': {'id-token': 'oidc-token', 'idp-issuer-url': 'https://x'}},
    })
    assert login_via_kubeconfig(path).token == 'oidc-token'


def two_contexts(path):
    return write_kubeconfig(
        path,
        clusters={'dev': {'server': 'https://dev:6443'}, 'prod': {'server': 'https://prod:6443'}},
        users={'dev-user': {'token': 'dev-token'}, 'prod-user': {'token': 'prod-token'}},
        contexts={'dev': {'cluster': 'dev', 'user': 'dev-user', 'namespace': 'dev-ns'},
                  'prod': {'cluster': 'prod', 'user': 'prod-user'}},
        current='dev',
    )


def test_kubeconfig_uses_the_current_context(tmp_path):
    info = login_via_kubeconfig(two_contexts(tmp_path / 'kubeconfig'))
    assert info.server == 'https://dev:6443'
    assert info.token == 'dev-token'
    assert info.default_namespace == 'dev-ns'


def test_kubeconfig_uses_the_given_context(tmp_path):
    info = login_via_kubeconfig(two_contexts(tmp_path / 'kubeconfig'), context='prod')
    assert info.server == 'https://prod:6443'
    assert info.token == 'prod-token'
    assert info.default_namespace is None


def test_kubeconfig_unknown_context_is_a_login_error_naming_it(tmp_path):
    with pytest.raises(LoginError, match="'staging'"):
        login_via_kubeconfig(two_contexts(tmp_path / 'kubeconfig'), context='staging')


def test_kubeconfig_without_current_context_is_a_login_error(tmp_path):
    path = write_kubeconfig(tmp_path / 'kubeconfig', clusters={'c': {'server': 'https://k8s'}},
                            users={'u': {'token': 't'}}, contexts={'x': {'cluster': 'c', 'user': 'u'}})
    with pytest.raises(LoginError, match='no current-context'):
        login_via_kubeconfig(path)
    assert login_via_kubeconfig(path, context='x').token == 't'


def test_kubeconfig_empty_file_is_a_login_error(tmp_path):
    (tmp_path / 'kubeconfig').write_text('')
    with pytest.raises(LoginError, match='kubeconfig'):
        login_via_kubeconfig(tmp_path / 'kubeconfig')


def test_kubeconfig_missing_file_is_a_login_error_naming_it(tmp_path):
    with pytest.raises(LoginError, match='does-not-exist'):
        login_via_kubeconfig(tmp_path / 'does-not-exist')


def test_kubeconfig_missing_certificate_file_is_a_login_error(tmp_path):
    path = simple_kubeconfig(tmp_path / 'kubeconfig', cluster_extra={'certificate-authority': 'nope.crt'})
    with pytest.raises(LoginError, match=r'nope\.crt'):
        login_via_kubeconfig(path)


def test_kubeconfig_from_the_env_var(tmp_path, monkeypatch):
    path = simple_kubeconfig(tmp_path / 'custom', user={'token': 'env-token'})
    monkeypatch.setenv('KUBECONFIG', str(path))
    assert login_via_kubeconfig().token == 'env-token'


def test_kubeconfig_env_var_with_several_files_uses_the_first(tmp_path, monkeypatch):
    first = simple_kubeconfig(tmp_path / 'first', user={'token': 'first-token'})
    second = simple_kubeconfig(tmp_path / 'second', user={'token': 'second-token'})
    monkeypatch.setenv('KUBECONFIG', os.pathsep.join([str(first), str(second)]))
    assert login_via_kubeconfig().token == 'first-token'


def test_kubeconfig_defaults_to_the_home_directory(tmp_path):
    simple_kubeconfig(tmp_path / 'home' / '.kube' / 'config', user={'token': 'home-token'})
    assert login_via_kubeconfig().token == 'home-token'


def test_kubeconfig_explicit_path_wins_over_the_env_var(tmp_path, monkeypatch):
    explicit = simple_kubeconfig(tmp_path / 'explicit', user={'token': 'explicit-token'})
    env = simple_kubeconfig(tmp_path / 'env', user={'token': 'env-token'})
    monkeypatch.setenv('KUBECONFIG', str(env))
    assert login_via_kubeconfig(explicit).token == 'explicit-token'


# --- In-cluster ----------------------------------------------------------------------------------

@pytest.fixture()
def service_account(tmp_path, monkeypatch, tls):
    directory = tmp_path / 'serviceaccount'
    directory.mkdir()
    (directory / 'token').write_text('sa-token\n')
    (directory / 'ca.crt').write_bytes(tls.ca_cert)
    (directory / 'namespace').write_text('operator-ns')
    monkeypatch.setattr(auth, 'SERVICE_ACCOUNT_DIR', str(directory))
    monkeypatch.setenv('KUBERNETES_SERVICE_HOST', '10.0.0.1')
    monkeypatch.setenv('KUBERNETES_SERVICE_PORT', '443')
    return directory


def test_incluster_login(service_account):
    info = login_via_incluster()
    assert info == ConnectionInfo(
        server='https://10.0.0.1:443',
        ca_path=str(service_account / 'ca.crt'),
        token='sa-token',
        token_path=str(service_account / 'token'),
        default_namespace='operator-ns',
    )


def test_incluster_login_with_ipv6(service_account, monkeypatch):
    monkeypatch.setenv('KUBERNETES_SERVICE_HOST', 'fd00::1')
    assert login_via_incluster().server == 'https://[fd00::1]:443'


def test_incluster_login_outside_of_a_pod_fails(service_account, monkeypatch):
    monkeypatch.delenv('KUBERNETES_SERVICE_HOST')
    with pytest.raises(LoginError, match='KUBERNETES_SERVICE_HOST'):
        login_via_incluster()


def test_incluster_login_without_token_fails(service_account):
    (service_account / 'token').unlink()
    with pytest.raises(LoginError, match='token'):
        login_via_incluster()


def test_default_login_prefers_incluster_in_a_pod(service_account, tmp_path):
    simple_kubeconfig(tmp_path / 'home' / '.kube' / 'config', user={'token': 'home-token'})
    assert login_default().token == 'sa-token'


def test_default_login_uses_kubeconfig_outside_of_a_pod(tmp_path):
    simple_kubeconfig(tmp_path / 'home' / '.kube' / 'config', user={'token': 'home-token'})
    assert login_default().token == 'home-token'


def test_default_login_falls_back_to_kubeconfig_if_incluster_fails(service_account, tmp_path):
    (service_account / 'token').write_text('')
    simple_kubeconfig(tmp_path / 'home' / '.kube' / 'config', user={'token': 'home-token'})
    assert login_default().token == 'home-token'


def test_default_login_says_what_was_tried(tmp_path):
    with pytest.raises(LoginError) as excinfo:
        login_default()
    message = str(excinfo.value)
    assert 'in-cluster' in message
    assert 'kubeconfig' in message
    assert str(tmp_path / 'home' / '.kube' / 'config') in message


# --- Kopf-compatible login helpers ------------------------------------------------------------------

def test_login_with_service_account_outside_of_a_pod_gives_nothing():
    assert kopf.login_with_service_account() is None


def test_login_with_service_account_in_a_pod(service_account):
    info = kopf.login_with_service_account(logger=logging.getLogger(), memo=None)
    assert info.token == 'sa-token'
    assert info.token_path == str(service_account / 'token')


def test_login_with_kubeconfig_without_one_gives_nothing():
    assert kopf.login_with_kubeconfig() is None


def test_login_with_kubeconfig(tmp_path):
    simple_kubeconfig(tmp_path / 'home' / '.kube' / 'config', user={'token': 'home-token'})
    assert kopf.login_with_kubeconfig(logger=logging.getLogger()).token == 'home-token'


def test_login_via_pykube_from_a_kubeconfig(tmp_path, monkeypatch):
    path = simple_kubeconfig(tmp_path / 'kubeconfig', user={'token': 'pykube-token'}, namespace='ns1',
                             cluster_extra={'insecure-skip-tls-verify': True})
    monkeypatch.setenv('KUBECONFIG', str(path))
    info = kopf.login_via_pykube(logger=logging.getLogger())
    assert info == ConnectionInfo(server='https://k8s:6443', token='pykube-token', insecure=True,
                                  default_namespace='ns1')


@pytest.mark.parametrize('login', ['login_with_kubeconfig', 'login_with_service_account', 'login_via_pykube',
                                   'login_default'])
def test_the_built_in_logins_trust_the_environment_if_the_settings_say_so(login, service_account, tmp_path,
                                                                          monkeypatch):
    simple_kubeconfig(tmp_path / 'home' / '.kube' / 'config')
    if login != 'login_with_service_account':
        monkeypatch.delenv('KUBERNETES_SERVICE_HOST')
    settings = kopf.OperatorSettings()

    assert not getattr(kopf, login)(settings=settings).trust_env
    settings.networking.trust_env = True
    assert getattr(kopf, login)(settings=settings).trust_env


def test_login_via_pykube_without_configuration_gives_nothing():
    assert kopf.login_via_pykube() is None


@pytest.fixture()
def client_default():
    """The official client's process-wide default configuration, restored after the test."""
    import kubernetes
    kubernetes.client.Configuration.set_default(None)
    yield kubernetes.client.Configuration
    kubernetes.client.Configuration.set_default(None)


def test_login_via_client_from_a_kubeconfig(tmp_path, monkeypatch, tls, client_default):
    (tmp_path / 'ca.crt').write_bytes(tls.ca_cert)
    path = simple_kubeconfig(tmp_path / 'kubeconfig', user={'token': 'client-token'},
                             cluster_extra={'certificate-authority': str(tmp_path / 'ca.crt')})
    monkeypatch.setenv('KUBECONFIG', str(path))
    info = kopf.login_via_client(logger=logging.getLogger())
    assert info.server == 'https://k8s:6443'
    assert info.token == 'client-token'
    assert info.scheme == 'Bearer'
    assert info.ca_path == str(tmp_path / 'ca.crt')
    assert info.insecure is False
    assert client_default.get_default_copy().host == 'https://k8s:6443'  # as in Kopf: the handlers' clients too
    assert not info.trust_env
    settings = kopf.OperatorSettings()
    settings.networking.trust_env = True
    assert kopf.login_via_client(logger=logging.getLogger(), settings=settings).trust_env


def test_login_via_client_without_configuration_gives_nothing(client_default):
    assert kopf.login_via_client() is None


async def test_login_via_async_client_from_a_kubeconfig(tmp_path, monkeypatch):
    path = simple_kubeconfig(tmp_path / 'kubeconfig', user={'token': 'async-token'})
    monkeypatch.setenv('KUBECONFIG', str(path))
    info = await kopf.login_via_async_client(logger=logging.getLogger())
    assert info.server == 'https://k8s:6443'
    assert info.token == 'async-token'
    assert not info.trust_env
    settings = kopf.OperatorSettings()
    settings.networking.trust_env = True
    assert (await kopf.login_via_async_client(logger=logging.getLogger(), settings=settings)).trust_env


@pytest.mark.parametrize('module, login, package', [
    ('kubernetes', kopf.login_via_client, 'pip install kubernetes'),
    ('kubernetes_asyncio', kopf.login_via_async_client, 'pip install kubernetes_asyncio'),
    ('pykube', kopf.login_via_pykube, 'pip install pykube-ng'),
])
async def test_login_via_a_missing_client_says_what_to_install(monkeypatch, module, login, package):
    monkeypatch.setitem(sys.modules, module, None)  # makes the import fail
    with pytest.raises(LoginError, match=package):
        result = login()
        if asyncio.iscoroutine(result):
            await result


# --- The official client, configured for handlers that use it without loading a configuration ----

def official_client_default(tmp_path, script):
    """Run a script in a fresh interpreter (imports are for good), with a kubeconfig; return its output."""
    path = simple_kubeconfig(tmp_path / 'kubeconfig', server='https://from-kubeconfig:6443', user={'token': 't'})
    env = {**os.environ, 'KUBECONFIG': str(path), 'PYTHONPATH': os.pathsep.join(sys.path)}
    env.pop('KUBERNETES_SERVICE_HOST', None)
    result = subprocess.run([sys.executable, '-c', textwrap.dedent(script)], capture_output=True, text=True,
                            env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_the_official_client_imported_before_the_login_is_configured_by_it(tmp_path):
    assert official_client_default(tmp_path, """
        import kubernetes
        from kopf._kube import auth
        auth.configure_official_client()
        print(kubernetes.client.CoreV1Api().api_client.configuration.host)
    """) == 'https://from-kubeconfig:6443'


def test_the_official_client_imported_after_the_login_is_configured_on_its_import(tmp_path):
    assert official_client_default(tmp_path, """
        import sys
        from kopf._kube import auth
        auth.configure_official_client()
        assert 'kubernetes' not in sys.modules  # not imported for nothing
        from kubernetes import client
        print(client.CoreV1Api().api_client.configuration.host)
    """) == 'https://from-kubeconfig:6443'


def test_an_official_client_that_finds_no_configuration_does_not_stop_the_login(tmp_path):
    assert official_client_default(tmp_path, """
        import os
        os.environ['KUBECONFIG'] = '/nonexistent/kubeconfig'
        from kopf._kube import auth
        auth.configure_official_client()
        import kubernetes
        print(kubernetes.client.Configuration.get_default_copy().host == kubernetes.client.Configuration().host)
    """) == 'True'  # the client's own default, untouched
