"""
Children: a KopfExample gets a ConfigMap of its own, owned by it.

`kopf.adopt()` prepares the child: it adds an owner reference to the
KopfExample (so that Kubernetes deletes the child together with its owner),
puts it into the owner's namespace, and copies the owner's labels to it.

The API calls are made with pykube-ng, which kopf itself depends on; any
Kubernetes client works the same way.
"""
import pykube

import kopf


def api() -> pykube.HTTPClient:
    # In a pod: the service account; elsewhere: $KUBECONFIG or ~/.kube/config.
    return pykube.HTTPClient(pykube.KubeConfig.from_env())


@kopf.on.create('kopfexamples')
def create_fn(spec, name, logger, **kwargs):
    child = {
        'apiVersion': 'v1',
        'kind': 'ConfigMap',
        'metadata': {'name': f"{name}-data"},
        'data': {
            'field': str(spec.get('field', '')),
            'items': ','.join(spec.get('items', [])),
        },
    }
    kopf.adopt(child)  # owner reference, namespace, labels -- from the object being handled

    configmap = pykube.ConfigMap(api(), child)
    if configmap.exists():
        # A retry after a partial failure: the child is there already. Handlers
        # may run more than once, so they must tolerate their own earlier work.
        logger.info(f"ConfigMap {child['metadata']['name']} exists already.")
    else:
        configmap.create()
        logger.info(f"ConfigMap {child['metadata']['name']} is created.")
    return {'children': [child['metadata']['name']]}
