"""
A plain operator of the kind most are: a built-in resource named by its kind, create and update handlers
without filters, the ``kubernetes`` client to read what the handler needs. Restarted over handled objects,
it must call nothing again, and still handle the next change.
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


@kopf.on.create('ConfigMap')
def created(name, namespace, **_):
    found = kubernetes.client.CoreV1Api().read_namespaced_config_map(name=name, namespace=namespace)
    record('create', name=name, data=found.data or {})


@kopf.on.update('ConfigMap')
def updated(name, new, **_):
    record('update', name=name, data=new.get('data') or {})
