"""
What a replica coordinates with: the Lease name and namespace, its identity, the timing -- resolved and checked.

The user's ``config.peering`` may leave most of it out; the defaults come
from the operator's code (the name), the host (the identity) and the served
namespaces (where the Leases are). Everything is checked once, at start, so
that a wrong setting fails in one line naming the setting, not later in a
Lease request.
"""
from __future__ import annotations

import dataclasses
import os
import re
import secrets
import socket
import sys
from collections.abc import Collection, Sequence
from pathlib import Path

from kopf._structs.namespaces import NamespaceSpec, is_exact
from kopf.config import PeeringConfig

# The Lease verbs each mode needs; the documented RBAC (docs/install.rst) grants exactly their union.
VERBS = {
    'ha': ('get', 'create', 'update'),
    'shards': ('list', 'create', 'update', 'delete'),
}

NAME_RE = re.compile(r'^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')
MAX_NAME_LENGTH = 63  # the name is also a label value


class PeeringError(Exception):
    """Replicas cannot coordinate (e.g. RBAC forbids the Lease verbs); the message says what to do."""


@dataclasses.dataclass(frozen=True)
class PeeringSettings:
    """The resolved, validated peering settings of one running replica."""

    mode: str
    name: str
    namespace: str
    identity: str
    lease_duration: int
    renew_deadline: float
    retry_period: float
    priority: int = 0

    @property
    def soft_fence(self) -> float:
        return self.renew_deadline - self.retry_period

    @property
    def request_timeout(self) -> float:
        return self.renew_deadline - self.retry_period

    @property
    def member_lease_name(self) -> str:
        return f'{self.name}-{self.identity}'[:253].rstrip('-.')


def sanitize(text: str) -> str:
    """Lowercase letters, digits and dashes only, as in the names of Kubernetes objects."""
    return re.sub(r'-+', '-', re.sub(r'[^a-z0-9-]', '-', text.lower())).strip('-')


def default_name(sources: Sequence[str] = ()) -> str:
    """A Lease name from the operator's files or modules (``kopf run op.py`` gives ``kopf-op``)."""
    if not sources:
        main = getattr(sys.modules.get('__main__'), '__file__', None)
        sources = [main] if main else []
    stems = [sanitize(Path(source).stem if source.endswith('.py') else source) for source in sources]
    name = '-'.join(['kopf', *[stem for stem in stems if stem]])
    return name[:MAX_NAME_LENGTH].rstrip('-')


def default_identity() -> str:
    """The host name (in a pod: the pod's name) and a random suffix, unique per process."""
    host = sanitize(socket.gethostname())[:48] or 'kopf'
    return f'{host}-{os.getpid()}-{secrets.token_hex(3)}'


def resolve(
        config: PeeringConfig,
        *,
        namespaces: Collection[NamespaceSpec],
        clusterwide: bool,
        default_namespace: str | None,
) -> PeeringSettings:
    """Fill in the defaults and check everything, naming the setting that is wrong."""
    try:
        config.validate()
    except ValueError as e:
        raise PeeringError(str(e)) from None
    name = config.name if config.name is not None else default_name()
    identity = config.identity if config.identity is not None else default_identity()
    for what, value in [('name', name), ('identity', identity)]:
        if len(value) > MAX_NAME_LENGTH or not NAME_RE.match(value):
            raise PeeringError(
                f"The peering {what} {value!r} cannot be used in Lease names: use at most {MAX_NAME_LENGTH} "
                f"lowercase letters, digits, '-' and '.', starting and ending with a letter or digit "
                f"(--lease-name/--identity, or config.peering.{what}).")
    namespace = lease_namespace(config.namespace, namespaces=namespaces, clusterwide=clusterwide,
                                default_namespace=default_namespace)
    return PeeringSettings(mode=config.mode, name=name, namespace=namespace, identity=identity,
                           lease_duration=config.lease_duration, renew_deadline=config.renew_deadline,
                           retry_period=config.retry_period, priority=config.priority)


def lease_namespace(
        explicit: str | None,
        *,
        namespaces: Collection[NamespaceSpec],
        clusterwide: bool,
        default_namespace: str | None,
) -> str:
    """
    Where the Leases are: as given, else the one served namespace, else the credentials' one, else default.

    A namespace pattern (``-n 'myapp-*'``) names no namespace of its own: the
    credentials' namespace (in a pod, the operator's own) is taken then.
    """
    if explicit is not None:
        return explicit
    if len(namespaces) == 1 and not clusterwide:
        namespace = next(iter(namespaces))
        if isinstance(namespace, str) and is_exact(namespace):
            return namespace
    return default_namespace or 'default'
