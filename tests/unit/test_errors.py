import pytest

from kopf.errors import (
    ActivityError,
    DuplicateHandlerError,
    ErrorsMode,
    HandlerChildrenRetry,
    HandlerRetriesError,
    HandlerTimeoutError,
    PermanentError,
    TemporaryError,
)


def test_temporary_error_defaults():
    error = TemporaryError()
    assert str(error) == ''
    assert error.delay == 60


def test_temporary_error_with_message_and_delay():
    error = TemporaryError('not ready', delay=5)
    assert str(error) == 'not ready'
    assert error.delay == 5


def test_temporary_error_positional_delay():
    assert TemporaryError('x', 7).delay == 7


@pytest.mark.parametrize('cls', [HandlerTimeoutError, HandlerRetriesError])
def test_policy_errors_are_permanent(cls):
    assert issubclass(cls, PermanentError)
    assert not issubclass(cls, TemporaryError)


def test_waiting_for_subhandlers_is_a_temporary_condition():
    assert issubclass(HandlerChildrenRetry, TemporaryError)


def test_permanent_and_temporary_errors_are_distinct():
    assert not issubclass(PermanentError, TemporaryError)
    assert not issubclass(TemporaryError, PermanentError)


def test_errors_modes():
    assert {mode.name for mode in ErrorsMode} == {'TEMPORARY', 'PERMANENT', 'IGNORED'}


def test_duplicate_handler_error_is_a_runtime_error():
    assert issubclass(DuplicateHandlerError, RuntimeError)


def test_activity_error_keeps_all_errors():
    cause = PermanentError('no')
    error = ActivityError('Startup handlers have failed: a.', errors={'a': cause})
    assert error.errors == {'a': cause}
    assert 'a' in str(error)
