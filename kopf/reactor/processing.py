"""
Processing one event of one object: handle it, send the patch, report when to continue.

This is where the pure handling cycle meets the API: the patch that the
handling has accumulated is sent here, and its failures are dealt with so
that no progress is lost: conflicts are re-based on the fresh object and
re-sent, transient errors are re-sent after a pause, and a patch that the
server rejects as invalid (422) is re-sent without the handlers' results and
changes -- the progress alone -- with the rejected part reported once.

Nothing of an event is kept here once it is processed: the body, the patch
and the logger live only in this call's frames.
"""
from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import MutableSet, Sequence
from typing import Any

import aiohttp

from kopf.clients import fetching, patching
from kopf.clients.auth import APIContext
from kopf.clients.errors import APIConflictError, APIConnectionError, APIServerError, APIUnprocessableError
from kopf.config import OperatorConfig
from kopf.engines.loggers import ObjectLogger
from kopf.reactor import cycle
from kopf.reactor.indexing import OperatorIndexes
from kopf.reactor.queueing import ProcessingOutcome, RawEvent, object_key
from kopf.reactor.registries import OperatorRegistry
from kopf.structs.bodies import Body
from kopf.structs.patches import Patch
from kopf.structs.resources import Resource, Selector

# How often to re-send a patch that failed for transient reasons (after the client's own retries).
PATCH_ATTEMPTS = 5
PATCH_PAUSE = 1.0
# When the server rejects our patch as invalid, handling is tried again this much later.
REJECTED_PATCH_DELAY = 60.0


@dataclasses.dataclass(frozen=True)
class ResourceWatch:
    """Everything the processing of one resource's events needs, fixed for the operator's lifetime."""

    context: APIContext
    resource: Resource
    selector: Selector
    registry: OperatorRegistry
    config: OperatorConfig
    memo: Any
    seen: MutableSet[str] = dataclasses.field(default_factory=set)  # objects seen since the start
    stages: Sequence[cycle.Stage] = cycle.STAGES  # what runs on every event (e.g. the resource's daemons)
    indexes: OperatorIndexes | None = None  # the operator's indexes, for the handlers


async def process_event(watch: ResourceWatch, raw_event: RawEvent, woken_up: bool) -> ProcessingOutcome:
    """Handle one event (or a wake-up after a delay) of one object."""
    body = Body(raw_event['object'])
    logger = ObjectLogger(body=body)
    if woken_up:
        patch = await cycle.touch(config=watch.config, body=body)
        if patch:
            return await _send(watch, body=body, patch=patch, delay=None, logger=logger)
        # Storages without a touch marker: continue from the latest known state ourselves.

    key = object_key(raw_event)
    first_seen = key not in watch.seen
    watch.seen.add(key)
    if raw_event.get('type') == 'DELETED':
        watch.seen.discard(key)

    result = await cycle.handle_object(
        registry=watch.registry, config=watch.config, resource=watch.selector,
        event_type=raw_event.get('type'), body=body, first_seen=first_seen, memo=watch.memo, logger=logger,
        stages=watch.stages, indexes=watch.indexes, resolved=watch.resource)
    if not result.patch:
        return ProcessingOutcome(delay=result.delay)
    return await _send(watch, body=body, patch=result.patch, delay=result.delay, logger=logger,
                       essential=result.essential, extras=result.extras)


async def _send(
        watch: ResourceWatch,
        *,
        body: Body,
        patch: Patch,
        delay: float | None,
        logger: ObjectLogger,
        essential: Patch | None = None,
        extras: tuple[str, ...] = (),
) -> ProcessingOutcome:
    """
    Send the patch until it lands, keeping it intact across transient failures.

    If the server rejects it as invalid and it has an ``essential`` part (the
    progress, the finalizer, the diff-base), the rejected rest (``extras``)
    is reported once and the essential part is sent alone.
    """
    name = body.metadata.name or ''
    namespace = body.metadata.namespace
    rejection = ''
    attempt = 0
    while attempt < PATCH_ATTEMPTS:
        attempt += 1
        try:
            patched = await patching.patch_obj(context=watch.context, resource=watch.resource,
                                               namespace=namespace, name=name, patch=patch, logger=logger)
        except APIConflictError:
            fresh = await fetching.read_obj(context=watch.context, resource=watch.resource,
                                            namespace=namespace, name=name)
            if fresh is None:
                return ProcessingOutcome()
            logger.debug("The object has changed meanwhile; re-sending the patch based on the fresh object.")
            finalizer = watch.config.persistence.finalizer
            patch = rebase(patch, Body(fresh), finalizer=finalizer)
            essential = rebase(essential, Body(fresh), finalizer=finalizer) if essential is not None else None
            continue
        except APIUnprocessableError as e:
            if essential is not None:
                # The handlers' results or changes may be what the server refuses: never lose the progress to them.
                rejection = f"The server rejected the patch as invalid: {e}. Not stored: {', '.join(extras)}."
                if not essential:
                    logger.error("%s", rejection)
                    return ProcessingOutcome(delay=delay)
                patch, essential, attempt = essential, None, 0
                continue
            logger.error("%sThe server rejected the patch as invalid: %s. Retrying the handling in %ss.",
                         f"{rejection} " if rejection else "", e, REJECTED_PATCH_DELAY)
            return ProcessingOutcome(delay=REJECTED_PATCH_DELAY)
        except (APIServerError, APIConnectionError, aiohttp.ClientError, asyncio.TimeoutError) as e:
            logger.warning("Failed to patch the object (attempt %d of %d): %s", attempt, PATCH_ATTEMPTS, e)
            await asyncio.sleep(PATCH_PAUSE * attempt)
            continue
        if patched is None:
            return ProcessingOutcome()  # gone meanwhile: nothing left to do
        if rejection:
            logger.error("%s The handlers' progress is stored without it; they are not run again.", rejection)
        rv = patched.get('metadata', {}).get('resourceVersion')
        return ProcessingOutcome(delay=delay, resource_version=str(rv) if rv else None, body=patched)
    logger.error("%sFailed to patch the object %d times; retrying the handling in %ss.",
                 f"{rejection} " if rejection else "", PATCH_ATTEMPTS, REJECTED_PATCH_DELAY)
    return ProcessingOutcome(delay=REJECTED_PATCH_DELAY)


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
