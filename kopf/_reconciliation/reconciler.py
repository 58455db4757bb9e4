"""
The reconciliation of one resource's objects: the executor around the decisions of :mod:`.planning`.

One :class:`Reconciler` per resource with reconcile handlers. It learns of
the objects from the handling cycle, as one of its stages (every event of
every object that this replica handles passes it), and of their children
from :mod:`.reconciling` (:meth:`Reconciler.poke`). It keeps, per object,
the latest body, a fingerprint of its essence, and one :class:`~.planning.Slot`
per handler; one scheduler task sleeps until the soonest due call and starts
it. An object's calls run in one task at a time, handler after handler, so
calls for one object never overlap; different objects run in parallel.

The body kept (and given to the handler) is the latest one without
``metadata.managedFields`` (see :func:`~.links.lean`).

What the triggers are:

* the object's first event since the start, and every change of its essence
  (what the diff-base keeps: spec, labels, annotations -- not the status,
  nor our own records), but not our own writes of the status;
* a child's (or a related object's) event -- except the events of our own
  ``kopf.apply()`` of that child: the call that applied it has seen it
  already (told apart by the ``resourceVersion`` that the apply returned);
* the retry, requeue and resync times of :mod:`.planning`.

An object being deleted, or gone, is not reconciled any more; its children
go with it (by Kubernetes' garbage collection).

Each call gets the usual keyword arguments of handlers of objects, with
``retry``/``started``/``runtime`` of its failures in a row, plus
``children`` and ``triggers``. What it writes into ``patch`` and its result
(as ``status.<handler id>``) are sent in one merge-patch after the call,
without what the object has already (so a call that changes nothing costs
no request). A failed call is reported with its traceback, as other
handlers' failures are, and its back-off is kept in the progress storage
(under ``reconcile-<handler id>``): an operator restarted during a back-off
waits for it instead of calling at once.

With replicas, the gate admits the objects of this replica: every call runs
inside :meth:`Gate.handling <kopf._replicas.fencing.Gate.handling>` (a
hand-over waits for it), and an object that is not admitted any more is
forgotten here.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import hashlib
import heapq
import itertools
import json
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from typing import Any

from kopf._cycle import selection
from kopf._cycle.causation import Cause
from kopf._cycle.queueing import Gate
from kopf._handlers import execution, invocation
from kopf._handlers.arguments import Arguments, Named, ObjectArguments, OperatorArguments
from kopf._handlers.loggers import LocalObjectLogger, ObjectLogger
from kopf._handlers.reasons import Reason
from kopf._handlers.registries import OperatorRegistry, ReconcilingHandler, ResourceKey
from kopf._kube import applying, patching
from kopf._kube.errors import APIConnectionError, APIError, describe_api_failure
from kopf._kube.session import APIContext
from kopf._reconciliation import planning
from kopf._reconciliation.links import Children, RawBody, lean
from kopf._reconciliation.planning import Outcome, Policy, Slot, Trigger, Verdict
from kopf._storage import calls, records
from kopf._storage.records import ProgressRecord
from kopf._structs.bodies import Body, object_key
from kopf._structs.clocks import SYSTEM_CLOCK, Clock
from kopf._structs.ids import HandlerId
from kopf._structs.patches import Patch
from kopf._structs.resources import Resource
from kopf._structs.typedefs import Logger
from kopf.config import OperatorConfig
from kopf.errors import PermanentError, TemporaryError

logger = logging.getLogger('kopf._reconciliation.reconciler')

# The children of an object for one handler, as the reconciliation keeps them.
ChildrenOf = Callable[[str, Mapping[str, Any], ReconcilingHandler], Children]
# Sends a call's changes of the object (a merge-patch, and its patch.fns); returns the object as patched.
Patcher = Callable[[Body, Patch, Logger], Awaitable[Mapping[str, Any] | None]]
ChildKey = tuple[Resource, str]  # a child's resource and uid


# With replicas: how often to forget the objects that are not this replica's any more.
PATROL_INTERVAL = 5.0

# Errors whose message says all: logged without their tracebacks.
_EXPLAINED = (TemporaryError, PermanentError, execution.ResultError, applying.ApplyConflictError)


def record_key(handler: ReconcilingHandler) -> HandlerId:
    """Under which key the progress storage keeps a reconcile handler's back-off."""
    return HandlerId(f"reconcile-{handler.id}")


def policy_of(handler: ReconcilingHandler) -> Policy:
    return Policy(
        coalesce=handler.coalesce if handler.coalesce is not None else planning.DEFAULT_COALESCE,
        backoff=handler.backoff if handler.backoff is not None else planning.DEFAULT_BACKOFF,
        max_backoff=max(handler.max_backoff if handler.max_backoff is not None else planning.DEFAULT_MAX_BACKOFF,
                        handler.backoff or 0.0),
        resync=handler.resync,
    )


class _Object:
    """What the reconciliation keeps of one object."""

    __slots__ = ('body', 'due', 'echoes', 'essence', 'memo', 'recorded', 'since', 'slots', 'task', 'waiting')

    def __init__(self, body: RawBody, memo: Any) -> None:
        self.body = body
        self.memo = memo
        self.essence: bytes | None = None
        self.slots: dict[HandlerId, Slot] = {}
        self.since: dict[HandlerId, datetime.datetime] = {}  # the first failure in a row, per handler
        self.recorded: set[HandlerId] = set()  # handlers with a back-off record in the storage
        self.echoes: dict[ChildKey, str] = {}  # the resourceVersions of our own applies, per child
        self.waiting: list[tuple[Collection[HandlerId], float, ChildKey, str | None]] = []  # during a call
        self.task: asyncio.Task[None] | None = None
        self.due: float | None = None


@dataclasses.dataclass(frozen=True)
class _Past:
    """Where a handler stands in its failures, as handlers are told (``retry``, ``started``, ``runtime``)."""

    retries: int
    started: datetime.datetime
    now: datetime.datetime

    @property
    def runtime(self) -> datetime.timedelta:
        return self.now - self.started


class Reconciler:
    """The objects of one resource with reconcile handlers, their slots, and the calls that are due."""

    def __init__(
            self,
            *,
            registry: OperatorRegistry,
            resource: Resource,
            config: OperatorConfig,
            patcher: Patcher,
            children: ChildrenOf,
            gate: Gate | None = None,
            ready: Callable[[], Awaitable[None]] | None = None,
            clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.resource = resource
        self.handlers = registry.get_reconciling_handlers(resource)
        self._policies = {handler.id: policy_of(handler) for handler in self.handlers}
        self._config = config
        self._patcher = patcher
        self._children = children
        self._gate = gate
        self._ready = ready
        self._clock = clock
        self._objects: dict[str, _Object] = {}
        self._names: dict[tuple[str | None, str], str] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._counter = itertools.count()
        self._wake = asyncio.Event()
        self._indexes: Named = {}
        limit = config.batching.worker_limit
        self._limiter = asyncio.Semaphore(limit) if limit else None
        self._scheduler: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # the running calls, also of objects forgotten meanwhile

    # What the others tell it.

    async def stage(self, registry: OperatorRegistry, resource: ResourceKey, cause: Cause,
                    arguments: Arguments) -> None:
        """A stage of the handling cycle: every event of every object of the resource that this replica handles."""
        assert arguments.object is not None
        body = arguments.object.body
        key = object_key(body.raw)
        self._indexes = arguments.operator.indexes
        if cause.reason == Reason.GONE or cause.deleting:
            self.forget(key)
            return None
        essence = await self._essence(body)
        obj = self._objects.get(key)
        now = self._clock.monotonic()
        if obj is None:
            obj = self._objects[key] = _Object(lean(body.raw), arguments.operator.memo)
            self._names[(body.metadata.namespace, body.metadata.name or '')] = key
            for handler in self.handlers:
                slot = await self._restore(obj, handler, body, logger=arguments.operator.logger)
                slot = planning.trigger(slot, Trigger.OBJECT, now=now, urgent=slot.retry_at is None)
                # Its children are new to this process too: whatever happened to them meanwhile is unknown.
                obj.slots[handler.id] = planning.trigger(slot, Trigger.CHILDREN, now=now)
        else:
            obj.body = lean(body.raw)
            if essence != obj.essence:
                for handler in self.handlers:
                    obj.slots[handler.id] = planning.trigger(obj.slots[handler.id], Trigger.OBJECT, now=now,
                                                             urgent=True)
        obj.essence = essence
        self._push(key)
        return None

    def poke(self, key: str, handler_ids: Collection[HandlerId], child: ChildKey, version: str | None) -> None:
        """A child of the object (or a related object) has appeared, changed or gone (``version=None``)."""
        obj = self._objects.get(key)
        if obj is None:
            return  # not ours (another replica's, or not seen yet: then its first call sees the child anyway)
        now = self._clock.monotonic()
        if obj.task is not None:
            obj.waiting.append((handler_ids, now, child, version))  # our own apply's event? known after the call
            return
        self._trigger_child(obj, handler_ids, now, child, version)
        self._push(key)

    def key_of(self, namespace: str | None, name: str) -> str | None:
        """The key of an object of this resource by its name, if this replica handles it."""
        return self._names.get((namespace if self.resource.namespaced else None, name))

    def forget(self, key: str) -> None:
        """Not to be reconciled here any more (a running call finishes, but nothing follows it)."""
        obj = self._objects.pop(key, None)
        if obj is not None:
            meta = obj.body.get('metadata') or {}
            self._names.pop((meta.get('namespace'), meta.get('name') or ''), None)

    async def _essence(self, body: Body) -> bytes:
        return await essence_of(body, self._config)

    # Running.

    def start(self) -> None:
        if self._scheduler is None:
            self._scheduler = asyncio.create_task(self._schedule(), name=f"kopf reconciliation of {self.resource}")

    async def close(self) -> None:
        """Stop calling; let the running calls finish (they are cancelled if the caller is)."""
        tasks = list(self._tasks)
        if self._scheduler is not None:
            self._scheduler.cancel()
        try:
            if tasks:
                await asyncio.wait(tasks, timeout=self._config.batching.exit_timeout)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, *([self._scheduler] if self._scheduler else []), return_exceptions=True)

    def _push(self, key: str) -> None:
        """Schedule the object's next call (if any is due), and wake the scheduler if it is sooner."""
        obj = self._objects.get(key)
        if obj is None or obj.task is not None:
            return
        times = [planning.due(obj.slots[handler.id], self._policies[handler.id])
                 for handler in self.handlers if handler.id in obj.slots]  # all of them once it is restored
        soonest = min((t for t in times if t is not None), default=None)
        if soonest is None or soonest == obj.due:
            return
        obj.due = soonest
        heapq.heappush(self._heap, (soonest, next(self._counter), key))
        if self._heap[0][2] == key:
            self._wake.set()

    async def _schedule(self) -> None:
        patrolled = self._clock.monotonic()
        while True:
            now = self._clock.monotonic()
            if self._gate is not None and now - patrolled >= PATROL_INTERVAL:
                patrolled = now
                self._patrol()
            while self._heap and self._heap[0][0] <= now:
                when, _, key = heapq.heappop(self._heap)
                obj = self._objects.get(key)
                if obj is None or obj.due != when:
                    continue  # rescheduled or forgotten meanwhile
                obj.due = None
                if obj.task is None:
                    obj.task = asyncio.create_task(self._run(key, obj), name=f"kopf reconciling {key}")
                    self._tasks.add(obj.task)
                    obj.task.add_done_callback(self._tasks.discard)
            self._wake.clear()
            delays = [self._heap[0][0] - now] if self._heap else []
            if self._gate is not None:
                delays.append(patrolled + PATROL_INTERVAL - now)
            await self._sleep(min(delays) if delays else None)

    def _patrol(self) -> None:
        """Forget the objects that another replica handles now: if one comes back, it is new here again."""
        assert self._gate is not None
        for key in [key for key in self._objects if not self._gate.admits(key)]:
            self.forget(key)

    async def _sleep(self, seconds: float | None) -> None:
        """Until the soonest call is due, or something sooner is scheduled."""
        waiters: list[asyncio.Future[Any]] = [asyncio.ensure_future(self._wake.wait())]
        if seconds is not None:
            waiters.append(asyncio.ensure_future(self._clock.sleep(seconds)))
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    async def _run(self, key: str, obj: _Object) -> None:
        """The due calls of one object, one after another; then its next call is scheduled."""
        try:
            if self._ready is not None:
                await self._ready()
            async with self._limiter if self._limiter is not None else contextlib.nullcontext():
                async with self._gate.handling(key) if self._gate is not None else \
                        contextlib.nullcontext(True) as admitted:
                    if not admitted:
                        self.forget(key)  # another replica's now: its owner reconciles it
                        return
                    now = self._clock.monotonic()
                    for handler in self.handlers:
                        due = planning.due(obj.slots[handler.id], self._policies[handler.id])
                        if due is not None and due <= now and self._objects.get(key) is obj:
                            await self._call(obj, handler)
        finally:
            obj.task = None
            waiting, obj.waiting = obj.waiting, []
            for handler_ids, when, child, version in waiting:
                self._trigger_child(obj, handler_ids, when, child, version)
            self._push(key)

    def _trigger_child(self, obj: _Object, handler_ids: Collection[HandlerId], when: float, child: ChildKey,
                       version: str | None) -> None:
        if version is None:
            obj.echoes.pop(child, None)  # gone: nothing of ours can come of it any more
        elif obj.echoes.get(child) == version:
            return  # the event of our own apply: the call that made it has seen it
        for handler_id in handler_ids:
            if handler_id in obj.slots:
                obj.slots[handler_id] = planning.trigger(obj.slots[handler_id], Trigger.CHILDREN, now=when)

    # One call.

    async def _call(self, obj: _Object, handler: ReconcilingHandler) -> None:
        """One call, whatever happens to it: its slot never stays running."""
        slot, triggers = planning.start(obj.slots[handler.id], now=self._clock.monotonic())
        obj.slots[handler.id] = slot
        policy = self._policies[handler.id]
        finished = False
        try:
            try:
                outcome = await self._attempt(obj, handler, slot, triggers)
            except Exception as e:  # a bug of ours, not of the handler (its errors are judged): backed off too
                outcome = Outcome(Verdict.RETRY, delay=policy.backoff_after(slot.failures + 1), error=e)
                ObjectLogger(body=obj.body).exception("Reconciling with %s has failed unexpectedly: %s. It is tried "
                                                      "again in %gs.", handler, e, outcome.delay)
            obj.slots[handler.id] = planning.finish(obj.slots[handler.id], outcome, now=self._clock.monotonic(),
                                                    policy=policy)
            finished = True
        finally:
            if not finished:  # cancelled: what it was to answer waits for the next call
                obj.slots[handler.id] = planning.interrupt(obj.slots[handler.id], triggers,
                                                           now=self._clock.monotonic())

    async def _attempt(self, obj: _Object, handler: ReconcilingHandler, slot: Slot,
                       triggers: frozenset[Trigger]) -> Outcome:
        body = Body(obj.body)
        log = ObjectLogger(body=body)
        patch = Patch()
        arguments = Arguments(
            operator=OperatorArguments(logger=log, memo=obj.memo, config=self._config, indexes=self._indexes),
            object=ObjectArguments(body=body, patch=patch, resource=self.resource))
        if not selection.matches(handler, arguments=arguments, logger=log):
            outcome = Outcome(Verdict.SUCCESS)  # not interested in the object as it is now
        else:
            wall = self._clock.now()
            past = _Past(retries=slot.failures, started=obj.since.get(handler.id, wall), now=wall)
            outcome = await self._invoke(obj, handler, arguments.for_handler(handler).with_attempt(past),
                                         triggers=triggers, logger=log)
            outcome = self._delayed(handler, outcome, failures=slot.failures + 1, logger=log)
            self._report(handler, outcome, logger=log, quiet=LocalObjectLogger(body=body))
            await self._record(obj, handler, outcome, body=body, patch=patch, failures=slot.failures + 1, logger=log)
            if outcome.verdict == Verdict.SUCCESS and outcome.result is not None:
                patch.status[handler.id] = outcome.result
            await self._send(obj, body=body, patch=patch, logger=log)
        return outcome

    async def _invoke(self, obj: _Object, handler: ReconcilingHandler, arguments: Arguments, *,
                      triggers: frozenset[Trigger], logger: Logger) -> Outcome:
        kwargs = arguments.render()
        kwargs['children'] = self._children(object_key(obj.body), obj.body, handler)
        kwargs['triggers'] = frozenset(str(trigger) for trigger in triggers)
        kwargs.update((name, self._indexes[name]) for name in self._indexes.keys())  # indexes win, as everywhere
        token = applying.listener_var.set(lambda resource, applied: self._applied(obj, resource, applied))
        try:
            result = await invocation.invoke(handler.fn, kwargs=kwargs, executor=self._config.execution.executor)
            if not isinstance(result, planning.Requeue):
                result = execution.storable(handler, result)
        except Exception as e:
            return planning.judge(error=e, mode=handler.errors)
        finally:
            applying.listener_var.reset(token)
            del kwargs
        return planning.judge(result)

    def _applied(self, obj: _Object, resource: Resource, applied: Mapping[str, Any]) -> None:
        """A call has applied a child: the child's event with this version is the call's own doing."""
        meta = applied.get('metadata') or {}
        uid, version = meta.get('uid'), meta.get('resourceVersion')
        if isinstance(uid, str) and version is not None:
            obj.echoes[(resource, uid)] = str(version)

    def _delayed(self, handler: ReconcilingHandler, outcome: Outcome, *, failures: int, logger: Logger) -> Outcome:
        """The outcome with the delay of its retry or requeue, within sane limits."""
        if outcome.verdict == Verdict.RETRY:
            policy = self._policies[handler.id]
            delay = execution.sane_delay(handler, outcome.delay, default=policy.backoff, logger=logger)
            return dataclasses.replace(outcome, delay=delay if delay is not None else policy.backoff_after(failures))
        if outcome.verdict == Verdict.REQUEUE:
            return dataclasses.replace(outcome, delay=min(outcome.delay or 0.0, execution.MAX_DELAY))
        return outcome

    def _report(self, handler: ReconcilingHandler, outcome: Outcome, *, logger: Logger, quiet: Logger) -> None:
        """
        One line per call; a traceback only for the errors that do not explain themselves.

        Successes go to the operator's log only (``quiet``): a level-based
        handler is called often, and an Event per call would double the API
        requests of a repair. Failures are posted as Events, as for other handlers.
        """
        error = outcome.error
        trace = None if error is None or isinstance(error, _EXPLAINED) else error
        if outcome.verdict == Verdict.SUCCESS and error is None:
            quiet.info("%s succeeded.", handler)
        elif outcome.verdict == Verdict.REQUEUE:
            quiet.info("%s succeeded; it is called again in %gs.", handler, outcome.delay)
        elif outcome.verdict == Verdict.SUCCESS:
            logger.error("%s failed with an exception; it is ignored (errors=IGNORED).", handler, exc_info=trace)
        elif outcome.verdict == Verdict.RETRY and isinstance(error, execution.ResultError):
            logger.error("%s It is called again in %gs.", error, outcome.delay)
        elif outcome.verdict == Verdict.RETRY and isinstance(error, TemporaryError):
            logger.error("%s failed temporarily: %s; it is called again in %gs.", handler,
                         planning.describe(outcome), outcome.delay)
        elif outcome.verdict == Verdict.RETRY:
            logger.error("%s failed: %s; it is called again in %gs.", handler, planning.describe(outcome),
                         outcome.delay, exc_info=trace)
        else:
            logger.error("%s failed permanently: %s; it is called again when the object or its children change.",
                         handler, planning.describe(outcome), exc_info=trace)

    async def _restore(self, obj: _Object, handler: ReconcilingHandler, body: Body, *, logger: Logger) -> Slot:
        """The back-off that a previous process has left in the storage, if any."""
        storage = self._config.persistence.progress_storage
        try:
            record: ProgressRecord | None = await calls.call(storage.fetch, key=record_key(handler), body=body)
        except Exception as e:
            logger.warning("Cannot read the back-off record of %s: %s; calling it as if it had none.", handler, e)
            return Slot()
        if not record:
            return Slot()
        obj.recorded.add(handler.id)
        failures = record.get('retries') or 0
        delayed, started = record.get('delayed'), record.get('started')
        try:
            retry_in = (records.parse_time(delayed) - self._clock.now()).total_seconds() if delayed else None
            if started:
                obj.since[handler.id] = records.parse_time(started)
        except ValueError:
            retry_in = None
        if retry_in is not None and retry_in > 0:
            logger.info("%s has failed %d time(s) in a row before the restart; it is called again in %gs, "
                        "as its back-off says.", handler, failures, retry_in)
        return planning.restore(failures=failures if retry_in is not None else 0,
                                retry_in=retry_in, now=self._clock.monotonic())

    async def _record(self, obj: _Object, handler: ReconcilingHandler, outcome: Outcome, *, body: Body,
                      patch: Patch, failures: int, logger: Logger) -> None:
        """Keep the back-off of a failing handler in the storage; forget it once it succeeds."""
        storage = self._config.persistence.progress_storage
        key = record_key(handler)
        try:
            if outcome.verdict == Verdict.RETRY:
                now = self._clock.now()
                since = obj.since.setdefault(handler.id, now)
                record: ProgressRecord = {
                    'started': records.format_time(since),
                    'delayed': records.format_time(now + datetime.timedelta(seconds=outcome.delay or 0)),
                    'retries': failures, 'success': False, 'failure': False,
                    'message': planning.describe(outcome)[:1000]}
                await calls.call(storage.store, key=key, record=record, body=body, patch=patch)
                obj.recorded.add(handler.id)
            else:
                obj.since.pop(handler.id, None)
                if handler.id in obj.recorded:
                    await calls.call(storage.purge, key=key, body=body, patch=patch)
                    obj.recorded.discard(handler.id)
            await calls.call(storage.flush)
        except Exception as e:
            logger.error("Cannot keep the back-off record of %s: %s. A restart calls it without waiting.", handler, e)

    async def _send(self, obj: _Object, *, body: Body, patch: Patch, logger: Logger) -> None:
        """Send what the call has changed (leaving out what the object has already); nothing if nothing."""
        changes = Patch(effective(patch, body.raw))
        changes.fns.extend(patch.fns)
        if not changes and not changes.fns:
            return
        try:
            patched = await self._patcher(body, changes, logger)
        except (APIError, APIConnectionError) as e:
            logger.error("The changes of the reconciliation (%s) could not be sent: %s. The next call makes "
                         "them anew.", ', '.join(_leaves(changes)) or 'patch.fns', describe_api_failure(e))
            return
        except (patching.TransformationError, patching.TransformationConflict) as e:
            logger.error("%s", e)
            return
        if patched is not None:
            obj.body = lean(patched)


async def patch_object(body: Body, patch: Patch, logger: Logger, *, context: APIContext,
                       resource: Resource) -> Mapping[str, Any] | None:
    """Send a call's changes to the object (nothing if the object is gone)."""
    return await patching.patch_obj(context=context, resource=resource, namespace=body.metadata.namespace,
                                    name=body.metadata.name or '', patch=patch, logger=logger, fns=patch.fns,
                                    body=body.raw)


def effective(patch: Mapping[str, Any], body: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a merge-patch that changes the object: values it has already are left out."""
    result: dict[str, Any] = {}
    for key, value in patch.items():
        current = body.get(key, _MISSING) if isinstance(body, Mapping) else _MISSING
        if value is None:
            if current is not _MISSING:
                result[key] = None
        elif isinstance(value, Mapping) and isinstance(current, Mapping):
            nested = effective(value, current)
            if nested:
                result[key] = nested
        elif _canonical(value) != _canonical(current):
            result[key] = value
    return result


_MISSING = object()


def _canonical(value: Any) -> Any:
    if value is _MISSING:
        return value
    return json.dumps(value, sort_keys=True, default=str)


def _leaves(patch: Mapping[str, Any], prefix: str = '') -> Iterable[str]:
    for key, value in patch.items():
        if isinstance(value, Mapping) and value:
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


async def essence_of(body: Body, config: OperatorConfig) -> bytes:
    """A fingerprint of the object's essence as the diff-base sees it, without the framework's records."""
    persistence = config.persistence
    essence = await calls.call(persistence.diffbase_storage.build, body=body)
    essence = await calls.call(persistence.progress_storage.clear, essence=essence)
    text = json.dumps(essence, sort_keys=True, separators=(',', ':'), default=str)
    return hashlib.blake2b(text.encode('utf-8'), digest_size=16).digest()
