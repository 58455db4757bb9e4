"""
One operator for both the released Kopf (0.27 to 1.x) and kopf: the upgrade test runs it with either.

Only API that every version shares is used. Every handler call is recorded as a
JSON line in ``$E2E_CALLS`` (with the process id, so that the test tells who
called what), and whether it succeeded.

* ``spec.failures`` of an object: how many times ``flaky`` and ``parent/child2``
  raise a TemporaryError before they succeed (retry delay ``$E2E_DELAY`` seconds).
* ``upd`` (the update handler) fails twice before it succeeds.
* ``$E2E_EVENTS``, if set: every event of an object is recorded there with the value of the
  marker annotation, so that the test knows when the operator has seen a change it made.
"""
import json
import os

import kopf

GROUP, VERSION, PLURAL = 'e2e.kopf.dev', 'v1', 'kopfupgrades'
CALLS = os.environ['E2E_CALLS']
DELAY = float(os.environ.get('E2E_DELAY', '2'))
EVENTS = os.environ.get('E2E_EVENTS')
MARKER = 'kubectl.kubernetes.io/last-applied-configuration'
LONG_ID = 'a-very-long-handler-id-that-goes-well-beyond-sixty-three-characters-in-total'


def record(handler, name, retry, ok, **details):
    with open(CALLS, 'a') as f:
        f.write(json.dumps({'handler': handler, 'name': name, 'retry': retry, 'ok': ok,
                            'pid': os.getpid(), **details}, default=str) + '\n')


def fail_until(handler, name, retry, failures):
    ok = retry >= failures
    record(handler, name, retry, ok)
    if not ok:
        raise kopf.TemporaryError(f"{handler} is not ready yet", delay=DELAY)


@kopf.on.create(GROUP, VERSION, PLURAL, id='plain')
def plain(name, retry, **_):
    record('plain', name, retry, True)


@kopf.on.create(GROUP, VERSION, PLURAL, id=LONG_ID)
def long_one(name, retry, **_):
    record(LONG_ID, name, retry, True)


@kopf.on.create(GROUP, VERSION, PLURAL, id='parent')
def parent(name, retry, spec, **_):
    record('parent', name, retry, True)

    def child1(retry, **_):
        record('parent/child1', name, retry, True)

    def child2(retry, **_):
        fail_until('parent/child2', name, retry, spec.get('failures', 0))

    kopf.register(child1, id='child1')
    kopf.register(child2, id='child2')


@kopf.on.create(GROUP, VERSION, PLURAL, id='flaky')
def flaky(name, retry, spec, **_):
    fail_until('flaky', name, retry, spec.get('failures', 0))


@kopf.on.field(GROUP, VERSION, PLURAL, field='spec.field')
def fieldfn(name, retry, **_):
    record('fieldfn/spec.field', name, retry, True)


@kopf.on.update(GROUP, VERSION, PLURAL, id='upd')
def upd(name, retry, diff, **_):
    ok = retry >= 2
    record('upd', name, retry, ok, diff=[[op, list(path), old, new] for op, path, old, new in diff])
    if not ok:
        raise kopf.TemporaryError("upd is not ready yet", delay=DELAY)


if EVENTS:
    @kopf.on.event(GROUP, VERSION, PLURAL)
    def seen(body, **_):
        annotations = body.get('metadata', {}).get('annotations', {})
        with open(EVENTS, 'a') as f:
            f.write(json.dumps({'marker': annotations.get(MARKER), 'pid': os.getpid()}) + '\n')
