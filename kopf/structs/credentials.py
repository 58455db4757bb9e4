"""
Everything needed to connect to a Kubernetes API server, and nothing else.

Login functions produce it (from a kubeconfig, from a pod's service account,
from an exec credential plugin, or from a user's ``@kopf.on.login`` handler);
the API client consumes it. It is plain data, so that the source of
credentials and the HTTP machinery stay independent. Secrets are kept out of
``repr()`` so that they never reach logs.
"""
from __future__ import annotations

import dataclasses
import datetime


@dataclasses.dataclass(frozen=True)
class ConnectionInfo:
    """
    Where the API server is and how to authenticate to it.

    Files (``*_path``) and in-memory PEM data (``*_data``) are alternatives;
    when both are given, the client loads both where that makes sense (CA) or
    prefers the data (client certificate and key).

    ``token_path`` names a file with the token that is re-read whenever it
    changes (projected service-account tokens are rotated in place); while
    the file is readable, its content wins over ``token``. ``expiration`` is
    when the credentials stop working: the client logs in again shortly
    before that moment. A naive ``datetime`` is taken as UTC. ``scheme`` is
    the ``Authorization`` scheme of the token (``Bearer`` by default).
    ``priority`` is kept for compatibility: one set of credentials is used
    at a time, the one that the login produced.
    """

    server: str
    ca_path: str | None = None
    ca_data: bytes | None = dataclasses.field(default=None, repr=False)
    insecure: bool = False
    username: str | None = None
    password: str | None = dataclasses.field(default=None, repr=False)
    scheme: str | None = None
    token: str | None = dataclasses.field(default=None, repr=False)
    certificate_path: str | None = None
    private_key_path: str | None = None
    certificate_data: bytes | None = dataclasses.field(default=None, repr=False)
    private_key_data: bytes | None = dataclasses.field(default=None, repr=False)
    default_namespace: str | None = None
    priority: int = 0
    expiration: datetime.datetime | None = None
    token_path: str | None = None

    @property
    def expires_at(self) -> datetime.datetime | None:
        """The expiration as an aware UTC datetime (naive values are UTC), or ``None``."""
        if self.expiration is None:
            return None
        if self.expiration.tzinfo is None:
            return self.expiration.replace(tzinfo=datetime.timezone.utc)
        return self.expiration.astimezone(datetime.timezone.utc)
