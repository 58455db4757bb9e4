import click.testing
import pytest

import kopf
from kopf import cli


@pytest.fixture()
def invoke():
    runner = click.testing.CliRunner()
    return lambda *args: runner.invoke(cli.main, list(args))


def test_help_lists_the_run_command(invoke):
    result = invoke('--help')
    assert result.exit_code == 0
    assert 'run' in result.output


def test_run_help_lists_the_options(invoke):
    result = invoke('run', '--help')
    assert result.exit_code == 0
    for option in ['--module', '--namespace', '--all-namespaces', '--standalone', '--verbose', '--debug',
                   '--quiet', '--log-format']:
        assert option in result.output


def test_run_without_operator_code_is_a_usage_error(invoke):
    result = invoke('run')
    assert result.exit_code == 2
    assert 'at least one operator file' in result.output


def test_namespaces_and_all_namespaces_exclude_each_other(invoke, tmp_path):
    path = tmp_path / 'op.py'
    path.write_text('')
    result = invoke('run', str(path), '-n', 'ns', '-A')
    assert result.exit_code == 2
    assert 'not both' in result.output


def test_unknown_log_format_is_rejected(invoke, tmp_path):
    result = invoke('run', str(tmp_path / 'op.py'), '--log-format', 'fancy')
    assert result.exit_code == 2


def test_an_operator_that_fails_to_import_exits_with_its_traceback(invoke, tmp_path):
    path = tmp_path / 'broken_op.py'
    path.write_text('import kopf\n\nraise RuntimeError("operator is broken")\n')
    result = invoke('run', str(path))
    assert result.exit_code != 0
    assert 'failed to import' in result.output
    assert 'Traceback' in result.output
    assert 'operator is broken' in result.output


def test_a_syntax_error_is_reported_the_same_way(invoke, tmp_path):
    path = tmp_path / 'syntax_op.py'
    path.write_text('def (:\n')
    result = invoke('run', str(path))
    assert result.exit_code != 0
    assert 'SyntaxError' in result.output


def test_a_missing_file_is_reported(invoke, tmp_path):
    result = invoke('run', str(tmp_path / 'absent.py'))
    assert result.exit_code != 0
    assert 'does not exist' in result.output


def test_a_missing_module_is_reported(invoke):
    result = invoke('run', '-m', 'no_such_operator_module_xyz')
    assert result.exit_code != 0
    assert 'no_such_operator_module_xyz' in result.output


def test_operator_code_is_loaded_before_running(monkeypatch, tmp_path, invoke):
    runs = []
    monkeypatch.setattr(cli.running, 'run', lambda **kwargs: runs.append(kwargs))
    path = tmp_path / 'marker_op.py'
    marker = tmp_path / 'loaded'
    path.write_text(f'open({str(marker)!r}, "w").close()\n')
    result = invoke('run', str(path), '-n', 'a', '-n', 'b', '--quiet')
    assert result.exit_code == 0, result.output
    assert marker.exists()
    assert runs[0]['namespaces'] == ('a', 'b')
    assert runs[0]['clusterwide'] is False


def test_without_namespaces_the_operator_serves_the_whole_cluster(monkeypatch, tmp_path, invoke):
    runs = []
    monkeypatch.setattr(cli.running, 'run', lambda **kwargs: runs.append(kwargs))
    path = tmp_path / 'empty_op.py'
    path.write_text('')
    assert invoke('run', str(path)).exit_code == 0
    assert runs[0]['clusterwide'] is True


def test_operator_errors_end_the_command_with_their_message(monkeypatch, tmp_path, invoke):
    def fail(**_):
        raise cli.running.OperatorError("Cannot serve the resource nonexistents: not found")
    monkeypatch.setattr(cli.running, 'run', fail)
    path = tmp_path / 'op2.py'
    path.write_text('')
    result = invoke('run', str(path))
    assert result.exit_code == 1
    assert 'Cannot serve the resource nonexistents' in result.output


def test_run_help_lists_kopfs_options_too(invoke):
    result = invoke('run', '--help')
    for option in ['--dev', '--liveness', '--log-prefix', '--no-log-prefix', '--log-refkey']:
        assert option in result.output


@pytest.fixture()
def runs(monkeypatch):
    runs = []
    monkeypatch.setattr(cli.running, 'run', lambda **kwargs: runs.append(kwargs))
    monkeypatch.setattr(cli.logsetup, 'configure', lambda **kwargs: runs.append(kwargs))
    return runs


@pytest.fixture()
def operator_file(tmp_path):
    path = tmp_path / 'some_op.py'
    path.write_text('')
    return str(path)


def test_liveness_endpoint_is_passed_to_the_operator(invoke, runs, operator_file):
    assert invoke('run', operator_file, '-L', 'http://0.0.0.0:8080/healthz').exit_code == 0
    assert runs[-1]['liveness_endpoint'] == 'http://0.0.0.0:8080/healthz'
    assert invoke('run', operator_file).exit_code == 0
    assert runs[-1]['liveness_endpoint'] is None


@pytest.mark.parametrize('flag', ['--dev', '--standalone'])
def test_dev_and_standalone_keep_working(invoke, runs, operator_file, flag):
    result = invoke('run', operator_file, flag)
    assert result.exit_code == 0, result.output
    assert runs[-1]['standalone'] is True


def test_logging_options_configure_logging_as_kopf_configure_does(invoke, runs, operator_file):
    assert invoke('run', operator_file, '-v', '--log-format', 'json', '--log-refkey', 'k8s').exit_code == 0
    assert runs[0] == {'debug': False, 'verbose': True, 'quiet': False, 'log_format': 'json',
                       'log_prefix': None, 'log_refkey': 'k8s'}
    assert invoke('run', operator_file, '--no-log-prefix').exit_code == 0
    assert runs[2]['log_prefix'] is False


@pytest.mark.parametrize('args, option', [
    (['--peering', 'my-peering'], '--peering'),
    (['-P', 'my-peering', '--priority', '100'], '--peering'),
    (['--priority', '100'], '--priority'),
    (['-p', '100', '--dev'], '--priority'),
])
def test_kopfs_peering_options_fail_with_the_lease_based_way(invoke, runs, operator_file, args, option):
    result = invoke('run', operator_file, *args)
    assert result.exit_code == 2
    assert runs == []
    line, = result.output.strip().splitlines()
    assert line.startswith(f"Error: {option} is Kopf's peering option")
    assert '--ha' in line and '--shards' in line


@pytest.mark.parametrize('command, args', [
    ('freeze', ['--id', 'x', '--peering', 'p', '--priority', '100', '--lifetime', '60', '-m', 'maintenance']),
    ('freeze', []),
    ('resume', ['-P', 'p', '-n', 'ns']),
])
def test_freeze_and_resume_exist_and_fail_with_the_lease_based_way(invoke, command, args):
    result = invoke(command, *args)
    assert result.exit_code == 2
    line, = result.output.strip().splitlines()
    assert line.startswith(f"Error: kopf {command} ")
    assert '--ha' in line and 'Deployment' in line


def test_the_runners_registry_and_settings_reach_the_operator(monkeypatch, operator_file):
    runs = []
    monkeypatch.setattr(cli.running, 'run', lambda **kwargs: runs.append(kwargs))
    registry, settings = kopf.OperatorRegistry(), kopf.OperatorSettings()
    controls = cli.CLIControls(registry=registry, settings=settings)
    result = click.testing.CliRunner().invoke(cli.main, ['run', operator_file], obj=controls)
    assert result.exit_code == 0, result.output
    assert runs[0]['registry'] is registry
    assert runs[0]['settings'] is settings
@pytest.mark.parametrize('flags', [('--standalone', '--ha'), ('--standalone', '--shards'), ('--ha', '--shards')])
def test_coordination_modes_exclude_each_other(invoke, tmp_path, flags):
    path = tmp_path / 'op.py'
    path.write_text('')
    result = invoke('run', str(path), *flags)
    assert result.exit_code == 2
    assert 'Use only one of --standalone, --ha, --shards' in result.output
    assert ' and '.join(flags) in result.output


def test_replica_options_reach_the_operator(monkeypatch, tmp_path, invoke):
    runs = []
    monkeypatch.setattr(cli.running, 'run', lambda **kwargs: runs.append(kwargs))
    path = tmp_path / 'my_op.py'
    path.write_text('')
    assert invoke('run', str(path), '--shards', '--lease-namespace', 'ops', '--identity', 'pod-1').exit_code == 0
    assert runs[0]['shards'] is True and runs[0]['ha'] is False
    assert runs[0]['peering_name'] == 'kopf-my-op'  # from the operator's file unless --lease-name is given
    assert runs[0]['peering_namespace'] == 'ops'
    assert runs[0]['identity'] == 'pod-1'
    assert invoke('run', str(path), '--ha', '--lease-name', 'my-lease').exit_code == 0
    assert runs[1]['ha'] is True and runs[1]['peering_name'] == 'my-lease'
