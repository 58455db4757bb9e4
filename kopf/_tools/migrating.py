"""
``kopf migrate``: move the progress and the last-handled configurations of all objects from one storage to another.

Per object, in an order that loses nothing if interrupted at any point:

1. Read everything from the source: the progress records (all that the
   source lists, plus those of the known handler ids) and the essence.
2. Write it all to the target, and make it durable there: flush the target,
   and send the object's patch if the target keeps its state in the object.
3. Only then remove it from the source (purge each record, and the essence),
   and make that durable too. Where both keep their state in the
   annotations, steps 2 and 3 are one patch: atomic.

Running it again is harmless: what has been moved is not in the source any
more, and writing a record or an essence again to the target replaces it
with the same. No handler runs. Stop the operator during a migration (or run
it with a Multi storage of both, new first): an operator that handles an
object between steps 1 and 3 may write to the source after it was read.
"""
from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

from kopf._storage import budget, calls, persistence
from kopf._storage.diffbase import (
    AnnotationsDiffBaseStorage,
    DiffBaseStorage,
    MultiDiffBaseStorage,
    StatusDiffBaseStorage,
)
from kopf._storage.progress import AnnotationsProgressStorage, MultiProgressStorage, ProgressStorage
from kopf._structs.bodies import Body
from kopf._structs.ids import HandlerId
from kopf._structs.patches import Patch
from kopf._tools import reading

logger = logging.getLogger('kopf._tools')

# Sends a patch to the object; returns the object as patched, or None if it is gone.
Send = Callable[[Body, Patch], Awaitable[Body | None]]

# An annotation name that a handler id was mapped to with a hash: the id cannot be told from it.
_HASHED_NAME = re.compile(r'-[0-9a-f]{8}$')


@dataclasses.dataclass(frozen=True)
class Pair:
    """A progress storage and a diff-base storage (either may be left out of a migration)."""

    progress: ProgressStorage | None
    diffbase: DiffBaseStorage | None


@dataclasses.dataclass(frozen=True)
class Moved:
    """What was moved for one object (or would be, in a dry run), or why it was skipped."""

    namespace: str | None
    name: str
    records: tuple[str, ...] = ()
    essence: bool = False
    kept: tuple[str, ...] = ()  # what stays in the source (it cannot forget it)
    skipped: str | None = None

    @property
    def nothing(self) -> bool:
        return not self.records and not self.essence and self.skipped is None

    def describe(self, *, dry_run: bool) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        if self.skipped is not None:
            return f"{where}: skipped: {self.skipped}"
        if self.nothing:
            return f"{where}: nothing to move"
        parts = []
        if self.records:
            parts.append(f"{len(self.records)} progress record(s) ({', '.join(self.records)})")
        if self.essence:
            parts.append("the last-handled configuration")
        verb = "would move" if dry_run else "moved"
        note = f"; left in the source: {', '.join(self.kept)}" if self.kept else ""
        return f"{where}: {verb} {' and '.join(parts)}{note}"


async def migrate_object(
        body: Body,
        *,
        source: Pair,
        target: Pair,
        ids: Collection[HandlerId],
        send: Send,
        dry_run: bool = False,
        keep_source: bool = False,
) -> Moved:
    """Move one object's state from the source to the target storages (see the module's docs for the order)."""
    namespace, name = body.metadata.namespace, body.metadata.name or ''
    found = await reading.collect(source.progress, body=body, ids=ids) if source.progress else None
    moving = dict(found.records) if found is not None else {}
    if found is not None and not found.listed and not ids:
        return Moved(namespace, name, skipped="the source progress storage cannot list its records; "
                                               "pass the operator (-f) so that its handler ids are known")
    unclear = sorted(key for key in moving if key not in ids and _mapped(source.progress, key))
    if unclear:
        return Moved(namespace, name, skipped=f"cannot tell the handler ids of the records {', '.join(unclear)} "
                                               f"(names derived from the ids): pass the operator (-f)")
    essence = await calls.call(source.diffbase.fetch, body=body) if source.diffbase else None
    moved = Moved(namespace, name, records=tuple(moving), essence=essence is not None)
    if dry_run or moved.nothing:
        return moved

    # 1. Written to the target, durably.
    written = Patch()
    if target.progress is not None and moving:
        for handler_id, record in moving.items():
            await calls.call(target.progress.store, key=HandlerId(handler_id), record=record, body=body,
                             patch=written)
        await calls.call(target.progress.flush)
    if target.diffbase is not None and essence is not None:
        await calls.call(target.diffbase.store, body=body, patch=written, essence=essence)
    written = budget.fit(body=body, patch=written, essential=None, extras=(), diffbase=target.diffbase,
                         logger=logger).patch
    if keep_source:
        await _send(send, body, written)
        return moved

    # 2. Removed from the source: together with the target's writes where that is one request (annotations
    #    only), else only after the target's part has landed.
    if _in_object(source):
        removal, kept = await _removal(source, body=body, ids=moving, essence=essence is not None)
        removal = _without_overlap(removal, written)
        if set(written) | set(removal) <= {'metadata'}:
            await _send(send, body, _merged(written, removal))
        else:  # e.g. with the status subresource, the status part is a request of its own
            await _send(send, body, written)
            await _send(send, body, removal)
    else:
        await _send(send, body, written)
        removal, kept = await _removal(source, body=body, ids=moving, essence=essence is not None)
        await _send(send, body, removal)
    return dataclasses.replace(moved, kept=tuple(kept))


async def _removal(source: Pair, *, body: Body, ids: Collection[str], essence: bool) -> tuple[Patch, list[str]]:
    """Forget the moved state in the source; what goes into the object is returned as a patch."""
    removal = Patch()
    kept: list[str] = []
    if source.progress is not None and ids:
        for handler_id in ids:
            await calls.call(source.progress.purge, key=HandlerId(handler_id), body=body, patch=removal)
        await calls.call(source.progress.flush)
    if source.diffbase is not None and essence:
        try:
            await calls.call(source.diffbase.purge, body=body, patch=removal)
        except NotImplementedError:
            kept.append("the last-handled configuration (the storage cannot forget it)")
    return removal, kept


async def _send(send: Send, body: Body, patch: Patch) -> Body | None:
    return await send(body, patch) if patch else body


def _mapped(storage: ProgressStorage | None, key: str) -> bool:
    """Whether a record's key may be a name derived from an unknown handler id (annotations cut and hash them)."""
    if isinstance(storage, MultiProgressStorage):
        return any(_mapped(child, key) for child in storage.storages)
    return isinstance(storage, AnnotationsProgressStorage) and bool(_HASHED_NAME.search(key))


def _in_object(pair: Pair) -> bool:
    """Whether removing the state from these storages only writes into the patch."""
    progress = pair.progress is None or persistence.in_body(pair.progress)
    return progress and (pair.diffbase is None or _diffbase_in_object(pair.diffbase))


def _diffbase_in_object(storage: DiffBaseStorage) -> bool:
    if isinstance(storage, MultiDiffBaseStorage):
        return all(_diffbase_in_object(child) for child in storage.storages)
    return isinstance(storage, (AnnotationsDiffBaseStorage, StatusDiffBaseStorage))


def _without_overlap(removal: Mapping[str, Any], written: Mapping[str, Any]) -> Patch:
    """The removals, except of what the target has just written to the same place (the same storage twice)."""
    def walk(removed: Mapping[str, Any], kept: Any) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, value in removed.items():
            other = kept.get(key) if isinstance(kept, Mapping) else None
            if isinstance(value, Mapping):
                sub = walk(value, other)
                if sub:
                    result[key] = sub
            elif not (value is None and other is not None):
                result[key] = value
        return result
    return Patch(walk(removal, written))


def _merged(first: Mapping[str, Any], second: Mapping[str, Any]) -> Patch:
    result = Patch()
    for patch in (first, second):
        _merge(result, patch)
    return result


def _merge(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    for key, value in patch.items():
        if isinstance(value, Mapping):
            child = target.setdefault(key, {})
            if isinstance(child, dict):
                _merge(child, value)
            else:
                target[key] = dict(value)
        else:
            target[key] = value
