"""
Forms from Kopf's documentation beyond Kopf's own examples, run here and under Kopf 1.45.2 side by side.

The operators (``operators/compat/forms.py``, ``background.py``) are written as
Kopf's users write them; each test drives the same objects through the same
steps in both frameworks and compares the handlers' records of their calls
and what the API server holds. The side-by-side machinery is that of
``test_compat.py``.
"""
from __future__ import annotations

import collections
import json
from collections.abc import Callable
from typing import Any

from kopf.testing import KubeAPI
from tests.e2e import test_compat
from tests.e2e.test_compat import FINALIZER, LAST_HANDLED, Side, body, collection, progress, settled

crd = test_compat.crd  # the fixtures of the side-by-side runs
sides = test_compat.sides


def handled_by_both(side: Side, kube: KubeAPI, name: str) -> dict[str, Any] | None:
    obj = kube.find(side.path(name))
    return obj if obj and LAST_HANDLED in obj['metadata'].get('annotations', {}) and not progress(obj) else None


def test_handler_forms_as_in_kopf(kube: KubeAPI, sides: Callable[..., list[Side]]) -> None:
    both = sides('forms.py')
    for side in both:
        kube.create(collection(side.namespace), {
            **body('o1', first=1, second=1, obsolete='x'),
            'metadata': {'name': 'o1', 'labels': {'number': '3', 'tier': 'web'}}})
        kube.create(collection(side.namespace), {
            **body('o2', second=1), 'metadata': {'name': 'o2', 'labels': {'number': '5'}}})
    objects: dict[str, dict[str, Any]] = {}
    for side in both:
        for name in ['o1', 'o2']:
            obj = side.wait(settled(kube, side, name, 'state'), what=f"the creation of {name} handled")
            assert obj['spec'] == ({'first': 1, 'second': 1, 'greeting': 'hello'} if name == 'o1'
                                   else {'second': 1, 'greeting': 'hello'})  # None deleted 'obsolete'
            assert obj['metadata']['annotations']['compat.kopf.dev/never-again'] == 'yes'
            assert 'finalizers' not in obj['metadata']  # an optional deletion handler needs none
        objects[side.framework] = kube.get(side.path('o1'))

    for side in both:
        kube.patch(side.path('o1'), {'spec': {'first': 2, 'second': 2}})
        kube.patch(side.path('o2'), {'metadata': {'labels': {'number': '7', 'tier': 'db'}}})
    for side in both:
        side.wait(lambda s=side: len(s.records('some_field_changed')) == 2 and len(s.records('relabelled')) == 3
                  and handled_by_both(s, kube, 'o1') and handled_by_both(s, kube, 'o2'), what="the updates handled")
        kube.patch(f"{side.path('o1')}/status", {'status': {'phase': 'Running'}})
    for side in both:
        side.wait(lambda s=side: s.records('phase_changed') and handled_by_both(s, kube, 'o1'),
                  what="the change of the status handled")
        side.restart()
    for side in both:
        side.wait(lambda s=side: len([r for r in s.records('started') if r['reason'] == 'resume']) == 2,
                  what="the resuming after a restart")
        kube.delete(side.path('o1'))
        kube.delete(side.path('o2'))
    for side in both:
        side.wait(lambda s=side: not (kube.find(collection(s.namespace)) or {}).get('items'),
                  what="the objects deleted at once")

    ours, theirs = both
    for handler in ['method', 'started', 'some_field_changed', 'phase_changed', 'relabelled', 'odd_created',
                    'ensure_defaults', 'cleaned_up']:
        assert sorted(ours.records(handler), key=json.dumps) == sorted(theirs.records(handler), key=json.dumps), \
            handler
    # The handlers' own patches and the test's changes come as one change or two, as the events fall:
    # whole-object update handlers are compared only where the test's change stands alone.
    assert {k: v for k, v in ours.counts().items() if k[0] != 'updated'} == \
           {k: v for k, v in theirs.counts().items() if k[0] != 'updated'}
    for side in both:  # the status is in the essence once a field handler watches it, also for the others
        assert [r for r in side.records('updated') if 'status' in r['changes']] == [
            {'handler': 'updated', 'name': 'o1', 'changes': ['status']}]
    # A bound method's result goes into the status under the same id in both.
    assert {k: v for k, v in objects['ours']['status'].items() if v == 'hello'} == \
           {k: v for k, v in objects[theirs.framework]['status'].items() if v == 'hello'}
    assert sorted(ours.records('started'), key=lambda r: (r['name'], r['reason'])) == [
        {'handler': 'started', 'name': 'o1', 'reason': 'create'},
        {'handler': 'started', 'name': 'o1', 'reason': 'resume'},
        {'handler': 'started', 'name': 'o2', 'reason': 'create'},
        {'handler': 'started', 'name': 'o2', 'reason': 'resume'},
    ]
    assert sorted((r['param'], r['old'], r['new']) for r in ours.records('some_field_changed')) == [
        ('one', 1, 2), ('two', 1, 2)]
    assert ours.records('phase_changed') == [{'handler': 'phase_changed', 'name': 'o1', 'old': None,
                                              'new': 'Running'}]
    assert [r['name'] for r in ours.records('odd_created')] == ['o1']  # o2 is odd but has no spec.first
    assert not ours.records('cleaned_up')  # no finalizer held the objects for it
    assert collections.Counter(r['name'] for r in ours.records('relabelled')) == {'o1': 1, 'o2': 2}
    assert FINALIZER not in str(objects['ours'])


def test_daemon_and_timer_forms_as_in_kopf(kube: KubeAPI, sides: Callable[..., list[Side]]) -> None:
    both = sides('background.py')
    for side in both:
        kube.create(collection(side.namespace), {
            **body('o1', delay=0.5), 'metadata': {'name': 'o1', 'labels': {'watched': 'yes'}}})
    for side in both:
        obj = side.wait(lambda s=side: (lambda o: o if o and o.get('status', {}).get('finisher') else None)(
            kube.find(s.path('o1'))), what="the daemon's result in the status")
        assert obj['status']['finisher'] == {'finished': True}
        side.wait(lambda s=side: len(s.records('monitor')) == 5 and s.records('ticker') and s.records('watcher')
                  and s.records('delayed_daemon'), what="the daemons and the timer at work")
        assert (kube.get(side.path('o1')).get('status') or {}).get('ticker') == 'ticked'
        kube.patch(side.path('o1'), {'metadata': {'labels': {'watched': None}}})
    for side in both:
        side.wait(lambda s=side: s.records('watcher_stopped'), what="the daemon stopped by its filters")
        kube.patch(side.path('o1'), {'metadata': {'labels': {'watched': 'yes'}}})
    for side in both:
        side.wait(lambda s=side: len(s.records('watcher')) == 2, what="the daemon started again by its filters")
        kube.delete(side.path('o1'))
    for side in both:
        side.wait(lambda s=side: kube.find(s.path('o1')) is None and len(s.records('watcher_stopped')) == 2,
                  what="the deletion done once the daemons stopped")

    ours, theirs = both
    for handler in ['finisher', 'monitor', 'watcher', 'watcher_stopped', 'ticker', 'delayed_daemon']:
        assert ours.records(handler) == theirs.records(handler), handler
    assert [r['retry'] for r in ours.records('monitor')] == [0, 1, 2, 3, 4]  # not restarted after the last one
    assert ours.records('finisher') == [{'handler': 'finisher', 'name': 'o1'}]  # a daemon that returns is done
    assert [r['reason'] for r in ours.records('watcher_stopped')] == ['FILTERS_MISMATCH', 'RESOURCE_DELETED']
    assert ours.records('get_delay') and theirs.records('get_delay')


def test_transformation_functions_as_in_kopf(kube: KubeAPI, sides: Callable[..., list[Side]]) -> None:
    both = sides('patches.py')
    for side in both:
        kube.create(collection(side.namespace), body('o1', items=['a', 'b'], ticks=2))
    for side in both:
        obj = side.wait(lambda s=side: (lambda o: o if len((o or {}).get('status', {}).get('log', [])) == 3 else None)(
            kube.find(s.path('o1'))), what="the creation's and the timer's transformation functions applied")
        assert obj['spec'] == {'items': ['b'], 'ticks': 2, 'merged': True}
        assert obj['status']['log'] == ['created', 'tick-1', 'tick-2']
        assert 'compat.kopf.dev/cleanup' in obj['metadata']['finalizers']
    ours, theirs = both
    assert ours.records('create_fn') == theirs.records('create_fn') == [{'handler': 'create_fn', 'name': 'o1'}]
