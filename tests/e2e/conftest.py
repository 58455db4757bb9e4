"""Fixtures for end-to-end tests against a real kube-apiserver + etcd.

The control plane, the admin client and the namespaces come from the test
kit's pytest plugin (``kopf_cluster``, ``kopf_api``, ``kopf_namespace``): the
project tests itself with what its users get. If the control plane cannot be
built or started, every test that needs it fails with the reason: an
end-to-end test that silently skips would prove nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kopf.testing import ControlPlane, KubeAPI
from tests.e2e.harness import OPERATORS, OperatorProcess, kopf_run


@pytest.fixture(scope="session")
def control_plane(kopf_cluster) -> ControlPlane:
    """The local control plane of the session (these tests need one of their own, not an existing cluster)."""
    if kopf_cluster.control_plane is None:
        pytest.fail("The project's end-to-end tests need the local control plane, not --kopf-kubeconfig.",
                    pytrace=False)
    return kopf_cluster.control_plane


@pytest.fixture(scope="session")
def kubeconfig(control_plane: ControlPlane, kopf_kubeconfig: Path) -> Path:
    """The path of a kubeconfig for the admin user of the session's control plane."""
    return kopf_kubeconfig


@pytest.fixture(scope="session")
def user_kubeconfig(control_plane: ControlPlane) -> Callable[..., Path]:
    """``user_kubeconfig(name, groups=())``: the kubeconfig of a non-admin user, for RBAC tests.

    The user authenticates with a client certificate (CN=name, O=groups) and
    may do nothing beyond what every authenticated user may, until the test
    binds roles to the name or the groups.
    """
    return control_plane.user_kubeconfig


@pytest.fixture(scope="session")
def kube(control_plane: ControlPlane, kopf_api: KubeAPI) -> KubeAPI:
    """A plain client for checking what the server really holds."""
    return kopf_api


@pytest.fixture()
def namespace(kopf_namespace: str) -> str:
    """A fresh namespace per test, so that tests and their operators never see each other's objects."""
    return kopf_namespace


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
