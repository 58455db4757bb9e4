"""
A custom resource whose CRD comes and goes while the operator runs, as a Kopf user writes the operator.

The resource is named by ``$E2E_PLURAL`` in the group ``scopes.e2e.kopf.dev``;
ConfigMaps labelled ``e2e-scopes`` are handled too, as a resource that is
always there. Every call is recorded as a JSON line in ``$E2E_CALLS``. With
``$E2E_SCANNING_DISABLED``, ``settings.scanning.disabled`` is set.
"""
import json
import os
from typing import Any

import kopf

CALLS = os.environ['E2E_CALLS']
GROUP = 'scopes.e2e.kopf.dev'


def record(handler: str, name: str, **details: Any) -> None:
    with open(CALLS, 'a') as f:
        f.write(json.dumps({'handler': handler, 'name': name, **details}) + '\n')


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.watching.server_timeout = 10
    settings.posting.enabled = False
    if os.environ.get('E2E_SCANNING_DISABLED'):
        settings.scanning.disabled = True


for plural in os.environ['E2E_PLURAL'].split(','):
    @kopf.on.create(GROUP, 'v1', plural, id=f'created_{plural}')
    def created(name: str, namespace: str, resource: kopf.Resource, **_: Any) -> None:
        record('created', name, namespace=namespace, plural=resource.plural)


@kopf.on.create('configmaps', labels={'e2e-scopes': kopf.PRESENT})
def configmap_created(name: str, namespace: str, **_: Any) -> None:
    record('configmap_created', name, namespace=namespace)
