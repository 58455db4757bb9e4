"""
Handlers that use the official ``kubernetes`` client as Kopf's users do: without configuring it.

The default login configures it (as Kopf's does); the children are the client's models, adopted by kopf.
"""
import json
import os

import kubernetes

import kopf


def record(handler, **fields):
    with open(os.environ['E2E_CALLS'], 'a') as f:
        f.write(json.dumps({'handler': handler, **fields}) + '\n')


@kopf.on.startup()
def configure(settings, **_):
    settings.posting.enabled = False


@kopf.on.create('configmaps', annotations={'client': 'parent'})
def create_child(name, namespace, **_):
    child = kubernetes.client.V1ConfigMap(data={'from': name})
    kopf.adopt(child)  # a model, not a dict
    created = kubernetes.client.CoreV1Api().create_namespaced_config_map(namespace=namespace, body=child)
    record('create_child', name=name, child=created.metadata.name)
    return {'child': created.metadata.name}
