"""
Handlers and their results, as a Kopf user writes them: creation, updates, a field, deletion, resuming.

Every call is recorded as a JSON line in ``$E2E_CALLS``; the results go into the status.
Two probes report a constant and the number of calls so far (``kopf run --liveness``).
"""
import json
import os
from typing import Any

import kopf

CALLS = os.environ['E2E_CALLS']


def record(handler: str, name: str, **details: Any) -> None:
    with open(CALLS, 'a') as f:
        f.write(json.dumps({'handler': handler, 'name': name, **details}) + '\n')


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.watching.server_timeout = 10


@kopf.on.probe(id='answer')
def answer(**_: Any) -> Any:
    return 42


@kopf.on.probe()
def handled(**_: Any) -> Any:
    with open(CALLS) as f:
        return sum(1 for _ in f)


@kopf.on.resume('kopfcompats')
def resumed(name: str, spec: kopf.Spec, **_: Any) -> Any:
    record('resumed', name, field=spec.get('field'))
    return 'resumed'


@kopf.on.create('kopfcompats')
def created(name: str, spec: kopf.Spec, meta: kopf.Meta, labels: kopf.Labels, **_: Any) -> Any:
    record('created', name, field=spec.get('field'), label=labels.get('tier'), uid=bool(meta.get('uid')))
    return {'field': spec.get('field')}


@kopf.on.create('kopfcompats', id='named-creation')
def created_with_an_id(**_: Any) -> Any:
    return 'named'


@kopf.on.update('kopfcompats')
def updated(name: str, diff: kopf.Diff, old: kopf.BodyEssence, new: kopf.BodyEssence, **_: Any) -> Any:
    changes = sorted([d[0], '.'.join(d[1]), d[2], d[3]] for d in diff)
    record('updated', name, changes=changes, old=old.get('spec', {}).get('field'), new=new.get('spec', {}).get('field'))
    return {'changes': len(changes)}


@kopf.on.field('kopfcompats', field='spec.field')
def field_changed(name: str, old: Any, new: Any, **_: Any) -> Any:
    record('field_changed', name, old=old, new=new)
    return {'old': old, 'new': new}


@kopf.on.delete('kopfcompats')
def deleted(name: str, **_: Any) -> None:
    record('deleted', name)
