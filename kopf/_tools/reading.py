"""
Reading an object's state from any storage: all its progress records, also from storages that cannot list them.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping

from kopf._storage import calls
from kopf._storage.progress import ProgressStorage
from kopf._storage.records import ProgressRecord
from kopf._structs.bodies import Body
from kopf._structs.ids import HandlerId


@dataclasses.dataclass(frozen=True)
class Records:
    """The records of one object by handler id; ``listed``: whether the storage could enumerate them."""

    records: Mapping[str, ProgressRecord]
    listed: bool


async def collect(storage: ProgressStorage, *, body: Body, ids: Collection[HandlerId]) -> Records:
    """
    The object's records: all that the storage lists, and those of the known ids and their sub-handlers.

    A storage that cannot list its records (``list_records`` raises
    :class:`NotImplementedError`) is asked for the known ids only, and for
    the sub-handlers that their records name, recursively.
    """
    found: dict[str, ProgressRecord] = {}
    listed = True
    try:
        found.update(await calls.call(storage.list_records, body=body, ids=list(ids)))
    except NotImplementedError:
        listed = False
    pending = [*ids, *(ref for record in list(found.values()) for ref in record.get('subrefs') or ())]
    seen: set[str] = set()
    while pending:
        handler_id = HandlerId(pending.pop(0))
        if handler_id in seen:
            continue
        seen.add(handler_id)
        record = found.get(handler_id)
        if record is None and not listed:
            record = await calls.call(storage.fetch, key=handler_id, body=body) or None
        if record is not None:
            found[handler_id] = record
            pending.extend(record.get('subrefs') or ())
    return Records(records=dict(sorted(found.items())), listed=listed)
