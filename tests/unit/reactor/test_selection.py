"""
Selection: which handlers are interested in an object, for a cause or an event.
"""
import json
import logging

import pytest

import kopf.on
from kopf.reactor import selection
from kopf.reactor.filters import ABSENT, PRESENT

from .conftest import LAST_HANDLED, RESOURCE, SELECTOR, fetch, make_handler, names

# Field handlers.

async def test_field_handlers_see_only_their_field(server, registry):
    calls = []
    kopf.on.field(*RESOURCE, field='spec.field', registry=registry)(make_handler(calls, 'f'))
    await server.run()
    assert calls[0][1]['old'] is None
    assert calls[0][1]['new'] == 'x'
    assert calls[0][1]['diff'] == [('add', (), None, 'x')]

    server.change({'spec': {'other': 2}})
    await server.run()
    assert len(calls) == 1  # another field changed

    server.change({'spec': {'field': 'y'}})
    results = await server.run()
    assert results[0].cause == 'update'
    assert len(calls) == 2
    kwargs = calls[-1][1]
    assert kwargs['old'] == 'x'
    assert kwargs['new'] == 'y'
    assert kwargs['diff'] == [('change', (), 'x', 'y')]


async def test_field_handler_ids_include_the_field(server, registry):
    calls = []
    fn = make_handler(calls, 'fn', failures=[kopf.TemporaryError('later', delay=1)])
    kopf.on.field(*RESOURCE, field='spec.field', registry=registry)(fn)

    await server.cycle()

    stored = fetch(server, 'fn/spec.field')
    assert stored['retries'] == 1


async def test_field_handlers_can_watch_the_status(server, registry):
    calls = []
    kopf.on.field(*RESOURCE, field='status.phase', registry=registry)(make_handler(calls, 'f'))
    server.change({'status': {'phase': 'new'}})
    await server.run()
    assert calls[-1][1]['new'] == 'new'

    server.change({'status': {'phase': 'done'}})
    await server.run()

    assert len(calls) == 2
    assert calls[-1][1]['old'] == 'new'
    assert calls[-1][1]['new'] == 'done'


# Updates.

async def test_update_handlers_receive_the_diff_since_the_last_handling(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, id='c', registry=registry)(make_handler(calls, 'c'))
    kopf.on.update(*RESOURCE, id='u', registry=registry)(make_handler(calls, 'u'))
    await server.run()

    server.change({'spec': {'field': 'y', 'new': True}, 'metadata': {'labels': {'l': '1'}}})
    results = await server.run()

    assert results[0].cause == 'update'
    assert names(calls) == ['c', 'u']
    kwargs = calls[-1][1]
    assert kwargs['reason'] == 'update'
    assert kwargs['old'] == {'spec': {'field': 'x', 'other': 1}}
    assert kwargs['new'] == {'spec': {'field': 'y', 'other': 1, 'new': True}, 'metadata': {'labels': {'l': '1'}}}
    assert kwargs['diff'] == [
        ('add', ('metadata',), None, {'labels': {'l': '1'}}),
        ('change', ('spec', 'field'), 'x', 'y'),
        ('add', ('spec', 'new'), None, True),
    ]
    assert json.loads(server.annotations[LAST_HANDLED]) == kwargs['new']

    assert (await server.cycle()).cause == 'noop'


async def test_status_changes_and_our_own_progress_are_not_updates(server, registry):
    calls = []
    kopf.on.update(*RESOURCE, id='u', registry=registry)(make_handler(calls, 'u'))
    await server.run()

    server.change({'status': {'phase': 'x'}, 'metadata': {'annotations': {'kopf.zalando.org/touch-dummy': 't'}}})
    result = await server.cycle()

    assert result.cause == 'noop'
    assert calls == []


async def test_same_function_for_update_and_resume_runs_once(server, registry):
    calls = []
    fn = make_handler(calls, 'fn')
    kopf.on.update(*RESOURCE, registry=registry)(fn)
    kopf.on.resume(*RESOURCE, registry=registry)(fn)
    await server.run()
    server.change({'spec': {'field': 'y'}})

    await server.run(first_seen=True)

    assert names(calls) == ['fn']


# Filters.

@pytest.mark.parametrize('labels, matches', [
    ({'app': 'demo'}, True),
    ({'app': 'other'}, False),
    ({'app': PRESENT}, True),
    ({'app': ABSENT}, False),
    ({'missing': ABSENT}, True),
    ({'missing': PRESENT}, False),
    ({'app': lambda value: value.startswith('de')}, True),
])
async def test_label_filters(server, registry, labels, matches):
    calls = []
    server.raw['metadata']['labels'] = {'app': 'demo'}
    kopf.on.create(*RESOURCE, id='h', labels=labels, registry=registry)(make_handler(calls, 'h'))

    results = await server.run()

    assert bool(calls) == matches
    assert results[-1].done


async def test_annotation_and_when_filters(server, registry):
    calls = []
    server.raw['metadata']['annotations'] = {'mode': 'on'}
    kopf.on.create(*RESOURCE, id='yes', annotations={'mode': 'on'}, registry=registry)(make_handler(calls, 'yes'))
    kopf.on.create(*RESOURCE, id='no', annotations={'mode': 'off'}, registry=registry)(make_handler(calls, 'no'))
    kopf.on.create(*RESOURCE, id='when-yes', when=lambda spec, **_: spec['field'] == 'x',
                   registry=registry)(make_handler(calls, 'when-yes'))
    kopf.on.create(*RESOURCE, id='when-no', when=lambda reason, **_: reason == 'update',
                   registry=registry)(make_handler(calls, 'when-no'))

    await server.run()

    assert names(calls) == ['yes', 'when-yes']


async def test_when_filters_of_field_handlers_see_the_field(server, registry):
    calls = []
    seen = []

    def when(old, new, diff, **_):
        seen.append((old, new, list(diff)))
        return True
    kopf.on.field(*RESOURCE, field='spec.field', when=when, registry=registry)(make_handler(calls, 'f'))

    await server.run()

    assert seen[0] == (None, 'x', [('add', (), None, 'x')])
    assert len(calls) == 1


async def test_failing_filters_skip_the_handler_loudly(server, registry, caplog):
    calls = []
    kopf.on.create(*RESOURCE, id='broken', when=lambda **_: 1 / 0, registry=registry)(make_handler(calls, 'broken'))
    kopf.on.create(*RESOURCE, id='fine', registry=registry)(make_handler(calls, 'fine'))

    results = await server.run()

    assert names(calls) == ['fine']
    assert results[-1].done
    assert any("'broken'" in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)


async def test_filters_decide_about_the_finalizer(server, registry):
    kopf.on.delete(*RESOURCE, id='d', labels={'app': 'demo'}, registry=registry)(lambda **_: None)

    results = await server.run()

    assert [r.cause for r in results] == ['create']
    assert 'finalizers' not in server.raw['metadata']


async def test_failing_filters_of_delete_handlers_keep_the_finalizer(server, registry, caplog):
    kopf.on.delete(*RESOURCE, id='d', when=lambda **_: 1 / 0, registry=registry)(lambda **_: None)

    result = await server.cycle()

    assert result.cause == 'finalizer'
    assert any('assuming the finalizer is needed' in r.getMessage() for r in caplog.records)


async def test_when_filters_of_delete_handlers_see_the_deletion_cause(server, registry):
    seen = []

    def when(reason, old, new, **_):
        seen.append((reason, old, new))
        return False
    kopf.on.delete(*RESOURCE, id='d', when=when, registry=registry)(lambda **_: None)

    await server.run()

    assert seen[0] == ('delete', None, {'spec': {'field': 'x', 'other': 1}})


# Event handlers.

async def test_event_handlers_run_for_every_event_without_state(server, registry):
    events = []

    def on_event(type, event, body, **_):
        events.append((type, event['type'], body['metadata']['name']))
        raise ValueError("errors are only logged")
    kopf.on.event(*RESOURCE, registry=registry)(on_event)

    await server.cycle(event_type='ADDED')
    await server.cycle(event_type='MODIFIED')
    await server.cycle(event_type='MODIFIED')
    result = await server.cycle(event_type='DELETED')

    assert events == [('ADDED', 'ADDED', 'ex1'), ('MODIFIED', 'MODIFIED', 'ex1'),
                      ('MODIFIED', 'MODIFIED', 'ex1'), ('DELETED', 'DELETED', 'ex1')]
    assert result.cause == 'gone'
    assert server.annotations == {}  # no progress, no diff-base for event-only resources


async def test_event_handlers_are_filtered_too(server, registry):
    events = []
    kopf.on.event(*RESOURCE, id='yes', labels={'app': ABSENT}, registry=registry)(lambda **_: events.append('y'))
    kopf.on.event(*RESOURCE, id='no', labels={'app': PRESENT}, registry=registry)(lambda **_: events.append('n'))

    await server.cycle(event_type='ADDED')

    assert events == ['y']


def test_the_ids_that_may_have_progress(registry):
    kopf.on.create(*RESOURCE, id='c', registry=registry)(lambda **_: None)
    kopf.on.resume(*RESOURCE, id='r', registry=registry)(lambda **_: None)
    kopf.on.field(*RESOURCE, id='f', field='spec.x', registry=registry)(lambda **_: None)
    kopf.on.event(*RESOURCE, id='e', registry=registry)(lambda **_: None)
    assert selection.resume_ids(registry, SELECTOR) == ['r']
    assert selection.all_ids(registry, SELECTOR) == ['c', 'r', 'f/spec.x']
