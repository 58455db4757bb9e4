"""
``kopf inspect``: what the framework keeps about each object, as a table or as JSON.

Per object: each handler's progress (its state, the attempts so far, when
it started, when it is retried next, the last error), the last-handled
configuration, and our finalizer (present or not, and whether a deletion
waits for it). Nothing is written anywhere.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Collection, Sequence

from kopf._storage import calls, records
from kopf._storage.diffbase import DiffBaseStorage
from kopf._storage.progress import ProgressStorage
from kopf._storage.records import ProgressRecord
from kopf._structs.bodies import Body, Essence
from kopf._structs.ids import HandlerId
from kopf._tools import reading

# How much of the last-handled configuration a table shows (JSON shows all of it).
ESSENCE_PREVIEW = 160


@dataclasses.dataclass(frozen=True)
class HandlerView:
    """One handler's progress, as people read it."""

    id: str
    state: str  # succeeded, failed, waiting (for a retry at next_retry), due, started
    attempts: int
    started: str | None
    stopped: str | None
    next_retry: str | None
    last_error: str | None
    success: bool
    failure: bool


@dataclasses.dataclass(frozen=True)
class ObjectView:
    """What is kept about one object."""

    resource: str
    namespace: str | None
    name: str
    uid: str | None
    finalizer: str
    finalizer_present: bool
    deleting: bool
    handlers: tuple[HandlerView, ...]
    listed: bool  # whether the progress storage could list all records (else: only those of known ids)
    last_handled: Essence | None


async def inspect_object(
        body: Body,
        *,
        resource: str,
        progress: ProgressStorage,
        diffbase: DiffBaseStorage,
        ids: Collection[HandlerId],
        finalizer: str,
        now: datetime.datetime,
) -> ObjectView:
    found = await reading.collect(progress, body=body, ids=ids)
    essence = await calls.call(diffbase.fetch, body=body)
    return ObjectView(
        resource=resource,
        namespace=body.metadata.namespace,
        name=body.metadata.name or '',
        uid=body.metadata.uid,
        finalizer=finalizer,
        finalizer_present=finalizer in body.metadata.finalizers,
        deleting=body.metadata.deletion_timestamp is not None,
        handlers=tuple(_handler(handler_id, record, now=now) for handler_id, record in found.records.items()),
        listed=found.listed,
        last_handled=essence,
    )


def _handler(handler_id: str, record: ProgressRecord, *, now: datetime.datetime) -> HandlerView:
    delayed = record.get('delayed')
    attempts = record.get('retries') or 0
    if record.get('success'):
        state = 'succeeded'
    elif record.get('failure'):
        state = 'failed'
    elif delayed and records.parse_time(delayed) > now:
        state = 'waiting'
    elif attempts:
        state = 'due'
    else:
        state = 'started'
    return HandlerView(id=handler_id, state=state, attempts=attempts, started=record.get('started'),
                       stopped=record.get('stopped'), next_retry=delayed if state == 'waiting' else None,
                       last_error=record.get('message'), success=bool(record.get('success')),
                       failure=bool(record.get('failure')))


def as_json(views: Sequence[ObjectView]) -> str:
    return json.dumps([dataclasses.asdict(view) for view in views], indent=2, sort_keys=False)


def as_table(views: Sequence[ObjectView], *, now: datetime.datetime) -> str:
    if not views:
        return "No objects found."
    return '\n\n'.join(_block(view, now=now) for view in views)


def _block(view: ObjectView, *, now: datetime.datetime) -> str:
    where = f"{view.namespace}/{view.name}" if view.namespace else view.name
    finalizer = 'present' if view.finalizer_present else 'absent'
    if view.deleting:
        finalizer += ', deletion waiting for it' if view.finalizer_present else ', being deleted'
    lines = [f"{view.resource} {where}  (uid {view.uid})",
             f"  finalizer:     {view.finalizer} ({finalizer})",
             f"  last handled:  {_preview(view.last_handled)}"]
    if not view.handlers:
        lines.append("  progress:      none (nothing is being handled)" if view.listed else
                     "  progress:      none of the known handlers (this storage cannot list its records)")
        return '\n'.join(lines)
    lines.append("  progress:")
    rows = [("HANDLER", "STATE", "ATTEMPTS", "STARTED", "NEXT RETRY", "LAST ERROR")]
    for handler in view.handlers:
        rows.append((handler.id, handler.state, str(handler.attempts), _time(handler.started),
                     _retry(handler.next_retry, now=now), _short(handler.last_error)))
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths)] + [row[-1]]
        lines.append("    " + "  ".join(cells).rstrip())
    return '\n'.join(lines)


def _preview(essence: Essence | None) -> str:
    if essence is None:
        return "none (never handled, or kept elsewhere)"
    text = json.dumps(essence, separators=(',', ':'), sort_keys=True)
    if len(text) <= ESSENCE_PREVIEW:
        return text
    return f"{text[:ESSENCE_PREVIEW]}... ({len(text)} bytes; -o json shows all)"


def _time(value: str | None) -> str:
    if not value:
        return '-'
    return records.parse_time(value).strftime('%Y-%m-%dT%H:%M:%SZ')


def _retry(value: str | None, *, now: datetime.datetime) -> str:
    if not value:
        return '-'
    seconds = int((records.parse_time(value) - now).total_seconds())
    return f"{_time(value)} (in {seconds}s)"


def _short(message: str | None, limit: int = 80) -> str:
    if not message:
        return '-'
    line = ' '.join(message.split())
    return line if len(line) <= limit else line[:limit - 1] + '…'
