"""
The operator's ServiceAccount, Deployment (with the probes and ports its options imply), budget and Dockerfile.

The Deployment runs the same ``kopf run`` command line as the options
describe. A standalone operator is replaced with the ``Recreate`` strategy:
two standalone operators must never run at once. ``--ha`` and ``--shards``
run several replicas (two by default) with a PodDisruptionBudget: for HA,
one replica always stays (``minAvailable: 1``); for shards, one is taken
away at a time (``maxUnavailable: 1``), so that the others take its objects
over. Each endpoint the options ask for is a container port, and a probe
where Kubernetes has one for it: liveness, and readiness (``/readyz``,
which the operator serves beside the liveness endpoint, else beside the
metrics). Endpoints that share a port share its container port.

Each output (an endpoint's port, a probe) is a row of :data:`ENDPOINTS`,
so that a feature that adds an endpoint adds its row there.
"""
from __future__ import annotations

import dataclasses
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any

APP_DIR = '/app'
NONROOT = 65532


@dataclasses.dataclass(frozen=True)
class Options:
    """The operator's command line (that of ``kopf run``) and how to deploy it."""

    name: str
    namespace: str  # where the operator runs: its ServiceAccount, Deployment, Leases
    image: str
    paths: tuple[str, ...] = ()  # the operator files, as they are in the image
    modules: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()  # -n; none: -A
    mode: str = 'standalone'
    replicas: int | None = None
    liveness: str | None = None
    metrics: str | None = None
    webhook_port: int | None = None
    extras: tuple[str, ...] = ()  # the framework's extras that the operator needs
    framework: str | None = None  # a pip requirement of the framework; None: a wheel beside the Dockerfile

    @property
    def replica_count(self) -> int:
        return self.replicas if self.replicas is not None else (1 if self.mode == 'standalone' else 2)


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """A port the operator listens on, and the probe that uses it (if any)."""

    name: str
    port: int
    probe: str | None = None  # 'livenessProbe', 'readinessProbe'
    path: str = '/'


def _liveness(options: Options) -> Endpoint | None:
    if options.liveness is None:
        return None
    url = urllib.parse.urlsplit(options.liveness)
    return Endpoint(name='liveness', port=url.port or 80, probe='livenessProbe', path=url.path or '/')


def _metrics(options: Options) -> Endpoint | None:
    if options.metrics is None:
        return None
    url = urllib.parse.urlsplit(options.metrics)
    return Endpoint(name='metrics', port=url.port or 80, path=url.path or '/')


def _readiness(options: Options) -> Endpoint | None:
    """``/readyz``, on the port of the liveness endpoint, else on that of the metrics."""
    beside = options.liveness or options.metrics
    if beside is None:
        return None
    url = urllib.parse.urlsplit(beside)
    return Endpoint(name='readiness', port=url.port or 80, probe='readinessProbe', path='/readyz')


def _webhooks(options: Options) -> Endpoint | None:
    return Endpoint(name='webhooks', port=options.webhook_port) if options.webhook_port is not None else None


# The endpoints that options imply, one row each.
ENDPOINTS: tuple[Callable[[Options], Endpoint | None], ...] = (_liveness, _metrics, _readiness, _webhooks)


def endpoints(options: Options) -> list[Endpoint]:
    return [endpoint for row in ENDPOINTS if (endpoint := row(options)) is not None]


def command(options: Options) -> list[str]:
    """The ``kopf run`` command line of the container."""
    args = ['kopf', 'run', *(f"{APP_DIR}/{path}" for path in options.paths)]
    for module in options.modules:
        args += ['-m', module]
    if options.namespaces:
        for namespace in options.namespaces:
            args += ['-n', namespace]
    else:
        args.append('-A')
    if options.mode != 'standalone':
        args.append(f'--{options.mode}')
    if options.liveness is not None:
        args += ['--liveness', options.liveness]
    if options.metrics is not None:
        args += ['--metrics', options.metrics]
    return args


def service_account(options: Options) -> dict[str, Any]:
    return {'apiVersion': 'v1', 'kind': 'ServiceAccount',
            'metadata': {'name': options.name, 'namespace': options.namespace}}


def deployment(options: Options) -> dict[str, Any]:
    labels = {'app.kubernetes.io/name': options.name}
    container: dict[str, Any] = {
        'name': 'operator',
        'image': options.image,
        'command': command(options),
        'securityContext': {'allowPrivilegeEscalation': False, 'runAsNonRoot': True, 'runAsUser': NONROOT,
                            'capabilities': {'drop': ['ALL']}},
    }
    found = endpoints(options)
    ports: dict[int, str] = {}  # one container port per port number: the first endpoint on it names it
    for endpoint in found:
        ports.setdefault(endpoint.port, endpoint.name)
    if ports:
        container['ports'] = [{'name': name, 'containerPort': port} for port, name in ports.items()]
    for endpoint in found:
        if endpoint.probe is not None:
            container[endpoint.probe] = {'httpGet': {'path': endpoint.path, 'port': ports[endpoint.port]},
                                         'periodSeconds': 10, 'failureThreshold': 3}
    strategy = {'type': 'Recreate'} if options.mode == 'standalone' else {
        'type': 'RollingUpdate', 'rollingUpdate': {'maxUnavailable': 1, 'maxSurge': 1}}
    return {
        'apiVersion': 'apps/v1', 'kind': 'Deployment',
        'metadata': {'name': options.name, 'namespace': options.namespace, 'labels': labels},
        'spec': {
            'replicas': options.replica_count,
            'strategy': strategy,
            'selector': {'matchLabels': labels},
            'template': {
                'metadata': {'labels': labels},
                'spec': {'serviceAccountName': options.name, 'containers': [container]},
            },
        },
    }


def disruption_budget(options: Options) -> dict[str, Any] | None:
    """For several replicas: keep one up (HA), or take one away at a time (shards)."""
    if options.mode == 'standalone' or options.replica_count < 2:
        return None
    budget: dict[str, Any] = {'minAvailable': 1} if options.mode == 'ha' else {'maxUnavailable': 1}
    return {'apiVersion': 'policy/v1', 'kind': 'PodDisruptionBudget',
            'metadata': {'name': options.name, 'namespace': options.namespace},
            'spec': {**budget, 'selector': {'matchLabels': {'app.kubernetes.io/name': options.name}}}}


def service(options: Options) -> dict[str, Any] | None:
    """The admission webhooks' Service, for a webhook server on a fixed port."""
    if options.webhook_port is None:
        return None
    return {'apiVersion': 'v1', 'kind': 'Service',
            'metadata': {'name': options.name, 'namespace': options.namespace},
            'spec': {'selector': {'app.kubernetes.io/name': options.name},
                     'ports': [{'name': 'webhooks', 'port': 443, 'targetPort': 'webhooks'}]}}


def dockerfile(options: Options, *, sources: Sequence[str]) -> str:
    """
    An image with Python, the framework and the operator's code, run as a non-root user.

    The framework comes as a wheel beside the Dockerfile (built from its
    repository with ``pip wheel --no-deps -w DIR .``), unless a pip
    requirement of it is given; its extras are those the operator needs.
    """
    extras = f"[{','.join(options.extras)}]" if options.extras else ''
    copies = '\n'.join(f"COPY {source} {APP_DIR}/{source}" for source in sources)
    cmd = ', '.join(f'"{part}"' for part in command(options))
    if options.framework is None:
        install = ("# The framework: a wheel of it beside this file (pip wheel --no-deps -w DIR <its repository>).\n"
                   "COPY kopf-*.whl /tmp/\n"
                   f'RUN pip install --no-cache-dir "$(ls /tmp/kopf-*.whl){extras}" && rm /tmp/kopf-*.whl\n')
    else:
        needed = f" (it needs the extras {extras})" if extras else ''
        install = f"# The framework{needed}.\nRUN pip install --no-cache-dir '{options.framework}'\n"
    return (
        "# The operator's image: Python, kopf and the operator's code; run as a non-root user.\n"
        "FROM python:3.12-slim\n"
        "ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1\n"
        f"{install}"
        f"WORKDIR {APP_DIR}\n"
        f"{copies}\n"
        f"USER {NONROOT}:{NONROOT}\n"
        f"CMD [{cmd}]\n"
    )
