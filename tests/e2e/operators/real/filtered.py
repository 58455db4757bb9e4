"""Only one update handler, for labelled ConfigMaps: no other ConfigMap is the operator's business."""
import json
import os

import kopf


@kopf.on.startup()
def configure(settings, **_):
    settings.posting.enabled = False


@kopf.on.update('configmaps', labels={'rp': 'filtered'})
def updated(name, diff, **_):
    with open(os.environ['E2E_CALLS'], 'a') as f:
        f.write(json.dumps({'handler': 'updated', 'name': name}) + '\n')


@kopf.on.event('configmaps')
def seen(name, body, **_):
    with open(os.environ['E2E_CALLS'], 'a') as f:
        f.write(json.dumps({'handler': 'seen', 'name': name, 'rv': body['metadata']['resourceVersion']}) + '\n')
