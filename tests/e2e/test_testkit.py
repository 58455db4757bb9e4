"""
The test kit's pytest plugin, as its users meet it: test sessions of their own, run in a subprocess.

Most sessions run against this session's control plane (``--kopf-kubeconfig``),
so that they cost a Python start, not a control plane's. Those about the
control plane itself (its failures, sharing it among xdist workers) start
their own, or fail before starting one.
"""
from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kopf._testkit import processes
from kopf.testing import ControlPlane, KubeAPI

OPERATOR = '''
import kopf

@kopf.on.create('configmaps')
def create_fn(body, patch, logger, **_):
    logger.info("Seen %s.", body['data']['k'])
    patch.setdefault('metadata', {}).setdefault('annotations', {})['seen'] = body['data']['k']
'''

CONFIGMAP = {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': 'cm'}, 'data': {'k': 'v'}}


def run_pytest(directory: Path, tests: str, *args: str, env: dict[str, str] | None = None,
               timeout: float = 120, autoload: bool = False) -> subprocess.CompletedProcess[str]:
    """
    A user's test session: ``my_operator.py`` and ``test_it.py`` in a directory of their own.

    Unless ``autoload``, only our plugin is loaded (``-p kopf.testing``): the
    others installed here only cost their import time.
    """
    (directory / 'pytest.ini').write_text("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    (directory / 'my_operator.py').write_text(OPERATOR)
    (directory / 'test_it.py').write_text(textwrap.dedent(tests))
    plugins = [] if autoload else ['-p', 'kopf.testing']
    env = {**os.environ, **({} if autoload else {'PYTEST_DISABLE_PLUGIN_AUTOLOAD': '1'}), **(env or {})}
    return subprocess.run([sys.executable, '-m', 'pytest', '-p', 'no:cacheprovider', '-q', '--rootdir', str(directory),
                           *plugins, *args], cwd=directory, env=env, capture_output=True, text=True, timeout=timeout)


def output_of(result: subprocess.CompletedProcess[str]) -> str:
    return f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"


def test_the_fixtures_run_the_operator_in_the_test_against_a_given_cluster(kubeconfig, kube, tmp_path):
    result = run_pytest(tmp_path, f'''
        CONFIGMAP = {CONFIGMAP!r}

        def test_handled(kopf_cluster, kopf_api, kopf_namespace, kopf_operator):
            assert kopf_cluster.control_plane is None  # the given cluster, no local one
            operator = kopf_operator('my_operator.py')
            created = kopf_cluster.create(CONFIGMAP, namespace=kopf_namespace)
            handled = operator.wait_until_handled(created)
            assert handled['metadata']['annotations']['seen'] == 'v'
            assert "Seen v." in operator.log
            with open('namespace.txt', 'w') as f:
                f.write(kopf_namespace)
    ''', '--kopf-kubeconfig', str(kubeconfig), autoload=True)  # the plugin is active where kopf is installed
    assert result.returncode == 0, output_of(result)
    assert '1 passed' in result.stdout
    namespace = (tmp_path / 'namespace.txt').read_text()
    assert namespace.startswith('kopf-test-handled-')
    # Deleted afterwards: gone, or terminating (a local control plane has no controller to finish it).
    found = kube.find(f'/api/v1/namespaces/{namespace}')
    assert found is None or found['metadata'].get('deletionTimestamp')


def test_a_failing_test_shows_the_log_of_its_operator(kubeconfig, tmp_path):
    result = run_pytest(tmp_path, f'''
        def test_fails(kopf_cluster, kopf_namespace, kopf_operator):
            assert kopf_cluster.control_plane is None  # the cluster of $KOPF_TEST_KUBECONFIG
            operator = kopf_operator('my_operator.py')
            operator.wait_until_handled(kopf_cluster.create({CONFIGMAP!r}, namespace=kopf_namespace))
            assert False, "the test's own failure"
    ''', env={'KOPF_TEST_KUBECONFIG': str(kubeconfig)})
    assert result.returncode == 1, output_of(result)
    assert "the test's own failure" in result.stdout
    assert "Captured log of the kopf operator 0 in kopf-test-fails-" in result.stdout
    assert "Handler 'create_fn' succeeded." in result.stdout


def test_a_runner_left_running_is_stopped_with_a_warning_naming_the_test(kubeconfig, tmp_path):
    result = run_pytest(tmp_path, f'''
        from kopf.testing import KopfRunner

        def test_leaky(kopf_namespace):
            runner = KopfRunner(['run', 'my_operator.py', '-n', kopf_namespace], ready_timeout=30,
                                env={{'KUBECONFIG': {str(kubeconfig)!r}}})
            runner.__enter__()  # and never left
            assert runner.ready
    ''', env={'KOPF_TEST_KUBECONFIG': str(kubeconfig)}, timeout=60)
    assert result.returncode == 0, output_of(result)
    assert "An operator started by test_it.py::test_leaky was still running at the end of the session" \
           in result.stdout, output_of(result)


def test_a_control_plane_that_fails_to_start_shows_its_last_log_lines(tmp_path):
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    for name in ('etcd', 'kube-apiserver'):
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\necho '{name}: the disk is on fire' >&2\nexit 3\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    session = tmp_path / 'session'
    session.mkdir()
    result = run_pytest(session, '''
        def test_needs_a_server(kopf_api):
            pass
    ''', env={'KOPF_CONTROLPLANE_BIN': str(bin_dir)})
    assert result.returncode == 1, output_of(result)
    assert "The local Kubernetes control plane could not be started" in result.stdout
    assert "etcd exited with code 3 during startup" in result.stdout
    assert "etcd: the disk is on fire" in result.stdout


FAKE_GO = """#!/bin/sh
case "$1 $2" in
  "env GOOS") echo linux;;
  "env GOARCH") echo amd64;;
  "env GOVERSION") echo go1.24.2;;
  "list -m") echo v1.33.0;;
  "list -deps") echo "go: downloading example.com/a" >&2; echo a; echo b;;
  "build -v") echo "example.com/a" >&2; echo "cmd/etcd: the compiler has run out of patience" >&2; exit 2;;
esac
"""


def test_a_first_build_shows_its_progress_and_a_failing_one_its_last_lines(tmp_path):
    fake = tmp_path / 'fake-go'
    fake.mkdir()
    (fake / 'go').write_text(FAKE_GO)
    (fake / 'go').chmod(0o755)
    session = tmp_path / 'session'
    session.mkdir()
    env = {'PATH': f'{fake}:/usr/bin:/bin', 'KOPF_CONTROLPLANE_CACHE': str(tmp_path / 'empty-cache'),
           'KOPF_CONTROLPLANE_BIN': '', 'KUBEBUILDER_ASSETS': ''}
    result = run_pytest(session, '''
        def test_needs_a_server(kopf_namespace):
            pass
    ''', env=env)
    assert result.returncode == 1, output_of(result)
    # Shown as it goes, despite the capture: before the report of the failure, not only in it.
    assert 0 <= result.stdout.find("kopf: Building kube-apiserver and etcd with Go once") < \
           result.stdout.find("= ERRORS ="), output_of(result)
    assert "kopf: Compiling etcd: 2 packages ..." in result.stdout
    assert "Building etcd with" in result.stdout and "failed (exit code 2); the last lines:" in result.stdout
    assert "cmd/etcd: the compiler has run out of patience" in result.stdout


def test_without_binaries_and_without_go_one_line_says_what_to_do(tmp_path):
    session = tmp_path / 'session'
    session.mkdir()
    env = {'PATH': '/usr/bin:/bin', 'KOPF_CONTROLPLANE_CACHE': str(tmp_path / 'empty-cache'),
           'KOPF_CONTROLPLANE_BIN': '', 'KUBEBUILDER_ASSETS': ''}
    result = run_pytest(session, '''
        def test_needs_a_server(kopf_namespace):
            pass
    ''', env=env)
    assert result.returncode == 1, output_of(result)
    assert "No kube-apiserver and etcd for the test control plane, and no Go toolchain to build them: set " \
           "KOPF_CONTROLPLANE_BIN" in result.stdout
    assert "--kopf-kubeconfig" in result.stdout


def test_xdist_workers_share_one_control_plane_with_a_namespace_per_test(tmp_path):
    pytest.importorskip('xdist')
    result = run_pytest(tmp_path, '''
        import json, os
        import pytest

        @pytest.mark.parametrize('index', range(4))
        def test_worker(kopf_cluster, kopf_namespace, index):
            plane = kopf_cluster.control_plane
            with open(f'seen-{index}.json', 'w') as f:
                json.dump({'server': plane.server, 'workdir': str(plane.workdir), 'namespace': kopf_namespace,
                           'worker': os.environ['PYTEST_XDIST_WORKER'], 'startup': plane.startup_seconds}, f)
    ''', '-p', 'xdist.plugin', '-n', '2', timeout=180)
    assert result.returncode == 0, output_of(result)
    seen = [json.loads((tmp_path / f'seen-{index}.json').read_text()) for index in range(4)]
    assert len({item['server'] for item in seen}) == 1
    assert len({item['namespace'] for item in seen}) == 4
    assert len({item['worker'] for item in seen}) == 2
    # The session's main process has stopped it at the end.
    assert not Path(seen[0]['workdir']).exists()
    port = int(seen[0]['server'].rsplit(':', 1)[1])
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(('127.0.0.1', port), timeout=5).close()


def test_the_operator_leaves_the_logging_of_the_test_process_as_it_was(kubeconfig, tmp_path):
    result = run_pytest(tmp_path, '''
        import logging

        def test_logging(kopf_operator):
            root = logging.getLogger()
            before = (list(root.handlers), root.level)
            operator = kopf_operator('my_operator.py')  # `kopf run --verbose` sets up logging its way
            assert root.level == logging.DEBUG
            operator.stop()
            assert (list(root.handlers), root.level) == before
    ''', env={'KOPF_TEST_KUBECONFIG': str(kubeconfig)})
    assert result.returncode == 0, output_of(result)


def test_a_port_taken_by_someone_else_is_given_up_for_other_free_ones(monkeypatch):
    taken = socket.socket()
    taken.bind(('127.0.0.1', 0))
    taken.listen()
    picks: list[list[int]] = []
    real = processes.free_ports

    def clashing(count: int) -> list[int]:
        ports = real(count)
        picks.append([taken.getsockname()[1], *ports[1:]] if not picks else ports)  # etcd's port: taken at first
        return picks[-1]

    monkeypatch.setattr(processes, 'free_ports', clashing)
    try:
        with ControlPlane() as plane:
            assert len(picks) == 2
            assert plane.etcd_url.endswith(f":{picks[1][0]}")
            assert KubeAPI(plane).get('/api/v1/namespaces/default')['metadata']['name'] == 'default'
    finally:
        taken.close()


def test_an_operator_that_cannot_start_fails_the_test_with_the_reason(kubeconfig, tmp_path):
    result = run_pytest(tmp_path, '''
        def test_broken(kopf_operator):
            kopf_operator('no_such_operator.py')
    ''', env={'KOPF_TEST_KUBECONFIG': str(kubeconfig)})
    assert result.returncode == 1, output_of(result)
    assert "The operator has failed" in result.stdout
    assert "Error: The operator file 'no_such_operator.py' does not exist" in result.stdout, output_of(result)
