"""
Progress storages: where each handler's state lives between handling cycles.

A storage only reads the body it is given and writes into the patch it is
given (or into its own external system); the framework sends the patch.
Methods may be ``async def`` in subclasses: the framework awaits them via
:func:`kopf._storage.calls.call`. The base methods are typed to return
``MaybeAwaitable[...]`` so that both kinds of subclasses type-check.

The annotations storage also reads (and cleans up) what the released Kopf
0.27-1.x wrote under its own key forms, so that operators move here with
objects in the middle of handling and nothing that succeeded runs again.
"""
from __future__ import annotations

import abc
import logging
from collections.abc import Collection, Mapping, MutableMapping
from typing import Any, cast

from kopf._storage import calls, conventions, records
from kopf._storage.calls import MaybeAwaitable, Steps
from kopf._storage.records import ProgressRecord
from kopf._structs import dicts
from kopf._structs.bodies import Body, Essence
from kopf._structs.ids import HandlerId
from kopf._structs.patches import Patch

logger = logging.getLogger('kopf._storage')


DEFAULT_PREFIX = 'kopf.zalando.org'
TOUCH_DUMMY_NAME = 'touch-dummy'  # the default wake-up marker of the annotations progress storages
KOPF_MANAGED_NAME = 'kopf-managed'  # a marker that Kopf 1.x puts on objects under non-default prefixes


class ProgressStorage(calls.Lifetime, abc.ABC):
    """
    The base for all progress storages, built-in or custom.

    Subclasses must implement :meth:`fetch`, :meth:`store` and :meth:`purge`;
    :meth:`touch`, :meth:`clear`, :meth:`flush` and :meth:`erase` have
    defaults that suit storages keeping their state outside of the object.
    Any method may be overridden as ``async def``.

    Storages are also async context managers: the operator enters each of them
    once when it starts (after the startup handlers, which may configure
    them) and exits them when it stops, e.g. to open and close a connection.
    """

    @abc.abstractmethod
    def fetch(self, *, key: HandlerId, body: Body) -> MaybeAwaitable[ProgressRecord | None]:
        """Return the handler's record, or ``None`` if there is none (or it is unreadable)."""

    @abc.abstractmethod
    def store(self, *, key: HandlerId, record: ProgressRecord, body: Body, patch: Patch) -> MaybeAwaitable[None]:
        """Keep the handler's record, replacing any earlier one."""

    @abc.abstractmethod
    def purge(self, *, key: HandlerId, body: Body, patch: Patch) -> MaybeAwaitable[None]:
        """Forget the handler's record, once its cause is fully handled."""

    def touch(self, *, body: Body, patch: Patch, value: str | None) -> MaybeAwaitable[None]:
        """
        Make a dummy change to the object, so that the server sends a new event.

        The default does nothing: the framework then re-handles the object
        itself when a delay is over and no patch was produced.
        """
        return None

    def clear(self, *, essence: Essence) -> MaybeAwaitable[Essence]:
        """
        Remove progress bookkeeping from an essence, so that it never counts as a change of the object.

        The default removes what any instance of this framework or of the
        released Kopf writes into annotations, under any prefix: progress
        records, wake-up markers, Kopf's ``kopf-managed`` marker. Storages that
        write elsewhere into the object extend it (calling ``super()``).
        """
        return strip_bookkeeping(essence)

    def flush(self) -> MaybeAwaitable[None]:
        """Write any batched changes; the default writes immediately and has none."""
        return None

    def erase(self, *, body: Body) -> MaybeAwaitable[None]:
        """
        Forget everything about an object that is gone (its deletion was seen).

        A no-op by default: records kept in the object disappear with it.
        Storages that keep records outside of the object override it to drop
        what is left there, e.g. of a cause interrupted by the deletion.
        """
        return None

    def list_records(
            self,
            *,
            body: Body,
            ids: Collection[HandlerId] = (),
    ) -> MaybeAwaitable[Mapping[str, ProgressRecord]]:
        """
        Optional: every record kept for the object, by handler id (for ``kopf inspect`` and ``kopf migrate``).

        The handling never calls it. ``ids`` are handler ids that the caller
        knows of (e.g. the operator's handlers): a storage that keeps records
        under names derived from the ids reports those records under these
        ids. Records whose id cannot be told are reported under the name they
        are kept by. A storage that cannot enumerate its records raises
        :class:`NotImplementedError` (the default): the tools then fetch the
        records of the known ids only.
        """
        raise NotImplementedError


def strip_bookkeeping(essence: Essence) -> Essence:
    """Remove all progress records and markers (of any framework instance and prefix) from an essence."""
    annotations = dicts.resolve(essence, ('metadata', 'annotations'), None)
    if type(annotations) is dict or isinstance(annotations, MutableMapping):  # plain dicts skip the ABC check
        for key in [k for k, v in annotations.items() if _is_bookkeeping(k, v)]:
            dicts.remove(essence, ('metadata', 'annotations', key))
    return essence


def _is_bookkeeping(key: str, value: Any) -> bool:
    prefix, name = conventions.split_key(key)
    if prefix is not None and name in (TOUCH_DUMMY_NAME, KOPF_MANAGED_NAME):
        return True
    return isinstance(value, str) and records.looks_like_record(value)


class AnnotationsProgressStorage(ProgressStorage):
    """
    One annotation per handler, ``{prefix}/{handler-id}``, with compact JSON.

    Annotations are never pruned by schemas and are patched together with the
    rest of the object, so this costs no extra API calls.

    Records that the released Kopf (0.27-1.x) wrote under its own key forms
    for the same prefix are read too, as if they were ours; when a handler has
    several, the most advanced one wins. They are replaced by our key on the
    next store and removed together with ours on purge.
    """

    def __init__(
            self,
            *,
            prefix: str | None = DEFAULT_PREFIX,
            verbose: bool = False,
            touch_key: str = TOUCH_DUMMY_NAME,
            v1: bool = True,
    ) -> None:
        super().__init__()
        self.prefix = conventions.validate_prefix(prefix) if prefix is not None else None
        self.verbose = verbose
        self.touch_key = conventions.validate_name(touch_key)
        self.v1 = v1  # accepted for compatibility: Kopf's v1 keys are always read and cleaned up

    def make_key(self, key: HandlerId) -> str:
        """The annotation key of our record for this handler."""
        return conventions.make_key(self.prefix, key)

    @property
    def touch_annotation(self) -> str:
        """The full annotation key of the wake-up marker."""
        return conventions.join_key(self.prefix, self.touch_key)

    def _keys(self, key: HandlerId) -> list[str]:
        """Our key first, then Kopf's forms of it (without duplicates)."""
        ours = self.make_key(key)
        return [ours] + [k for k in conventions.kopf_keys(self.prefix, key) if k != ours]

    def fetch(self, *, key: HandlerId, body: Body) -> ProgressRecord | None:
        found: list[tuple[str, ProgressRecord]] = []
        for full_key in self._keys(key):
            value = body.metadata.annotations.get(full_key)
            if value is None:
                continue
            try:
                found.append((full_key, records.decode_record(value)))
            except ValueError as e:
                logger.warning(
                    "Ignoring the unreadable progress annotation %r of %s: %s. "
                    "The handler %r will be treated as not yet started.",
                    full_key, body.describe(), e, key)
        if not found:
            return None
        chosen_key, chosen = max(found, key=lambda item: records.advancement(item[1]))
        if any(record != chosen for _, record in found):
            logger.debug(
                "The handler %r of %s has records under several keys (%s); using the most advanced one, %r.",
                key, body.describe(), ', '.join(repr(k) for k, _ in found), chosen_key)
        return chosen

    def store(self, *, key: HandlerId, record: ProgressRecord, body: Body, patch: Patch) -> None:
        ours, *others = self._keys(key)
        patch.meta.annotations[ours] = records.encode_record(record, verbose=self.verbose)
        # Kopf's forms of the same record are superseded now: leave no stale copies behind.
        for other in others:
            _forget_annotation(other, body=body, patch=patch)

    def purge(self, *, key: HandlerId, body: Body, patch: Patch) -> None:
        """
        Forget the handler's record in all key forms, and the records of its sub-handlers.

        Sub-handlers are purged with their parents anyway (via ``subrefs``);
        but Kopf 0.27 did not list them in the parent's record and left them
        behind after the cause was handled: they are recognised by their keys
        (``parent.child...``) and forgotten together with the parent.
        """
        for full_key in self._keys(key):
            _forget_annotation(full_key, body=body, patch=patch)
        descendants = key.replace('/', '.') + '.'
        for full_key, value in body.metadata.annotations.items():
            prefix, name = conventions.split_key(full_key)
            if prefix == self.prefix and name.startswith(descendants) and records.is_orphan_candidate(value):
                _forget_annotation(full_key, body=body, patch=patch)

    def list_records(self, *, body: Body, ids: Collection[HandlerId] = ()) -> dict[str, ProgressRecord]:
        """
        Every record under this prefix, by handler id where it can be told.

        Annotation names are derived from handler ids (and cut and hashed
        where needed), so an id is recognised when it is given in ``ids`` or
        listed in another record's ``subrefs``; a record under any other name
        is reported under its name (which is its id for ids that are valid
        annotation names, as function names are).
        """
        stored: dict[str, ProgressRecord] = {}
        for full_key, value in body.metadata.annotations.items():
            prefix, name = conventions.split_key(full_key)
            if prefix == self.prefix and name != self.touch_key and records.looks_like_record(value):
                try:
                    stored[full_key] = records.decode_record(value)
                except ValueError:
                    continue
        known = list(dict.fromkeys([*ids, *(HandlerId(ref) for record in stored.values()
                                            for ref in record.get('subrefs') or ())]))
        result: dict[str, ProgressRecord] = {}
        claimed: set[str] = set()
        for handler_id in known:
            keys = [key for key in self._keys(handler_id) if key in stored]
            if keys:
                result[handler_id] = max((stored[key] for key in keys), key=records.advancement)
                claimed.update(keys)
        for full_key, record in stored.items():
            if full_key not in claimed:
                result.setdefault(conventions.split_key(full_key)[1], record)
        return result

    def touch(self, *, body: Body, patch: Patch, value: str | None) -> None:
        if body.metadata.annotations.get(self.touch_annotation) != value:
            patch.meta.annotations[self.touch_annotation] = value

    def clear(self, *, essence: Essence) -> Essence:
        """Remove our touch marker (whatever its name) and all framework records; other annotations stay."""
        dicts.remove(essence, ('metadata', 'annotations', self.touch_annotation))
        return strip_bookkeeping(essence)


class StatusProgressStorage(ProgressStorage):
    """
    One dict per handler under a status field, ``status.kopf.progress`` by default.

    This is the legacy location. Beware: structural CRD schemas prune unknown
    status fields, built-in resources have fixed schemas, and with the status
    subresource enabled every write costs an extra API call to ``/status``.
    """

    def __init__(
            self,
            *,
            name: str = 'kopf',
            field: dicts.FieldSpec = 'status.{name}.progress',
            touch_field: dicts.FieldSpec = 'status.{name}.dummy',
    ) -> None:
        super().__init__()
        self._name = name
        self._field = _status_path(field, name=name, what='progress')
        self._touch_field = _status_path(touch_field, name=name, what='touch marker')

    @property
    def field(self) -> dicts.FieldPath:
        """Where the records are: a path, settable as ``'status.x'`` or ``('status', 'x')``."""
        return self._field

    @field.setter
    def field(self, value: dicts.FieldSpec) -> None:
        self._field = _status_path(value, name=self._name, what='progress')

    @property
    def touch_field(self) -> dicts.FieldPath:
        """Where the wake-up marker is: a path, settable as a string or a tuple."""
        return self._touch_field

    @touch_field.setter
    def touch_field(self, value: dicts.FieldSpec) -> None:
        self._touch_field = _status_path(value, name=self._name, what='touch marker')

    def fetch(self, *, key: HandlerId, body: Body) -> ProgressRecord | None:
        value = dicts.resolve(body, self.field + (key,), None)
        if value is None:
            return None
        try:
            return records.decode_record(value)
        except ValueError as e:
            logger.warning(
                "Ignoring the unreadable progress record %r of %s: %s. "
                "The handler %r will be treated as not yet started.",
                dicts.format_field(self.field + (key,)), body.describe(), e, key)
            return None

    def store(self, *, key: HandlerId, record: ProgressRecord, body: Body, patch: Patch) -> None:
        # A merge-patch merges dicts key by key: absent fields must be sent
        # as None explicitly, or the old values would survive on the server.
        full = {field: record.get(field) for field in ProgressRecord.__annotations__}
        dicts.ensure(patch, self.field + (key,), full)

    def purge(self, *, key: HandlerId, body: Body, patch: Patch) -> None:
        """Forget the handler's record, and those of its sub-handlers (``key/...``), which Kopf 0.27 left behind."""
        stored = dicts.resolve(body, self.field, None)
        stored = stored if isinstance(stored, dict) else {}
        keys = [key] + [k for k, v in stored.items() if k.startswith(f"{key}/") and records.is_orphan_candidate(v)]
        for k in keys:
            path = self.field + (k,)
            if dicts.resolve(body, path, None) is not None:
                dicts.ensure(patch, path, None)
            else:
                dicts.remove(patch, path)

    def list_records(self, *, body: Body, ids: Collection[HandlerId] = ()) -> dict[str, ProgressRecord]:
        """Every readable record under the field; the keys are the handler ids themselves."""
        stored = dicts.resolve(body, self.field, None)
        result: dict[str, ProgressRecord] = {}
        for key, value in (stored.items() if isinstance(stored, Mapping) else ()):
            try:
                result[str(key)] = records.decode_record(value)
            except ValueError:
                continue
        return result

    def touch(self, *, body: Body, patch: Patch, value: str | None) -> None:
        if dicts.resolve(body, self.touch_field, None) != value:
            dicts.ensure(patch, self.touch_field, value)

    def clear(self, *, essence: Essence) -> Essence:
        dicts.remove(essence, self.field)
        dicts.remove(essence, self.touch_field)
        return strip_bookkeeping(essence)


def _status_path(value: dicts.FieldSpec, *, name: str, what: str) -> dicts.FieldPath:
    path = dicts.parse_field(value.format(name=name) if isinstance(value, str) else value)
    if not path:
        raise ValueError(f"The status field for the {what} must not be empty (e.g. 'status.my-op.progress').")
    if path[0] != 'status' or len(path) < 2:
        # Anywhere else, the records would overwrite the object's own fields (and count as its changes).
        raise ValueError(f"The status field for the {what} must be a field under 'status' "
                         f"(e.g. 'status.my-op.progress'), not {dicts.format_field(path)!r}.")
    return path


class MultiProgressStorage(calls.EnteredTogether, ProgressStorage):
    """
    Several storages at once, e.g. to switch from one storage to another safely.

    Reads take the first non-empty record in the given order; writes, purges,
    touches and clean-ups go to all of them. The methods are plain calls that
    return the result directly while the children are synchronous, and an
    awaitable once a child is asynchronous (the framework awaits it either way).
    """

    def __init__(self, storages: Collection[ProgressStorage]) -> None:
        super().__init__()
        if not storages:
            raise ValueError("MultiProgressStorage needs at least one storage.")
        for storage in storages:
            if not isinstance(storage, ProgressStorage):
                raise TypeError(f"Expected a kopf.ProgressStorage, got {storage!r}.")
        self.storages: tuple[ProgressStorage, ...] = tuple(storages)

    def fetch(self, *, key: HandlerId, body: Body) -> MaybeAwaitable[ProgressRecord | None]:
        def steps() -> Steps[ProgressRecord | None]:
            for storage in self.storages:
                record = yield storage.fetch(key=key, body=body)
                if record:
                    return cast(ProgressRecord, record)
            return None
        return calls.drive(steps())

    def store(self, *, key: HandlerId, record: ProgressRecord, body: Body, patch: Patch) -> MaybeAwaitable[None]:
        return calls.drive(calls.each(s.store(key=key, record=record, body=body, patch=patch) for s in self.storages))

    def purge(self, *, key: HandlerId, body: Body, patch: Patch) -> MaybeAwaitable[None]:
        return calls.drive(calls.each(s.purge(key=key, body=body, patch=patch) for s in self.storages))

    def touch(self, *, body: Body, patch: Patch, value: str | None) -> MaybeAwaitable[None]:
        return calls.drive(calls.each(s.touch(body=body, patch=patch, value=value) for s in self.storages))

    def clear(self, *, essence: Essence) -> MaybeAwaitable[Essence]:
        def steps() -> Steps[Essence]:
            result = essence
            for storage in self.storages:
                result = yield storage.clear(essence=result)
            return result
        return calls.drive(steps())

    def flush(self) -> MaybeAwaitable[None]:
        return calls.drive(calls.each(s.flush() for s in self.storages))

    def erase(self, *, body: Body) -> MaybeAwaitable[None]:
        """Pass the object's disappearance on to the children, which may keep state outside of it."""
        return calls.drive(calls.each(s.erase(body=body) for s in self.storages))

    def list_records(
            self,
            *,
            body: Body,
            ids: Collection[HandlerId] = (),
    ) -> MaybeAwaitable[Mapping[str, ProgressRecord]]:
        """The records of all children that can list theirs; for each id, the first child's record wins."""
        def steps() -> Steps[Mapping[str, ProgressRecord]]:
            result: dict[str, ProgressRecord] = {}
            listed = False
            for storage in self.storages:
                try:
                    pending = storage.list_records(body=body, ids=ids)
                except NotImplementedError:
                    continue
                found = yield pending
                listed = True
                for key, record in cast(Mapping[str, ProgressRecord], found).items():
                    result.setdefault(key, record)
            if not listed:
                raise NotImplementedError
            return result
        return calls.drive(steps())


class SmartProgressStorage(MultiProgressStorage):
    """
    The default: annotations for everything new, the legacy status for reading.

    A :class:`MultiProgressStorage` of an annotations storage and a status
    storage (``.storages``, in this order). Records are read from annotations
    first, then from the status field where older versions (and Kopf) kept
    them, so that operators continue their work after an upgrade. New records
    are written to annotations only (status writes are pruned on strict
    schemas and cost an extra call with the status subresource); a legacy
    record is removed from the status as soon as it is written anew, and
    purging cleans both places.
    """

    def __init__(
            self,
            *,
            name: str = 'kopf',
            field: dicts.FieldSpec = 'status.{name}.progress',
            touch_key: str = TOUCH_DUMMY_NAME,
            touch_field: dicts.FieldSpec = 'status.{name}.dummy',
            prefix: str | None = DEFAULT_PREFIX,
            verbose: bool = False,
            v1: bool = True,
    ) -> None:
        super().__init__([
            AnnotationsProgressStorage(prefix=prefix, verbose=verbose, touch_key=touch_key, v1=v1),
            StatusProgressStorage(name=name, field=field, touch_field=touch_field),
        ])

    @property
    def annotations(self) -> ProgressStorage:
        """The storage where new records go (the first one)."""
        return self.storages[0]

    @property
    def status(self) -> ProgressStorage:
        """The legacy storage, read and cleaned up, never written (the second one)."""
        return self.storages[1]

    def store(self, *, key: HandlerId, record: ProgressRecord, body: Body, patch: Patch) -> MaybeAwaitable[None]:
        def steps() -> Steps[None]:
            first, *legacy = self.storages
            yield first.store(key=key, record=record, body=body, patch=patch)
            # Once moved to the first storage, a legacy record must not be read again.
            for storage in legacy:
                yield storage.purge(key=key, body=body, patch=patch)
        return calls.drive(steps())

    def touch(self, *, body: Body, patch: Patch, value: str | None) -> MaybeAwaitable[None]:
        # Wake-ups go through the first storage only; clearing the marker clears it everywhere (also Kopf's).
        targets = self.storages if value is None else self.storages[:1]
        return calls.drive(calls.each(s.touch(body=body, patch=patch, value=value) for s in targets))


def _forget_annotation(key: str, *, body: Body, patch: Patch) -> None:
    """Delete an annotation on the server if it is there, or drop it from the patch if only there."""
    if key in body.metadata.annotations:
        patch.meta.annotations[key] = None
    elif key in patch.meta.annotations:
        del patch.meta.annotations[key]
