"""
Children and owner references, as a Kopf user writes them: ``kopf.adopt`` and the other object helpers.

The handler records what the helpers made of the children (as JSON lines in
``$E2E_CALLS``), and creates one child ConfigMap on the server with a plain
HTTP request, so that the owner reference is seen by the API server too.
"""
import json
import os
import ssl
import urllib.request
from typing import Any

import kopf

CALLS = os.environ['E2E_CALLS']


def record(handler: str, name: str, **details: Any) -> None:
    with open(CALLS, 'a') as f:
        f.write(json.dumps({'handler': handler, 'name': name, **details}) + '\n')


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.watching.server_timeout = 10


def create(obj: dict[str, Any]) -> None:
    """A plain request with the operator's kubeconfig credentials: any client would do."""
    info = kopf.login_with_kubeconfig(settings=kopf.OperatorSettings())
    assert info is not None
    context = ssl.create_default_context(cafile=info.ca_path)
    context.load_cert_chain(info.certificate_path, info.private_key_path)
    url = f"{info.server}/api/v1/namespaces/{obj['metadata']['namespace']}/configmaps"
    request = urllib.request.Request(url, data=json.dumps(obj).encode(), method='POST',
                                     headers={'Content-Type': 'application/json'})
    with urllib.request.urlopen(request, context=context, timeout=10):
        pass


@kopf.on.create('kopfcompats')
def adopt_children(body: kopf.Body, name: str, namespace: str, **_: Any) -> Any:
    child: dict[str, Any] = {'apiVersion': 'v1', 'kind': 'ConfigMap', 'data': {'key': 'value'}}
    kopf.adopt(child)  # the owner is the object being handled
    record('adopted', name, child=child)
    create(child)

    pods = [{'metadata': {'name': 'explicit', 'labels': {'own': 'label'}},
             'spec': {'template': {'metadata': {}}}},
            {'metadata': {'generateName': 'generated-'}}]
    kopf.adopt(pods, owner=body, nested='spec.template')
    kopf.label(pods, {'extra': 'yes', 'own': 'overridden'}, nested=['spec.template'], forced=True)
    record('adopted_many', name, objs=pods)

    loose: dict[str, Any] = {}
    kopf.append_owner_reference(loose, owner=body, controller=False, block_owner_deletion=False)
    kopf.append_owner_reference(loose, owner=body)  # no duplicates
    record('appended', name, obj=json.loads(json.dumps(loose)))
    kopf.remove_owner_reference(loose, owner=body)
    kopf.harmonize_naming(loose, name='harmonized', forced=True)
    kopf.adjust_namespace(loose, namespace=namespace)
    record('harmonized', name, obj=loose)
    record('references', name, owner=dict(kopf.build_owner_reference(body)),
           object=dict(kopf.build_object_reference(body)))
    return {'child': child['metadata'].get('name') or child['metadata'].get('generateName')}
