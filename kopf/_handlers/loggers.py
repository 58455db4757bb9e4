"""
Per-object loggers and the operator's log output formats.

Every message logged while handling an object carries a reference to that
object, so that it can be prefixed in the output and posted as a Kubernetes
Event attached to the object (see :mod:`kopf._runtime.posting`).
"""
from __future__ import annotations

import datetime
import json
import logging
from collections.abc import Mapping, MutableMapping
from typing import Any

ObjectRef = Mapping[str, Any]


def make_ref(body: Mapping[str, Any]) -> dict[str, Any]:
    """The identity of an object, as needed to post Events about it."""
    meta = body.get('metadata', {})
    return {
        'apiVersion': body.get('apiVersion'),
        'kind': body.get('kind'),
        'name': meta.get('name'),
        'namespace': meta.get('namespace'),
        'uid': meta.get('uid'),
    }


class ObjectLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    """
    A logger that prefixes messages with the object and remembers which object they are about.

    ``settings`` (optional) decide the posting of its messages as Events
    instead of the running operator's settings.
    """

    def __init__(self, *, body: Mapping[str, Any], settings: Any = None, logger: logging.Logger | None = None) -> None:
        self.ref = make_ref(body)
        self.settings = settings
        super().__init__(logger or logging.getLogger('kopf.objects'), {'k8s_ref': self.ref})

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        extra = {'k8s_ref': self.ref, **kwargs.get('extra', {})}
        if self.settings is not None:
            extra.setdefault('k8s_settings', self.settings)
        kwargs['extra'] = extra
        return msg, kwargs


class LocalObjectLogger(ObjectLogger):
    """A per-object logger whose messages are never posted as Events: for the operator's log only."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        msg, kwargs = super().process(msg, kwargs)
        kwargs['extra']['k8s_skip'] = True
        return msg, kwargs


def describe_ref(ref: ObjectRef) -> str:
    namespace, name = ref.get('namespace'), ref.get('name')
    return f"{namespace}/{name}" if namespace else f"{name}"


class ObjectFormatter(logging.Formatter):
    """Prefixes per-object messages with the object, so that interleaved output stays readable."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        ref = getattr(record, 'k8s_ref', None)
        text = super().formatMessage(record)
        if ref and record.message in text:
            text = text.replace(record.message, f"[{describe_ref(ref)}] {record.message}", 1)
        return text


# The attributes of every log record, and ours: all others are a caller's ``extra=`` fields.
_RECORD_ATTRIBUTES = frozenset(vars(logging.LogRecord('', 0, '', 0, '', (), None))) | {
    'message', 'asctime', 'taskName', 'k8s_ref', 'k8s_skip', 'k8s_settings'}


def severity(levelno: int) -> str:
    """Kopf's names of the levels in JSON logs: debug, info, warn, error, fatal."""
    if levelno >= logging.CRITICAL:
        return 'fatal'
    if levelno >= logging.ERROR:
        return 'error'
    if levelno > logging.INFO:
        return 'warn'
    if levelno == logging.INFO:
        return 'info'
    return 'debug'


class JsonFormatter(logging.Formatter):
    """
    One JSON object per line, for log collectors, with Kopf's keys.

    ``message``, the fields a caller gave as ``extra=``, the object's
    reference under ``refkey``, ``exc_info`` (the formatted traceback),
    ``timestamp`` (ISO 8601 with the time zone) and ``severity``.
    """

    def __init__(self, *args: Any, refkey: str = 'object', **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.refkey = refkey

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {'message': record.getMessage()}
        data.update({key: value for key, value in vars(record).items() if key not in _RECORD_ATTRIBUTES})
        ref = getattr(record, 'k8s_ref', None)
        if ref:
            data[self.refkey] = ref
        if record.exc_info:
            data['exc_info'] = self.formatException(record.exc_info)
        created = datetime.datetime.fromtimestamp(record.created, tz=datetime.timezone.utc)
        data['timestamp'] = created.isoformat()
        data['severity'] = severity(record.levelno)
        return json.dumps(data, default=str)

