"""
The pytest plugin of the test kit: a real API server for a test session, a namespace per test, the operator in the test.

It is active wherever kopf is installed (the ``pytest11`` entry point
``kopf.testing``; or ``-p kopf.testing``). Its fixtures cost nothing until
a test asks for them:

* ``kopf_cluster`` (session): the cluster -- a local control plane started
  once per session, or the one of ``--kopf-kubeconfig PATH`` (or
  ``$KOPF_TEST_KUBECONFIG``); ``kopf_kubeconfig`` and ``kopf_api`` are its
  kubeconfig and its admin client;
* ``kopf_namespace``: a fresh namespace per test, deleted afterwards;
* ``kopf_operator``: ``kopf_operator('operator.py')`` runs the operator in the
  test, serving the test's namespace; it is stopped after the test, and its
  log is attached to the report of a failing test.

With ``pytest-xdist``, the workers share one control plane (the first one
starts it, the session's main process stops it) and every test has its own
namespace. An operator that a test leaves running (a runner never stopped)
is stopped at the end of the session, with a warning that names the test.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import sys
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from kopf._testkit import processes, tracking
from kopf._testkit.controlplane import ControlPlane, ControlPlaneError, Owner
from kopf._testkit.kubeapi import KubeAPI
from kopf._testkit.operators import OperatorInTest

ENV_KUBECONFIG = 'KOPF_TEST_KUBECONFIG'
SHARED_NAME = 'kopf-controlplane'
NAMESPACE_PREFIX = 'kopf-test'


class KopfTestWarning(pytest.PytestWarning):
    """Something a test of an operator left behind or got wrong, which the kit has put right."""


class Cluster:
    """
    The cluster of a test session: its kubeconfig, an admin client, and the local control plane if it is one.

    ``control_plane`` is ``None`` for an existing cluster (``--kopf-kubeconfig``).
    """

    def __init__(self, kubeconfig: Path, api: KubeAPI, control_plane: ControlPlane | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.api = api
        self.control_plane = control_plane

    def apply_crd(self, crd: Mapping[str, Any] | str | Path) -> None:
        """Create or replace a CRD (a dict, or a YAML file) and wait until it is served."""
        for document in _documents(crd):
            self.api.apply_crd(document)

    def create(self, obj: Mapping[str, Any] | str | Path, *, namespace: str | None = None) -> Any:
        """Create an object (a dict, or the first document of a YAML file) in the namespace; the created object."""
        document = _documents(obj)[0]
        return self.api.create_object(document, namespace=namespace)


# Configuration.

def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup('kopf', "kopf: testing operators")
    group.addoption('--kopf-kubeconfig', metavar='PATH', default=None,
                    help=f"Run the tests of operators against the cluster of this kubeconfig instead of a local "
                         f"control plane (also ${ENV_KUBECONFIG}).")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line('markers', "kopf: a test of an operator (the kopf test kit)")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    tracking.current_test = item.nodeid


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    tracking.current_test = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Attach the logs of the test's operators to its report when it fails."""
    outcome: Any = yield
    report: pytest.TestReport = outcome.get_result()
    if report.failed:
        operators: list[OperatorInTest] = item.stash.get(_OPERATORS, [])
        for index, operator in enumerate(operators):
            title = f"kopf operator {operator.name or index}" + (f" in {operator.namespace}" if operator.namespace
                                                                  else '')
            report.sections.append((f"Captured log of the {title}", operator.log or '(nothing logged)'))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop what tests left running; the main process of an xdist session stops the shared control plane."""
    for leaked in tracking.leaked():
        message = (f"An operator started by {leaked.test or 'no test (a session fixture?)'} was still running at "
                   f"the end of the session; it is stopped now. Stop it in the test (leave the `with` block of "
                   f"the KopfRunner), or use the kopf_operator fixture, which stops it.")
        warnings.warn(KopfTestWarning(message), stacklevel=1)  # in the session's summary of warnings
        leaked.stop()
    if not _is_xdist_worker() and session.config.pluginmanager.has_plugin('dsession'):  # xdist's main process
        _stop_shared(_shared_dir(session.config))


# Fixtures.

@pytest.fixture(scope='session')
def kopf_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The cluster of the session: a local control plane started once, or the one of ``--kopf-kubeconfig``."""
    given = request.config.getoption('kopf_kubeconfig') or os.environ.get(ENV_KUBECONFIG)
    if given:
        path = Path(given).expanduser().resolve()
        if not path.is_file():
            pytest.fail(f"--kopf-kubeconfig / ${ENV_KUBECONFIG}: no such file {path}.", pytrace=False)
        yield Cluster(path, KubeAPI.from_kubeconfig(path))
        return
    progress = _progress(request.config)
    if _is_xdist_worker():
        plane = _shared_plane(_shared_dir(request.config), progress)
    else:
        plane = _start(ControlPlane(progress=progress))
    try:
        assert plane.kubeconfig is not None
        yield Cluster(plane.kubeconfig, KubeAPI(plane), plane)
    finally:
        plane.stop()  # nothing for a plane attached to, or owned by the session's main process


@pytest.fixture(scope='session')
def kopf_kubeconfig(kopf_cluster: Cluster) -> Path:
    """The path of the admin kubeconfig of the session's cluster."""
    return kopf_cluster.kubeconfig


@pytest.fixture(scope='session')
def kopf_api(kopf_cluster: Cluster) -> KubeAPI:
    """A plain admin client of the session's cluster, independent of kopf's own (see :class:`kopf.testing.KubeAPI`)."""
    return kopf_cluster.api


@pytest.fixture()
def kopf_namespace(kopf_cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for this test, named after it; deleted afterwards."""
    name = namespace_name(request.node.name)
    kopf_cluster.api.ensure_namespace(name)
    yield name
    kopf_cluster.api.delete(f"/api/v1/namespaces/{name}")


@pytest.fixture()
def kopf_operator(
        kopf_cluster: Cluster,
        kopf_namespace: str,
        request: pytest.FixtureRequest,
) -> Iterator[Callable[..., OperatorInTest]]:
    """
    ``kopf_operator('operator.py', ...)``: the operator runs in the test, serving the test's namespace.

    Keyword arguments: ``modules=[...]`` (operator modules, as ``-m``),
    ``args=[...]`` (more options of ``kopf run``; ``--verbose`` by default),
    ``registry=`` and ``settings=`` (as for :class:`kopf.testing.KopfRunner`),
    ``namespace=`` (another one; ``None`` for all namespaces). It returns
    once the operator watches; it is stopped after the test.
    """
    started: list[OperatorInTest] = []
    request.node.stash[_OPERATORS] = started

    def start(*targets: str | Path, namespace: str | None = kopf_namespace, **options: Any) -> OperatorInTest:
        operator = OperatorInTest(*targets, kubeconfig=kopf_cluster.kubeconfig, namespace=namespace,
                                  name=str(len(started)), **options)
        started.append(operator)
        return operator

    yield start
    errors = []
    for operator in reversed(started):
        try:
            operator.stop()
        except AssertionError as e:
            errors.append(str(e))
    if errors:
        pytest.fail('\n'.join(errors), pytrace=False)


_OPERATORS = pytest.StashKey[list[OperatorInTest]]()


# Internals.

def namespace_name(test: str) -> str:
    """A valid namespace name from the test's name, unique: ``kopf-test-<name>-<random>``."""
    stem = re.sub(r'[^a-z0-9-]+', '-', test.lower().removeprefix('test_').replace('_', '-')).strip('-')[:36]
    return f"{NAMESPACE_PREFIX}-{stem.strip('-') or 'x'}-{uuid.uuid4().hex[:6]}"


def _documents(source: Mapping[str, Any] | str | Path) -> list[Mapping[str, Any]]:
    if isinstance(source, Mapping):
        return [source]
    import yaml
    return [doc for doc in yaml.safe_load_all(Path(source).read_text()) if doc]


def _progress(config: pytest.Config) -> Callable[[str], None]:
    """Progress lines of a first build, shown even while the output is captured."""
    reporter = config.pluginmanager.getplugin('terminalreporter')
    capture = config.pluginmanager.getplugin('capturemanager')

    def report(message: str) -> None:
        with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
            if reporter is not None:
                reporter.write_line(f"kopf: {message}")
            else:
                print(f"kopf: {message}", file=sys.stderr, flush=True)
    return report


def _start(plane: ControlPlane) -> ControlPlane:
    try:
        return plane.start()
    except (ControlPlaneError, OSError) as e:
        pytest.fail(f"The local Kubernetes control plane could not be started:\n{e}", pytrace=False)


def _is_xdist_worker() -> bool:
    return bool(os.environ.get('PYTEST_XDIST_WORKER'))


def _shared_dir(config: pytest.Config) -> Path:
    """The directory of the session's shared control plane: in the main process's temporary directory."""
    base: Path = config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    return (base.parent if _is_xdist_worker() else base) / SHARED_NAME


def _shared_plane(workdir: Path, progress: Callable[[str], None]) -> ControlPlane:
    """The first worker starts the control plane for the session's main process to own; the others attach."""
    workdir.parent.mkdir(parents=True, exist_ok=True)
    with open(workdir.parent / f'{SHARED_NAME}.lock', 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with contextlib.suppress(ControlPlaneError):
                attached = ControlPlane.attach(workdir)
                if attached.running:
                    return attached
            if (workdir / 'failed.txt').exists():
                pytest.fail((workdir / 'failed.txt').read_text(), pytrace=False)
            plane = ControlPlane(workdir, owner=Owner.parent(), progress=progress)
            try:
                plane.start()
            except (ControlPlaneError, OSError) as e:
                message = f"The local Kubernetes control plane could not be started:\n{e}"
                workdir.mkdir(parents=True, exist_ok=True)
                (workdir / 'failed.txt').write_text(message)
                pytest.fail(message, pytrace=False)
            plane.detach()
            return ControlPlane.attach(workdir)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _stop_shared(workdir: Path) -> None:
    """Stop the control plane that the workers have shared (if they have started one) and remove it."""
    record = processes.read_pidfile(workdir)
    if record is None:
        return
    processes.kill_recorded_children(record)
    shutil.rmtree(workdir, ignore_errors=True)
