"""A login handler as some operators have one: pykube-ng's configuration, from the kubeconfig."""
import json
import os

import kopf


def record(handler, **fields):
    with open(os.environ['E2E_CALLS'], 'a') as f:
        f.write(json.dumps({'handler': handler, **fields}) + '\n')


@kopf.on.startup()
def configure(settings, **_):
    settings.posting.enabled = False


@kopf.on.login()
def login(**kwargs):
    credentials = kopf.login_via_pykube(**kwargs)
    record('login', server=credentials.server if credentials else None)
    return credentials


@kopf.on.create('configmaps', labels={'login': 'pykube'})
def created(name, **_):
    record('created', name=name)
    return {'created': name}
