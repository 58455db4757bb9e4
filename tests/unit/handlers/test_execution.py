"""
Execution: what a handler's attempt ends with, and the retry policy that judges it.

The policy is checked both directly (:func:`attempt`) and as the cycle applies
it to handlers of a cause, across cycles.
"""
import datetime
import json
import logging

import pytest

import kopf.on
from kopf._handlers.execution import MAX_DELAY, MAX_RESULT_SIZE, attempt
from kopf._handlers.progression import HandlerState
from kopf._handlers.registries import DEFAULT_BACKOFF, ChangingHandler
from kopf._structs.ids import HandlerId
from kopf.errors import (
    ErrorsMode,
    HandlerChildrenRetry,
    HandlerRetriesError,
    HandlerTimeoutError,
    PermanentError,
    TemporaryError,
)
from tests.unit.conftest import LAST_HANDLED, RESOURCE, T0, make_handler, names

logger = logging.getLogger('test-execution')


def handler(**options):
    return ChangingHandler(fn=lambda **_: None, id=HandlerId('h'), **options)


async def outcome_of(fn, *, past=None, clock, **options):
    async def call():
        return fn()
    return await attempt(handler(**options), past or HandlerState.from_scratch(clock=clock), call=call,
                         logger=logger)


def raising(exception):
    def fn():
        raise exception
    return fn


# The judgement of one attempt.

async def test_returning_is_a_final_success_with_the_result(clock):
    outcome = await outcome_of(lambda: {'x': 1}, clock=clock)
    assert outcome.final and outcome.exception is None and outcome.result == {'x': 1}


async def test_a_temporary_error_asks_for_a_retry_after_its_delay(clock):
    outcome = await outcome_of(raising(TemporaryError('later', delay=7)), clock=clock)
    assert not outcome.final and outcome.delay == 7
    assert str(outcome.exception) == 'later'


async def test_a_permanent_error_is_final(clock):
    outcome = await outcome_of(raising(PermanentError('no')), clock=clock)
    assert outcome.final and isinstance(outcome.exception, PermanentError)


async def test_waiting_for_sub_handlers_is_not_an_error(clock, caplog):
    with caplog.at_level(logging.DEBUG):
        outcome = await outcome_of(raising(HandlerChildrenRetry('children', delay=3)), clock=clock)
    assert not outcome.final and outcome.delay == 3 and outcome.exception is None
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize('mode, final, delay, failed', [
    (None, False, DEFAULT_BACKOFF, True),
    (ErrorsMode.TEMPORARY, False, DEFAULT_BACKOFF, True),
    (ErrorsMode.PERMANENT, True, None, True),
    (ErrorsMode.IGNORED, True, None, False),
])
async def test_other_exceptions_are_judged_by_the_errors_mode(clock, mode, final, delay, failed):
    outcome = await outcome_of(raising(ValueError('boom')), clock=clock, errors=mode)
    assert outcome.final is final
    assert outcome.delay == delay
    assert (outcome.exception is not None) is failed
    assert outcome.result is None


async def test_the_backoff_is_the_delay_of_unexpected_errors(clock):
    outcome = await outcome_of(raising(ValueError('boom')), clock=clock, backoff=3)
    assert outcome.delay == 3


async def test_used_up_retries_refuse_the_attempt_with_the_last_error(clock, caplog):
    called = []
    past = HandlerState.from_record({'started': '2020-01-01T00:00:00+00:00', 'retries': 2, 'message': 'flaky'},
                                    clock=clock)
    outcome = await outcome_of(lambda: called.append(1), past=past, clock=clock, retries=2)
    assert called == []
    assert outcome.final and isinstance(outcome.exception, HandlerRetriesError)
    assert str(outcome.exception) == "Handler 'h' has used up its 2 attempt(s). The last error: flaky"


async def test_a_retry_that_would_exceed_the_retries_is_not_waited_for(clock):
    outcome = await outcome_of(raising(TemporaryError('again', delay=1)), clock=clock, retries=1)
    assert outcome.final and isinstance(outcome.exception, HandlerRetriesError)
    assert 'again' in str(outcome.exception)


async def test_the_log_says_whether_an_exception_will_be_retried(clock, caplog):
    with caplog.at_level(logging.ERROR, logger='test-execution'):
        await outcome_of(raising(ValueError('boom')), clock=clock, backoff=5)
        await outcome_of(raising(ValueError('boom')), clock=clock, retries=1)
    messages = [record.getMessage() for record in caplog.records]
    assert messages == [  # one line per failure, the last one saying why it is the last
        "Handler 'h' failed with an exception; it will be retried in 5s.",
        "Handler 'h' failed with an exception; it will not be retried: it has used up its 1 attempt(s).",
    ]
    assert all(record.exc_info is not None for record in caplog.records)  # with the tracebacks


async def test_an_exception_after_the_last_attempt_fails_the_handler_with_the_limit_and_the_error(clock):
    outcome = await outcome_of(raising(ValueError('boom')), clock=clock, retries=1)
    assert outcome.final and isinstance(outcome.exception, HandlerRetriesError)
    assert str(outcome.exception) == "Handler 'h' has used up its 1 attempt(s). The last error: boom"

    outcome = await outcome_of(raising(ValueError('late')), clock=clock, timeout=30, backoff=60)
    assert outcome.final and isinstance(outcome.exception, HandlerTimeoutError)
    assert str(outcome.exception) == "Handler 'h' has run out of its 30 seconds. The last error: late"


async def test_a_retry_that_would_come_after_the_timeout_is_not_waited_for(clock):
    outcome = await outcome_of(raising(TemporaryError('later', delay=100)), clock=clock, timeout=30)
    assert outcome.final and isinstance(outcome.exception, HandlerTimeoutError)


async def test_the_timeout_counts_from_the_first_attempt(clock):
    past = HandlerState.from_scratch(clock=clock)
    clock.advance(31)
    outcome = await outcome_of(lambda: 'late', past=past, clock=clock, timeout=30)
    assert outcome.final and isinstance(outcome.exception, HandlerTimeoutError)
    assert "30 seconds" in str(outcome.exception)


# The policy across cycles.

async def test_temporary_error_retries_only_that_handler_after_its_delay(server, registry, clock):
    calls = []
    kopf.on.create(*RESOURCE, id='h1', registry=registry)(make_handler(calls, 'h1'))
    kopf.on.create(*RESOURCE, id='h2', registry=registry)(
        make_handler(calls, 'h2', failures=[TemporaryError('not yet', delay=1)]))
    kopf.on.create(*RESOURCE, id='h3', registry=registry)(make_handler(calls, 'h3'))

    results = await server.run()

    assert names(calls) == ['h1', 'h2', 'h3', 'h2']
    assert [kwargs['retry'] for name, kwargs in calls if name == 'h2'] == [0, 1]
    assert any(result.delay == 1 for result in results)  # the sleep was asked for, not skipped
    assert results[-1].done
    assert list(server.annotations) == [LAST_HANDLED]


async def test_sleeping_handler_is_not_called_before_its_delay(server, registry, clock):
    calls = []
    kopf.on.create(*RESOURCE, id='h', registry=registry)(
        make_handler(calls, 'h', failures=[TemporaryError('not yet', delay=10)]))

    result = await server.cycle()
    assert result.delay == 10
    clock.advance(9)
    result = await server.cycle()
    assert not result.done
    assert result.delay == 1
    assert names(calls) == ['h']

    clock.advance(1)
    result = await server.cycle()
    assert result.done
    assert names(calls) == ['h', 'h']


async def test_permanent_error_finishes_the_handler_without_retries(server, registry, caplog):
    calls = []
    kopf.on.create(*RESOURCE, id='bad', registry=registry)(
        make_handler(calls, 'bad', failures=[PermanentError('no way')]))
    kopf.on.create(*RESOURCE, id='good', registry=registry)(make_handler(calls, 'good'))

    results = await server.run()

    assert names(calls) == ['bad', 'good']
    assert results[-1].done
    assert 'bad' not in server.raw.get('status', {})
    assert list(server.annotations) == [LAST_HANDLED]  # the cause counts as handled
    assert any(r.levelno == logging.ERROR and 'no way' in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize('mode, expected_calls, expected_delay', [
    (ErrorsMode.TEMPORARY, 2, 7),
    (ErrorsMode.PERMANENT, 1, None),
    (ErrorsMode.IGNORED, 1, None),
])
async def test_errors_mode_decides_the_fate_of_arbitrary_exceptions(
        server, registry, mode, expected_calls, expected_delay):
    calls = []
    kopf.on.create(*RESOURCE, id='h', errors=mode, backoff=7, registry=registry)(
        make_handler(calls, 'h', result='ok', failures=[ValueError('boom')]))

    results = await server.run()

    assert len(calls) == expected_calls
    assert results[0].delay == expected_delay
    if mode == ErrorsMode.TEMPORARY:
        assert server.raw['status']['h'] == 'ok'
    else:
        assert 'h' not in server.raw.get('status', {})  # ignored or failed: no result


@pytest.mark.parametrize('mode, expected', [
    (ErrorsMode.IGNORED, {'success': True}),
    (ErrorsMode.PERMANENT, {'failure': True, 'message': 'boom'}),
])
async def test_ignored_errors_count_as_success_and_permanent_ones_as_failure(
        server, registry, config, mode, expected):
    config.persistence.max_unpersisted_time = 0  # one handler per cycle: the record stays visible
    calls = []
    kopf.on.create(*RESOURCE, id='h', errors=mode, registry=registry)(
        make_handler(calls, 'h', failures=[ValueError('boom')]))
    kopf.on.create(*RESOURCE, id='next', registry=registry)(make_handler(calls, 'next'))

    await server.cycle()

    assert names(calls) == ['h']
    record = json.loads(server.annotations['kopf.zalando.org/h'])
    assert {k: record.get(k) for k in expected} == expected
    assert record.get('success' if mode == ErrorsMode.PERMANENT else 'failure') is None


async def test_unexpected_exception_is_retried_with_the_default_backoff(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, id='h', registry=registry)(make_handler(calls, 'h', failures=[ValueError('boom')]))

    result = await server.cycle()

    assert result.delay == 60
    record = json.loads(server.annotations['kopf.zalando.org/h'])
    assert record['message'] == 'boom'
    assert record['retries'] == 1
    assert record['delayed'] == (T0 + datetime.timedelta(seconds=60)).isoformat()


async def test_timeout_fails_the_handler_once_its_runtime_is_over(server, registry, clock, caplog):
    calls = []
    kopf.on.create(*RESOURCE, id='slow', timeout=30, registry=registry)(
        make_handler(calls, 'slow', failures=[TemporaryError('later', delay=1)] * 10))

    result = await server.cycle()
    assert not result.done
    clock.advance(60)
    result = await server.cycle()

    assert result.done
    assert names(calls) == ['slow']  # not called again once the time is over
    errors = [r for r in caplog.records if r.levelno == logging.ERROR and 'slow' in r.getMessage()]
    assert any('30 seconds' in r.getMessage() for r in errors)


async def test_timeout_does_not_wait_for_a_retry_that_would_be_too_late(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, id='slow', timeout=30, registry=registry)(
        make_handler(calls, 'slow', failures=[TemporaryError('later', delay=100)]))

    results = await server.run()

    assert len(results) == 1
    assert names(calls) == ['slow']


async def test_retries_limit_the_number_of_attempts(server, registry, caplog):
    calls = []
    kopf.on.create(*RESOURCE, id='flaky', retries=3, registry=registry)(
        make_handler(calls, 'flaky', failures=[TemporaryError('again', delay=0)] * 10))

    results = await server.run()

    assert names(calls) == ['flaky'] * 3
    assert len(results) == 3  # a retry belongs to the next cycle, even without a delay
    assert results[-1].done
    assert any('3 attempt' in r.getMessage() and 'again' in r.getMessage() for r in caplog.records)


# Retry delays within limits.

@pytest.mark.parametrize('delay, expected', [
    (10 ** 20, MAX_DELAY), (float('inf'), MAX_DELAY), (MAX_DELAY + 1, MAX_DELAY),
    (float('nan'), DEFAULT_BACKOFF), ('5', DEFAULT_BACKOFF), (True, DEFAULT_BACKOFF),
])
async def test_retry_delays_beyond_a_day_or_not_numbers_are_replaced_and_reported(clock, caplog, delay, expected):
    outcome = await outcome_of(raising(TemporaryError('later', delay=delay)), clock=clock)
    assert not outcome.final and outcome.delay == expected
    HandlerState.from_scratch(clock=clock).with_outcome(outcome)  # the state can be computed
    assert any(r.levelno == logging.WARNING and "Handler 'h' asked for a retry" in r.getMessage()
               for r in caplog.records)


async def test_negative_delays_mean_now(clock):
    outcome = await outcome_of(raising(TemporaryError('now', delay=-5)), clock=clock)
    assert outcome.delay == 0


async def test_a_huge_backoff_is_cut_to_a_day(clock):
    outcome = await outcome_of(raising(ValueError('boom')), clock=clock, backoff=10 ** 30)
    assert outcome.delay == MAX_DELAY


# Results that can be stored, and those that cannot.

class Custom:
    pass


@pytest.mark.parametrize('result, named', [
    ({1, 2}, "a value of type set"),
    (datetime.datetime(2020, 1, 1), "a value of type datetime.datetime"),
    ({"items": [1, Custom()]}, "a value of type tests.unit.handlers.test_execution.Custom at ['items'][1]"),
    ({'x': float('nan')}, "nan is not a JSON number at ['x']"),
    ({('a', 'b'): 1}, "a key of type tuple"),
    (b"bytes", "a value of type bytes"),
])
@pytest.mark.parametrize('mode, final, delay', [
    (ErrorsMode.TEMPORARY, False, DEFAULT_BACKOFF),
    (ErrorsMode.PERMANENT, True, None),
])
async def test_a_result_that_is_not_json_fails_the_handler_per_its_errors_mode(
        server, registry, caplog, result, named, mode, final, delay):
    calls = []
    kopf.on.create(*RESOURCE, id='h', errors=mode, registry=registry)(make_handler(calls, 'h', result=result))

    outcome = await server.cycle()

    assert outcome.delay == delay and outcome.done is final
    assert 'h' not in server.raw.get('status', {})
    record = json.loads(server.annotations['kopf.zalando.org/h'] if not final else '{}')
    assert final or (record.get('success') is None and named in record['message'])
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is None  # one line, no traceback
    assert named in errors[0].getMessage() and 'status.h' in errors[0].getMessage()


async def test_an_unstorable_result_of_an_ignoring_handler_is_dropped(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, id='h', errors=ErrorsMode.IGNORED, registry=registry)(
        make_handler(calls, 'h', result={1, 2}))
    results = await server.run()
    assert results[-1].done and len(calls) == 1
    assert 'h' not in server.raw.get('status', {})


async def test_views_of_the_object_and_tuples_are_stored_as_plain_json(server, registry):
    kopf.on.create(*RESOURCE, id='h', registry=registry)(
        lambda spec, **_: {'spec': spec, 'pair': (1, 2), 3: 'three'})
    await server.run()
    assert server.raw['status']['h'] == {'spec': {'field': 'x', 'other': 1}, 'pair': [1, 2], '3': 'three'}


async def test_a_circular_result_is_refused(server, registry, caplog):
    loop: dict = {}
    loop['self'] = loop
    kopf.on.create(*RESOURCE, id='h', errors=ErrorsMode.PERMANENT, registry=registry)(lambda **_: loop)
    await server.run()
    assert 'refers to itself' in caplog.text


async def test_an_oversize_result_is_refused_before_it_is_sent(server, registry, caplog):
    kopf.on.create(*RESOURCE, id='h', errors=ErrorsMode.PERMANENT, registry=registry)(
        lambda **_: 'x' * (MAX_RESULT_SIZE + 1))
    await server.run()
    assert 'h' not in server.raw.get('status', {})
    assert all(len(json.dumps(patch)) < MAX_RESULT_SIZE for patch in server.patches)
    assert ("Handler 'h' has returned 524,291 bytes of JSON (512.0 KiB), more than the 512.0 KiB that a result "
            "may have in status.h; it is not stored.") in caplog.text


async def test_a_result_within_the_size_is_stored(server, registry):
    kopf.on.create(*RESOURCE, id='h', registry=registry)(lambda **_: 'x' * (MAX_RESULT_SIZE - 10))
    await server.run()
    assert len(server.raw['status']['h']) == MAX_RESULT_SIZE - 10
