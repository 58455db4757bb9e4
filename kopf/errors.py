"""
Exceptions that handlers raise to steer their retries, and that the framework raises about handlers.

A handler decides its own fate by what it raises: :class:`TemporaryError`
asks for a retry after a delay, :class:`PermanentError` stops the retries for
good. Any other exception is treated as its handler's ``errors=`` mode says.
"""
from __future__ import annotations

import enum
from collections.abc import Mapping


class ErrorsMode(enum.Enum):
    """How a handler's unexpected exceptions (neither temporary nor permanent errors) are treated."""

    TEMPORARY = 'temporary'  # retry after the handler's back-off
    PERMANENT = 'permanent'  # fail the handler for good
    IGNORED = 'ignored'      # log it, and consider the handler done, without a result


class TemporaryError(Exception):
    """Retry the handler after ``delay`` seconds (``None``: as soon as possible)."""

    def __init__(self, message: str = '', delay: float | None = 60) -> None:
        super().__init__(message)
        self.delay = delay


class PermanentError(Exception):
    """Fail the handler for good: it will not be retried for this cause."""


class HandlerTimeoutError(PermanentError):
    """The handler has been retried for longer than its ``timeout=``."""


class HandlerRetriesError(PermanentError):
    """The handler has been attempted as many times as its ``retries=`` allow."""


class AdmissionError(PermanentError):
    """
    Reject an admission request, with this message and HTTP status code for the API client.

    Raised by ``@kopf.on.validate``/``@kopf.on.mutate`` handlers; ``kubectl``
    shows the message as the reason of the denial.
    """

    def __init__(self, message: str | None = '', code: int | None = 500) -> None:
        super().__init__(message)
        self.code = code


class HandlerChildrenRetry(TemporaryError):
    """
    Not an error: the handler's sub-handlers are not finished yet.

    Raised from :func:`kopf.execute` (or after the handler returns, for
    sub-handlers registered with :func:`kopf.register`), so that the parent
    is re-invoked when its soonest sub-handler is due. Users should let it
    propagate.
    """


class DuplicateHandlerError(RuntimeError):
    """Two handlers that can run for the same object and cause share one id."""


class HandlerSignatureError(TypeError):
    """A handler's function cannot be called with the keyword arguments that every handler gets."""


class ActivityError(Exception):
    """
    Some activity handlers (startup, cleanup, login) failed permanently.

    ``errors`` maps the failed handlers' ids to their exceptions, so that the
    caller can report them all.
    """

    def __init__(self, message: str, *, errors: Mapping[str, BaseException]) -> None:
        super().__init__(message)
        self.errors: Mapping[str, BaseException] = dict(errors)



# The text of errors in messages: one definition, used wherever an error is put into words.

def message(error: BaseException) -> str:
    """An error's own words, or its type's name where it has none (e.g. a bare ``TimeoutError``)."""
    return str(error) or type(error).__name__


def describe(error: BaseException) -> str:
    """An error in one line with its type: ``ValueError: bad value``, or the type alone if it says nothing."""
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
