"""
The same operator in the released Kopf's way: handlers of events, a polling timer, and a client library.

Kopf calls handlers when something happens, so keeping a child as the spec
says takes three of them: one for the object's own changes, one for the
child's changes (which must find the owner by hand), and a timer for
whatever no event shows. Each reads the current state and writes the
difference with the official ``kubernetes`` client.
"""
import kubernetes

import kopf

OWNER = 'kopf.dev/example-owner'


@kopf.on.startup()
def configure(**_):
    try:
        kubernetes.config.load_incluster_config()
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config()


def ensure_child(owner, logger):
    meta, spec = owner['metadata'], owner.get('spec', {})
    name, namespace = f"{meta['name']}-data", meta['namespace']
    data = {'field': str(spec.get('field', '')), 'items': ','.join(spec.get('items', []))}
    api = kubernetes.client.CoreV1Api()
    try:
        current = api.read_namespaced_config_map(name, namespace)
    except kubernetes.client.ApiException as e:
        if e.status != 404:
            raise
        child = {'apiVersion': 'v1', 'kind': 'ConfigMap', 'data': data,
                 'metadata': {'name': name, 'labels': {OWNER: meta['name']}}}
        kopf.adopt(child, owner=owner)
        try:
            api.create_namespaced_config_map(namespace, child)
        except kubernetes.client.ApiException as e:
            if e.status != 409:  # created meanwhile by another handler of the same owner: fine
                raise
        logger.info(f"{name} is created.")
        return
    if current.data != data:
        api.patch_namespaced_config_map(name, namespace, {'data': data})
        logger.info(f"{name} is repaired.")


@kopf.on.resume('kopfexamples')
@kopf.on.create('kopfexamples')
@kopf.on.update('kopfexamples')
def owner_changed(body, logger, **_):
    ensure_child(body, logger)


@kopf.timer('kopfexamples', interval=60)
def drift(body, logger, **_):
    ensure_child(body, logger)


@kopf.on.event('configmaps', labels={OWNER: kopf.PRESENT})
def child_changed(body, logger, **_):
    api = kubernetes.client.CustomObjectsApi()
    try:
        owner = api.get_namespaced_custom_object('kopf.dev', 'v1', body['metadata']['namespace'],
                                                 'kopfexamples', body['metadata']['labels'][OWNER])
    except kubernetes.client.ApiException as e:
        if e.status == 404:
            return  # the owner is gone; the child goes with it
        raise
    if not owner['metadata'].get('deletionTimestamp'):
        ensure_child(owner, logger)
