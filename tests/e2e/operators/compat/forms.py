"""
Handler forms from Kopf's documentation that Kopf's own examples do not show, as a Kopf user writes them:
a bound method as a handler, one function under several decorators (create and resume; several
fields with a param each), an update handler of the status, a value callback, a field handler's
relative diff, the patch's dict forms, and an optional deletion handler.

Every call is recorded as a JSON line in ``$E2E_CALLS``.
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


class Reconciler:
    """Handlers grouped in a class: registered per instance, as Kopf's documentation suggests."""

    def __init__(self, greeting: str) -> None:
        self.greeting = greeting

    def on_create(self, name: str, **_: Any) -> Any:
        record('method', name, greeting=self.greeting)
        return self.greeting


reconciler = Reconciler('hello')
kopf.on.create('kopfcompats')(reconciler.on_create)


@kopf.on.resume('kopfcompats')
@kopf.on.create('kopfcompats')
def started(name: str, reason: str, **_: Any) -> None:
    record('started', name, reason=reason)


@kopf.on.update('kopfcompats', field='spec.first', param='one')
@kopf.on.update('kopfcompats', field='spec.second', param='two')
def some_field_changed(name: str, param: Any, old: Any, new: Any, **_: Any) -> None:
    record('some_field_changed', name, param=param, old=old, new=new)


@kopf.on.update('kopfcompats', field='status.phase')
def phase_changed(name: str, old: Any, new: Any, **_: Any) -> None:
    record('phase_changed', name, old=old, new=new)


@kopf.on.field('kopfcompats', field='metadata.labels')
def relabelled(name: str, diff: kopf.Diff, **_: Any) -> None:
    record('relabelled', name, diff=sorted([op, list(path), old, new] for op, path, old, new in diff))


def is_odd(value: Any, /, spec: kopf.Spec, **_: Any) -> bool:
    return value is not None and int(value) % 2 == 1 and 'first' in spec


@kopf.on.create('kopfcompats', labels={'number': is_odd})
def odd_created(name: str, **_: Any) -> None:
    record('odd_created', name)


@kopf.on.create('kopfcompats')
def ensure_defaults(name: str, spec: kopf.Spec, patch: kopf.Patch, **_: Any) -> None:
    record('ensure_defaults', name)
    if 'greeting' not in spec:
        patch.spec['greeting'] = 'hello'
    patch.spec['obsolete'] = None
    patch.status['state'] = 'initialized'
    patch.metadata.annotations['compat.kopf.dev/never-again'] = 'yes'


@kopf.on.delete('kopfcompats', optional=True)
def cleaned_up(name: str, **_: Any) -> None:
    record('cleaned_up', name)


@kopf.on.update('kopfcompats')
def updated(name: str, diff: kopf.Diff, **_: Any) -> None:
    record('updated', name, changes=sorted('.'.join(path) for _, path, _, _ in diff))
