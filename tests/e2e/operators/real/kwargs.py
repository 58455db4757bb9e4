"""
Every kind of handler records the names of the keyword arguments it gets, to compare them with Kopf's.

Handlers pass their ``**kwargs`` on to a helper of their own with a ``config`` parameter, as real operators do.
"""
import json
import os
import threading

import kopf

LOCK = threading.Lock()
LABELS = {'kwargs': 'yes'}


def record(kind, kwargs):
    with LOCK, open(os.environ['E2E_CALLS'], 'a') as f:
        f.write(json.dumps({'handler': kind, 'kwargs': sorted(kwargs)}) + '\n')


def reconcile(config, **kwargs):
    """A helper of the operator's own: its ``config`` is not the framework's."""
    return config['replicas']


@kopf.on.startup()
def startup(**kwargs):
    record('startup', kwargs)
    kwargs['settings'].posting.enabled = False


@kopf.on.login()
def login(**kwargs):
    record('login', kwargs)
    return kopf.login_with_kubeconfig(**kwargs)


@kopf.on.probe()
def probe(**kwargs):
    record('probe', kwargs)
    return 1


@kopf.on.cleanup()
def cleanup(**kwargs):
    record('cleanup', kwargs)


@kopf.index('configmaps', labels=LABELS)
def by_name(**kwargs):
    record('index', kwargs)
    return {kwargs['name']: 1}


@kopf.on.create('configmaps', labels=LABELS)
def create(**kwargs):
    record('create', kwargs)
    kopf.register(lambda **kw: record('subhandler', kw), id='sub')


@kopf.on.update('configmaps', labels=LABELS)
def update(**kwargs):
    record('update', kwargs)


@kopf.on.field('configmaps', field='data.x', labels=LABELS)
def field(**kwargs):
    record('field', kwargs)


@kopf.on.delete('configmaps', labels=LABELS)
def delete(**kwargs):
    record('delete', kwargs)


@kopf.on.resume('configmaps', labels=LABELS)
def resume(**kwargs):
    record('resume', kwargs)


@kopf.on.event('configmaps', labels=LABELS)
def event(**kwargs):
    record('event', kwargs)


@kopf.daemon('configmaps', labels=LABELS)
def daemon(stopped, **kwargs):
    record('daemon', {**kwargs, 'stopped': stopped})
    record('helper', {'replicas': reconcile(config={'replicas': 3}, **kwargs)})
    stopped.wait(60)


@kopf.timer('configmaps', interval=1, labels=LABELS)
def timer(**kwargs):
    record('timer', kwargs)
