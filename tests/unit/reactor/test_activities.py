"""
Activities: startup, cleanup and login handlers, retried in memory until each has finished.
"""
import pytest

import kopf.on
from kopf.errors import ActivityError, PermanentError, TemporaryError
from kopf.reactor.activities import run_activity
from kopf.storage.progress import AnnotationsProgressStorage, SmartProgressStorage

from .conftest import logger, make_handler, names


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


async def test_activity_handlers_are_retried_in_memory(registry, config):
    calls = []
    kopf.on.startup(id='flaky', backoff=0.01, registry=registry)(
        make_handler(calls, 'flaky', result=1, failures=[TemporaryError('later', delay=0.01), ValueError('x')]))
    kopf.on.cleanup(id='other', registry=registry)(make_handler(calls, 'other'))

    results = await run_activity(registry=registry, activity='startup', config=config, memo=None, logger=logger)

    assert results == {'flaky': 1}
    assert names(calls) == ['flaky', 'flaky', 'flaky']
    assert [kwargs['retry'] for _, kwargs in calls] == [0, 1, 2]


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
