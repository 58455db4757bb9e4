"""
Posting Kubernetes Events: from ``kopf.event/info/warn/exception`` and, if enabled, from per-object logs.

What is posted follows ``settings.posting`` (as in Kopf): ``enabled``
switches all posting off; ``level`` (default INFO) is the lowest level of
the explicit ``kopf.info`` (INFO), ``kopf.warn`` (WARNING) and
``kopf.exception`` (ERROR) that is posted, while ``kopf.event`` (any type)
is always posted; ``loggers`` (default off) also posts the per-object log
messages of handlers and of the framework at or above that level.

Messages are only queued here, never sent directly, so that logging stays
synchronous and cheap; a background task of the operator sends them. Posting
must never break handling: failures are logged and dropped.

No Events are posted about Events (as in Kopf): an operator that handles
Events would otherwise feed itself a new Event for every message about one.
"""
from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from kopf._handlers.loggers import make_ref
from kopf.config import PostingConfig

logger = logging.getLogger('kopf._runtime.posting')

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
event_settings_var: contextvars.ContextVar[PostingConfig] = contextvars.ContextVar('event_settings_var')

Poster = Callable[[K8sEvent], Awaitable[None]]


def accepts(settings: PostingConfig, level: int | None) -> bool:
    """Whether an event of this logging level (``None``: of ``kopf.event``) is to be posted."""
    return settings.enabled and (level is None or level >= settings.level)


def enqueue(event: K8sEvent, *, level: int | None = None) -> None:
    """Queue an event for posting if the operator's settings accept its level, also from handler threads."""
    settings = event_settings_var.get(None)
    if settings is None or accepts(settings, level):
        _queue(event)


def _queue(event: K8sEvent) -> None:
    """Queue an event of the operator running in this context; warn if no operator runs."""
    if is_event(event.ref):
        return  # silently, as in Kopf: messages about Events must not make more Events
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


def is_event(ref: Mapping[str, Any]) -> bool:
    """Whether an object is a Kubernetes Event itself (of the core API or of ``events.k8s.io``)."""
    api_version = str(ref.get('apiVersion') or '')
    return ref.get('kind') == 'Event' and (api_version == 'v1' or api_version.startswith('events.k8s.io/'))


def event(objs: Mapping[str, Any] | Iterable[Mapping[str, Any]], *, type: str, reason: str, message: str = '') -> None:
    """Post an Event of any type about one or several objects (bodies or references)."""
    _post(objs, type=type, reason=reason, message=message, level=None)


def info(objs: Mapping[str, Any] | Iterable[Mapping[str, Any]], *, reason: str, message: str = '') -> None:
    """Post a Normal Event (at the INFO level of ``settings.posting.level``)."""
    _post(objs, type='Normal', reason=reason, message=message, level=logging.INFO)


def warn(objs: Mapping[str, Any] | Iterable[Mapping[str, Any]], *, reason: str, message: str = '') -> None:
    """Post a Warning Event (at the WARNING level of ``settings.posting.level``)."""
    _post(objs, type='Warning', reason=reason, message=message, level=logging.WARNING)


def _post(objs: Mapping[str, Any] | Iterable[Mapping[str, Any]], *,
          type: str, reason: str, message: str, level: int | None) -> None:
    for obj in ([objs] if isinstance(objs, Mapping) else objs):
        ref = obj if 'metadata' not in obj else make_ref(obj)
        enqueue(K8sEvent(ref=ref, type=type, reason=reason, message=message[:MAX_MESSAGE_LENGTH]), level=level)


def exception(
        objs: Mapping[str, Any] | Iterable[Mapping[str, Any]],
        *,
        reason: str = '',
        message: str = '',
        exc: BaseException | None = None,
) -> None:
    """Post an Error event about the exception being handled, or the given one (at the ERROR level)."""
    exc = exc if exc is not None else sys.exc_info()[1]
    text = f"{message} {exc if exc is not None else ''}".strip()  # as in Kopf: the message, then the error's text
    _post(objs, type='Error', reason=reason or (type(exc).__name__ if exc else 'Exception'), message=text,
          level=logging.ERROR)


class PostingHandler(logging.Handler):
    """
    Turns per-object log records into queued Events, if ``settings.posting.loggers`` is on.

    Records with a ``k8s_reason`` are the framework's own Events (as if by
    ``kopf.warn``): they are posted whether ``loggers`` is on or not.

    The records' own settings (of a ``kopf.ObjectLogger(settings=...)``) win
    over the operator's; records of a ``kopf.LocalObjectLogger`` are never posted.
    """

    def __init__(self, *, settings: Callable[[], PostingConfig]) -> None:
        super().__init__(level=logging.DEBUG)
        self._settings = settings

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, 'k8s_ref', None) or getattr(record, 'k8s_skip', False):
            return False
        own = getattr(record, 'k8s_settings', None)
        settings = own.posting if own is not None else self._settings()
        explicit = getattr(record, 'k8s_reason', None) is not None  # the framework's own Events, e.g. InvalidSpec
        return (explicit or bool(settings.loggers)) and accepts(settings, record.levelno)

    def emit(self, record: logging.LogRecord) -> None:
        type_ = 'Warning' if record.levelno >= logging.WARNING else 'Normal'
        message = record.getMessage()
        ref: Mapping[str, Any] = record.__dict__['k8s_ref']
        reason = str(getattr(record, 'k8s_reason', 'Logging'))  # the framework's own reasons, e.g. InvalidSpec
        # Already filtered by the record's own settings or the operator's.
        _queue(K8sEvent(ref=ref, type=type_, reason=reason, message=message[:MAX_MESSAGE_LENGTH]))


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
