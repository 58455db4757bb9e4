"""
The persistence of one handling cycle: one snapshot read, one patch written.

A :class:`Persistence` is made per cycle for one object. It is the cycle's
only way to the storages, and it keeps these promises:

* **Reads once.** The essences (the last handled and the current one, and
  their diff) are computed at most once; every progress record is fetched at
  most once per handler id, however many parts of the cycle ask for it.
* **Reads nothing where nothing is stored.** The built-in storages that keep
  progress in the object (annotations, the status, and Smart/Multi storages
  made of them) can tell from the object alone that it holds no records:
  then no record is fetched at all, and nothing is purged. So an idle event
  of an object at rest costs no storage call but the essences. A custom
  storage that keeps records elsewhere cannot be judged from the object: its
  records are fetched (once per id) when the cycle needs them.
* **Writes once, with the object.** For storages that keep progress in the
  object, stores and purges are collected and applied at :meth:`commit`:
  per handler id only the last wish counts (a record stored and purged in
  the same cycle is never written), the storage is flushed once, and
  everything goes into one patch, :attr:`patch`, which the caller sends.
  The cycle adds its finalizer changes to the same patch.
* **Writes early, outside of the object.** A storage that keeps records
  elsewhere costs no API request per write, and cannot be written together
  with the object anyway: its records are stored as soon as they are kept
  (a pending handler's start before it runs, each outcome right after its
  attempt) and flushed at every :meth:`sync`, so that a crash costs at most
  the handler that was running. Unchanged records are not stored again.
  Purges wait for :meth:`commit`, the end of the cycle.
* Purges are skipped for records known to be absent.
* **Whatever is under our keys is ours.** A value under the key of one of
  the given handlers' records (or of their sub-handlers') is progress,
  readable or not: it is never part of the essences (so a corrupt record
  that is purged does not look like a change of the object), and it counts
  as stored (so it is purged like any other record).

The storages are called only through :func:`kopf._storage.calls.call`, so
that sync and async storages work alike.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from typing import ParamSpec, TypeVar, cast

from kopf._storage import calls, conventions
from kopf._storage.diffbase import (
    AnnotationsDiffBaseStorage,
    DiffBaseStorage,
    MultiDiffBaseStorage,
    StatusDiffBaseStorage,
)
from kopf._storage.progress import (
    AnnotationsProgressStorage,
    MultiProgressStorage,
    ProgressStorage,
    SmartProgressStorage,
    StatusProgressStorage,
)
from kopf._storage.records import ProgressRecord
from kopf._structs import dicts, diffs
from kopf._structs.bodies import Body, Essence
from kopf._structs.ids import HandlerId
from kopf._structs.patches import Patch


@dataclasses.dataclass(frozen=True)
class Essences:
    """The object as last handled (``None`` if never) and as it is now, both without framework traces."""

    old: Essence | None
    new: Essence
    diff: diffs.Diff


class _Absent:
    """Not there at all (unlike ``None``): no wish about the touch marker yet, or no essence read yet."""


_ABSENT = _Absent()


class Persistence:
    """One cycle's view of the storages for one object."""

    def __init__(
            self,
            *,
            progress: ProgressStorage,
            diffbase: DiffBaseStorage,
            body: Body,
            extra_fields: Sequence[dicts.FieldPath] = (),
            handler_ids: Collection[HandlerId] = (),
    ) -> None:
        self.progress = progress
        self.diffbase = diffbase
        self.body = body
        self.extra_fields = tuple(extra_fields)
        self.handler_ids = tuple(handler_ids)
        self.patch = Patch()
        self._essences: Essences | None = None
        # The stored and the current essence as the diff-base storage gives them (each read once).
        self._stored: Essence | _Absent | None = _ABSENT
        self._current: Essence | None = None
        self._records: dict[HandlerId, ProgressRecord | None] = {}
        self._writes: dict[HandlerId, ProgressRecord | None] = {}  # None means: purge
        self._touch: str | _Absent | None = _ABSENT
        self._essence: Essence | None = None
        self._empty: bool | None = None
        self._in_body = in_body(progress)
        self._unflushed = False

    # Reading.

    async def essences(self) -> Essences:
        """The essences of the object, computed once per cycle."""
        if self._essences is None:
            old, new = await self._stored_essence(), await self._current_essence()
            self._stored, self._current = _ABSENT, None  # changed below: not to be given out again
            if not await self._holds_nothing():  # else: no trace of the storage in it to clear
                new = self._untraced(await calls.call(self.progress.clear, essence=new))
            if old is not None:
                old = self._untraced(await calls.call(self.progress.clear, essence=dicts.copy_json(old)))
            self._essences = Essences(old=old, new=new, diff=diffs.diff(old, new))
        return self._essences

    async def at_rest(self) -> bool:
        """
        Whether the object is exactly as last handled and holds no progress: a cycle would find nothing to do.

        Decided on the essences as the diff-base storage gives them, before
        the progress storage's traces are removed from them: equal so, they
        are equal without the traces too; unequal, :meth:`essences` decides
        (from the same reads). Storages that keep progress outside of the
        object cannot be judged from it, and storages that keep essences
        outside of it are not asked here (a restart asks about every listed
        object, one after another): never at rest here.
        """
        if not self._in_body or not essence_in_body(self.diffbase):
            return False
        old = await self._stored_essence()
        if old is None or not await self._holds_nothing():
            return False
        return old == await self._current_essence()

    async def _stored_essence(self) -> Essence | None:
        if isinstance(self._stored, _Absent):
            self._stored = await calls.call(self.diffbase.fetch, body=self.body)
        return self._stored

    async def _current_essence(self) -> Essence:
        if self._current is None:
            self._current = await calls.call(self.diffbase.build, body=self.body,
                                             extra_fields=list(self.extra_fields) or None)
        return self._current

    async def fetch(self, ids: Iterable[HandlerId]) -> dict[HandlerId, ProgressRecord | None]:
        """
        The records of these handlers (``None`` where there is none); each id is fetched once.

        What this cycle has already decided to store or purge is seen here as if done.
        """
        wanted = list(dict.fromkeys(ids))
        if not await self._holds_nothing():
            for handler_id in wanted:
                if handler_id not in self._records and handler_id not in self._writes:
                    record = await calls.call(self.progress.fetch, key=handler_id, body=self.body)
                    self._records[handler_id] = record or None
        return {handler_id: self._writes[handler_id] if handler_id in self._writes else
                self._records.get(handler_id) for handler_id in wanted}

    async def stored(self, ids: Iterable[HandlerId]) -> list[HandlerId]:
        """Which of these handlers have a record stored, readable or not (an unreadable one is reported)."""
        records = await self.fetch(ids)
        return [handler_id for handler_id, record in records.items()
                if record is not None or (handler_id not in self._writes and self._traced(handler_id))]

    async def holds_any(self, ids: Iterable[HandlerId]) -> bool:
        """Whether any of these handlers has a record; stops fetching at the first one found."""
        if await self._holds_nothing():
            return False
        for handler_id in dict.fromkeys(ids):
            if (await self.fetch([handler_id]))[handler_id] is not None:
                return True
        return False

    async def _holds_nothing(self) -> bool:
        """
        Whether the object is known to have no records of this storage.

        Only storages that keep everything in the object can be judged so: if
        removing their traces (:meth:`ProgressStorage.clear`) from the object's
        annotations and status changes nothing, no record is there to fetch.
        The touch marker counts as a trace: it exists only while a cause is
        being handled.
        """
        if not self._in_body:
            return False
        if self._empty is None:
            annotations = dict(self.body.metadata.annotations)
            status = self.body.raw.get('status')
            if not annotations and not status:
                self._empty = True  # a fresh object: nowhere to keep a record
                return True
            original: Essence = {'metadata': {'annotations': annotations}, **({'status': status} if status else {})}
            # clear() may change the probe, but the body must stay intact: a copy.
            probe: Essence = {'metadata': {'annotations': dicts.copy_json(annotations)},
                              **({'status': dicts.copy_json(status)} if status else {})}
            cleared = await calls.call(self.progress.clear, essence=probe)
            owned = owned_annotations(self.progress, annotations, self.handler_ids)
            self._empty = cleared == original and not owned
        return self._empty

    def _traced(self, handler_id: HandlerId) -> bool:
        """Whether the object holds anything under this handler's keys, even if it is unreadable."""
        if not self._in_body:
            return False
        # Known to hold no annotation of ours: only the status may keep what clear() has left as unreadable.
        known_empty = self._empty and handler_id in self.handler_ids
        if not known_empty and owned_annotations(self.progress, self.body.metadata.annotations, [handler_id]):
            return True
        return any(dicts.resolve(self.body, field + (handler_id,), None) is not None
                   for field in _status_fields_of(self.progress))

    def _untraced(self, essence: Essence) -> Essence:
        """The essence without whatever is under the handlers' keys (what clear() left is unreadable, but ours)."""
        annotations = dicts.resolve(essence, ('metadata', 'annotations'), None)
        if isinstance(annotations, Mapping):
            for key in owned_annotations(self.progress, annotations, self.handler_ids):
                dicts.remove(essence, ('metadata', 'annotations', key))
        return essence

    # Writing.

    async def keep(self, key: HandlerId, record: ProgressRecord) -> None:
        """Store the record: at commit in the object (unless purged meanwhile), right away elsewhere."""
        if self._in_body:
            self._writes[key] = record
            return
        self._writes.pop(key, None)
        if self._records.get(key) != record:
            await calls.call(self.progress.store, key=key, record=record, body=self.body, patch=self.patch)
            self._records[key] = record
            self._unflushed = True

    async def sync(self) -> None:
        """Flush what was stored right away, if anything (a storage outside of the object only)."""
        if self._unflushed:
            self._unflushed = False
            await calls.call(self.progress.flush)

    def snapshot(self) -> Callable[[], Awaitable[Patch]]:
        """
        The records kept so far, to be written early if asked: a patch of their own, made only when asked.

        Taking it costs a copy of a small dict, so that it can be taken before
        every handler. Purges are not in it (they conclude a cause, at
        :meth:`commit`); neither is anything of a storage outside of the
        object, which has its records already. The commit still writes
        everything, as if nothing had been written early.
        """
        writes = {key: record for key, record in self._writes.items() if record is not None} if self._in_body else {}

        async def render() -> Patch:
            patch = Patch()
            for key, record in writes.items():
                await calls.call(self.progress.store, key=key, record=record, body=self.body, patch=patch)
            return patch
        return render

    def rebase(self, body: Body) -> None:
        """
        Continue from the object as an early write has left it: the commit's writes are relative to it.

        The storages decide what to write (e.g. whether a purge removes
        anything) by the object they are given: after records were written
        early, the object has them, and their purges must remove them.
        """
        self.body = body
        self._empty = None
        self._stored, self._current = _ABSENT, None

    def forget(self, key: HandlerId) -> None:
        """Purge the record at commit (if there can be one)."""
        self._writes[key] = None

    def keep_essence(self, essence: Essence) -> None:
        """Store the essence as the new diff-base at commit."""
        self._essence = essence

    def remove_touch(self) -> None:
        """Remove the wake-up marker at commit: the cause it was for is handled."""
        self._touch = None

    async def commit(self) -> Patch:
        """Apply the collected writes, flush the progress storage once, and return the patch."""
        written = self._unflushed
        self._unflushed = False
        for key, record in self._writes.items():
            if record is not None:
                await calls.call(self.progress.store, key=key, record=record, body=self.body, patch=self.patch)
                written = True
            elif await self._may_hold(key):
                await calls.call(self.progress.purge, key=key, body=self.body, patch=self.patch)
                written = True
        self._writes.clear()
        if not isinstance(self._touch, _Absent) and not await self._holds_nothing():
            await calls.call(self.progress.touch, body=self.body, patch=self.patch, value=self._touch)
            written = True
        self._touch = _ABSENT
        if written:
            await calls.call(self.progress.flush)
        if self._essence is not None:
            await calls.call(self.diffbase.store, body=self.body, patch=self.patch, essence=self._essence)
            self._essence = None
        return self.patch

    async def _may_hold(self, key: HandlerId) -> bool:
        """Whether a purge of this record can change anything."""
        if await self._holds_nothing():
            return False
        if key in self._records and self._records[key] is None and not self._in_body:
            return False  # fetched and absent; in-body storages still purge unreadable records for free
        return True

    async def erase(self) -> None:
        """Let storages that keep data outside of the object forget it: the object is gone."""
        await calls.call(self.progress.erase, body=self.body)
        await calls.call(self.diffbase.erase, body=self.body)


async def touch(storage: ProgressStorage, *, body: Body, value: str) -> Patch:
    """A patch with a dummy change that makes the server send a new event (empty if the storage has none)."""
    patch = Patch()
    await calls.call(storage.touch, body=body, patch=patch, value=value)
    return patch


P = ParamSpec('P')
T = TypeVar('T')


def _per_storage(fn: Callable[P, T]) -> Callable[P, T]:
    """Find what a storage's make-up tells once per storage (storages are set once, at the start)."""
    cached = cast(Callable[P, T], functools.lru_cache(maxsize=64)(fn))  # it takes what fn takes

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return cached(*args, **kwargs)
        except TypeError:  # a custom storage that cannot be hashed
            return fn(*args, **kwargs)
    return wrapper


def owned_annotations(
        storage: ProgressStorage,
        keys: Iterable[str],
        handler_ids: Collection[HandlerId],
) -> list[str]:
    """
    Which of these annotation keys are where this storage keeps these handlers' records, or their sub-handlers'.

    Whatever their values are: a record that cannot be read is still ours.
    Our key and the released Kopf's key forms count, and, for sub-handlers,
    names that continue a handler's dotted id (``parent.child...``) under the
    storage's prefix.
    """
    if not handler_ids:
        return []
    exact, nested = _record_keys(storage, tuple(handler_ids))
    if not exact:
        return []
    owned: list[str] = []
    for key in keys:
        if key in exact:
            owned.append(key)
        elif nested:
            prefix, name = conventions.split_key(key)
            if any(prefix == where and name.startswith(start) for where, start in nested):
                owned.append(key)
    return owned


@_per_storage
def _record_keys(
        storage: ProgressStorage,
        handler_ids: tuple[HandlerId, ...],
) -> tuple[frozenset[str], tuple[tuple[str | None, str], ...]]:
    """The exact annotation keys of these handlers' records, and the (prefix, name start) of their sub-handlers'."""
    exact: set[str] = set()
    nested: set[tuple[str | None, str]] = set()
    for child in _children(storage):
        if isinstance(child, AnnotationsProgressStorage):
            for handler_id in handler_ids:
                exact.add(child.make_key(handler_id))
                exact.update(conventions.kopf_keys(child.prefix, handler_id))
                nested.add((child.prefix, f"{handler_id.replace('/', '.')}."))
    return frozenset(exact), tuple(sorted(nested, key=lambda item: (item[0] or '', item[1])))



def _status_fields(storage: ProgressStorage) -> tuple[dicts.FieldPath, ...]:
    """Where the status storages among this one keep their records."""
    return tuple(child.field for child in _children(storage) if isinstance(child, StatusProgressStorage))


_status_fields_of = _per_storage(_status_fields)


def _children(storage: ProgressStorage) -> Iterable[ProgressStorage]:
    """The storage itself, or the storages that a multi-storage is made of, recursively."""
    if isinstance(storage, MultiProgressStorage):
        for child in storage.storages:
            yield from _children(child)
    else:
        yield storage


@_per_storage
def essence_in_body(storage: DiffBaseStorage) -> bool:
    """Whether a diff-base storage keeps the essence in the object itself (so that reading it costs no request)."""
    if isinstance(storage, MultiDiffBaseStorage):
        return all(essence_in_body(child) for child in storage.storages)
    return isinstance(storage, (AnnotationsDiffBaseStorage, StatusDiffBaseStorage))


@_per_storage
def in_body(storage: ProgressStorage) -> bool:
    """Whether a storage keeps all its records in the object itself (so that the object tells what it holds)."""
    if isinstance(storage, MultiProgressStorage):
        return all(in_body(child) for child in storage.storages)
    return isinstance(storage, (AnnotationsProgressStorage, StatusProgressStorage, SmartProgressStorage))
