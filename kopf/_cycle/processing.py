"""
Processing one event of one object: handle it, send the patch, report when to continue.

This is where the pure handling cycle meets the API: the patch that the
handling has accumulated is sent here, and its failures are dealt with so
that no progress is lost:

* conflicts (409) are re-based on the fresh object and re-sent;
* transient errors (5xx, connection failures, timeouts) are re-sent after a
  pause, a few times;
* a patch that the server refuses for what it holds -- invalid (422), too
  large, forbidden (403) for one of its parts, any other 4xx -- is re-sent
  without the handlers' results and changes, the progress alone, and the
  refused part is reported once; a patch that is too large is not even sent
  with them (that is checked after the cycle has fitted the annotations
  into Kubernetes' budget, :mod:`~kopf._storage.budget`: what the budget has
  left out is reported there, and not named again here);
* credentials refused also after logging in again (401), and a server that
  keeps throttling the operator (429) after the client has waited as often
  as it was asked, end the cycle with one line; the patch is kept, and the
  next processing of the object re-sends it before anything else (so that
  the handlers whose outcomes it carries do not run again), until it lands
  or the object is gone.

Anything else that goes wrong while an object is handled (a storage that
raises, a bug) is reported with the object and the handlers that ran, and
the object is handled again later; the same failure of the same object is
not logged again for a while (:mod:`~kopf._cycle.failures`). A worker never
dies of it.

Nothing of an event is kept here once it is processed: the body, the patch
and the logger live only in this call's frames.
"""
from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
from collections.abc import Mapping, MutableSet, Sequence
from typing import Any

import aiohttp

from kopf._cycle import cycle, failures
from kopf._cycle.queueing import ProcessingOutcome, event_key
from kopf._handlers import execution
from kopf._handlers.loggers import ObjectLogger
from kopf._handlers.reasons import Reason
from kopf._handlers.registries import OperatorRegistry
from kopf._kube import fetching, patching
from kopf._kube.auth import APIContext
from kopf._kube.errors import (
    APIConflictError,
    APIConnectionError,
    APIError,
    APIForbiddenError,
    APIServerError,
    APITooManyRequestsError,
    APIUnauthorizedError,
    APIUnprocessableError,
    too_large,
)
from kopf._observability import recording
from kopf._structs import dormancy, patches
from kopf._structs.bodies import Body, RawBody
from kopf._structs.ephemera import ObjectMemos
from kopf._structs.ids import HandlerId
from kopf._structs.patches import Patch
from kopf._structs.resources import Resource, Selector
from kopf._structs.typedefs import PatchFn, RawEvent
from kopf._typed import gate as typedgate
from kopf._typed.gate import Gate
from kopf.config import OperatorConfig

# How often to re-send a patch that failed for transient reasons (after the client's own retries).
PATCH_ATTEMPTS = 5
PATCH_PAUSE = 1.0
# When the server rejects our patch as invalid, handling is tried again this much later.
REJECTED_PATCH_DELAY = 60.0
# When the handling of an object fails unexpectedly, it is tried again this much later (or on its next event).
FAILURE_DELAY = 60.0
# A patch with handlers' results or changes larger than this is not sent with them (etcd keeps ~1.5 MiB per object).
MAX_PATCH_SIZE = 1024 * 1024
# How much of the server's explanation of a refusal is logged (some quote the whole object).
MAX_EXPLANATION = 500


@dataclasses.dataclass(frozen=True)
class ResourceWatch:
    """
    Everything the processing of one resource's events needs, fixed for the operator's lifetime.

    ``memo`` is the operator's; each object gets its own from ``memos``.
    """

    context: APIContext
    resource: Resource
    selector: Selector
    registry: OperatorRegistry
    config: OperatorConfig
    memo: Any
    # The objects seen since the start, packed while quiet: it lives as long as the objects.
    seen: MutableSet[str] = dataclasses.field(default_factory=dormancy.DormantSet)
    stages: Sequence[cycle.Stage] = cycle.STAGES  # what runs on every event (e.g. the resource's daemons)
    indexes: cycle.Indexes | None = None  # the operator's indexes, for the handlers
    # The failures reported lately, not to be reported again for a while.
    repeats: failures.RepeatLimiter = dataclasses.field(default_factory=failures.RepeatLimiter)
    # The patches that the API would not take for a while (401, 429), by object: re-sent before anything else.
    unsent: dict[str, Unsent] = dataclasses.field(default_factory=dict)
    # The bodies of listed objects just found not at rest, by object: their cycle does not ask again.
    restless: dict[str, RawBody] = dataclasses.field(default_factory=dict)
    # The objects' own memos, copies of the operator's (made and kept only as they are used).
    memos: ObjectMemos = dataclasses.field(init=False, repr=False, compare=False)
    # A typed resource's gate: the handlers run only with a valid spec, which they get as the model.
    gate: Gate | None = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, 'memos', ObjectMemos(self.memo))
        model = typedgate.model_of(self.registry.selectors, self.resource)
        gate = Gate(model, finalizer=self.config.persistence.finalizer) if model is not None else None
        object.__setattr__(self, 'gate', gate)


@dataclasses.dataclass(frozen=True)
class Unsent:
    """A handling's patch that could not be sent yet, with what its sending needs."""

    patch: Patch
    delay: float | None
    essential: Patch | None
    extras: tuple[str, ...]
    fns: tuple[PatchFn, ...] = ()


async def process_event(watch: ResourceWatch, raw_event: RawEvent, woken_up: bool) -> ProcessingOutcome:
    """Handle one event (or a wake-up after a delay) of one object; never fails (failures are reported)."""
    body = Body(raw_event['object'])
    logger = ObjectLogger(body=body)
    key = event_key(raw_event)
    attempted: list[HandlerId] = []
    token = execution.attempted.set(attempted)
    with recording.current().cycle(watch.resource, body.raw, raw_event.get('type')):
        try:
            return await _process(watch, raw_event, body=body, key=key, woken_up=woken_up, logger=logger)
        except Exception as e:
            return _failed(watch, key=key, body=body, error=e, attempted=attempted, logger=logger)
        finally:
            execution.attempted.reset(token)


async def at_rest(watch: ResourceWatch, raw_event: RawEvent) -> bool:
    """
    Whether an object needs no cycle for this event at all (see :func:`~kopf._cycle.cycle.at_rest`).

    For a listed object without a worker: on a restart over many handled
    objects, this is all that each of them costs (no worker, no cycle).
    What a cycle would do to it all the same is done here: it is seen (which
    fixes its memo), and the cycle is recorded, as a ``NOOP``. Never fails:
    whatever fails here is left to the cycle, which reports it.
    """
    key = event_key(raw_event)
    if key in watch.unsent:
        return False  # a patch of an earlier cycle is to be sent
    body = Body(raw_event['object'])
    try:
        if not await cycle.at_rest(registry=watch.registry, config=watch.config, resource=watch.resource,
                                   event_type=raw_event.get('type'), body=body, stages=watch.stages, gate=watch.gate):
            watch.restless[key] = body.raw
            return False
    except Exception:
        return False  # e.g. a storage that fails: the cycle reports it, with the object
    with recording.current().cycle(watch.resource, body.raw, raw_event.get('type')):
        if key not in watch.seen:
            watch.memos.seen(key)
            watch.seen.add(key)
        recording.current().caused(Reason.NOOP.value, None)
    if _OBJECTS_LOGGER.isEnabledFor(logging.DEBUG):  # a logger per object costs more than the rest of this
        ObjectLogger(body=body).debug("Handling cycle for %s: %s.", body.describe(), Reason.NOOP.value)
    return True


_OBJECTS_LOGGER = logging.getLogger('kopf.objects')


async def _process(
        watch: ResourceWatch,
        raw_event: RawEvent,
        *,
        body: Body,
        key: str,
        woken_up: bool,
        logger: ObjectLogger,
) -> ProcessingOutcome:
    if raw_event.get('type') == 'DELETED':
        watch.unsent.pop(key, None)  # nothing can be stored in a deleted object
    unsent = watch.unsent.pop(key, None)
    if unsent is not None:
        logger.info("Sending the outcome of an earlier handling, which the API would not take then.")
        return await _send(watch, key=key, body=body, patch=unsent.patch, delay=unsent.delay, logger=logger,
                           essential=unsent.essential, extras=unsent.extras, fns=unsent.fns)
    if woken_up:
        patch = await cycle.touch(config=watch.config, body=body)
        if patch:
            return await _send(watch, key=key, body=body, patch=patch, delay=None, logger=logger)
        # Storages without a touch marker: continue from the latest known state ourselves.

    first_seen = key not in watch.seen
    if first_seen:
        watch.memos.seen(key)
    restless = watch.restless.pop(key, None) is body.raw  # this very body, as judged by :func:`at_rest`
    try:
        result = await cycle.handle_object(
            registry=watch.registry, config=watch.config, resource=watch.resource,
            event_type=raw_event.get('type'), body=body, first_seen=first_seen, memo=watch.memos.get(key),
            logger=logger, stages=watch.stages, indexes=watch.indexes, resolved=watch.resource,
            send_early=functools.partial(_send_early, watch, body=body, logger=logger), gate=watch.gate,
            restless=restless)
    except Exception:
        if first_seen:
            watch.seen.discard(key)  # the next attempt is still the first sight of it
        raise
    watch.seen.add(key)
    recording.current().caused(result.cause, result.delay)
    if raw_event.get('type') == 'DELETED':
        watch.seen.discard(key)
        watch.memos.forget(key)
    if result.fns and not result.patch:
        return await _transform(watch, body=body.raw, fns=result.fns, outcome=ProcessingOutcome(delay=result.delay),
                                logger=logger)
    if not result.patch:
        return ProcessingOutcome(delay=result.delay)
    return await _send(watch, key=key, body=body, patch=result.patch, delay=result.delay, logger=logger,
                       essential=result.essential, extras=result.extras, fns=result.fns, settled=result.settled)


def _failed(
        watch: ResourceWatch,
        *,
        key: str,
        body: Body,
        error: Exception,
        attempted: list[HandlerId],
        logger: ObjectLogger,
) -> ProcessingOutcome:
    """Report an unexpected failure of an object's handling (unless it was reported lately); retry later."""
    suppressed = watch.repeats.admit((key, *failures.signature(error)))
    recording.current().cycle_failed(watch.resource)
    ran = ', '.join(repr(handler_id) for handler_id in dict.fromkeys(attempted))
    if suppressed is None:
        logger.debug("The handling has failed again: %s: %s", type(error).__name__, error)
    else:
        logger.error(
            "The handling of %s has failed%s: %s: %s.%s Retrying in %gs or on the next change.%s",
            body.describe(), f" after running the handlers {ran}" if ran else '',
            type(error).__name__, _cut(str(error) or '-', MAX_EXPLANATION),
            " Their outcomes are not stored: they will run again." if ran else '',
            FAILURE_DELAY, failures.repeated(suppressed), exc_info=error)
    return ProcessingOutcome(delay=FAILURE_DELAY)


async def _send(
        watch: ResourceWatch,
        *,
        key: str,
        body: Body,
        patch: Patch,
        delay: float | None,
        logger: ObjectLogger,
        essential: Patch | None = None,
        extras: tuple[str, ...] = (),
        fns: Sequence[PatchFn] = (),
        settled: bool = False,
) -> ProcessingOutcome:
    """
    Send the patch until it lands, keeping it intact across transient failures.

    If the server refuses it for what it holds (or it is too large to send)
    and it has an ``essential`` part (the progress, the finalizer, the
    diff-base), the refused rest (``extras``) is reported once and the
    essential part is sent alone. The transformation functions ``fns`` are
    applied to the object as the patch has left it (:func:`_transform`).
    ``settled``: the patch concludes the handling (see
    :attr:`~kopf._cycle.cycle.HandlingResult.settled`); so it does only if
    it lands whole.
    """
    name = body.metadata.name or ''
    namespace = body.metadata.namespace
    rejection = ''
    recorder = recording.current()
    size = _size(patch) if essential is not None or recorder.enabled else 0
    sized = patch  # the patch that ``size`` is the size of
    if size > MAX_PATCH_SIZE and essential is not None:
        rejection = (f"The patch is too large to be sent ({size:,} bytes; at most {MAX_PATCH_SIZE:,}). "
                     f"Not stored: {', '.join(extras)}.")
        recorder.patch_refused(watch.resource, 'too_large')
        if not essential:
            logger.error("%s", rejection)
            return ProcessingOutcome(delay=delay)
        patch, essential = essential, None
    conflicted = False
    attempt = 0
    while attempt < PATCH_ATTEMPTS:
        attempt += 1
        try:
            if conflicted:
                conflicted = False
                fresh = await fetching.read_obj(context=watch.context, resource=watch.resource,
                                                namespace=namespace, name=name)
                if fresh is None:
                    return ProcessingOutcome(gone=True)
                finalizer = watch.config.persistence.finalizer
                patch = rebase(patch, Body(fresh), finalizer=finalizer)
                essential = rebase(essential, Body(fresh), finalizer=finalizer) if essential is not None else None
            patched = await patching.patch_obj(context=watch.context, resource=watch.resource,
                                               namespace=namespace, name=name, patch=patch, logger=logger)
        except APIConflictError:
            logger.debug("The object has changed meanwhile; re-sending the patch based on the fresh object.")
            recorder.patch_refused(watch.resource, 'conflict_rebased')
            conflicted = True
            continue
        except (APIUnauthorizedError, APITooManyRequestsError) as e:
            recorder.patch_refused(watch.resource, 'deferred')
            _give_up(watch, body, e, logger, f"{rejection} " if rejection else '', _unsendable(e, watch))
            watch.unsent[key] = Unsent(patch=patch, delay=delay, essential=essential, extras=extras, fns=tuple(fns))
            return ProcessingOutcome(delay=REJECTED_PATCH_DELAY)
        except APIError as e:
            if isinstance(e, APIServerError) and not too_large(e):
                quiet = watch.context.reachability.covers(e)  # the server is away: said once for all objects
                (logger.debug if quiet else logger.warning)("Failed to patch the object (attempt %d of %d): %s",
                                                            attempt, PATCH_ATTEMPTS, _explain(e))
                await asyncio.sleep(PATCH_PAUSE * attempt)
                continue
            recorder.patch_refused(watch.resource, 'too_large' if too_large(e) else 'rejected')
            if essential is not None:
                # The handlers' results or changes may be what the server refuses: never lose the progress to them.
                rejection = f"{_refusal(e)}. Not stored: {', '.join(extras)}."
                if not essential:
                    logger.error("%s", rejection)
                    return ProcessingOutcome(delay=delay)
                patch, essential, attempt = essential, None, 0
                continue
            _give_up(watch, body, e, logger, f"{rejection} " if rejection else '', _unpatchable(e, watch),
                     f" Retrying the handling in {REJECTED_PATCH_DELAY:g}s.")
            return ProcessingOutcome(delay=REJECTED_PATCH_DELAY)
        except (APIConnectionError, aiohttp.ClientError, asyncio.TimeoutError) as e:
            quiet = watch.context.reachability.covers(e)  # the server is away: said once for all objects
            (logger.debug if quiet else logger.warning)("Failed to patch the object (attempt %d of %d): %s",
                                                        attempt, PATCH_ATTEMPTS, e)
            await asyncio.sleep(PATCH_PAUSE * attempt)
            continue
        recorder.patched(watch.resource, patch, size=size if patch is sized else None)
        if patched is None:
            return ProcessingOutcome(gone=True)  # gone meanwhile: nothing left to do
        if rejection:
            logger.error("%s The handlers' progress is stored without it; they are not run again.", rejection)
        rv = patched.get('metadata', {}).get('resourceVersion')
        outcome = ProcessingOutcome(delay=delay, resource_version=str(rv) if rv else None, body=patched,
                                    settled=settled and not rejection and patch is sized and not fns
                                    and _as_patched(body, patch, patched))
        return await _transform(watch, body=patched, fns=fns, outcome=outcome, logger=logger) if fns else outcome
    (logger.debug if watch.context.reachability.down and not rejection else logger.error)(
        "%sFailed to patch the object %d times; retrying the handling in %ss.",
        f"{rejection} " if rejection else "", PATCH_ATTEMPTS, REJECTED_PATCH_DELAY)
    return ProcessingOutcome(delay=REJECTED_PATCH_DELAY)


def _as_patched(body: Body, patch: Patch, patched: Mapping[str, Any]) -> bool:
    """
    Whether the object, as the server returns it after our patch, is what our patch made of the object we had.

    Not so if something else has written to it between our read and our
    patch: e.g. the last patch of an operator process that was killed while
    sending it, landing after the next process has read the object, which
    leaves its progress beside the diff-base that concludes the handling; or
    a change of the spec whose event has not come yet, and would be taken for
    one older than our patch. Then the patch does not conclude the handling:
    its own event is handled as any other. What the server changes on every
    write (the version, the managed fields, the generation) is not compared.
    """
    applied = patches.apply(body.raw, patch)
    return (_same(patched, applied, skip=_NOT_COMPARED)
            and _same(patched.get('metadata') or {}, applied.get('metadata') or {}, skip=_SERVER_MANAGED))


_NOT_COMPARED = frozenset({'apiVersion', 'kind', 'metadata'})  # the metadata is compared on its own
_SERVER_MANAGED = frozenset({'resourceVersion', 'managedFields', 'generation'})
_ABSENT = object()


def _same(a: Mapping[str, Any], b: Mapping[str, Any], *, skip: frozenset[str] = frozenset()) -> bool:
    """
    Whether two maps hold the same (but for the keys in ``skip``), where an empty map or list is as good as none.

    The server omits empty maps and lists. Walked in place, without pruned
    copies of both objects: it runs for every concluding patch.
    """
    for key, x in a.items():
        if key not in skip:
            y = b.get(key, _ABSENT)
            if not _equal(x, y) and not (_void(x) and _void(y)):
                return False
    for key, y in b.items():
        if key not in skip and key not in a and not _void(y):
            return False
    return True


def _equal(x: Any, y: Any) -> bool:
    if x == y:  # nearly always, and at the speed of the built-in comparison
        return True
    if isinstance(x, Mapping) and isinstance(y, Mapping):
        return _same(x, y)
    if isinstance(x, list) and isinstance(y, list):
        return len(x) == len(y) and all(_equal(i, j) for i, j in zip(x, y))
    return False


def _void(value: Any) -> bool:
    """Absent, an empty list, or a map of nothing but such (empty once they are omitted)."""
    if value is _ABSENT:
        return True
    if type(value) is list:
        return not value
    if isinstance(value, Mapping):
        return all(_void(item) for item in value.values())
    return False


async def _transform(
        watch: ResourceWatch,
        *,
        body: Mapping[str, Any],
        fns: Sequence[PatchFn],
        outcome: ProcessingOutcome,
        logger: ObjectLogger,
) -> ProcessingOutcome:
    """
    Apply the handlers' transformation functions to the freshest body, send them as a JSON patch.

    ``outcome`` is that of the patch sent before (if any): the worker awaits
    the event of the latest of our changes. A failing function, an object
    that keeps changing, or a refusal lose the functions' changes (only
    them: the handlers have succeeded, and their progress is stored), with
    one line that says so.
    """
    name = body.get('metadata', {}).get('name') or ''
    namespace = body.get('metadata', {}).get('namespace')
    lost = "The changes of the transformation functions (patch.fns) are not stored"
    try:
        transformed = await patching.transform_obj(context=watch.context, resource=watch.resource, namespace=namespace,
                                                   name=name, fns=fns, body=body, logger=logger)
    except (patching.TransformationError, patching.TransformationConflict) as e:
        logger.error("%s %s.", e, lost)
        return outcome
    except APIError as e:
        logger.error("%s. %s.", _refusal(e), lost)
        return outcome
    except (APIConnectionError, aiohttp.ClientError, asyncio.TimeoutError) as e:
        logger.error("%s: the API server cannot be reached: %s.", lost, e)
        return outcome
    if transformed is None:
        return ProcessingOutcome()  # gone meanwhile: nothing left to do
    rv = transformed.get('metadata', {}).get('resourceVersion')
    return ProcessingOutcome(delay=outcome.delay, resource_version=str(rv) if rv else outcome.resource_version,
                             body=transformed)


async def _send_early(
        watch: ResourceWatch,
        patch: Patch,
        essential: Patch | None,
        *,
        body: Body,
        logger: ObjectLogger,
) -> Mapping[str, Any] | None:
    """
    Write the finished handlers' work while another handler runs long; once, without retries.

    It is an early copy of what the cycle's own patch sends anyway: if it
    fails, nothing is lost but the earliness, so it is only logged. A part
    that the server refuses is left out, as in the cycle's own patch. Gives
    the object as the write has left it (``None`` if it did not land).
    """
    name, namespace = body.metadata.name or '', body.metadata.namespace
    for attempt in (patch, essential):
        if not attempt:
            continue
        try:
            return await patching.patch_obj(context=watch.context, resource=watch.resource, namespace=namespace,
                                            name=name, patch=attempt, logger=logger)
        except APIError as e:
            if isinstance(e, (APIServerError, APIUnauthorizedError, APITooManyRequestsError)):
                logger.debug("The early write has failed (%s); the cycle's patch will carry it.", e)
                return None
            logger.debug("The early write was refused (%s)%s.", e, "; trying the progress alone" if attempt is patch
                         and essential else "; the cycle's patch will carry it")
        except (APIConnectionError, aiohttp.ClientError, asyncio.TimeoutError) as e:
            logger.debug("The early write has failed (%s); the cycle's patch will carry it.", e)
            return None
    return None


def _give_up(watch: ResourceWatch, body: Body, error: APIError, logger: ObjectLogger, *parts: str) -> None:
    """Report a patch that cannot be sent for now; the same refusal of the same object only now and then."""
    key = (body.metadata.uid or body.describe(), 'refused', type(error).__name__, error.status)
    suppressed = watch.repeats.admit(key)
    if suppressed is None:
        logger.debug("The patch is refused again: %s", error)
    else:
        logger.error("%s%s", ''.join(parts), failures.repeated(suppressed))


def _refusal(error: APIError) -> str:
    """What the server has said about the part of a patch it refuses."""
    if isinstance(error, APIUnprocessableError):
        return f"The server rejected the patch as invalid: {_explain(error)}"
    if too_large(error):
        return f"The server rejected the patch as too large: {_explain(error)}"
    return f"The server refused the patch: {_explain(error)}"


def _unpatchable(error: APIError, watch: ResourceWatch) -> str:
    """Why nothing at all of a patch could be stored, and what to do."""
    if isinstance(error, APIForbiddenError):
        plural = watch.resource.plural
        status = f" (and on {plural}/status)" if 'status' in watch.resource.subresources else ''
        return (f"The operator may not patch {plural}: {_explain(error)}. Grant it the 'patch' verb on "
                f"{plural}{status} in its Role or ClusterRole.")
    return f"{_refusal(error)}."


def _unsendable(error: APIError, watch: ResourceWatch) -> str:
    """One line for a patch that the server will not take for a while: refused credentials, or throttling."""
    if isinstance(error, APIUnauthorizedError):
        return (f"Cannot store the outcome of the handling: the Kubernetes API refuses the operator's credentials, "
                f"also after logging in again ({_explain(error)}). Sending it again in {REJECTED_PATCH_DELAY:g}s; "
                f"check the credentials (or the login handlers).")
    return (f"Cannot store the outcome of the handling: the Kubernetes API keeps throttling the operator "
            f"({_explain(error)}), also after waiting {watch.context.throttle_retries} times as it asked. "
            f"Sending it again in {REJECTED_PATCH_DELAY:g}s. If this repeats, lower "
            f"config.batching.worker_limit, or ask for more API priority for the operator (a FlowSchema).")


def _explain(error: APIError) -> str:
    """The server's explanation, briefly: its causes if it lists them (some messages quote the whole object)."""
    causes = error.details.get('causes') if isinstance(error.details, Mapping) else None
    if isinstance(causes, list) and causes:
        items = [_cause(cause) for cause in causes[:3] if isinstance(cause, Mapping)]
        more = f" (and {len(causes) - 3} more)" if len(causes) > 3 else ''
        if items:
            return _cut(f"{error.status} {error.reason or 'Error'}: {'; '.join(items)}{more}", MAX_EXPLANATION)
    return _cut(str(error), MAX_EXPLANATION)


def _cause(cause: Mapping[str, Any]) -> str:
    field, message = cause.get('field'), cause.get('message') or cause.get('reason') or ''
    return _cut(f"{field}: {message}" if field else str(message), MAX_EXPLANATION // 2)


def _size(patch: Patch) -> int:
    try:
        return len(json.dumps(patch, separators=(',', ':')).encode('utf-8'))
    except (TypeError, ValueError):
        return 0  # not JSON at all: the sending says so


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit - 1]}…"


def rebase(patch: Patch, fresh: Body, *, finalizer: str) -> Patch:
    """
    Adapt a patch that conflicted to the fresh object.

    Only the finalizers list carries a version precondition (lists are
    replaced whole, so another controller's new finalizer must not be lost):
    recompute it from the fresh list, keeping what we wanted for ours.
    """
    rebased = Patch(patch)
    meta = dict(rebased.get('metadata') or {})
    pending = meta.get('finalizers')
    if isinstance(pending, list):
        fresh_list = [f for f in fresh.metadata.finalizers if f != finalizer]
        meta['finalizers'] = fresh_list + ([finalizer] if finalizer in pending else [])
        meta['resourceVersion'] = fresh.metadata.resource_version
    else:
        meta.pop('resourceVersion', None)
    rebased['metadata'] = meta
    return rebased
