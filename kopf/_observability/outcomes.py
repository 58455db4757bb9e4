"""
The outcome of a handler call in one word, as metrics and traces name it.

``success``; ``temporary_error`` (retried later); ``permanent_error``;
``timeout`` and ``exhausted`` (its ``timeout=`` or ``retries=`` are over:
failed for good); ``waiting`` (it has declared sub-handlers that are not
done yet).
"""
from __future__ import annotations

from kopf.errors import HandlerRetriesError, HandlerTimeoutError

OUTCOMES = ('success', 'temporary_error', 'permanent_error', 'timeout', 'exhausted', 'waiting')


def handler_outcome(*, final: bool, error: BaseException | None) -> str:
    """The word for an outcome that the retry policy has judged ``final`` or not, with its error if any."""
    if not final:
        return 'waiting' if error is None else 'temporary_error'
    if error is None:
        return 'success'
    if isinstance(error, HandlerTimeoutError):
        return 'timeout'
    if isinstance(error, HandlerRetriesError):
        return 'exhausted'
    return 'permanent_error'
