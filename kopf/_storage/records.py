"""
Progress records: the serialisable form of one handler's state.

The record is what storages keep between handling cycles. Decoding is strict
about types, so that a hand-edited or corrupted record is reported and ignored
rather than silently misread (e.g. ``"retries": "3"`` or ``"success": "no"``).
Whatever a record holds, decoding it raises nothing but ``ValueError``: a
record is data from outside, and no value of it may stop an object's handling.
"""
from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from typing import Any, TypedDict, cast


class ProgressRecord(TypedDict, total=False):
    """A handler's progress as kept in storage; times are ISO-8601 UTC strings."""

    started: str | None
    stopped: str | None
    delayed: str | None
    scheduled: str | None  # when the delay was set: a clock set back since then is noticed
    retries: int | None
    success: bool | None
    failure: bool | None
    message: str | None
    subrefs: list[str] | None


_FIELD_TYPES: Mapping[str, tuple[type, ...]] = {
    'started': (str,),
    'stopped': (str,),
    'delayed': (str,),
    'scheduled': (str,),
    'retries': (int,),
    'success': (bool,),
    'failure': (bool,),
    'message': (str,),
    'subrefs': (list,),
}

_TIME_FIELDS = frozenset({'started', 'stopped', 'delayed', 'scheduled'})


def parse_time(value: str) -> datetime.datetime:
    """
    Parse an ISO-8601 time into an aware UTC datetime; ``ValueError`` if it is none.

    Older versions wrote naive times (implicitly UTC); they are still accepted.
    Times that exist only in another timezone (``0001-01-01T00:00:00+01:00``
    is before the first representable UTC time) are not times for us either.
    """
    parsed = datetime.datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=datetime.timezone.utc)
    try:
        return parsed.astimezone(datetime.timezone.utc)
    except OverflowError:
        raise ValueError(f"{value!r} is out of the range of representable UTC times") from None


def format_time(value: datetime.datetime) -> str:
    """Format an aware datetime as ISO-8601 UTC with an explicit offset."""
    return value.astimezone(datetime.timezone.utc).isoformat()


def decode_record(value: Any) -> ProgressRecord:
    """
    Validate a raw record (a dict, or its JSON text) and return it typed.

    Raises ``ValueError`` with a human explanation of the first problem found.
    Unknown fields are ignored, so that records written by newer versions
    with extra fields are still readable.
    """
    if isinstance(value, str):
        value = _parse_json(value)
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    record: dict[str, Any] = {}
    for field, types in _FIELD_TYPES.items():
        item = value.get(field)
        if item is None:
            continue
        if not isinstance(item, types) or not _valid(field, item):
            raise ValueError(f"field {field!r} has an invalid value {_shorten(item)}")
        if field in _TIME_FIELDS and isinstance(item, str):
            try:
                parse_time(item)
            except ValueError:
                raise ValueError(f"field {field!r} is not an ISO-8601 time of the years 1-9999 in UTC: "
                                 f"{_shorten(item)}") from None
        record[field] = item
    return cast(ProgressRecord, record)


def _parse_json(text: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("not valid JSON (nested too deeply)") from None
    except ValueError as e:
        raise ValueError(f"not valid JSON ({e})") from None


def _valid(field: str, item: Any) -> bool:
    """The checks beyond the type: non-negative retries (not booleans), a list of strings for subrefs."""
    if field == 'retries':
        return not isinstance(item, bool) and item >= 0
    if field == 'subrefs':
        return all(isinstance(ref, str) for ref in item)
    return True


def _shorten(value: Any, limit: int = 100) -> str:
    """A value for a message: its repr, cut (messages go to logs, records may be large)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 1]}…"


def encode_record(record: ProgressRecord, *, verbose: bool = False) -> str:
    """Compact JSON of a record; ``None`` fields are dropped unless verbose."""
    data = dict(record) if verbose else {k: v for k, v in record.items() if v is not None}
    return json.dumps(data, separators=(',', ':'), sort_keys=True)


# Fields that the released Kopf adds to its records; a record with them is still a record.
KOPF_EXTRA_FIELDS = frozenset({'purpose'})


def looks_like_record(value: str) -> bool:
    """
    Whether an annotation value is a progress record of some framework instance.

    Used to keep other operators' bookkeeping (under other prefixes), and what
    the released Kopf left behind, out of the diff-base essence, so that their
    progress does not look like a change of the object to us. A record always
    has ``started`` once written; Kopf's records also carry ``purpose``.
    """
    if not value.startswith('{') or len(value) > 64 * 1024:
        return False
    if '"started"' not in value and '\\' not in value:
        return False  # without escapes, the key is there literally; e.g. essences are skipped without parsing
    try:
        data = json.loads(value)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and 'started' in data and set(data) <= _KNOWN_FIELDS


_KNOWN_FIELDS = frozenset(_FIELD_TYPES) | KOPF_EXTRA_FIELDS


def is_orphan_candidate(value: Any) -> bool:
    """
    Whether a record (a dict or its JSON text) was written by Kopf 0.27, which left sub-handlers' records behind.

    Such records are recognised by their keys (``parent.child``) when the
    parent is purged; but only records in 0.27's own shape (no ``purpose``,
    a naive ``started`` time) are taken by the key alone: a record written by
    this framework or by a later Kopf is never purged for its name's sake,
    even if that name happens to start like another handler's.
    """
    if isinstance(value, str):
        if not looks_like_record(value):
            return False
        value = json.loads(value)
    if not isinstance(value, Mapping) or 'purpose' in value:
        return False
    started = value.get('started')
    if not isinstance(started, str):
        return False
    try:
        return datetime.datetime.fromisoformat(started).tzinfo is None
    except ValueError:
        return False


def advancement(record: ProgressRecord) -> tuple[int, int]:
    """
    How far a handler had got by this record: finished beats unfinished, then more attempts beat fewer.

    Used when one handler has records under several keys (ours and Kopf's):
    the most advanced one tells the truth, as no record ever goes backwards.
    """
    finished = bool(record.get('success') or record.get('failure'))
    return (int(finished), record.get('retries') or 0)
