"""
Progress storages: where each handler's state lives between handling cycles.

A storage only reads the body it is given and writes into the patch it is
given (or into its own external system); the framework sends the patch.
Methods may be ``async def`` in subclasses: the framework awaits them via
:func:`kopf.storage.calls.call`.
"""
from __future__ import annotations

import abc
import logging
from collections.abc import Collection, MutableMapping
from typing import Any

from kopf.storage import calls, conventions, records
from kopf.storage.records import ProgressRecord
from kopf.structs import dicts
from kopf.structs.bodies import Body
from kopf.structs.ids import HandlerId
from kopf.structs.patches import Patch

logger = logging.getLogger('kopf.storage')

Essence = dict[str, Any]


class ProgressStorage(abc.ABC):
    """
    The base for all progress storages, built-in or custom.

    Subclasses must implement :meth:`fetch`, :meth:`store` and :meth:`purge`;
    :meth:`touch`, :meth:`clear` and :meth:`flush` have defaults that suit
    storages keeping their state outside of the object.
    """

    @abc.abstractmethod
    def fetch(self, *, key: HandlerId, body: Body) -> ProgressRecord | None:
        """Return the handler's record, or ``None`` if there is none (or it is unreadable)."""

    @abc.abstractmethod
    def store(self, *, key: HandlerId, record: ProgressRecord, body: Body, patch: Patch) -> None:
        """Keep the handler's record, replacing any earlier one."""

    @abc.abstractmethod
    def purge(self, *, key: HandlerId, body: Body, patch: Patch) -> None:
        """Forget the handler's record, once its cause is fully handled."""

    def touch(self, *, body: Body, patch: Patch, value: str | None) -> None:
        """
        Make a dummy change to the object, so that the server sends a new event.

        The default does nothing: the framework then re-handles the object
        itself when a delay is over and no patch was produced.
        """

    def clear(self, *, essence: Essence) -> Essence:
        """Remove this storage's traces from an essence; the default has none there."""
        return essence

    def flush(self) -> None:
        """Write any batched changes; the default writes immediately and has none."""


class AnnotationsProgressStorage(ProgressStorage):
    """
    One annotation per handler, ``{prefix}/{handler-id}``, with compact JSON.

    Annotations are never pruned by schemas and are patched together with the
    rest of the object, so this costs no extra API calls.
    """

    def __init__(
            self,
            *,
            prefix: str = 'kopf.zalando.org',
            verbose: bool = False,
            touch_key: str = 'touch-dummy',
    ) -> None:
        super().__init__()
        self.prefix = conventions.validate_prefix(prefix)
        self.verbose = verbose
        self.touch_key = f"{prefix}/{conventions.validate_name(touch_key)}"

    def make_key(self, key: HandlerId) -> str:
        return conventions.make_key(self.prefix, key)

    def fetch(self, *, key: HandlerId, body: Body) -> ProgressRecord | None:
        full_key = self.make_key(key)
        value = body.metadata.annotations.get(full_key)
        if value is None:
            return None
        try:
            return records.decode_record(value)
        except ValueError as e:
            logger.warning(
                "Ignoring the unreadable progress annotation %r of %s: %s. "
                "The handler %r will be treated as not yet started.",
                full_key, body.describe(), e, key)
            return None

    def store(self, *, key: HandlerId, record: ProgressRecord, body: Body, patch: Patch) -> None:
        patch.meta.annotations[self.make_key(key)] = records.encode_record(record, verbose=self.verbose)

    def purge(self, *, key: HandlerId, body: Body, patch: Patch) -> None:
        _forget_annotation(self.make_key(key), body=body, patch=patch)

    def touch(self, *, body: Body, patch: Patch, value: str | None) -> None:
        if body.metadata.annotations.get(self.touch_key) != value:
            patch.meta.annotations[self.touch_key] = value

    def clear(self, *, essence: Essence) -> Essence:
        """Remove our progress records and the touch marker; other annotations stay."""
        annotations = dicts.resolve(essence, ('metadata', 'annotations'), None)
        if isinstance(annotations, MutableMapping):
            ours = [
                k for k, v in annotations.items()
                if k == self.touch_key or (
                    conventions.split_key(k)[0] == self.prefix
                    and isinstance(v, str) and records.looks_like_record(v)
                )
            ]
            for k in ours:
                dicts.remove(essence, ('metadata', 'annotations', k))
        return essence


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
            field: str = 'status.{name}.progress',
            touch_field: str = 'status.{name}.dummy',
    ) -> None:
        super().__init__()
        self.field = dicts.parse_field(field.format(name=name))
        self.touch_field = dicts.parse_field(touch_field.format(name=name))
        if not self.field:
            raise ValueError("The status field for the progress must not be empty.")

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
        path = self.field + (key,)
        if dicts.resolve(body, path, None) is not None:
            dicts.ensure(patch, path, None)
        else:
            dicts.remove(patch, path)

    def touch(self, *, body: Body, patch: Patch, value: str | None) -> None:
        if dicts.resolve(body, self.touch_field, None) != value:
            dicts.ensure(patch, self.touch_field, value)

    def clear(self, *, essence: Essence) -> Essence:
        dicts.remove(essence, self.field)
        dicts.remove(essence, self.touch_field)
        return essence


class SmartProgressStorage(ProgressStorage):
    """
    The default: annotations for everything new, the legacy status for reading.

    Records are read from annotations first, then from the status field where
    older versions kept them, so that operators continue their work after an
    upgrade. New records are written to annotations only (status writes are
    pruned on strict schemas and cost an extra call with the status
    subresource). Purging cleans both, so the legacy records disappear as soon
    as their cause is handled.
    """

    def __init__(
            self,
            *,
            name: str = 'kopf',
            field: str = 'status.{name}.progress',
            touch_key: str = 'touch-dummy',
            touch_field: str = 'status.{name}.dummy',
            prefix: str = 'kopf.zalando.org',
            verbose: bool = False,
    ) -> None:
        super().__init__()
        self.annotations = AnnotationsProgressStorage(prefix=prefix, verbose=verbose, touch_key=touch_key)
        self.status = StatusProgressStorage(name=name, field=field, touch_field=touch_field)

    def fetch(self, *, key: HandlerId, body: Body) -> ProgressRecord | None:
        return (self.annotations.fetch(key=key, body=body) or
                self.status.fetch(key=key, body=body) or None)

    def store(self, *, key: HandlerId, record: ProgressRecord, body: Body, patch: Patch) -> None:
        self.annotations.store(key=key, record=record, body=body, patch=patch)
        # Once moved to annotations, the legacy record must not be read again.
        self.status.purge(key=key, body=body, patch=patch)

    def purge(self, *, key: HandlerId, body: Body, patch: Patch) -> None:
        self.annotations.purge(key=key, body=body, patch=patch)
        self.status.purge(key=key, body=body, patch=patch)

    def touch(self, *, body: Body, patch: Patch, value: str | None) -> None:
        self.annotations.touch(body=body, patch=patch, value=value)

    def clear(self, *, essence: Essence) -> Essence:
        essence = self.annotations.clear(essence=essence)
        return self.status.clear(essence=essence)


class MultiProgressStorage(ProgressStorage):
    """
    Several storages at once, e.g. to switch from one storage to another safely.

    Reads take the first non-empty record in the given order; writes, purges,
    touches and clean-ups go to all of them. Because any child may be
    asynchronous, all methods here are ``async``.
    """

    def __init__(self, storages: Collection[ProgressStorage]) -> None:
        super().__init__()
        if not storages:
            raise ValueError("MultiProgressStorage needs at least one storage.")
        for storage in storages:
            if not isinstance(storage, ProgressStorage):
                raise TypeError(f"Expected a kopf.ProgressStorage, got {storage!r}.")
        self.storages = tuple(storages)

    async def fetch(self, *, key: HandlerId, body: Body) -> ProgressRecord | None:  # type: ignore[override]
        for storage in self.storages:
            record = await calls.call(storage.fetch, key=key, body=body)
            if record:
                return record
        return None

    async def store(self, *, key: HandlerId, record: ProgressRecord, body: Body, patch: Patch) -> None:  # type: ignore[override]
        for storage in self.storages:
            await calls.call(storage.store, key=key, record=record, body=body, patch=patch)

    async def purge(self, *, key: HandlerId, body: Body, patch: Patch) -> None:  # type: ignore[override]
        for storage in self.storages:
            await calls.call(storage.purge, key=key, body=body, patch=patch)

    async def touch(self, *, body: Body, patch: Patch, value: str | None) -> None:  # type: ignore[override]
        for storage in self.storages:
            await calls.call(storage.touch, body=body, patch=patch, value=value)

    async def clear(self, *, essence: Essence) -> Essence:  # type: ignore[override]
        for storage in self.storages:
            essence = await calls.call(storage.clear, essence=essence)
        return essence

    async def flush(self) -> None:  # type: ignore[override]
        for storage in self.storages:
            await calls.call(storage.flush)

    async def erase(self, *, body: Body) -> None:
        """Pass the object's disappearance on to the children that keep state outside of it."""
        for storage in self.storages:
            erase = getattr(storage, 'erase', None)
            if callable(erase):
                await calls.call(erase, body=body)


def _forget_annotation(key: str, *, body: Body, patch: Patch) -> None:
    """Delete an annotation on the server if it is there, or drop it from the patch if only there."""
    if key in body.metadata.annotations:
        patch.meta.annotations[key] = None
    elif key in patch.meta.annotations:
        del patch.meta.annotations[key]

