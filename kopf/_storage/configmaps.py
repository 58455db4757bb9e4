"""
Kubernetes-native storages: the progress and the last handled configuration in one ConfigMap per object.

For objects that the operator must not annotate: objects managed by GitOps
tools (where annotations show as drift), or resources whose owners rewrite
the annotations. The state stays in the cluster, so it survives restarts and
moves with the objects between the replicas of a sharded operator.

One ConfigMap per handled object, named ``{prefix}-{uid}``, in the object's
namespace (or in ``namespace=``, which cluster-scoped objects need), holds:

* ``progress.<handler>``: one key per handler with a record, as JSON
  ``{"handler": <id>, "record": {...}}`` (the key is the handler id mapped to
  a valid key, as for annotations);
* ``last-handled-configuration``: the essence, as compact JSON.

It carries an owner reference to its object (where Kubernetes allows one: the
same namespace, or a cluster-scoped owner), so that the garbage collector of
the cluster's controller-manager deletes it when the object is deleted while
the operator is not running; when the operator sees a deletion, it deletes
the ConfigMap itself (``erase``). The ConfigMap lives as long as its object
(it is not re-created for every cause, even when it holds nothing). Labels: ``app.kubernetes.io/managed-by: kopf`` and
``kopf.dev/state: {prefix}``.

The storages get the operator's API session from the framework
(:mod:`~kopf._storage.cluster`); they read the ConfigMap once per handling
cycle (both storages together) and write it once per batch of the
framework's writes: see docs/configuration.rst for the measured cost.
"""
from __future__ import annotations

import asyncio
import json
import logging
import re
import weakref
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from kopf._storage import conventions, records, trimming
from kopf._storage.cluster import ClusterAccess
from kopf._storage.diffbase import DiffBaseStorage, decode_essence, encode_essence
from kopf._storage.errors import StorageError
from kopf._storage.progress import ProgressStorage
from kopf._storage.records import ProgressRecord
from kopf._structs import dicts
from kopf._structs.bodies import Body, Essence
from kopf._structs.ids import HandlerId
from kopf._structs.patches import Patch
from kopf._structs.resources import Resource

logger = logging.getLogger('kopf._storage')

CONFIGMAPS = Resource(group='', version='v1', plural='configmaps', kind='ConfigMap', namespaced=True)
DEFAULT_PREFIX = 'kopf'
PROGRESS_KEY_PREFIX = 'progress.'
LAST_HANDLED_KEY = 'last-handled-configuration'
MANAGED_BY = {'app.kubernetes.io/managed-by': 'kopf'}
STATE_LABEL = 'kopf.dev/state'
OWNER_ANNOTATION = 'kopf.dev/owner'
# A ConfigMap holds at most 1 MiB; an essence bigger than this is stored trimmed.
MAX_ESSENCE_SIZE = 900 * 1024

_PREFIX_RE = re.compile(r'^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$')


class _StateMaps:
    """Where an object's ConfigMap is, and how it is read and written: shared by both storages."""

    def __init__(self, *, prefix: str, namespace: str | None, what: str) -> None:
        if not _PREFIX_RE.match(prefix):
            raise ValueError(f"{what}'s prefix must be 1-63 lowercase letters, digits, '-' or '.', "
                             f"starting and ending with a letter or a digit (it names the ConfigMaps): {prefix!r}")
        self.prefix = prefix
        self.namespace = namespace
        self.what = what
        self._cluster: ClusterAccess | None = None

    def use_cluster(self, cluster: ClusterAccess) -> None:
        self._cluster = cluster

    @property
    def cluster(self) -> ClusterAccess:
        if self._cluster is None:
            raise StorageError(f"{self.what} has no access to the cluster: the operator gives it its API session "
                               f"when it starts (kopf run, kopf inspect, kopf migrate); outside of them, call "
                               f"storage.use_cluster(kopf._storage.cluster.ClusterAccess(api)) first.")
        return self._cluster

    def locate(self, body: Body) -> tuple[str, str]:
        """The namespace and the name of the object's ConfigMap."""
        uid = body.metadata.uid
        if not uid:
            raise ValueError(f"{body.describe()} has no uid: {self.what} names the ConfigMaps by it.")
        namespace = self.namespace or body.metadata.namespace
        if not namespace:
            raise StorageError(f"{self.what} needs namespace= to keep the state of the cluster-scoped object "
                               f"{body.describe()} (e.g. the operator's own namespace).")
        return namespace, f"{self.prefix}-{uid}"

    async def read(self, body: Body) -> Mapping[str, str]:
        namespace, name = self.locate(body)
        found = await self.cluster.read(CONFIGMAPS, namespace=namespace, name=name, body=body)
        data = (found or {}).get('data')
        return data if isinstance(data, Mapping) else {}

    async def write(self, body: Body, changes: Mapping[str, str | None]) -> None:
        """Apply the changes (``None`` removes a key); create the ConfigMap if there is none yet."""
        namespace, name = self.locate(body)
        current = await self.cluster.read(CONFIGMAPS, namespace=namespace, name=name, body=body)
        additions = {key: value for key, value in changes.items() if value is not None}
        if current is None:
            if not additions:
                return
            obj = self._new(body, namespace=namespace, name=name, data=additions)
            if await self.cluster.create(CONFIGMAPS, namespace=namespace, obj=obj, body=body) is not None:
                return
        patched = await self.cluster.patch(CONFIGMAPS, namespace=namespace, name=name, body=body,
                                           patch={'data': dict(changes)})
        if patched is None and additions:  # deleted meanwhile: start anew
            obj = self._new(body, namespace=namespace, name=name, data=additions)
            if await self.cluster.create(CONFIGMAPS, namespace=namespace, obj=obj, body=body) is None:
                raise StorageError(f"{self.what} cannot write the ConfigMap {namespace}/{name} of "
                                   f"{body.describe()}: it is being deleted and re-created concurrently.")

    async def delete(self, body: Body) -> None:
        namespace, name = self.locate(body)
        await self.cluster.delete(CONFIGMAPS, namespace=namespace, name=name, body=body)

    def _new(self, body: Body, *, namespace: str, name: str, data: Mapping[str, str]) -> dict[str, Any]:
        api_version, kind = str(body.get('apiVersion') or ''), str(body.get('kind') or '')
        meta = body.metadata
        metadata: dict[str, Any] = {
            'name': name,
            'namespace': namespace,
            'labels': {**MANAGED_BY, STATE_LABEL: self.prefix},
            'annotations': {OWNER_ANNOTATION: f"{api_version} {kind} "
                                              f"{meta.namespace + '/' if meta.namespace else ''}{meta.name}"},
        }
        # Kubernetes allows owners in the same namespace or cluster-scoped ones; others would be taken for gone.
        if api_version and kind and meta.name and meta.uid and meta.namespace in (None, namespace):
            metadata['ownerReferences'] = [{'apiVersion': api_version, 'kind': kind, 'name': meta.name,
                                            'uid': meta.uid}]
        return {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': metadata, 'data': dict(data)}


def _progress_key(handler_id: HandlerId) -> str:
    return PROGRESS_KEY_PREFIX + conventions.make_name(handler_id)


class ConfigMapProgressStorage(ProgressStorage):
    """
    The handlers' progress in one ConfigMap per object, ``{prefix}-{uid}``, key ``progress.<handler>``.

    Stores and purges are collected per object and written at :meth:`flush`
    in one request (the framework flushes after each batch: the start of the
    handlers, each attempt, the end of the cause). Nothing is written into
    the object. ``namespace``: where the ConfigMaps are (default: the
    object's namespace; needed for cluster-scoped objects).
    """

    def __init__(self, *, prefix: str = DEFAULT_PREFIX, namespace: str | None = None) -> None:
        super().__init__()
        self.prefix = prefix
        self.namespace = namespace
        self._maps = _StateMaps(prefix=prefix, namespace=namespace, what='kopf.ConfigMapProgressStorage')
        # Per task (each object is handled by one task at a time), per object: the body and the changes to write.
        self._pending: weakref.WeakKeyDictionary[asyncio.Task[Any], dict[str, tuple[Body, dict[str, str | None]]]]
        self._pending = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(prefix={self.prefix!r}, namespace={self.namespace!r})"

    def use_cluster(self, cluster: ClusterAccess) -> None:
        """Called by the framework before entering the storage: the operator's API session."""
        self._maps.use_cluster(cluster)

    async def fetch(self, *, key: HandlerId, body: Body) -> ProgressRecord | None:
        data_key = _progress_key(key)
        pending = self._changes(body)
        value = pending[data_key] if data_key in pending else (await self._maps.read(body)).get(data_key)
        return None if value is None else self._decode(value, key=key, body=body)[1]

    async def store(self, *, key: HandlerId, record: ProgressRecord, body: Body, patch: Patch) -> None:
        kept = {field: value for field, value in record.items() if value is not None}
        value = json.dumps({'handler': key, 'record': kept}, separators=(',', ':'), sort_keys=True)
        self._changes(body, write=True)[_progress_key(key)] = value

    async def purge(self, *, key: HandlerId, body: Body, patch: Patch) -> None:
        self._changes(body, write=True)[_progress_key(key)] = None

    async def flush(self) -> None:
        task = asyncio.current_task()
        pending = self._pending.pop(task, {}) if task is not None else {}
        for body, changes in pending.values():
            if changes:
                await self._maps.write(body, changes)

    async def erase(self, *, body: Body) -> None:
        for objects in self._pending.values():
            objects.pop(str(body.metadata.uid), None)
        await self._maps.delete(body)

    async def list_records(self, *, body: Body, ids: Collection[HandlerId] = ()) -> dict[str, ProgressRecord]:
        """Every record of the object, by the handler id kept with it."""
        data = {**(await self._maps.read(body)), **self._changes(body)}
        result: dict[str, ProgressRecord] = {}
        for data_key, value in sorted(data.items()):
            if data_key.startswith(PROGRESS_KEY_PREFIX) and value is not None:
                handler_id, record = self._decode(value, key=HandlerId(data_key), body=body)
                if record is not None:
                    result[handler_id] = record
        return result

    def _changes(self, body: Body, *, write: bool = False) -> dict[str, str | None]:
        """The changes not yet written for this object by this task (a new batch if writing)."""
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("ConfigMap storages are used from asyncio tasks only.")
        objects = self._pending.setdefault(task, {}) if write else self._pending.get(task, {})
        uid = str(body.metadata.uid)
        if uid not in objects:
            if not write:
                return {}
            objects[uid] = (body, {})
        changes = objects[uid][1]
        if write:
            objects[uid] = (body, changes)  # the latest view of the object, for writing
        return changes

    def _decode(self, value: str, *, key: HandlerId, body: Body) -> tuple[str, ProgressRecord | None]:
        try:
            try:
                data = json.loads(value)
            except RecursionError:
                raise ValueError("not valid JSON (nested too deeply)") from None
            except ValueError as e:
                raise ValueError(f"not valid JSON ({e})") from None
            if not isinstance(data, dict) or not isinstance(data.get('handler'), str):
                raise ValueError("expected a JSON object with the handler's id and the record")
            return data['handler'], records.decode_record(data.get('record'))
        except ValueError as e:
            logger.warning("Ignoring the unreadable progress record %r of %s in its ConfigMap: %s. "
                           "The handler will be treated as not yet started.", key, body.describe(), e)
            return key, None


class ConfigMapDiffBaseStorage(DiffBaseStorage):
    """
    The last handled configuration in one ConfigMap per object, ``{prefix}-{uid}``, key ``last-handled-configuration``.

    The same ConfigMap as :class:`ConfigMapProgressStorage` with the same
    ``prefix`` and ``namespace``; together, they read it once per cycle.
    Written at once when the framework stores it (at the end of a cause).
    """

    def __init__(
            self,
            *,
            prefix: str = DEFAULT_PREFIX,
            namespace: str | None = None,
            ignored_fields: Iterable[dicts.FieldSpec] | None = None,
    ) -> None:
        super().__init__()
        self.prefix = prefix
        self.namespace = namespace
        self.ignored_fields = tuple(p for p in (dicts.parse_field(f) for f in ignored_fields or ()) if p)
        self._maps = _StateMaps(prefix=prefix, namespace=namespace, what='kopf.ConfigMapDiffBaseStorage')

    def __repr__(self) -> str:
        return f"{type(self).__name__}(prefix={self.prefix!r}, namespace={self.namespace!r})"

    def use_cluster(self, cluster: ClusterAccess) -> None:
        """Called by the framework before entering the storage: the operator's API session."""
        self._maps.use_cluster(cluster)

    async def fetch(self, *, body: Body) -> Essence | None:
        value = (await self._maps.read(body)).get(LAST_HANDLED_KEY)
        if value is None:
            return None
        return self.restore(decode_essence(value, where="its ConfigMap", body=body), body=body)

    async def store(self, *, body: Body, patch: Patch, essence: Essence) -> None:
        encoded = encode_essence(essence)
        if trimming.encoded_size(essence) > MAX_ESSENCE_SIZE:
            trimmed = trimming.trim(essence, MAX_ESSENCE_SIZE)
            if trimmed is not None:
                logger.warning("The last-handled configuration of %s is %d bytes, too big for a ConfigMap; "
                               "stored trimmed, with digests for: %s.", body.describe(), len(encoded),
                               ', '.join('.'.join(path) for path in trimmed[1]))
                encoded = encode_essence(trimmed[0])
        if (await self._maps.read(body)).get(LAST_HANDLED_KEY) != encoded:
            await self._maps.write(body, {LAST_HANDLED_KEY: encoded})

    async def purge(self, *, body: Body, patch: Patch) -> None:
        if LAST_HANDLED_KEY in await self._maps.read(body):
            await self._maps.write(body, {LAST_HANDLED_KEY: None})

    async def erase(self, *, body: Body) -> None:
        await self._maps.delete(body)
