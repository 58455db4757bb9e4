"""
Sub-handlers, as a Kopf user writes them: ``kopf.subhandler`` in a loop, ``kopf.register``, ``kopf.execute``.

Every call is recorded as a JSON line in ``$E2E_CALLS``; the results go into the status.
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


@kopf.on.create('kopfcompats')
def per_item(name: str, spec: kopf.Spec, **_: Any) -> Any:
    record('per_item', name)
    for item in spec.get('items', []):

        @kopf.subhandler(id=f'item-{item}')
        def handle_item(retry: int, item: str = item, **_: Any) -> Any:
            record(f'item-{item}', name, retry=retry)
            if item == 'b' and retry < 1:
                raise kopf.TemporaryError(f"{item} is not ready.", delay=0.3)
            return {'item': item}

    return 'items registered'


def first(name: str, **_: Any) -> Any:
    record('first', name)
    return 1


def second(name: str, **_: Any) -> Any:
    record('second', name)
    return 2


@kopf.on.create('kopfcompats')
def registered(name: str, **_: Any) -> None:
    record('registered', name)
    kopf.register(first, id='one')
    kopf.register(second, id='two')


@kopf.on.create('kopfcompats')
async def executed(name: str, **_: Any) -> Any:
    record('executed', name)
    await kopf.execute(fns={'a': first, 'b': second})
    return 'all executed'
