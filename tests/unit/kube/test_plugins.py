"""Exec credential plugins of kubeconfigs, run for real as small scripts."""
import datetime
import json
import sys
import textwrap

import pytest
import yaml

from kopf._kube.auth import LoginError, login_via_kubeconfig

SECRET = 'plugin-s3cret-token'


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    monkeypatch.delenv('KUBECONFIG', raising=False)
    monkeypatch.delenv('KUBERNETES_EXEC_INFO', raising=False)
    monkeypatch.setenv('HOME', str(tmp_path / 'home'))


def plugin(tmp_path, body, name='plugin.py'):
    """An executable Python script; it sees `exec_info` (the parsed KUBERNETES_EXEC_INFO) and `log`."""
    path = tmp_path / name
    path.write_text(f'#!{sys.executable}\n' + textwrap.dedent('''
        import json, os, sys
        exec_info = json.loads(os.environ['KUBERNETES_EXEC_INFO'])
        log = open(os.path.join(os.path.dirname(__file__), 'calls.log'), 'a')
        log.write(json.dumps({'info': exec_info, 'argv': sys.argv[1:], 'env': os.environ.get('PLUGIN_ENV')}) + '\\n')
        log.close()
    ''') + textwrap.dedent(body))
    path.chmod(0o755)
    return path


def calls(tmp_path):
    log = tmp_path / 'calls.log'
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def kubeconfig(tmp_path, exec_config, cluster_extra=None):
    doc = {
        'apiVersion': 'v1', 'kind': 'Config', 'current-context': 'ctx',
        'clusters': [{'name': 'c', 'cluster': {'server': 'https://k8s:6443', **(cluster_extra or {})}}],
        'users': [{'name': 'u', 'user': {'exec': exec_config}}],
        'contexts': [{'name': 'ctx', 'context': {'cluster': 'c', 'user': 'u'}}],
    }
    path = tmp_path / 'kubeconfig'
    path.write_text(yaml.safe_dump(doc))
    return path


def credential(version, **status):
    return json.dumps({'apiVersion': f'client.authentication.k8s.io/{version}', 'kind': 'ExecCredential',
                       'status': status})


@pytest.mark.parametrize('version', ['v1', 'v1beta1'])
def test_a_token_from_the_plugin(tmp_path, version):
    plugin(tmp_path, f'print({credential(version, token=SECRET)!r})')
    path = kubeconfig(tmp_path, {'apiVersion': f'client.authentication.k8s.io/{version}',
                                 'command': './plugin.py', 'args': ['--flag', 'x'],
                                 'env': [{'name': 'PLUGIN_ENV', 'value': 'from-kubeconfig'}],
                                 'interactiveMode': 'Never'})
    info = login_via_kubeconfig(path)
    assert info.token == SECRET
    assert info.server == 'https://k8s:6443'
    assert info.expiration is None
    [call] = calls(tmp_path)
    assert call['argv'] == ['--flag', 'x']
    assert call['env'] == 'from-kubeconfig'
    assert call['info'] == {'apiVersion': f'client.authentication.k8s.io/{version}', 'kind': 'ExecCredential',
                            'spec': {'interactive': False}}


def test_a_client_certificate_from_the_plugin(tmp_path, tls):
    status = {'clientCertificateData': tls.client_cert.decode(), 'clientKeyData': tls.client_key.decode()}
    plugin(tmp_path, f'print({credential("v1", **status)!r})')
    info = login_via_kubeconfig(kubeconfig(tmp_path, {'apiVersion': 'client.authentication.k8s.io/v1',
                                                      'command': './plugin.py', 'interactiveMode': 'Never'}))
    assert info.certificate_data == tls.client_cert
    assert info.private_key_data == tls.client_key
    assert info.token is None


def test_the_expiration_is_kept(tmp_path):
    plugin(tmp_path, f'print({credential("v1", token=SECRET, expirationTimestamp="2030-01-02T03:04:05Z")!r})')
    info = login_via_kubeconfig(kubeconfig(tmp_path, {'apiVersion': 'client.authentication.k8s.io/v1',
                                                      'command': './plugin.py', 'interactiveMode': 'Never'}))
    assert info.expiration == datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)


def test_cluster_info_is_provided_when_asked(tmp_path):
    plugin(tmp_path, f'print({credential("v1", token=SECRET)!r})')
    login_via_kubeconfig(kubeconfig(
        tmp_path,
        {'apiVersion': 'client.authentication.k8s.io/v1', 'command': './plugin.py', 'interactiveMode': 'Never',
         'provideClusterInfo': True},
        cluster_extra={'extensions': [{'name': 'client.authentication.k8s.io/exec',
                                       'extension': {'audience': 'op'}}]}))
    [call] = calls(tmp_path)
    assert call['info']['spec']['cluster'] == {'server': 'https://k8s:6443', 'config': {'audience': 'op'}}


def test_a_bare_command_is_found_on_the_path(tmp_path, monkeypatch):
    plugin(tmp_path, f'print({credential("v1", token=SECRET)!r})', name='kopf-test-plugin')
    monkeypatch.setenv('PATH', f"{tmp_path}:{__import__('os').environ['PATH']}")
    info = login_via_kubeconfig(kubeconfig(tmp_path, {'apiVersion': 'client.authentication.k8s.io/v1',
                                                      'command': 'kopf-test-plugin', 'interactiveMode': 'Never'}))
    assert info.token == SECRET


def test_a_missing_command_shows_the_install_hint(tmp_path):
    path = kubeconfig(tmp_path, {'apiVersion': 'client.authentication.k8s.io/v1', 'command': 'no-such-plugin-xyz',
                                 'installHint': 'Install it with: brew install no-such-plugin'})
    with pytest.raises(LoginError, match=r"'no-such-plugin-xyz' of the user 'u' is not found.*brew install"):
        login_via_kubeconfig(path)


def test_a_failing_plugin_shows_its_error_output(tmp_path):
    plugin(tmp_path, 'sys.stderr.write("the SSO session has expired; run `login`\\n"); sys.exit(3)')
    path = kubeconfig(tmp_path, {'apiVersion': 'client.authentication.k8s.io/v1', 'command': './plugin.py'})
    with pytest.raises(LoginError, match=r'failed with exit code 3: the SSO session has expired'):
        login_via_kubeconfig(path)


def test_invalid_output_is_not_shown(tmp_path):
    plugin(tmp_path, f'print("token: {SECRET} (oops, not JSON)")')
    path = kubeconfig(tmp_path, {'apiVersion': 'client.authentication.k8s.io/v1', 'command': './plugin.py'})
    with pytest.raises(LoginError, match='no valid JSON') as excinfo:
        login_via_kubeconfig(path)
    assert SECRET not in str(excinfo.value)


@pytest.mark.parametrize('output, problem', [
    (credential('v1beta1', token=SECRET), "apiVersion 'client.authentication.k8s.io/v1beta1'"),
    (credential('v1'), 'neither a token nor a client certificate'),
    (credential('v1', token=SECRET, expirationTimestamp='tomorrow'), 'invalid expirationTimestamp'),
    (json.dumps({'kind': 'Secret', 'data': SECRET}), 'no ExecCredential'),
])
def test_wrong_credentials_are_refused_clearly(tmp_path, output, problem):
    plugin(tmp_path, f'print({output!r})')
    path = kubeconfig(tmp_path, {'apiVersion': 'client.authentication.k8s.io/v1', 'command': './plugin.py'})
    with pytest.raises(LoginError, match=problem) as excinfo:
        login_via_kubeconfig(path)
    assert SECRET not in str(excinfo.value)


def test_interactive_plugins_are_refused(tmp_path):
    path = kubeconfig(tmp_path, {'apiVersion': 'client.authentication.k8s.io/v1', 'command': './plugin.py',
                                 'interactiveMode': 'Always'})
    with pytest.raises(LoginError, match='interactive terminal'):
        login_via_kubeconfig(path)


def test_unknown_api_versions_are_refused(tmp_path):
    path = kubeconfig(tmp_path, {'apiVersion': 'client.authentication.k8s.io/v1alpha1', 'command': './plugin.py'})
    with pytest.raises(LoginError, match='unsupported apiVersion'):
        login_via_kubeconfig(path)
