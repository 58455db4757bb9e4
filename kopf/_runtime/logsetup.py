"""
The operator's log output: levels and formats, for ``kopf run`` and embedding applications.

``kopf.configure(verbose=True, log_format=kopf.LogFormat.JSON)`` sets up the
root logger the way ``kopf run -v --log-format=json`` does: one stream
handler (replacing the one of an earlier call), the level, and the format.
"""
from __future__ import annotations

import enum
import logging

from kopf._handlers.loggers import JsonFormatter, ObjectFormatter


class LogFormat(enum.Enum):
    """The output formats: the message only, the message with time/logger/level, or JSON lines."""

    PLAIN = '%(message)s'
    FULL = '[%(asctime)s] %(name)-20.20s [%(levelname)-8.8s] %(message)s'
    JSON = '-json-'


DEFAULT_REFKEY = 'object'


def configure(
        debug: bool | None = None,
        verbose: bool | None = None,
        quiet: bool | None = None,
        log_format: LogFormat | str = LogFormat.FULL,
        log_prefix: bool | None = False,
        log_refkey: str | None = None,
) -> None:
    """
    Set up logging as ``kopf run`` does with the same-named options.

    ``verbose``: kopf's own messages at the DEBUG level; ``debug``: all
    libraries' too; ``quiet``: warnings and errors only. ``log_prefix``
    prefixes per-object messages with ``[namespace/name]`` in the plain and
    full formats (``None``: as ``kopf run`` does, i.e. yes). ``log_refkey``
    is the JSON key of the object's reference (default ``object``).
    """
    fmt = parse_format(log_format)
    level = logging.DEBUG if debug or verbose else logging.WARNING if quiet else logging.INFO
    handler = logging.StreamHandler()
    if fmt is LogFormat.JSON:
        handler.setFormatter(JsonFormatter(refkey=log_refkey or DEFAULT_REFKEY))
    elif log_prefix or log_prefix is None:
        handler.setFormatter(ObjectFormatter(fmt.value))
    else:
        handler.setFormatter(logging.Formatter(fmt.value))
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, '_kopf', False)]:
        root.removeHandler(old)
    handler._kopf = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
    # The libraries' own debug output is too noisy unless debugging is asked for explicitly.
    noisy = logging.DEBUG if debug else max(level, logging.INFO)
    logging.getLogger('asyncio').setLevel(noisy)
    logging.getLogger('aiohttp').setLevel(noisy)


def parse_format(log_format: LogFormat | str) -> LogFormat:
    """A format by its enum member or its name (``'plain'``, ``'full'``, ``'json'``, any case)."""
    if isinstance(log_format, LogFormat):
        return log_format
    try:
        return LogFormat[str(log_format).upper()]
    except KeyError:
        raise ValueError(f"Unknown log format {log_format!r}; use one of: plain, full, json.") from None
