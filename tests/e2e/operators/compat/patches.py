"""
Kopf's transformation functions (its "Patching" page), as a Kopf user writes them: ``patch.fns`` of a
creation handler (a finalizer of its own, an item removed from a list, an item appended to a list in
the status, which is a subresource) beside the merge-patch dict, and ``patch.fns`` of a timer.

Every call is recorded as a JSON line in ``$E2E_CALLS``.
"""
import functools
import json
import os
from typing import Any

import kopf

CALLS = os.environ['E2E_CALLS']
FINALIZER = 'compat.kopf.dev/cleanup'


def record(handler: str, name: str, **details: Any) -> None:
    with open(CALLS, 'a') as f:
        f.write(json.dumps({'handler': handler, 'name': name, **details}) + '\n')


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.watching.server_timeout = 10


def add_finalizer(body: dict[str, Any]) -> None:
    finalizers = body.setdefault('metadata', {}).setdefault('finalizers', [])
    if FINALIZER not in finalizers:
        finalizers.append(FINALIZER)


def drop_item(body: dict[str, Any], item: str) -> None:
    items = body.setdefault('spec', {}).setdefault('items', [])
    if item in items:
        items.remove(item)


def log_in_status(body: dict[str, Any], entry: str) -> None:
    log = body.setdefault('status', {}).setdefault('log', [])
    if entry not in log:
        log.append(entry)


@kopf.on.create('kopfcompats')
def create_fn(name: str, patch: kopf.Patch, **_: Any) -> None:
    record('create_fn', name)
    patch.spec['merged'] = True
    patch.fns.append(add_finalizer)
    patch.fns.append(functools.partial(drop_item, item='a'))
    patch.fns.append(functools.partial(log_in_status, entry='created'))


@kopf.timer('kopfcompats', interval=0.5, field='spec.ticks')
def tick(name: str, spec: kopf.Spec, patch: kopf.Patch, status: kopf.Status, **_: Any) -> None:
    log = status.get('log', [])
    if 'created' in log and len(log) <= spec['ticks']:
        record('tick', name)
        patch.fns.append(functools.partial(log_in_status, entry=f"tick-{len(log)}"))
