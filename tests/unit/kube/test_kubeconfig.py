"""Reading kubeconfigs: errors name the file, the line and the field, but never show the file's content."""
import base64

import pytest
import yaml

from kopf._kube import kubeconfig
from kopf._kube.auth import LoginError, login_via_kubeconfig

SECRET = 'sEcReT-t0ken-do-not-print'


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    monkeypatch.delenv('KUBECONFIG', raising=False)
    monkeypatch.setenv('HOME', str(tmp_path / 'home'))


def config(**user):
    return {
        'apiVersion': 'v1', 'kind': 'Config', 'current-context': 'ctx',
        'clusters': [{'name': 'c', 'cluster': {'server': 'https://k8s:6443'}}],
        'users': [{'name': 'u', 'user': user or {'token': SECRET}}],
        'contexts': [{'name': 'ctx', 'context': {'cluster': 'c', 'user': 'u'}}],
    }


def write(path, doc):
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return path


BROKEN_YAML = [
    # an unclosed quote right after the token
    f'users:\n- name: u\n  user:\n    token: "{SECRET}\n',
    # a tab in the indentation of the token line
    f'users:\n- name: u\n  user:\n\ttoken: {SECRET}\n',
    # a mapping value where none is allowed, on the token line
    f'users:\n- name: u\n  user:\n    token: {SECRET}: more\n',
    # bad indentation after the token line
    f'users:\n- name: u\n  user:\n    token: {SECRET}\n   - x\n',
]


@pytest.mark.parametrize('text', BROKEN_YAML)
def test_broken_yaml_names_the_file_and_line_but_never_shows_the_content(tmp_path, text):
    path = write(tmp_path / 'kubeconfig', text)
    with pytest.raises(LoginError) as excinfo:
        login_via_kubeconfig(path)
    message = str(excinfo.value)
    assert str(path) in message
    assert 'line ' in message
    assert SECRET not in message
    assert SECRET[:8] not in message
    assert excinfo.value.__cause__ is None and excinfo.value.__suppress_context__  # no chained YAML error either


def test_broken_yaml_says_which_line(tmp_path):
    path = write(tmp_path / 'kubeconfig', f'a: 1\nb: 2\nusers:\n\ttoken: {SECRET}\n')
    with pytest.raises(LoginError, match=r'line 4, column 1'):
        login_via_kubeconfig(path)


def test_a_tab_is_named_as_the_problem(tmp_path):
    path = write(tmp_path / 'kubeconfig', f'users:\n\ttoken: {SECRET}\n')
    with pytest.raises(LoginError, match=r"'\\t'"):
        login_via_kubeconfig(path)


@pytest.mark.parametrize('user, field', [
    ({'token': ['x', SECRET]}, "'token'"),
    ({'client-certificate-data': 'not base64!' + SECRET}, "'client-certificate-data'"),
    ({'username': {'nested': SECRET}}, "'username'"),
])
def test_invalid_fields_are_named_without_their_values(tmp_path, user, field):
    path = write(tmp_path / 'kubeconfig', config(**user))
    with pytest.raises(LoginError) as excinfo:
        login_via_kubeconfig(path)
    assert field in str(excinfo.value)
    assert "'u'" in str(excinfo.value)
    assert SECRET not in str(excinfo.value)


def test_a_list_at_the_top_is_not_a_kubeconfig(tmp_path):
    path = write(tmp_path / 'kubeconfig', f'- {SECRET}\n')
    with pytest.raises(LoginError, match='not a kubeconfig') as excinfo:
        login_via_kubeconfig(path)
    assert SECRET not in str(excinfo.value)


def test_an_unreadable_token_file_is_named(tmp_path):
    path = write(tmp_path / 'kubeconfig', config(tokenFile='missing-token'))
    with pytest.raises(LoginError, match='missing-token'):
        login_via_kubeconfig(path)


def test_a_token_file_is_followed_by_path(tmp_path):
    (tmp_path / 'token').write_text('first\n')
    info = login_via_kubeconfig(write(tmp_path / 'kubeconfig', config(tokenFile='token')))
    assert info.token == 'first'
    assert info.token_path == str(tmp_path / 'token')


def test_several_files_are_merged_the_first_definition_wins(tmp_path, monkeypatch):
    first = write(tmp_path / 'first', {
        'current-context': 'ctx',
        'contexts': [{'name': 'ctx', 'context': {'cluster': 'c', 'user': 'u', 'namespace': 'ns1'}}],
        'users': [{'name': 'u', 'user': {'token': 'first-token'}}],
    })
    second = write(tmp_path / 'second', {
        'current-context': 'other',
        'clusters': [{'name': 'c', 'cluster': {'server': 'https://second:6443'}}],
        'users': [{'name': 'u', 'user': {'token': 'second-token'}}],
    })
    monkeypatch.setenv('KUBECONFIG', f'{first}:{tmp_path / "absent"}:{second}')
    info = login_via_kubeconfig()
    assert info.server == 'https://second:6443'
    assert info.token == 'first-token'
    assert info.default_namespace == 'ns1'


def test_none_of_several_files_exists(tmp_path, monkeypatch):
    monkeypatch.setenv('KUBECONFIG', f'{tmp_path / "a"}:{tmp_path / "b"}')
    with pytest.raises(LoginError, match='None of the kubeconfig files exists'):
        login_via_kubeconfig()


def test_inline_data_is_decoded(tmp_path):
    doc = config(token='t')
    doc['clusters'][0]['cluster']['certificate-authority-data'] = base64.b64encode(b'PEM').decode()
    info = login_via_kubeconfig(write(tmp_path / 'kubeconfig', doc))
    assert info.ca_data == b'PEM'


def test_kubeconfig_paths_default_to_the_home_directory(tmp_path):
    assert kubeconfig.kubeconfig_paths() == [tmp_path / 'home' / '.kube' / 'config']


def test_the_current_context_is_that_of_the_merged_files_as_kubectl_has_it(tmp_path, monkeypatch):
    first, second = tmp_path / 'first', tmp_path / 'second'
    first.write_text('apiVersion: v1\nkind: Config\nclusters: []\n')  # no current context of its own
    second.write_text('apiVersion: v1\nkind: Config\ncurrent-context: k3d-dev\n')
    monkeypatch.setenv('KUBECONFIG', f'{first}:{tmp_path / "missing"}:{second}')
    assert kubeconfig.current_context() == 'k3d-dev'
    first.write_text('apiVersion: v1\nkind: Config\ncurrent-context: minikube\n')
    assert kubeconfig.current_context() == 'minikube'  # the first file that names one wins
    first.write_text(': not yaml: [')
    assert kubeconfig.current_context() is None
    monkeypatch.setenv('KUBECONFIG', str(tmp_path / 'missing'))
    assert kubeconfig.current_context() is None
