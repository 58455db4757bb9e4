"""
The annotation budget: a patch never makes an object's annotations bigger than Kubernetes accepts.

Kubernetes limits all annotations of one object together to 256 KiB -- the
sum of the lengths in bytes of every key and value -- and rejects a write
beyond that as invalid (422). A request that is bound to be rejected is not
sent. Before the patch of a cycle goes out, :func:`fit` computes the
annotations as they would be after it, and if they are too big, it makes
room, in this order, stopping as soon as the patch fits:

1. The last-handled configuration: dropped from the annotations if the
   diff-base storage keeps it elsewhere too (a Multi storage with a
   non-annotation child), else stored trimmed: its biggest fields become
   digests (:mod:`~kopf._storage.trimming`), so that changes are still
   detected and update handlers still get a diff.
2. The error messages in progress records are cut short.
3. Annotations that the handlers add through the patch are not stored
   (reported by key); their other changes and results are still sent.
4. Only when the object's other annotations leave no room for the
   framework's bookkeeping at all: the cause is not concluded (its records
   stay as they are, not purged, so no handler runs again), and if even new
   records do not fit, they are not sent (those handlers may run again).

Deletions -- purges and our finalizer's removal -- only shrink the
annotations and stay in the patch (but for the purges of a cause that cannot
be concluded, see 4), so an object's deletion is never blocked.
Every time room is made, one ERROR names the object, the sizes, the biggest
annotations and what was done.
"""
from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any, TypeGuard

from kopf._storage import records, trimming
from kopf._storage.diffbase import (
    ESSENCE_SIZE_WARNING,
    AnnotationsDiffBaseStorage,
    DiffBaseStorage,
    MultiDiffBaseStorage,
)
from kopf._structs.bodies import Body
from kopf._structs.patches import Patch
from kopf._structs.typedefs import Logger

# What Kubernetes accepts for all annotations of an object together (apimachinery's TotalAnnotationSizeLimitB).
LIMIT = 256 * 1024
# How much of a handler's error message a progress record keeps when room is short.
SHORT_MESSAGE = 200
BIGGEST = 3


@dataclasses.dataclass(frozen=True)
class Fitted:
    """The patch to send (and its essential part and what that lacks, for a 422), within the budget."""

    patch: Patch
    essential: Patch | None
    extras: tuple[str, ...]


def size(annotations: Mapping[str, Any]) -> int:
    """The size of annotations as Kubernetes counts it: the keys' and values' lengths in bytes."""
    return sum(len(key.encode('utf-8')) + len(str(value).encode('utf-8'))
               for key, value in annotations.items() if value is not None)


def annotations_after(body: Body, patch: Mapping[str, Any]) -> dict[str, str]:
    """The object's annotations as they would be after a merge-patch."""
    result = dict(body.metadata.annotations)
    for key, value in _changes(patch).items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = value
    return result


def fit(
        *,
        body: Body,
        patch: Patch,
        essential: Patch | None,
        extras: tuple[str, ...],
        diffbase: DiffBaseStorage | None,
        logger: Logger,
) -> Fitted:
    """The patch within the annotation budget (itself if it fits); one ERROR if room had to be made."""
    if not any(value is not None for value in _changes(patch).values()):
        return Fitted(patch=patch, essential=essential, extras=extras)  # nothing grows
    names = _diffbase_names(diffbase) if diffbase is not None else set()
    before = annotations_after(body, patch)
    if size(before) <= LIMIT:
        _warn_if_large(body, patch, names=names, logger=logger)
        return Fitted(patch=patch, essential=essential, extras=extras)

    work = Patch(copy.deepcopy(dict(patch)))
    ours = set(_changes(essential)) if essential is not None else set(_changes(patch))
    elsewhere = diffbase is not None and _kept_elsewhere(diffbase)
    actions: list[str] = []
    _shrink_diffbase(body, work, names=names, elsewhere=elsewhere, actions=actions)
    if not _fits(body, work):
        _shorten_messages(work, actions=actions)
        _shrink_diffbase(body, work, names=names, elsewhere=False, actions=actions)
    if not _fits(body, work):
        foreign = sorted(key for key, value in _changes(work).items() if key not in ours and value is not None)
        for key in foreign:
            del _changes_of(work)[key]
        if foreign:
            actions.append(f"the handlers' annotations were not stored: {', '.join(foreign)}")
            # Reported here: not to be named again among what a refusal of the rest has not stored.
            dropped = {f"metadata.annotations.{key}" for key in foreign}
            extras = tuple(extra for extra in extras if extra not in dropped)
    if not _fits(body, work):
        _postpone_conclusion(work, names=names, actions=actions)
    if not _fits(body, work):
        added = [key for key, value in _changes(work).items() if value is not None]
        for key in added:
            del _changes_of(work)[key]
        actions.append(f"the progress of this cycle was not stored ({', '.join(sorted(added))}), "
                       f"so its handlers may run again")

    biggest = sorted(before.items(), key=lambda item: -(len(item[0]) + len(item[1])))[:BIGGEST]
    logger.error(
        "The annotations of %s would take %d bytes after this patch, over Kubernetes' limit of %d bytes "
        "for all annotations of an object; the biggest: %s. To fit: %s; now %d bytes. To avoid this, keep the "
        "last-handled configuration outside of the annotations (e.g. kopf.SQLiteDiffBaseStorage or "
        "kopf.ConfigMapDiffBaseStorage), or leave its biggest fields out with ignored_fields=.",
        body.describe(), size(before), LIMIT,
        ', '.join(f"{key} ({len(key) + len(value.encode('utf-8'))} bytes)" for key, value in biggest),
        '; '.join(actions), size(annotations_after(body, work)))

    if essential is None:
        return Fitted(patch=work, essential=None, extras=extras)
    return Fitted(patch=work, essential=_aligned(essential, work), extras=extras)


def _warn_if_large(body: Body, patch: Mapping[str, Any], *, names: Iterable[str], logger: Logger) -> None:
    """A heads-up while the essence still fits: it takes a big share of what all annotations may take."""
    for name in names:
        value = _changes(patch).get(name)
        if isinstance(value, str) and len(value.encode('utf-8')) > ESSENCE_SIZE_WARNING:
            logger.warning(
                "The last-handled configuration of %s is %d bytes large (in the annotation %r); Kubernetes limits "
                "all annotations of an object to %d bytes together, and beyond that it will be stored trimmed. "
                "Consider a diff-base storage outside of the annotations (e.g. kopf.SQLiteDiffBaseStorage), or "
                "ignored_fields= for its biggest fields.", body.describe(), len(value.encode('utf-8')), name, LIMIT)


def _changes(patch: Mapping[str, Any] | None) -> Mapping[str, Any]:
    metadata = (patch or {}).get('metadata')
    annotations = metadata.get('annotations') if _is_mapping(metadata) else None
    return annotations if _is_mapping(annotations) else {}


def _is_mapping(value: Any) -> TypeGuard[Mapping[str, Any]]:
    return type(value) is dict or isinstance(value, Mapping)  # a plain dict spares the abstract-class check


def _changes_of(patch: Patch) -> MutableMapping[str, Any]:
    """The patch's own annotation changes, written through to the patch."""
    return patch.meta.annotations


def _fits(body: Body, patch: Mapping[str, Any]) -> bool:
    return size(annotations_after(body, patch)) <= LIMIT


def _diffbase_names(storage: DiffBaseStorage) -> set[str]:
    if isinstance(storage, MultiDiffBaseStorage):
        return set().union(*(_diffbase_names(child) for child in storage.storages))
    return {storage.name} if isinstance(storage, AnnotationsDiffBaseStorage) else set()


def _kept_elsewhere(storage: DiffBaseStorage) -> bool:
    """Whether the diff-base storage also keeps the essence outside of the annotations."""
    return isinstance(storage, MultiDiffBaseStorage) and any(
        not isinstance(child, (AnnotationsDiffBaseStorage, MultiDiffBaseStorage)) or _kept_elsewhere(child)
        for child in storage.storages)


def _shrink_diffbase(body: Body, patch: Patch, *, names: Iterable[str], elsewhere: bool, actions: list[str]) -> None:
    """Drop the essence from the annotations (if kept elsewhere too) or trim it until the patch fits."""
    changes = _changes_of(patch)
    for name in sorted(names):
        value = changes.get(name)
        if not isinstance(value, str) or _fits(body, patch):
            continue
        if elsewhere:
            _forget(body, patch, name)
            actions.append(f"the last-handled configuration is kept only outside of the annotations "
                           f"({name} is removed)")
            continue
        try:
            essence = json.loads(value)
        except ValueError:
            continue
        others = size({k: v for k, v in annotations_after(body, patch).items() if k != name})
        room = LIMIT - others - len(name.encode('utf-8'))
        trimmed = trimming.trim(essence, room) if isinstance(essence, dict) and room > 0 else None
        if trimmed is None:
            continue
        smaller, paths = trimmed
        encoded = json.dumps(smaller, separators=(',', ':'), sort_keys=True)
        changes[name] = encoded
        fields = ', '.join('.'.join(path) for path in trimming.trimmed_paths(smaller))
        actions.append(f"the last-handled configuration ({name}) is stored trimmed to {len(encoded)} bytes, "
                       f"with digests for {fields} (update handlers get a digest as the old value of a "
                       f"changed trimmed field)" if paths else f"{name} is stored as it is")


def _shorten_messages(patch: Patch, *, actions: list[str]) -> None:
    changes = _changes_of(patch)
    shortened = 0
    for key, value in list(changes.items()):
        if not isinstance(value, str) or not records.looks_like_record(value):
            continue
        record = json.loads(value)
        message = record.get('message')
        if isinstance(message, str) and len(message) > SHORT_MESSAGE:
            record['message'] = message[:SHORT_MESSAGE - 1] + '…'
            changes[key] = json.dumps(record, separators=(',', ':'), sort_keys=True)
            shortened += 1
    if shortened:
        actions.append(f"the error messages of {shortened} progress record(s) are cut to {SHORT_MESSAGE} characters")


def _postpone_conclusion(patch: Patch, *, names: Iterable[str], actions: list[str]) -> None:
    """No room for the essence: neither store it nor purge the records, so that the cause is concluded later."""
    changes = _changes_of(patch)
    dropped = [name for name in names if isinstance(changes.get(name), str)]
    if not dropped:
        return
    for name in dropped:
        del changes[name]
    kept = [key for key, value in changes.items() if value is None and key not in names]
    for key in kept:
        del changes[key]
    actions.append("the other annotations leave no room for the last-handled configuration: it is not stored, "
                   "and the handlers' records are kept (not purged), so that none of them runs again")


def _forget(body: Body, patch: Patch, key: str) -> None:
    changes = _changes_of(patch)
    if key in body.metadata.annotations:
        changes[key] = None
    else:
        changes.pop(key, None)


def _aligned(essential: Patch, fitted: Mapping[str, Any]) -> Patch:
    """The essential part with the same annotation decisions as the fitted patch."""
    result = Patch(copy.deepcopy(dict(essential)))
    if _changes(result):
        target = _changes_of(result)
        decided = _changes(fitted)
        for key in list(target):
            if key in decided:
                target[key] = decided[key]
            else:
                del target[key]
    return result
