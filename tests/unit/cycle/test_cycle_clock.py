"""
The operator host's wall clock set back (by an hour): no handler runs again, and no scheduled retry is lost.

Progress records keep wall-clock times. A retry scheduled for 10 s later
must not wait an hour more because the clock was set back meanwhile; a
handler that has succeeded must not run again however the clock moves.
"""
import datetime
import json
import logging

import pytest

import kopf
import kopf.on
from tests.unit.conftest import FINALIZER, RESOURCE, make_handler, names

HOUR = datetime.timedelta(hours=1)


@pytest.fixture()
def handlers(registry):
    calls = []
    kopf.on.create(*RESOURCE, id='first', registry=registry)(make_handler(calls, 'first'))
    kopf.on.create(*RESOURCE, id='second', registry=registry)(
        make_handler(calls, 'second', failures=[kopf.TemporaryError("not yet", delay=10)]))
    return calls


async def test_a_retry_scheduled_before_the_clock_was_set_back_waits_only_its_delay(server, handlers, clock, caplog):
    server.change({'metadata': {'finalizers': [FINALIZER]}})
    result = await server.cycle()
    assert names(handlers) == ['first', 'second']
    assert result.delay == 10
    record = json.loads(server.annotations['kopf.zalando.org/second'])
    assert record['scheduled'] == clock.now().isoformat()

    clock.wall -= HOUR  # the host's clock is set back; the monotonic clock goes on
    clock.advance(10)
    caplog.set_level(logging.WARNING)
    result = await server.cycle()
    assert "The clock is 3590s behind the moment" in caplog.text and "Retrying in 10s" in caplog.text
    assert result.delay == 10  # the delay as asked, from now: not an hour and 10 s
    clock.advance(10)
    results = await server.run()
    assert results[-1].done
    assert names(handlers) == ['first', 'second', 'second']  # the retry ran; 'first' did not run again


async def test_a_clock_set_forward_and_back_reruns_nothing(server, handlers, clock):
    server.change({'metadata': {'finalizers': [FINALIZER]}})
    await server.cycle()
    clock.wall += HOUR
    await server.cycle()  # the retry is due now (the clock jumped past it)
    clock.wall -= 2 * HOUR
    results = await server.run()
    assert results[-1].done
    assert names(handlers) == ['first', 'second', 'second']


async def test_a_record_without_a_schedule_time_is_trusted_as_before(server, handlers, clock):
    """Records of the released Kopf (and of older versions) have no ``scheduled``: their delay is kept as is."""
    record = {'started': clock.now().isoformat(), 'delayed': (clock.now() + datetime.timedelta(seconds=30)).isoformat(),
              'retries': 1}
    annotations = {'kopf.zalando.org/second': json.dumps(record)}
    server.change({'metadata': {'finalizers': [FINALIZER], 'annotations': annotations}})
    result = await server.cycle()
    assert result.delay == 30
