"""
Everything needed to connect to a Kubernetes API server, and nothing else.

Login functions produce it (from a kubeconfig, from a pod's service account,
or from a user's ``@kopf.on.login`` handler); the API client consumes it. It
is plain data, so that the source of credentials and the HTTP machinery stay
independent. Secrets are kept out of ``repr()`` so that they never reach logs.
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class ConnectionInfo:
    """
    Where the API server is and how to authenticate to it.

    Files (``*_path``) and in-memory PEM data (``*_data``) are alternatives;
    when both are given, the client loads both where that makes sense (CA) or
    prefers the data (client certificate and key).
    """

    server: str
    ca_path: str | None = None
    ca_data: bytes | None = dataclasses.field(default=None, repr=False)
    insecure: bool = False
    username: str | None = None
    password: str | None = dataclasses.field(default=None, repr=False)
    token: str | None = dataclasses.field(default=None, repr=False)
    certificate_path: str | None = None
    private_key_path: str | None = None
    certificate_data: bytes | None = dataclasses.field(default=None, repr=False)
    private_key_data: bytes | None = dataclasses.field(default=None, repr=False)
    default_namespace: str | None = None
