"""
Activities: startup, cleanup and login handlers, retried in memory until each has finished.
"""
import asyncio

import pytest

import kopf
from kopf._runtime.activities import ActivityInterrupted, run_activity
from kopf._storage.progress import AnnotationsProgressStorage, SmartProgressStorage
from kopf.errors import ActivityError, PermanentError, TemporaryError
from tests.unit.conftest import in_fake_time, logger, make_handler, names, until


async def test_startup_handlers_receive_the_config_as_config_and_settings(registry, config):
    seen = []

    @kopf.on.startup(registry=registry)
    def configure(config, settings, memo, activity, **_):
        seen.append((config, settings, memo, activity))
        config.persistence.progress_storage = AnnotationsProgressStorage(prefix='my-op.example.com')
        return 'configured'

    results = await run_activity(registry=registry, activity='startup', config=config, memo='m', logger=logger)

    assert results == {configure.__qualname__: 'configured'}
    assert seen == [(config, config, 'm', 'startup')]
    assert isinstance(config.persistence.progress_storage, AnnotationsProgressStorage)
    assert not isinstance(config.persistence.progress_storage, SmartProgressStorage)


async def test_activity_handlers_are_retried_in_memory(registry, config, clock):
    calls = []
    kopf.on.startup(id='flaky', backoff=5, registry=registry)(
        make_handler(calls, 'flaky', result=1, failures=[TemporaryError('later', delay=10), ValueError('x')]))
    kopf.on.cleanup(id='other', registry=registry)(make_handler(calls, 'other'))
    started = clock.monotonic()

    results = await in_fake_time(clock, run_activity(registry=registry, activity='startup', config=config,
                                                     memo=None, logger=logger, clock=clock))

    assert clock.monotonic() - started == 15  # the delay, then the backoff
    assert results == {'flaky': 1}
    assert names(calls) == ['flaky', 'flaky', 'flaky']
    assert [kwargs['retry'] for _, kwargs in calls] == [0, 1, 2]


async def test_activity_handlers_without_a_backoff_are_retried_after_the_default_backoff(
        registry, config, caplog, clock):
    calls = []
    config.execution.default_backoff = 7
    kopf.on.startup(id='flaky', registry=registry)(make_handler(calls, 'flaky', failures=[ValueError('x')]))
    started = clock.monotonic()

    await in_fake_time(clock, run_activity(registry=registry, activity='startup', config=config, memo=None,
                                           logger=logger, clock=clock))

    assert clock.monotonic() - started == 7  # not 60 s: the setting decides
    assert names(calls) == ['flaky', 'flaky']
    assert any('will be retried in 7s' in record.getMessage() for record in caplog.records)


async def test_activity_failures_are_raised_after_all_handlers(registry, config):
    calls = []
    kopf.on.startup(id='bad', registry=registry)(make_handler(calls, 'bad', failures=[PermanentError('no')]))
    kopf.on.startup(id='good', registry=registry)(make_handler(calls, 'good', result='ok'))

    with pytest.raises(ActivityError) as info:
        await run_activity(registry=registry, activity='startup', config=config, memo=None, logger=logger)

    assert names(calls) == ['bad', 'good']
    assert set(info.value.errors) == {'bad'}
    assert isinstance(info.value.errors['bad'], PermanentError)


async def test_activity_retries_are_limited_like_any_handler(registry, config):
    calls = []
    kopf.on.login(id='login', retries=2, backoff=0, registry=registry)(
        make_handler(calls, 'login', failures=[ValueError('no credentials')] * 5))

    with pytest.raises(ActivityError, match='Login handlers have failed: login'):
        await run_activity(registry=registry, activity='login', config=config, memo=None, logger=logger)

    assert names(calls) == ['login', 'login']


async def test_no_handlers_means_nothing_to_do(registry, config):
    assert await run_activity(registry=registry, activity='cleanup', config=config, memo=None, logger=logger) == {}


async def test_a_stop_interrupts_a_handler_waiting_for_its_retry(registry, config, clock):
    calls = []
    kopf.on.startup(id='waiting', registry=registry)(
        make_handler(calls, 'waiting', failures=[TemporaryError('not yet', delay=600)]))
    stop = asyncio.Event()
    activity = asyncio.create_task(run_activity(registry=registry, activity='startup', config=config, memo=None,
                                                logger=logger, stop=stop, clock=clock))
    await until(lambda: clock.next_deadline is not None)  # waiting for the retry
    stop.set()

    with pytest.raises(ActivityInterrupted, match='stopped while its startup handlers were running'):
        await asyncio.wait_for(activity, timeout=5)
    assert names(calls) == ['waiting']


async def test_a_stop_cancels_a_running_async_handler(registry, config):
    cancelled = []
    started = asyncio.Event()

    @kopf.on.startup(registry=registry)
    async def slow(**_):
        started.set()
        try:
            await asyncio.Event().wait()  # for ever
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
    stop = asyncio.Event()
    activity = asyncio.create_task(run_activity(registry=registry, activity='startup', config=config, memo=None,
                                                logger=logger, stop=stop))
    await started.wait()
    stop.set()

    with pytest.raises(ActivityInterrupted):
        await activity
    assert cancelled == [True]


async def test_handlers_that_finish_are_not_interrupted(registry, config):
    kopf.on.startup(id='quick', registry=registry)(lambda **_: 'done')
    results = await run_activity(registry=registry, activity='startup', config=config, memo=None, logger=logger,
                                 stop=asyncio.Event())
    assert results == {'quick': 'done'}


async def test_a_configuration_error_fails_the_activity_at_once_naming_the_line(registry, config, caplog):
    calls = []

    @kopf.on.startup(registry=registry)
    def configure(settings, **_):
        calls.append('configure')
        settings.persistence.progress_storage = 'annotations'

    kopf.on.startup(id='other', registry=registry)(
        make_handler(calls, 'other', failures=[TemporaryError('later', delay=600)]))

    with pytest.raises(ActivityError) as info:
        await asyncio.wait_for(run_activity(registry=registry, activity='startup', config=config, memo=None,
                                            logger=logger), timeout=5)

    assert calls == ['configure']  # neither retried, nor waiting for the others
    message = str(info.value)
    assert message.startswith(
        f"Startup handlers have failed: {configure.__qualname__}: config.persistence.progress_storage must be a "
        f"kopf.ProgressStorage, got str: 'annotations'. (test_activities.py, line ")
    assert message.endswith(", in configure) This is a configuration error, not retried: "
                            "fix it and start the operator again.")
    assert not [r for r in caplog.records if r.exc_info]  # no traceback for what the message explains


@pytest.mark.parametrize('build', [
    lambda: kopf.AnnotationsProgressStorage(prefix='Not A Prefix'),
    lambda: kopf.StatusProgressStorage(field='metadata.name'),
], ids=['prefix', 'field'])
async def test_invalid_storages_are_configuration_errors_too(registry, config, build):
    calls = []

    @kopf.on.startup(registry=registry)
    def configure(**_):
        calls.append(1)
        build()

    with pytest.raises(ActivityError, match='This is a configuration error'):
        await run_activity(registry=registry, activity='startup', config=config, memo=None, logger=logger)
    assert calls == [1]


async def test_errors_of_the_handlers_own_code_are_retried_as_usual(registry, config):
    calls = []
    kopf.on.startup(id='own', backoff=0.01, registry=registry)(
        make_handler(calls, 'own', failures=[ValueError('my own check failed')]))
    await run_activity(registry=registry, activity='startup', config=config, memo=None, logger=logger)
    assert names(calls) == ['own', 'own']
