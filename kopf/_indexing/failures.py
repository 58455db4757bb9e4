"""
The error policy of index functions: what a failure does to the object's values, and when it is indexed again.

Index functions are not retried in place: they run on every event, and a
failure only decides what happens to the object's values. With the default
``errors=IGNORED``, an arbitrary exception keeps the object's previous values
(stale, but probably close). :class:`kopf.TemporaryError` (or any exception
with ``errors=TEMPORARY``) removes them, and the object is not indexed again
until the error's ``delay`` (or ``backoff=``) has passed and a new event
comes; after ``retries=`` failures or ``timeout=`` seconds since the first,
the exclusion is for good. :class:`kopf.PermanentError` (or ``errors=PERMANENT``)
removes them and excludes the object for good (until it is deleted).

Each object's failure is logged once, with its consequence (and once more
if the object becomes excluded for good); repeated failures of the same
object are logged at DEBUG only, until it is indexed successfully again.

Everything here is a decision from the failure, the object's previous
failure and the time given; the indexing does the rest.
"""
from __future__ import annotations

import dataclasses
import datetime

from kopf._handlers.registries import IndexingHandler
from kopf.errors import ErrorsMode, PermanentError, TemporaryError


@dataclasses.dataclass(frozen=True)
class Failure:
    """An object that an index function has failed for, since when, and until when it is not indexed."""

    started: datetime.datetime
    since: float  # monotonic
    retries: int = 1
    until: float | None = None  # monotonic; None: for good; -inf: not excluded (errors ignored)

    def excludes(self, monotonic: float) -> bool:
        return self.until is None or monotonic < self.until


@dataclasses.dataclass(frozen=True)
class Attempts:
    """What an index function is told about its failures for the object so far (``retry``, ``started``, ...)."""

    retries: int
    started: datetime.datetime
    runtime: datetime.timedelta


def attempts(failure: Failure | None, *, now: datetime.datetime) -> Attempts:
    if failure is None:
        return Attempts(retries=0, started=now, runtime=datetime.timedelta(0))
    return Attempts(retries=failure.retries, started=failure.started, runtime=now - failure.started)


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What a failure does: the failure to remember, whether the object's values go, and what to say."""

    failure: Failure
    drop: bool  # whether the object's values leave the index
    consequence: str  # for the log: what happens to the object's values
    news: bool  # logged as an error (the first failure, or the exclusion for good); else at DEBUG


def judge(
        handler: IndexingHandler,
        error: Exception,
        *,
        failure: Failure | None,
        now: datetime.datetime,
        monotonic: float,
        default_backoff: float,
) -> Verdict:
    """Decide what the failure does to the object's values, given its previous failure (if any)."""
    started = failure.started if failure is not None else now
    since = failure.since if failure is not None else monotonic
    retries = failure.retries + 1 if failure is not None else 1
    mode = handler.errors or ErrorsMode.IGNORED
    delay: float | None
    if isinstance(error, TemporaryError):
        delay = error.delay or 0.0
    elif isinstance(error, PermanentError) or mode == ErrorsMode.PERMANENT:
        delay = None
    elif mode == ErrorsMode.TEMPORARY:
        delay = handler.backoff if handler.backoff is not None else default_backoff
    else:
        return Verdict(failure=Failure(started=started, since=since, retries=retries, until=float('-inf')),
                       drop=False, consequence="its values in the index stay as they were", news=failure is None)

    exhausted = ''
    if delay is not None and handler.retries is not None and retries >= handler.retries:
        exhausted = f" (its {handler.retries} attempt(s) are used up)"
    elif delay is not None and handler.timeout is not None and monotonic + delay - since > handler.timeout:
        exhausted = f" (its {handler.timeout} seconds are over)"
    if exhausted:
        delay = None
    if delay is None:
        consequence = f"its values are removed from the index, and it is not indexed again{exhausted}"
    else:
        consequence = (f"its values are removed from the index until it is indexed again "
                       f"(on its first event after {delay:g}s)")
    excluded_anew = delay is None and failure is not None and failure.until is not None
    return Verdict(failure=Failure(started=started, since=since, retries=retries,
                                   until=None if delay is None else monotonic + delay),
                   drop=True, consequence=consequence, news=failure is None or excluded_anew)
