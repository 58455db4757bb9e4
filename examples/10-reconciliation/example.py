"""
Reconciliation: a KopfExample keeps one ConfigMap as its spec says -- also when someone edits or deletes it.

One level-based handler: whatever has happened (the object is new or
changed, its ConfigMap was edited or deleted, the operator has restarted),
it declares the child as it should be, and the server makes it so.
"""
import kopf


@kopf.on.reconcile('kopfexamples', owns=['configmaps'])
def reconcile(name, spec, body, patch, **_):
    kopf.apply({
        'apiVersion': 'v1', 'kind': 'ConfigMap',
        'metadata': {'name': f"{name}-data"},
        'data': {'field': str(spec.get('field', '')), 'items': ','.join(spec.get('items', []))},
    }, force=True)  # owned by the KopfExample; fields edited by hand are taken back
    kopf.set_condition(body, patch, type='Ready', status=True, reason='ChildApplied',
                       message=f"{name}-data is as the spec says")
