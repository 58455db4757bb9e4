"""
An operator for end-to-end tests of indexes and field filters, on configmaps (no CRD needed).

It runs unchanged under the released Kopf too. Every handler call is recorded
as a JSON line in ``$E2E_CALLS``.

* ``e2e-role: source`` configmaps are indexed by their ``color`` label, and
  by name in an index that fails for yellow ones.
* ``e2e-role: target`` configmaps have handlers with field filters on ``data.mode``.
* ``e2e-role: probe`` configmaps show the index as it is when their event comes.
"""
import json
import os
import pathlib

import kopf

CALLS = pathlib.Path(os.environ['E2E_CALLS'])
TARGET = {'e2e-role': 'target'}


def record(handler, name, **details):
    with CALLS.open('a') as f:
        f.write(json.dumps({'handler': handler, 'name': name, **details}) + '\n')


def snapshot(index):
    return {str(key): sorted(store) for key, store in index.items()}


@kopf.index('configmaps', labels={'e2e-role': 'source'})
def colors(labels, name, **_):
    return {labels.get('color'): name}


@kopf.index('configmaps', labels={'e2e-role': 'source'})
def fragile(labels, name, **_):
    if labels.get('color') == 'yellow':
        raise ValueError(f"{name} is yellow")
    return name


@kopf.on.create('configmaps', labels=TARGET)
def created(name, colors, **_):
    record('created', name, colors=snapshot(colors))


@kopf.on.event('configmaps', labels={'e2e-role': 'probe'})
def probed(name, body, colors, fragile, **_):
    record('probed', name, stamp=body.get('data', {}).get('stamp'), colors=snapshot(colors),
           fragile=snapshot(fragile))


@kopf.on.create('configmaps', labels=TARGET, field='data.mode', value='a')
def created_with_a(name, **_):
    record('created_with_a', name)


@kopf.on.create('configmaps', labels=TARGET, field='data.mode', value=kopf.ABSENT)
def created_without_mode(name, **_):
    record('created_without_mode', name)


@kopf.on.update('configmaps', labels=TARGET, field='data.mode', old='a', new='b')
def a_to_b(name, old, new, **_):
    record('a_to_b', name, old=old, new=new)


@kopf.on.update('configmaps', labels=TARGET, field='data.mode', new=kopf.ABSENT)
def mode_removed(name, old, **_):
    record('mode_removed', name, old=old)


@kopf.on.field('configmaps', labels=TARGET, field='data.mode', value='b')
def into_or_out_of_b(name, old, new, **_):
    record('into_or_out_of_b', name, old=old, new=new)


@kopf.on.update('configmaps', labels=TARGET, field='data.other')
def other_changed(name, new, **_):
    record('other_changed', name, new=new)


def sized(value, spec, body, diff, **_):
    return value is not None and body.get('data', {}).get('size') == '2'


@kopf.on.update('configmaps', labels={'e2e-role': 'target', 'tier': sized})
def labelled_and_sized(name, **_):
    record('labelled_and_sized', name)
