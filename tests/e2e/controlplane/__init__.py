"""A local Kubernetes control plane (etcd + kube-apiserver) for end-to-end tests."""

from tests.e2e.controlplane.cluster import (
    ControlPlane,
    ControlPlaneError,
    cleanup_stale,
    ensure_binaries,
)

__all__ = ["ControlPlane", "ControlPlaneError", "cleanup_stale", "ensure_binaries"]
