import click.testing
import pytest

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
