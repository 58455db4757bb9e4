"""
``kopf inspect`` and ``kopf migrate`` on the command line: what they accept, and one line for what they cannot do.

Their work on a real cluster is tested end to end (tests/e2e/test_storages.py).
"""
import click.testing
import pytest

from kopf import cli


@pytest.fixture()
def invoke(monkeypatch, tmp_path):
    monkeypatch.setenv('KUBECONFIG', str(tmp_path / 'no-such-kubeconfig'))
    monkeypatch.delenv('KUBERNETES_SERVICE_HOST', raising=False)
    runner = click.testing.CliRunner()
    return lambda *args: runner.invoke(cli.main, list(args))


def test_both_commands_are_listed(invoke):
    result = invoke('--help')
    assert 'inspect' in result.output and 'migrate' in result.output


@pytest.mark.parametrize('command, options', [
    ('inspect', ['--namespace', '--operator', '--progress-storage', '--diffbase-storage', '--output']),
    ('migrate', ['--from', '--to', '--from-progress', '--to-diffbase', '--dry-run', '--keep-source', '--operator']),
])
def test_the_options_are_documented(invoke, command, options):
    result = invoke(command, '--help')
    assert result.exit_code == 0
    for option in options:
        assert option in result.output


@pytest.mark.parametrize('args, message', [
    (['inspect', 'kopfexamples', '--progress-storage', 'bogus'], "Unknown storage 'bogus'"),
    (['inspect', 'kopfexamples', '--progress-storage', 'sqlite'], "needs a path"),
    (['inspect', 'kopfexamples', '--progress-storage', 'annotations:Not Valid'], "not a DNS subdomain"),
    (['migrate', 'kopfexamples'], "Nothing to migrate"),
    (['migrate', 'kopfexamples', '--from', 'status', '--to', 'status'], "are the same: 'status'"),
    (['migrate', 'kopfexamples', '--from', 'smart', '--to', 'nowhere'], "Unknown storage 'nowhere'"),
])
def test_bad_storage_specs_are_one_line_and_exit_code_1(invoke, args, message):
    result = invoke(*args)
    assert result.exit_code == 1
    assert message in result.output
    assert result.output.count('\n') == 1 and 'Traceback' not in result.output


def test_without_credentials_it_is_one_line_too(invoke):
    result = invoke('inspect', 'kopfexamples')
    assert result.exit_code == 1
    assert 'Cannot log in' in result.output and result.output.count('\n') == 1
