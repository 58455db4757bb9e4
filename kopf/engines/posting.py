"""
Posting Kubernetes Events: from per-object log messages and from ``kopf.event()``.

Messages are only queued here, never sent directly, so that logging stays
synchronous and cheap; a background task of the operator sends them. Posting
must never break handling: failures are logged and dropped.
"""
from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from kopf.engines.loggers import make_ref

logger = logging.getLogger('kopf.engines.posting')

MAX_MESSAGE_LENGTH = 1024


@dataclasses.dataclass(frozen=True)
class K8sEvent:
    ref: Mapping[str, Any]
    type: str
    reason: str
    message: str


# The queue of the operator running in this context (set by the operator at start).
event_queue_var: contextvars.ContextVar[asyncio.Queue[K8sEvent]] = contextvars.ContextVar('event_queue_var')
event_loop_var: contextvars.ContextVar[asyncio.AbstractEventLoop] = contextvars.ContextVar('event_loop_var')

Poster = Callable[[K8sEvent], Awaitable[None]]


def enqueue(event: K8sEvent) -> None:
    """Queue an event for posting, also from handler threads; warn if no operator runs."""
    try:
        queue = event_queue_var.get()
        loop = event_loop_var.get()
    except LookupError:
        logger.warning("No operator is running in this context; the event is not posted: %s", event.message)
        return
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        queue.put_nowait(event)
    else:
        loop.call_soon_threadsafe(queue.put_nowait, event)


def event(objs: Mapping[str, Any] | Iterable[Mapping[str, Any]], *, type: str, reason: str, message: str = '') -> None:
    """Post an Event about one or several objects (bodies or references)."""
    for obj in ([objs] if isinstance(objs, Mapping) else objs):
        ref = obj if 'metadata' not in obj else make_ref(obj)
        enqueue(K8sEvent(ref=ref, type=type, reason=reason, message=message[:MAX_MESSAGE_LENGTH]))


def info(objs: Mapping[str, Any] | Iterable[Mapping[str, Any]], *, reason: str, message: str = '') -> None:
    event(objs, type='Normal', reason=reason, message=message)


def warn(objs: Mapping[str, Any] | Iterable[Mapping[str, Any]], *, reason: str, message: str = '') -> None:
    event(objs, type='Warning', reason=reason, message=message)


def exception(
        objs: Mapping[str, Any] | Iterable[Mapping[str, Any]],
        *,
        reason: str = '',
        message: str = '',
        exc: BaseException | None = None,
) -> None:
    """Post an Error event about the exception being handled (or the given one)."""
    exc = exc if exc is not None else sys.exc_info()[1]
    exc_text = f"{type(exc).__name__}: {exc}" if exc is not None else ''
    text = f"{message} {exc_text}".strip()
    event(objs, type='Error', reason=reason or (type(exc).__name__ if exc else 'Exception'), message=text)


class PostingHandler(logging.Handler):
    """Turns per-object log records at or above a level into queued Events."""

    def __init__(self, *, enabled: Callable[[], bool], level: Callable[[], int]) -> None:
        super().__init__(level=logging.DEBUG)
        self._enabled = enabled
        self._level = level

    def filter(self, record: logging.LogRecord) -> bool:
        return (self._enabled() and record.levelno >= self._level() and
                bool(getattr(record, 'k8s_ref', None)) and not getattr(record, 'k8s_skip', False))

    def emit(self, record: logging.LogRecord) -> None:
        type_ = 'Warning' if record.levelno >= logging.WARNING else 'Normal'
        message = record.getMessage()
        ref: Mapping[str, Any] = record.__dict__['k8s_ref']
        enqueue(K8sEvent(ref=ref, type=type_, reason='Logging', message=message[:MAX_MESSAGE_LENGTH]))


async def poster(*, queue: asyncio.Queue[K8sEvent], post: Poster) -> None:
    """Send queued events one by one, forever (until cancelled)."""
    while True:
        item = await queue.get()
        try:
            await post(item)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.warning("Failed to post an event about %s.", item.ref.get('name'), exc_info=True)
        finally:
            queue.task_done()
