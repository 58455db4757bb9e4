"""Fixtures for end-to-end tests against a real kube-apiserver + etcd.

The control plane is started once per test session. If it cannot be built or
started, every test that needs it fails with the reason: an end-to-end test
that silently skips would prove nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kopf.testing import ControlPlane, ControlPlaneError, KubeAPI
from tests.e2e.harness import OPERATORS, OperatorProcess, kopf_run


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """A running control plane shared by the whole session."""
    plane = ControlPlane()
    try:
        plane.start()
    except (ControlPlaneError, OSError) as exc:
        pytest.fail(f"The Kubernetes control plane could not be started:\n{exc}", pytrace=False)
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def kubeconfig(control_plane: ControlPlane) -> Path:
    """The path of a kubeconfig for the admin user of the session's control plane."""
    assert control_plane.kubeconfig is not None
    return control_plane.kubeconfig


@pytest.fixture(scope="session")
def user_kubeconfig(control_plane: ControlPlane) -> Callable[..., Path]:
    """``user_kubeconfig(name, groups=())``: the kubeconfig of a non-admin user, for RBAC tests.

    The user authenticates with a client certificate (CN=name, O=groups) and
    may do nothing beyond what every authenticated user may, until the test
    binds roles to the name or the groups.
    """
    return control_plane.user_kubeconfig


@pytest.fixture(scope="session")
def kube(control_plane: ControlPlane) -> KubeAPI:
    """A plain client for checking what the server really holds."""
    return KubeAPI(control_plane)


@pytest.fixture()
def namespace(kube: KubeAPI, request: pytest.FixtureRequest) -> str:
    """A fresh namespace per test, so that tests and their operators never see each other's objects."""
    name = f"e2e-{request.node.name.replace('_', '-')[5:40].strip('-').lower()}-{uuid.uuid4().hex[:6]}"
    kube.ensure_namespace(name)
    return name


@pytest.fixture()
def operators(
        kubeconfig: Path,
        namespace: str,
        tmp_path: Path,
) -> Iterator[Callable[..., OperatorProcess]]:
    """Start ``kopf run`` processes for the test; all are stopped (or killed) afterwards."""
    started: list[OperatorProcess] = []

    def start(script: str = 'tracing.py', kubeconfig: Path = kubeconfig, **env: str) -> OperatorProcess:
        log = tmp_path / f"operator-{len(started)}.log"
        process = OperatorProcess(kopf_run(OPERATORS / script, namespace=namespace), kubeconfig=kubeconfig,
                                  env=env, log=log)
        started.append(process)
        return process

    try:
        yield start
    finally:
        for process in started:
            process.kill()
