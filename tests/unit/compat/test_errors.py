"""
Kopf's error handling (its "Error handling" page): the delays of retries, driven through the handling cycle.
"""
import kopf
from tests.unit.conftest import RESOURCE, make_handler, names


async def test_a_temporary_error_is_retried_after_60_seconds_by_default_as_in_kopf(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, registry=registry)(
        make_handler(calls, 'create_fn', failures=[kopf.TemporaryError("The data is not yet ready.")]))

    results = await server.run()

    assert [result.delay for result in results[:1]] == [60]
    assert names(calls) == ['create_fn', 'create_fn']


async def test_a_temporary_error_without_a_message_takes_its_delay_as_in_kopf(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, timeout=60 * 60, registry=registry)(
        make_handler(calls, 'create_fn', failures=[kopf.TemporaryError(delay=30)]))

    results = await server.run()

    assert results[0].delay == 30
    assert names(calls) == ['create_fn', 'create_fn']


async def test_arbitrary_errors_are_retried_after_60_seconds_by_default_as_in_kopf(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, registry=registry)(make_handler(calls, 'create_fn', failures=[Exception()]))

    results = await server.run()

    assert results[0].delay == 60
    assert names(calls) == ['create_fn', 'create_fn']


async def test_the_default_backoff_of_arbitrary_errors_is_a_setting_as_in_kopf(server, registry, config):
    calls = []
    config.execution.default_backoff = 30
    kopf.on.create(*RESOURCE, registry=registry)(make_handler(calls, 'create_fn', failures=[Exception()]))

    results = await server.run()

    assert results[0].delay == 30
    assert names(calls) == ['create_fn', 'create_fn']
