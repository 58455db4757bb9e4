"""
An operator with admission webhooks for end-to-end tests, configured by environment variables.

It validates and mutates ConfigMaps, and records every call as a JSON line in
``$E2E_CALLS``; the mutation's side effect (a line in ``$E2E_EFFECTS``) is
skipped in dry runs.

* ``E2E_MANAGED``: the name of the managed webhook configurations.
* ``E2E_SERVER``: ``server`` (default; kopf.WebhookServer on 127.0.0.1) or ``autotunnel``.
* ``E2E_PORT``: the server's port (default: a free one).
* ``E2E_LEASE``, ``E2E_RENEW``, ``E2E_RETRY``: the peering timing of replicas (``--ha``/``--shards``).
"""
import json
import os
import pathlib

import kopf

CALLS = pathlib.Path(os.environ['E2E_CALLS'])
EFFECTS = pathlib.Path(os.environ['E2E_EFFECTS'])


def record(handler, **details):
    with CALLS.open('a') as f:
        f.write(json.dumps({'handler': handler, **details}, default=str) + '\n')


@kopf.on.startup()
def configure(settings, **_):
    port = int(os.environ['E2E_PORT']) if os.environ.get('E2E_PORT') else None
    if os.environ.get('E2E_SERVER') == 'autotunnel':
        settings.admission.server = kopf.WebhookAutoTunnel(port=port)
    else:
        settings.admission.server = kopf.WebhookServer(addr='127.0.0.1', port=port)
    settings.admission.managed = os.environ['E2E_MANAGED']
    if os.environ.get('E2E_LEASE'):
        settings.peering.lease_duration = int(os.environ['E2E_LEASE'])
        settings.peering.renew_deadline = float(os.environ['E2E_RENEW'])
        settings.peering.retry_period = float(os.environ['E2E_RETRY'])


@kopf.on.validate('configmaps', id='check-data')
def check_data(body, name, dryrun, warnings, userinfo, **_):
    data = body.get('data') or {}
    record('check-data', name=name, dryrun=dryrun, user=userinfo.get('username'))
    if 'crash' in data:
        raise RuntimeError("crashed on purpose")
    if 'forbidden' in data:
        raise kopf.AdmissionError("The key 'forbidden' is not allowed here.", code=422)
    if 'odd' in data:
        warnings.append("The key 'odd' is odd.")


@kopf.on.mutate('configmaps', id='add-label', side_effects=True)
def add_label(name, dryrun, patch, **_):
    record('add-label', name=name, dryrun=dryrun)
    if not dryrun:
        with EFFECTS.open('a') as f:
            f.write(f"{name}\n")
    patch.metadata.labels['mutated-by'] = 'kopf'
