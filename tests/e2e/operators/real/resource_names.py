"""
Resources named in every form that Kopf's users write, on ConfigMaps and on a custom resource.

Every handler records which object it saw, by its own name, in ``$E2E_CALLS``.
"""
import json
import os

import kopf

CALLS = os.environ['E2E_CALLS']
LABELS = {'names': 'yes'}


def record(handler, body):
    with open(CALLS, 'a') as f:
        f.write(json.dumps({'handler': handler, 'kind': body['kind'], 'name': body['metadata']['name']}) + '\n')


@kopf.on.startup()
def configure(settings, **_):
    settings.posting.enabled = False


def seen(handler_id):
    def fn(body, **_):
        record(handler_id, body)
    fn.__name__ = fn.__qualname__ = handler_id.replace('-', '_').replace('.', '_')
    return fn


# A core resource by its kind, singular and short names, after every form of the core API.
kopf.on.event('v1', 'ConfigMap', labels=LABELS, id='v1-kind')(seen('v1-kind'))
kopf.on.event('', 'v1', 'configmap', labels=LABELS, id='core-singular')(seen('core-singular'))
kopf.on.event('v1', 'cm', labels=LABELS, id='v1-short')(seen('v1-short'))
kopf.on.event('CM', labels=LABELS, id='short-upper')(seen('short-upper'))
kopf.on.event('configmaps.v1', labels=LABELS, id='dotted-core')(seen('dotted-core'))
kopf.on.event(kind='ConfigMap', labels=LABELS, id='kind-keyword')(seen('kind-keyword'))
kopf.on.event(version='v1', plural='configmaps', labels=LABELS, id='plural-keyword')(seen('plural-keyword'))

# A custom resource by its singular, kind and short name, with and without its group; by category and callable.
kopf.on.event('kopfname', labels=LABELS, id='singular')(seen('singular'))
kopf.on.event('kopf.dev', 'kopfname', labels=LABELS, id='group-singular')(seen('group-singular'))
kopf.on.event('KopfName.kopf.dev', labels=LABELS, id='dotted-kind')(seen('dotted-kind'))
kopf.on.event('kopf.dev/v1', 'KopfName', labels=LABELS, id='apiversion-kind')(seen('apiversion-kind'))
kopf.on.event('kn', labels=LABELS, id='short')(seen('short'))
kopf.on.event(shortcut='kn', group='kopf.dev', labels=LABELS, id='shortcut-keyword')(seen('shortcut-keyword'))
kopf.on.event(category='kopf-names', labels=LABELS, id='category')(seen('category'))
kopf.on.event(lambda resource: resource.kind == 'KopfName', labels=LABELS, id='callable')(seen('callable'))
