"""
Selection: which handlers are interested in an object, for a cause or an event.
"""
import json
import logging

import pytest

import kopf.on
from kopf._cycle import selection
from kopf._handlers.filters import ABSENT, PRESENT
from tests.unit.conftest import FINALIZER, LAST_HANDLED, RESOURCE, SELECTOR, fetch, make_handler, names

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

    assert [r.cause for r in results] == ['noop']  # no handler selects it: it is not ours at all
    assert server.patches == []


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


# Field filters: the field's value for most handlers, its change for update and field handlers.

@pytest.mark.parametrize('options, called', [
    ({'field': 'spec.field'}, True),
    ({'field': 'spec.field', 'value': 'x'}, True),
    ({'field': 'spec.field', 'value': 'y'}, False),
    ({'field': 'spec.missing'}, False),
    ({'field': 'spec.missing', 'value': ABSENT}, True),
    ({'field': 'spec.field', 'value': PRESENT}, True),
    ({'field': 'spec.other', 'value': lambda value, spec, **_: value == 1 and spec['field'] == 'x'}, True),
])
async def test_create_handlers_with_field_filters(server, registry, options, called):
    calls = []
    kopf.on.create(*RESOURCE, registry=registry, **options)(make_handler(calls, 'c'))
    await server.run()
    assert bool(calls) is called


async def test_handlers_with_a_field_see_the_field_and_are_known_by_it(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, field='spec.field', value='x', registry=registry)(
        make_handler(calls, 'c', failures=[kopf.TemporaryError('later', delay=1)]))
    await server.cycle()
    assert fetch(server, 'c/spec.field')['retries'] == 1
    await server.run()
    assert (calls[-1][1]['old'], calls[-1][1]['new']) == (None, 'x')


async def test_update_handlers_with_a_field_run_only_when_it_changes(server, registry):
    calls = []
    kopf.on.update(*RESOURCE, field='spec.field', registry=registry)(make_handler(calls, 'u'))
    await server.run()

    server.change({'spec': {'other': 2}})
    await server.run()
    assert calls == []

    server.change({'spec': {'field': 'y'}})
    await server.run()
    server.change({'spec': {'field': None}})  # removed: a change too
    await server.run()
    assert [(kw['old'], kw['new'], kw['diff']) for _, kw in calls] == [
        ('x', 'y', [('change', (), 'x', 'y')]),
        ('y', None, [('remove', (), 'y', None)]),
    ]


@pytest.mark.parametrize('options, changes, expected', [
    ({'value': 'y'}, ['y', 'z', 'w'], ['x->y', 'y->z']),  # into or out of the value
    ({'new': 'y'}, ['y', 'z', 'y'], ['x->y', 'z->y']),  # only into it
    ({'old': 'y'}, ['y', 'z', 'y'], ['y->z']),  # only out of it
    ({'old': 'x', 'new': 'z'}, ['z', 'x', 'y'], ['x->z']),
    ({'old': PRESENT, 'new': ABSENT}, ['y', None, 'z'], ['y->None']),
    ({'old': ABSENT, 'new': PRESENT}, ['y', None, 'z'], ['None->z']),
    ({'new': lambda value, **_: value is not None and value > 'x'}, ['y', 'a', 'z'], ['x->y', 'a->z']),
])
async def test_update_and_field_handlers_filter_the_change(server, registry, options, changes, expected):
    updates, fields = [], []
    kopf.on.update(*RESOURCE, id='u', field='spec.field', registry=registry, **options)(
        lambda old, new, **_: updates.append(f'{old}->{new}'))
    kopf.on.field(*RESOURCE, id='f', field='spec.field', registry=registry, **options)(
        lambda old, new, reason, **_: reason == 'update' and fields.append(f'{old}->{new}'))
    await server.run()
    for value in changes:
        server.change({'spec': {'field': value}})
        await server.run()
    assert updates == expected
    assert fields == expected


async def test_delete_handlers_with_a_field_filter_decide_about_the_finalizer(server, registry):
    kopf.on.delete(*RESOURCE, id='d', field='spec.keep', value='yes', registry=registry)(lambda **_: None)
    await server.run()
    assert 'finalizers' not in server.raw['metadata']

    server.change({'spec': {'keep': 'yes'}})
    await server.run()
    assert server.raw['metadata']['finalizers'] == [FINALIZER]


async def test_event_handlers_with_field_filters(server, registry):
    events = []
    kopf.on.event(*RESOURCE, id='x', field='spec.field', value='x', registry=registry)(lambda **_: events.append('x'))
    kopf.on.event(*RESOURCE, id='y', field='spec.field', value='y', registry=registry)(lambda **_: events.append('y'))
    await server.cycle(event_type='ADDED')
    server.change({'spec': {'field': 'y'}})
    await server.cycle(event_type='MODIFIED')
    assert events == ['x', 'y']


async def test_filter_callbacks_get_the_same_kwargs_as_the_handler(server, registry):
    seen = {}

    def when(**kwargs):
        seen['when'] = kwargs
        return True

    def label(value, **kwargs):
        seen['label'] = (value, kwargs)
        return True

    def field_value(value, **kwargs):
        seen['value'] = (value, kwargs)
        return True

    handled = []
    kopf.on.update(*RESOURCE, id='u', when=when, labels={'app': label}, field='spec.field', value=field_value,
                   registry=registry)(lambda **kw: handled.append(kw))
    await server.run()
    server.change({'spec': {'field': 'y'}, 'metadata': {'labels': {'app': 'demo'}}})
    await server.run()

    [kwargs] = handled
    for name in ['spec', 'body', 'meta', 'status', 'name', 'namespace', 'labels', 'annotations', 'patch',
                 'diff', 'old', 'new', 'reason', 'logger', 'memo', 'resource', 'param']:
        assert seen['when'][name] is kwargs[name] or seen['when'][name] == kwargs[name], name
    assert (seen['when']['old'], seen['when']['new']) == ('x', 'y')  # the field's own
    assert seen['label'][0] == 'demo' and seen['label'][1] == seen['when']
    assert seen['value'][0] in ('x', 'y') and seen['value'][1] == seen['when']
    assert seen['when']['spec'] == {'field': 'y', 'other': 1}
    assert seen['when']['memo'] is server.memo


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
