"""
The error policy of index functions: decisions from the failure, the previous one, and the time given.
"""
import datetime

import pytest

import kopf
from kopf._handlers.registries import IndexingHandler
from kopf._indexing.failures import Failure, attempts, judge
from kopf._structs.ids import HandlerId

T0 = datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc)


def fn(**_):
    pass


def handler(**options):
    return IndexingHandler(fn=fn, id=HandlerId('idx'), **options)


def test_an_ignored_error_keeps_the_values_and_never_excludes_the_object():
    verdict = judge(handler(), ValueError('x'), failure=None, now=T0, monotonic=100, default_backoff=60)
    assert not verdict.drop and verdict.news
    assert not verdict.failure.excludes(100)
    again = judge(handler(), ValueError('x'), failure=verdict.failure, now=T0, monotonic=101, default_backoff=60)
    assert not again.news and again.failure.retries == 2


@pytest.mark.parametrize('options, error, until', [
    ({}, kopf.TemporaryError('x', delay=7), 107),
    ({'errors': kopf.ErrorsMode.TEMPORARY, 'backoff': 3}, ValueError('x'), 103),
    ({'errors': kopf.ErrorsMode.TEMPORARY}, ValueError('x'), 160),  # the default back-off
    ({}, kopf.PermanentError('x'), None),
    ({'errors': kopf.ErrorsMode.PERMANENT}, ValueError('x'), None),
])
def test_other_errors_drop_the_values_until_a_time_or_for_good(options, error, until):
    verdict = judge(handler(**options), error, failure=None, now=T0, monotonic=100, default_backoff=60)
    assert verdict.drop and verdict.news
    assert verdict.failure.until == until


def test_used_up_retries_or_time_exclude_the_object_for_good_and_say_so():
    first = judge(handler(retries=2), kopf.TemporaryError('x', delay=1), failure=None, now=T0, monotonic=100,
                  default_backoff=60)
    second = judge(handler(retries=2), kopf.TemporaryError('x', delay=1), failure=first.failure, now=T0,
                   monotonic=102, default_backoff=60)
    assert second.failure.until is None and second.news  # news: the exclusion for good
    assert second.consequence.endswith("(its 2 attempt(s) are used up)")

    timed = judge(handler(timeout=5), kopf.TemporaryError('x', delay=6), failure=None, now=T0, monotonic=100,
                  default_backoff=60)
    assert timed.failure.until is None
    assert timed.consequence.endswith("(its 5 seconds are over)")


def test_the_function_is_told_about_its_past_failures():
    first = attempts(None, now=T0)
    assert (first.retries, first.started, first.runtime) == (0, T0, datetime.timedelta(0))
    failure = Failure(started=T0, since=100, retries=3, until=110)
    past = attempts(failure, now=T0 + datetime.timedelta(seconds=9))
    assert (past.retries, past.started, past.runtime) == (3, T0, datetime.timedelta(seconds=9))
    assert failure.excludes(109.9) and not failure.excludes(110)
