"""
Corrupt progress records, as a person with ``kubectl edit`` or a broken tool leaves them.

Whatever is under one of our keys, the object's handling goes on: the record
is reported once and treated as absent, it never enters the last-handled
configuration (so purging it is no change of the object), and it is purged
with the others.
"""
import json
import logging

import pytest

import kopf.on
from kopf._handlers import execution
from tests.unit.conftest import FINALIZER, LAST_HANDLED, RESOURCE, make_handler, names

KEY = 'kopf.zalando.org/create_fn'

CORRUPT = [
    '{"subrefs": 5}',
    '{"started": "0001-01-01T00:00:00+01:00"}',
    '{"started": "2020-01-01T00:00:00", "retries": "3"}',
    'not json at all',
    '[' * 50_000,
    '{"message":' * 50_000,
    '',
]


@pytest.fixture()
def handlers(registry):
    calls = []
    kopf.on.create(*RESOURCE, id='create_fn', registry=registry)(make_handler(calls, 'create_fn'))
    kopf.on.update(*RESOURCE, id='update_fn', registry=registry)(make_handler(calls, 'update_fn'))
    kopf.on.delete(*RESOURCE, id='delete_fn', registry=registry)(make_handler(calls, 'delete_fn'))
    return calls


@pytest.mark.parametrize('value', CORRUPT, ids=range(len(CORRUPT)))
async def test_a_corrupt_record_is_reported_once_and_treated_as_absent(server, handlers, value, caplog):
    server.change({'metadata': {'finalizers': [FINALIZER], 'annotations': {KEY: value}}})
    caplog.set_level(logging.WARNING)

    results = await server.run()

    assert [result.cause for result in results] == ['create']
    assert names(handlers) == ['create_fn']
    warnings = [r.getMessage() for r in caplog.records if 'unreadable' in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert KEY in warnings[0] and 'create_fn' in warnings[0]
    assert len(warnings[0]) < 500  # a huge corrupt value is not repeated in the log
    assert KEY not in server.annotations  # purged with the others


@pytest.mark.parametrize('value', CORRUPT, ids=range(len(CORRUPT)))
async def test_a_purged_corrupt_record_is_no_change_of_the_object(server, handlers, value):
    server.change({'metadata': {'finalizers': [FINALIZER], 'annotations': {KEY: value}}})
    await server.run()

    essence = json.loads(server.annotations[LAST_HANDLED])
    assert KEY not in (essence.get('metadata') or {}).get('annotations', {})
    result = await server.cycle()
    assert result.cause == 'noop'
    assert names(handlers) == ['create_fn']  # no update: nothing has changed but our bookkeeping


async def test_a_diffbase_that_took_in_a_corrupt_record_shows_no_change(server, handlers):
    # As an earlier version left it: the corrupt record inside the last-handled configuration, purged since.
    essence = {'spec': {'field': 'x', 'other': 1}, 'metadata': {'annotations': {KEY: '{"subrefs": 5}'}}}
    server.change({'metadata': {'finalizers': [FINALIZER], 'annotations': {LAST_HANDLED: json.dumps(essence)}}})
    result = await server.cycle()
    assert result.cause == 'noop'
    assert names(handlers) == []


async def test_a_corrupt_record_left_behind_is_purged_when_nothing_happens(server, handlers, caplog):
    await server.run()
    server.change({'metadata': {'annotations': {'kopf.zalando.org/update_fn': '{"subrefs": 5}'}}})
    caplog.set_level(logging.WARNING)

    result = await server.cycle()
    assert result.cause == 'noop'
    assert 'kopf.zalando.org/update_fn' not in server.annotations
    assert await server.cycle()  # and then nothing more to say about it
    assert len([r for r in caplog.records if 'unreadable' in r.getMessage()]) == 1
    assert names(handlers) == ['create_fn']


async def test_a_corrupt_sub_handler_record_is_ours_too(server, handlers):
    server.change({'metadata': {'finalizers': [FINALIZER],
                                'annotations': {'kopf.zalando.org/create_fn.child': 'garbage'}}})
    await server.run()
    essence = json.loads(server.annotations[LAST_HANDLED])
    assert 'metadata' not in essence
    assert (await server.cycle()).cause == 'noop'


async def test_other_annotations_under_our_prefix_stay_in_the_essence(server, handlers):
    server.change({'metadata': {'annotations': {'kopf.zalando.org/users-own': 'value'}}})
    await server.run()
    essence = json.loads(server.annotations[LAST_HANDLED])
    assert essence['metadata']['annotations'] == {'kopf.zalando.org/users-own': 'value'}


@pytest.mark.parametrize('value', CORRUPT, ids=range(len(CORRUPT)))
async def test_a_corrupt_record_never_blocks_the_deletion(server, handlers, value):
    await server.run()
    server.change({'metadata': {'deletionTimestamp': '2020-01-01T00:00:00Z',
                                'annotations': {'kopf.zalando.org/delete_fn': value}}})
    await server.run()
    assert names(handlers) == ['create_fn', 'delete_fn']
    assert server.gone


async def test_a_retry_far_in_the_future_is_bounded_and_reported(server, handlers, clock, caplog):
    record = {'started': '2020-01-01T00:00:00+00:00', 'delayed': '9999-12-31T23:59:59+00:00', 'retries': 1}
    server.change({'metadata': {'finalizers': [FINALIZER], 'annotations': {KEY: json.dumps(record)}}})
    caplog.set_level(logging.WARNING)

    result = await server.cycle()
    assert result.delay == 60  # the handler's back-off, not the year 9999
    assert names(handlers) == []
    messages = [r.getMessage() for r in caplog.records]
    assert any("'create_fn' was to be retried at 9999-12-31" in m and 'not plausible' in m for m in messages)
    assert json.loads(server.annotations[KEY])['delayed'].startswith('2020-01-01T00:01:00')

    clock.advance(60)
    await server.run()
    assert names(handlers) == ['create_fn']
    assert len([m for m in messages if 'not plausible' in m]) == 1


async def test_a_retry_within_a_day_is_trusted(server, handlers, clock):
    record = {'started': '2020-01-01T00:00:00+00:00', 'delayed': '2020-01-01T23:00:00+00:00', 'retries': 1}
    server.change({'metadata': {'finalizers': [FINALIZER], 'annotations': {KEY: json.dumps(record)}}})
    result = await server.cycle()
    assert result.delay == 23 * 3600
    assert execution.MAX_DELAY == 24 * 3600
