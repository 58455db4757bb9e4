"""
A login handler as many operators have one: the official client's configuration, taken as it is.

The client is then configured for the handlers too, as the login has found it.
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


@kopf.on.login()
def login(**kwargs):
    credentials = kopf.login_via_client(**kwargs)
    record('login', server=credentials.server if credentials else None)
    return credentials


@kopf.on.create('configmaps', labels={'login': 'client'})
def created(name, namespace, **_):
    listed = kubernetes.client.CoreV1Api().list_namespaced_config_map(namespace, label_selector='login=client')
    record('created', name=name, listed=sorted(item.metadata.name for item in listed.items))
    return {'listed': len(listed.items)}
