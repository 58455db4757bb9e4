"""
Namespaces served by patterns, as a Kopf user writes the operator: ``kopf run -n 'prefix-*,!*-pr-*'``.

ConfigMaps labelled ``e2e-scopes`` are handled on creation, and each runs a
daemon while it exists; every call, every daemon's start and stop (with the
reason) is recorded as a JSON line in ``$E2E_CALLS``.
"""
import json
import os
from typing import Any

import kopf

CALLS = os.environ['E2E_CALLS']


def record(handler: str, name: str, **details: Any) -> None:
    with open(CALLS, 'a') as f:
        f.write(json.dumps({'handler': handler, 'name': name, **details}) + '\n')


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.watching.server_timeout = 10
    settings.posting.enabled = False  # nothing here is about events; fewer permissions needed


@kopf.on.create('configmaps', labels={'e2e-scopes': kopf.PRESENT})
def created(name: str, namespace: str, **_: Any) -> None:
    record('created', name, namespace=namespace)


@kopf.daemon('configmaps', labels={'e2e-scopes': kopf.PRESENT})
async def watcher(name: str, namespace: str, stopped: kopf.DaemonStopped, **_: Any) -> None:
    record('daemon_started', name, namespace=namespace)
    await stopped.wait()
    record('daemon_stopped', name, namespace=namespace, reason=stopped.reason.name if stopped.reason else None)
