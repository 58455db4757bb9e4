"""
Filters, as a Kopf user writes them: labels and annotations (values, presence, callbacks), ``when=``,
the filter combinators, and ``field=``/``value=`` on several kinds of handlers.

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


def is_web(value: Any, spec: kopf.Spec, **_: Any) -> bool:
    return value == 'web' and 'field' in spec


def is_big(spec: kopf.Spec, **_: Any) -> bool:
    return spec.get('size', 0) > 10


def is_odd(spec: kopf.Spec, **_: Any) -> bool:
    return spec.get('size', 0) % 2 == 1


@kopf.on.create('kopfcompats', labels={'tier': 'web'})
def label_value(name: str, **_: Any) -> None:
    record('label_value', name)


@kopf.on.create('kopfcompats', labels={'tier': kopf.PRESENT})
def label_present(name: str, **_: Any) -> None:
    record('label_present', name)


@kopf.on.create('kopfcompats', labels={'tier': kopf.ABSENT})
def label_absent(name: str, **_: Any) -> None:
    record('label_absent', name)


@kopf.on.create('kopfcompats', labels={'tier': is_web})
def label_callback(name: str, **_: Any) -> None:
    record('label_callback', name)


@kopf.on.create('kopfcompats', annotations={'note': kopf.PRESENT})
def annotation_present(name: str, **_: Any) -> None:
    record('annotation_present', name)


@kopf.on.create('kopfcompats', when=is_big)
def when_big(name: str, **_: Any) -> None:
    record('when_big', name)


@kopf.on.create('kopfcompats', when=kopf.all_([is_big, is_odd]))
def when_big_and_odd(name: str, **_: Any) -> None:
    record('when_big_and_odd', name)


@kopf.on.create('kopfcompats', when=kopf.not_(is_big))
def when_not_big(name: str, **_: Any) -> None:
    record('when_not_big', name)


@kopf.on.create('kopfcompats', field='spec.field', value='x')
def field_value(name: str, **_: Any) -> None:
    record('field_value', name)


@kopf.on.update('kopfcompats', field='spec.size', old=kopf.PRESENT, new=kopf.ABSENT)
def size_removed(name: str, **_: Any) -> None:
    record('size_removed', name)


@kopf.on.update('kopfcompats', labels={'tier': 'web'}, field='spec.field')
def web_field_changed(name: str, old: Any, new: Any, **_: Any) -> None:
    record('web_field_changed', name, old=old, new=new)


@kopf.on.delete('kopfcompats', labels={'tier': 'web'})
def web_deleted(name: str, **_: Any) -> None:
    record('web_deleted', name)


@kopf.on.event('kopfcompats', annotations={'note': 'watched'})
def watched(name: str, type: str, **_: Any) -> None:
    record('watched', name, type=type)
