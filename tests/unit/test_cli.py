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


def test_a_malformed_namespace_pattern_is_refused_naming_it_before_the_code_is_loaded(invoke, tmp_path):
    path = tmp_path / 'op.py'
    path.write_text('raise SystemExit("must not be loaded")')
    result = invoke('run', str(path), '-n', 'ns', '-n', 'MyApp-*')
    assert result.exit_code == 2
    assert "Invalid namespace pattern 'MyApp-*'" in result.output
    assert 'must not be loaded' not in result.output


def test_the_namespace_option_explains_the_patterns(invoke):
    result = invoke('run', '--help')
    assert "'myapp-*,!*-pr-*'" in result.output


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


def test_an_import_failure_shows_the_operators_own_frames_only(invoke, tmp_path):
    (tmp_path / 'helpers_of_op.py').write_text('def connect():\n    raise ConnectionError("no database")\n')
    path = tmp_path / 'deep_op.py'
    path.write_text('import kopf\nimport helpers_of_op\n\nhelpers_of_op.connect()\n')
    result = invoke('run', str(path))
    assert result.exit_code == 2
    assert 'deep_op.py", line 4' in result.output and 'helpers_of_op.py", line 2' in result.output
    assert 'ConnectionError: no database' in result.output
    assert 'cli.py' not in result.output and 'importlib' not in result.output


def test_a_syntax_error_is_shown_as_python_shows_it(invoke, tmp_path):
    path = tmp_path / 'syntax_op.py'
    path.write_text('import kopf\n\ndef fn(**_):\n    return {\n')
    result = invoke('run', str(path))
    assert result.exit_code == 2
    assert 'syntax_op.py", line 4' in result.output and 'SyntaxError' in result.output
    assert 'Traceback' not in result.output and 'importlib' not in result.output


def test_a_module_that_fails_to_import_shows_its_own_frames(invoke, tmp_path, monkeypatch):
    (tmp_path / 'failing_op_module.py').write_text('import kopf\nraise RuntimeError("broken module")\n')
    monkeypatch.chdir(tmp_path)
    result = invoke('run', '-m', 'failing_op_module')
    assert result.exit_code == 2
    assert 'failing_op_module.py", line 2' in result.output and 'RuntimeError: broken module' in result.output
    assert 'importlib' not in result.output


def test_a_handler_without_kwargs_is_refused_at_import_in_one_line(invoke, tmp_path):
    path = tmp_path / 'sig_op.py'
    path.write_text('import kopf\n\n@kopf.on.create("configmaps")\ndef create_fn(spec, name):\n    pass\n')
    result = invoke('run', str(path))
    assert result.exit_code == 2
    assert 'Traceback' not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert 'create_fn(spec, name)' in lines[0] and '**kwargs' in lines[0]


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


def test_metrics_and_readiness_endpoints_are_passed_to_the_operator(invoke, runs, operator_file):
    result = invoke('run', operator_file, '--metrics', 'http://0.0.0.0:9090/metrics',
                    '--readiness', 'http://0.0.0.0:8080/ready')
    assert result.exit_code == 0, result.output
    assert runs[-1]['metrics_endpoint'] == 'http://0.0.0.0:9090/metrics'
    assert runs[-1]['readiness_endpoint'] == 'http://0.0.0.0:8080/ready'
    assert invoke('run', operator_file).exit_code == 0
    assert runs[-1]['metrics_endpoint'] is None and runs[-1]['readiness_endpoint'] is None


def test_standalone_keeps_working(invoke, runs, operator_file):
    result = invoke('run', operator_file, '--standalone')
    assert result.exit_code == 0, result.output
    assert runs[-1]['standalone'] is True


def test_logging_options_configure_logging_as_kopf_configure_does(invoke, runs, operator_file):
    assert invoke('run', operator_file, '-v', '--log-format', 'json', '--log-refkey', 'k8s').exit_code == 0
    assert runs[0] == {'debug': False, 'verbose': True, 'quiet': False, 'log_format': 'json',
                       'log_prefix': None, 'log_refkey': 'k8s'}
    assert invoke('run', operator_file, '--no-log-prefix').exit_code == 0
    assert runs[2]['log_prefix'] is False


def test_peering_runs_ha_replicas_of_that_lease(invoke, runs, operator_file):
    result = invoke('run', operator_file, '--peering', 'my-peering')
    assert result.exit_code == 0, result.output
    assert runs[-1]['ha'] is True and runs[-1]['standalone'] is False and runs[-1]['shards'] is False
    assert runs[-1]['peering_name'] == 'my-peering'
    assert runs[-1]['priority'] is None


@pytest.mark.parametrize('args, priority', [
    (['-P', 'x', '-p', '100'], 100),
    (['-P', 'x', '--dev'], 666),
    (['-P', 'x', '--dev', '--priority', '5'], 5),
    (['--ha', '--dev'], 666),
    (['--shards', '--dev'], 666),
])
def test_priorities_and_dev_mode_reach_the_replicas(invoke, runs, operator_file, args, priority):
    result = invoke('run', operator_file, *args)
    assert result.exit_code == 0, result.output
    assert runs[-1]['priority'] == priority
    assert runs[-1]['standalone'] is False


def test_dev_mode_alone_is_standalone(invoke, runs, operator_file):
    assert invoke('run', operator_file, '--dev').exit_code == 0
    assert runs[-1]['standalone'] is True and runs[-1]['ha'] is False and runs[-1]['priority'] is None
    assert runs[-1]['peering_name'] is None  # no Lease: a name would mean HA replicas, as in Kopf


def test_a_lease_name_alone_keeps_the_operator_standalone(invoke, runs, operator_file):
    assert invoke('run', operator_file, '--lease-name', 'x').exit_code == 0
    assert runs[-1]['peering_name'] is None and not runs[-1]['ha'] and not runs[-1]['shards']


@pytest.mark.parametrize('args, message', [
    (['-P', 'x', '--shards'], "--peering x runs HA replicas of one Lease; it cannot be combined with --shards"),
    (['-P', 'x', '--standalone'], "it cannot be combined with --standalone"),
    (['-P', 'x', '--lease-name', 'y'], "--peering x names the Lease already; --lease-name y says otherwise"),
])
def test_peering_contradicting_other_options_is_a_usage_error(invoke, runs, operator_file, args, message):
    result = invoke('run', operator_file, *args)
    assert result.exit_code == 2
    assert message in ' '.join(result.output.split())
    assert not [run for run in runs if 'registry' in run]


@pytest.mark.parametrize('command, args, missing', [
    ('freeze', ['-t', '60'], "'-P' / '--peering'"),
    ('freeze', ['-P', 'p'], "'-t' / '--lifetime'"),
    ('resume', [], "'-P' / '--peering'"),
])
def test_freeze_and_resume_need_kopfs_required_options(invoke, command, args, missing):
    result = invoke(command, *args)
    assert result.exit_code == 2
    assert f"Missing option {missing}" in result.output


@pytest.fixture()
def lease_commands(monkeypatch):
    calls = []

    def action(name):
        async def record(**kwargs):
            calls.append((name, kwargs))
            if kwargs['id'] == 'fail':
                raise cli.freezing.FreezeError("The lease ns/p is frozen by other, not by fail.")
            return f"{name} done"
        return record

    info = kopf.ConnectionInfo(server='https://example.invalid', default_namespace='creds-ns')
    monkeypatch.setattr(cli.auth, 'login_default', lambda: info)
    monkeypatch.setattr(cli.freezing, 'freeze', action('freeze'))
    monkeypatch.setattr(cli.freezing, 'resume', action('resume'))
    return calls


def test_freeze_takes_kopfs_options(invoke, lease_commands):
    result = invoke('freeze', '--id', 'x', '--peering', 'p', '--lifetime', '60', '-m', 'maintenance', '-n', 'ns')
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "freeze done"
    (name, kwargs), = lease_commands
    assert name == 'freeze'
    assert {k: v for k, v in kwargs.items() if k != 'context'} == {
        'namespace': 'ns', 'name': 'p', 'id': 'x', 'lifetime': 60, 'priority': 100, 'message': 'maintenance'}


@pytest.mark.parametrize('args, priority', [(['--dev'], 666), (['-p', '7'], 7), (['--dev', '-p', '7'], 7)])
def test_freeze_priorities(invoke, lease_commands, args, priority):
    assert invoke('freeze', '-P', 'p', '-t', '1', *args).exit_code == 0
    assert lease_commands[-1][1]['priority'] == priority


def test_the_lease_namespace_is_explicit_or_served_or_the_credentials_one(invoke, lease_commands):
    assert invoke('resume', '-P', 'p', '--lease-namespace', 'ops', '-n', 'ns').exit_code == 0
    assert invoke('resume', '-P', 'p', '-n', 'ns').exit_code == 0
    assert invoke('resume', '-P', 'p', '-A').exit_code == 0
    assert [kwargs['namespace'] for _, kwargs in lease_commands] == ['ops', 'ns', 'creds-ns']
    assert lease_commands[0][1]['id'] == cli.freezing.default_id()


def test_a_refused_resume_ends_with_its_message(invoke, lease_commands):
    result = invoke('resume', '-P', 'p', '-i', 'fail')
    assert result.exit_code == 1
    assert result.output.strip() == "Error: The lease ns/p is frozen by other, not by fail."


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


@pytest.mark.parametrize('argv, starts_over', [
    (['kopf', 'run', '--c-allocator', '--help'], True),
    (['kopf', 'run', '--help'], False),
    (['kopf', '--help'], False),
    (['kopf', 'inspect', '--help'], False),
])
def test_only_kopf_run_with_the_option_considers_the_c_allocator(monkeypatch, argv, starts_over):
    considered = []
    monkeypatch.setattr(cli.allocation, 'use_c_allocator', lambda: considered.append(True))
    monkeypatch.setattr('sys.argv', argv)
    with pytest.raises(SystemExit) as exit_info:
        cli.console()
    assert exit_info.value.code == 0
    assert considered == ([True] if starts_over else [])
