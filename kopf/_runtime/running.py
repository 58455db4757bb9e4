"""
Running an operator: startup, login, watching every resource, and a graceful exit.

``kopf.run()`` blocks (for ``kopf run`` and scripts); ``await kopf.operator()``
runs inside an existing event loop; ``await kopf.spawn_tasks()`` returns the
operator's tasks for applications that orchestrate tasks themselves, and
``await kopf.run_tasks(tasks)`` runs them to the end.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
import threading
from collections.abc import AsyncIterator, Callable, Collection, Coroutine, Hashable
from typing import Any, TypedDict

from typing_extensions import Unpack

from kopf._admission import serving
from kopf._cycle import cycle, processing, queueing
from kopf._daemons.calls import patch_object
from kopf._daemons.keeper import Daemons
from kopf._handlers.registries import Activity, OperatorRegistry, get_default_registry
from kopf._indexing import indexing
from kopf._kube import applying, auth, events, watching
from kopf._kube.auth import APIContext
from kopf._kube.errors import APIConnectionError, APIError, APIForbiddenError, APINotFoundError, describe_api_failure
from kopf._kube.objects import ObjectsClient
from kopf._observability import recording
from kopf._observability.readiness import Readiness
from kopf._reconciliation import reconciling
from kopf._replicas import fencing, peering
from kopf._runtime import (
    activities,
    allocation,
    observation,
    observing,
    orchestration,
    posting,
    preflight,
    probes,
    probing,
)
from kopf._storage import cluster
from kopf._storage.errors import StorageError
from kopf._structs.credentials import AiohttpSession, ConnectionInfo
from kopf._structs.ephemera import Memo
from kopf._structs.namespaces import NamespacePatternError, NamespaceScope, NamespaceSpec
from kopf._structs.resources import Resource, Selector
from kopf._structs.typedefs import RawEvent
from kopf.config import OperatorConfig, PostingConfig

logger = logging.getLogger('kopf._runtime.running')

StopFlag = threading.Event | asyncio.Event

# The longest the operator waits for its tasks to finish after a stop request.
GRACEFUL_EXIT_TIMEOUT = 10.0


class OperatorError(Exception):
    """The operator cannot start or run; the message says why."""


def run(*, loop: asyncio.AbstractEventLoop | None = None, **kwargs: Any) -> None:
    """
    Run the operator until it is stopped (SIGINT/SIGTERM or the stop flag); blocks.

    ``loop``, as in Kopf, is the event loop to run it in (e.g. uvloop's); it
    stays open afterwards: it is the caller's. Without it, a new loop is
    made and closed (:func:`asyncio.run`).
    """
    allocation.return_big_buffers()  # the process is the operator's: its memory goes back after bursts
    main = _owning_the_process(operator(**kwargs))
    if loop is None:
        asyncio.run(main)
    else:
        loop.run_until_complete(main)


async def _owning_the_process(main: Coroutine[Any, Any, None]) -> None:
    """The operator, with the upkeep of a process of its own: free memory goes back when quiet; its limit is watched."""
    trimmer = asyncio.create_task(allocation.trim_when_quiet(), name="kopf: free memory back when quiet")
    guard = asyncio.create_task(allocation.warn_near_memory_limit(), name="kopf: warn near the memory limit")
    try:
        await main
    finally:
        for task in (trimmer, guard):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class OperatorOptions(TypedDict, total=False):
    """The options of an operator: those of :func:`spawn_tasks`, which :func:`operator` passes on."""

    registry: OperatorRegistry | None
    config: OperatorConfig | None
    settings: OperatorConfig | None
    memo: Any
    namespaces: Collection[NamespaceSpec]
    namespace: NamespaceSpec | None
    clusterwide: bool
    standalone: bool
    ha: bool
    shards: bool
    peering_name: str | None
    peering_namespace: str | None
    identity: str | None
    priority: int | None
    liveness_endpoint: str | None
    readiness_endpoint: str | None
    metrics_endpoint: str | None
    stop_flag: StopFlag | None
    ready_flag: StopFlag | None


async def operator(**options: Unpack[OperatorOptions]) -> None:
    """Run the operator in the current event loop until it is stopped; the options are :func:`spawn_tasks`'s."""
    await run_tasks(await spawn_tasks(**options))


async def spawn_tasks(
        *,
        registry: OperatorRegistry | None = None,
        config: OperatorConfig | None = None,
        settings: OperatorConfig | None = None,
        memo: Any = None,
        namespaces: Collection[NamespaceSpec] = (),
        namespace: NamespaceSpec | None = None,
        clusterwide: bool = False,
        standalone: bool = False,
        ha: bool = False,
        shards: bool = False,
        peering_name: str | None = None,
        peering_namespace: str | None = None,
        identity: str | None = None,
        priority: int | None = None,
        liveness_endpoint: str | None = None,
        readiness_endpoint: str | None = None,
        metrics_endpoint: str | None = None,
        stop_flag: StopFlag | None = None,
        ready_flag: StopFlag | None = None,
) -> list[asyncio.Task[None]]:
    """
    Create the operator's task, for embedding into applications with their own event loop.

    ``settings`` is Kopf's name of ``config`` (give one of them).
    ``namespace`` is one more namespace to serve, as in Kopf.
    ``ha``/``shards`` make replicas coordinate through Leases (see
    docs/replicas.rst); ``standalone`` (the default) means no coordination;
    ``priority`` ranks HA replicas (Kopf's peering priority). These
    arguments go into ``config.peering`` before the startup handlers, which
    may still change it; so does ``metrics_endpoint`` into ``config.metrics``.
    ``readiness_endpoint`` serves ``/readyz`` there; by default it is served
    beside the liveness endpoint, else beside the metrics (docs/observability.rst).
    """
    if config is not None and settings is not None and config is not settings:
        raise TypeError("Pass the operator's settings either as settings= or as config=, not both.")
    namespaces = (*namespaces, namespace) if namespace is not None else tuple(namespaces)
    clusterwide = clusterwide or not namespaces
    try:
        scope = None if clusterwide else NamespaceScope.parse(namespaces)
    except NamespacePatternError as e:
        raise OperatorError(str(e)) from None
    config = config or settings or OperatorConfig()
    _configure_peering(config, standalone=standalone, ha=ha, shards=shards, name=peering_name,
                       namespace=peering_namespace, identity=identity, priority=priority)
    if metrics_endpoint is not None:
        config.metrics.endpoint = metrics_endpoint
    task = asyncio.create_task(_serve(
        registry=registry or get_default_registry(),
        config=config,
        memo=memo if memo is not None else Memo(),
        namespaces=tuple(namespaces),
        scope=scope,
        liveness_endpoint=liveness_endpoint,
        readiness_endpoint=readiness_endpoint,
        stop_flag=stop_flag,
        ready_flag=ready_flag,
    ), name='kopf operator')
    return [task]


def _configure_peering(
        config: OperatorConfig,
        *,
        standalone: bool,
        ha: bool,
        shards: bool,
        name: str | None,
        namespace: str | None,
        identity: str | None,
        priority: int | None = None,
) -> None:
    chosen = [option for option, flag in [('standalone', standalone), ('ha', ha), ('shards', shards)] if flag]
    if len(chosen) > 1:
        raise OperatorError(f"Choose one of standalone, ha, shards; got {' and '.join(chosen)}: "
                            "a standalone operator does not coordinate, HA and shards coordinate differently.")
    if chosen:
        config.peering.mode = chosen[0]
    elif name is not None and config.peering.mode == 'standalone':
        config.peering.mode = 'ha'  # as in Kopf: a peering name alone means replicas of which one handles
    for field, value in [('name', name), ('namespace', namespace), ('identity', identity), ('priority', priority)]:
        if value is not None:
            setattr(config.peering, field, value)


async def run_tasks(
        root_tasks: Collection[asyncio.Task[Any]],
        *,
        ignored: Collection[asyncio.Task[Any]] = frozenset(),
        return_when: str = asyncio.FIRST_COMPLETED,
) -> None:
    """
    Run the operator's tasks (of :func:`spawn_tasks`) until they end, and end them all together.

    When the first of them ends (``return_when``, as in :func:`asyncio.wait`),
    the others are cancelled and awaited; a task's failure is re-raised. If
    this coroutine itself is cancelled, so are the tasks. ``ignored`` tasks
    are neither awaited nor cancelled.
    """
    skipped = set(ignored)
    tasks = [task for task in root_tasks if task not in skipped]
    if not tasks:
        return
    try:
        await asyncio.wait(tasks, return_when=return_when)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in tasks:
        error = None if task.cancelled() else task.exception()
        if error is not None:
            raise error


async def _serve(
        *,
        registry: OperatorRegistry,
        config: OperatorConfig,
        memo: Any,
        namespaces: tuple[NamespaceSpec, ...],
        scope: NamespaceScope | None,
        liveness_endpoint: str | None,
        stop_flag: StopFlag | None,
        ready_flag: StopFlag | None,
        readiness_endpoint: str | None = None,
) -> None:
    """Run one operator: ``scope`` is what ``namespaces`` serve, ``None`` for all namespaces (cluster-wide)."""
    clusterwide = scope is None
    stop = asyncio.Event()
    health = probing.Health()
    readiness = Readiness()
    indexes = indexing.OperatorIndexes(registry)
    reconciliation = reconciling.OperatorReconciliation(registry, config=config, memo=memo)
    # An embedding application that passes its own stop flag keeps its own signal handling.
    with _stop_on_signals(stop) if stop_flag is None else contextlib.nullcontext():
        # A port in use fails here, before anything else has started.
        try:
            liveness = await probes.serve_liveness(liveness_endpoint, health=health, registry=registry,
                                                   config=config, memo=memo, indexes=indexes)
        except probing.LivenessError as e:
            raise OperatorError(str(e)) from e
        if liveness is not None and readiness_endpoint is None:
            # Beside liveness from the very start: "not ready" while starting, never a 404 for the probes.
            observing.serve_readiness_beside(liveness, readiness)
        stopper = asyncio.create_task(_relay_stop_flag(stop_flag, stop)) if stop_flag is not None else None
        try:
            await activities.run_activity(registry=registry, activity=Activity.STARTUP, config=config,
                                          memo=memo, logger=logger, indexes=indexes, stop=stop)
            config.persistence.freeze()
            try:
                async with contextlib.AsyncExitStack() as stack:
                    await stack.enter_async_context(observing.observing(
                        config=config, readiness=readiness, liveness=liveness, readiness_endpoint=readiness_endpoint))
                    info = await _login(registry=registry, config=config, memo=memo, indexes=indexes, stop=stop)
                    relogin = functools.partial(_login, registry=registry, config=config, memo=memo, indexes=indexes)
                    context = await stack.enter_async_context(_api_context(info, config=config, relogin=relogin))
                    await stack.enter_async_context(_storages(config, context=context))
                    await reconciliation.check(context=context, namespaces=[None] if scope is None else
                                               sorted(scope.exact_names))
                    insights = await stack.enter_async_context(observation.observing(
                        context=context, selectors=registry.selectors, config=config, scope=scope, stop=stop))
                    handled = [resource for selector, resource in insights.resources.items()
                               if not registry.is_related_only(selector)]  # children-only: nothing is stored
                    await preflight.check_persistence(context=context, resources=handled,
                                                      persistence=config.persistence)
                    admitted = await _resolve(context, registry.admission_selectors)
                    view = peering.ReplicaView() if config.peering.mode != 'standalone' else None
                    await stack.enter_async_context(serving.admission_webhooks(
                        context=context, registry=registry, resources=admitted, config=config, memo=memo,
                        stop=stop, namespaces=_webhook_namespaces(scope), indexes=indexes,
                        served=_served_namespaces(scope, insights), replicas=view))
                    peers = await stack.enter_async_context(peering.peering(
                        context=context, config=config.peering, namespaces=namespaces,
                        clusterwide=clusterwide, stop=stop, view=view))
                    await _watch_all(context=context, insights=insights, registry=registry, config=config,
                                     memo=memo, stop=stop, ready_flag=ready_flag, health=health, peers=peers,
                                     indexes=indexes, readiness=readiness, reconciliation=reconciliation)
            except (serving.AdmissionSetupError, StorageError, observation.ObservationError,
                    observing.ObservabilityError, reconciling.ReconciliationError) as e:
                raise OperatorError(str(e)) from e
            except peering.PeeringError as e:
                raise OperatorError(str(e)) from None
        except activities.ActivityInterrupted as e:
            logger.info("%s", e)
        finally:
            health.stopping()
            readiness.stopping()
            if stopper is not None:
                stopper.cancel()
            if liveness is not None:
                await liveness.stop()
            await activities.run_activity(registry=registry, activity=Activity.CLEANUP, config=config,
                                          memo=memo, logger=logger, indexes=indexes)
    logger.info("The operator has stopped.")


@contextlib.asynccontextmanager
async def _storages(config: OperatorConfig, *, context: APIContext | None = None) -> AsyncIterator[None]:
    """
    Enter the configured storages (e.g. to connect) for the operator's lifetime; exit them at stop.

    Storages that keep their records in the cluster get the operator's API session first.
    """
    storages = (config.persistence.progress_storage, config.persistence.diffbase_storage)
    if context is not None:
        cluster.provide(storages, cluster.ClusterAccess(ObjectsClient(context)))
    async with contextlib.AsyncExitStack() as stack:
        entered: list[object] = []
        for storage in storages:
            if not any(storage is other for other in entered):  # one object may serve as both
                await stack.enter_async_context(storage)
                entered.append(storage)
        yield


async def _login(
        *,
        registry: OperatorRegistry,
        config: OperatorConfig,
        memo: Any,
        indexes: indexing.OperatorIndexes | None = None,
        stop: asyncio.Event | None = None,
) -> ConnectionInfo | AiohttpSession:
    """Credentials from the login handlers if there are any, else from the environment."""
    results = await activities.run_activity(registry=registry, activity=Activity.LOGIN, config=config,
                                          memo=memo, logger=logger, indexes=indexes, stop=stop)
    for result in results.values():
        if isinstance(result, (ConnectionInfo, AiohttpSession)):
            return result
    if results:
        raise OperatorError("The login handlers returned no kopf.ConnectionInfo (or kopf.AiohttpSession).")
    login = functools.partial(auth.login_default, settings=config)  # trust_env as the settings say
    info = await asyncio.get_running_loop().run_in_executor(None, login)
    await asyncio.get_running_loop().run_in_executor(None, auth.configure_official_client)
    return info


def _api_context(info: ConnectionInfo | AiohttpSession, *, config: OperatorConfig, relogin: auth.Relogin) -> APIContext:
    """The API session as configured in ``config.networking``; it logs in again with the same login."""
    networking = config.networking
    if networking.max_concurrent_requests < 1:
        raise OperatorError(f"config.networking.max_concurrent_requests must be at least 1, "
                            f"got {networking.max_concurrent_requests!r}.")
    idle = networking.idle_connection_timeout
    if idle is not None and (isinstance(idle, bool) or not isinstance(idle, (int, float)) or idle <= 0):
        raise OperatorError(f"config.networking.idle_connection_timeout must be a positive number of seconds "
                            f"(or None to keep idle connections open), got {idle!r}.")
    return APIContext(info, timeout=networking.request_timeout, connect_timeout=networking.connect_timeout,
                      keepalive=networking.tcp_keepalive, backoffs=networking.error_backoffs or (),
                      max_retry_after=networking.max_retry_after, throttle_retries=networking.throttle_retries,
                      max_concurrent_requests=networking.max_concurrent_requests, relogin=relogin,
                      idle_timeout=networking.idle_connection_timeout)


def _webhook_namespaces(scope: NamespaceScope | None) -> Collection[str] | None:
    """
    The namespaces that the admission webhooks are limited to (``None``: all of them).

    A webhook configuration selects namespaces by their names' label, which
    knows no patterns: with patterns, the webhooks are not limited.
    """
    if scope is None or scope.inexact:
        return None
    return sorted(scope.exact_names)


def _served_namespaces(scope: NamespaceScope | None, insights: observation.Insights) -> Callable[[str], bool] | None:
    """With namespace patterns, the admission reviews of the namespaces served now, as the watches are."""
    if scope is None or not scope.inexact:
        return None
    return lambda namespace: namespace in insights.namespaces


async def _resolve(context: APIContext, selectors: Collection[Selector]) -> dict[Selector, Resource]:
    """
    Resolve the resources of the admission handlers (once, at the start); an unknown one stops the operator.

    The selectors of many resources (``kopf.EVERYTHING``, categories,
    callables) add every other served resource that they select (each under
    a selector of its own), so that no resource is watched twice.
    """
    resolution = await observation.resolve(context, selectors)
    for selector in resolution.unresolved:
        raise OperatorError(f"Cannot serve the admission webhooks of the resource {selector}: the cluster does not "
                            f"serve it. Is its CustomResourceDefinition installed, and is the name spelled right?")
    for selector, message in resolution.ambiguous.items():
        raise OperatorError(f"Cannot serve the resource {selector}: {message}")
    return dict(resolution.resources)


async def _watch_all(
        *,
        context: APIContext,
        insights: observation.Insights,
        registry: OperatorRegistry,
        config: OperatorConfig,
        memo: Any,
        stop: asyncio.Event,
        ready_flag: StopFlag | None,
        health: probing.Health | None = None,
        peers: peering.Peering | None = None,
        indexes: indexing.OperatorIndexes | None = None,
        readiness: Readiness | None = None,
        reconciliation: reconciling.OperatorReconciliation | None = None,
) -> None:
    """
    Watch every served resource in every served namespace, and post events, until stopped.

    The streams follow the insights: they start and stop as resources and
    namespaces appear and go (:mod:`~kopf._runtime.orchestration`). With
    replicas (``peers``), only what the gate permits is handled, and on
    stopping, the running cycles finish while the Lease is still held.
    """
    queue: asyncio.Queue[posting.K8sEvent] = asyncio.Queue()
    posting.event_queue_var.set(queue)
    posting.event_loop_var.set(asyncio.get_running_loop())
    posting.event_settings_var.set(config.posting)
    poster = asyncio.create_task(posting.poster(queue=queue, post=functools.partial(_post, context, config.posting)))
    handler = posting.PostingHandler(settings=lambda: config.posting)
    logging.getLogger('kopf.objects').addHandler(handler)
    gate = peers.gate if peers is not None else None
    handling_context = context if gate is None else fencing.FencedAPIContext(context, gate)
    if gate is not None:  # storages in the cluster write to it under the same fence as the handling cycles
        cluster.provide([config.persistence.progress_storage, config.persistence.diffbase_storage],
                        cluster.ClusterAccess(ObjectsClient(handling_context)))
    indexes = indexes if indexes is not None else indexing.OperatorIndexes(registry)
    recording.current().follow_indexes(indexes)
    if peers is not None:
        recording.current().follow_replica(peers.state)
        if readiness is not None:
            readiness.coordinated(peers.coordination)
    on_listed = readiness.listed if readiness is not None else None
    reconciliation = reconciliation or reconciling.OperatorReconciliation(registry, config=config, memo=memo)
    reconciliation.serve(context=handling_context, gate=gate)
    applying.context_var.set(handling_context)  # for kopf.apply() in handlers
    applying.loop_var.set(asyncio.get_running_loop())

    def spawn(stream: orchestration.Stream, until: asyncio.Event) -> tuple[asyncio.Task[None], Daemons | None]:
        keeper = _keeper(registry, stream.resource, handling_context, gate=gate)
        reconciler = reconciliation.stage(stream.resource)
        stages: list[cycle.Stage] = [*cycle.STAGES, *([keeper] if keeper is not None else []),
                                     *([reconciler] if reconciler is not None else [])]
        watch = processing.ResourceWatch(context=handling_context, resource=stream.resource, selector=stream.selector,
                                         registry=registry, config=config, memo=memo, indexes=indexes, stages=stages)
        task = asyncio.create_task(_watch_one(watch, namespace=stream.namespace, stop=until, gate=gate,
                                              insights=insights, indexes=indexes, reconciliation=reconciliation,
                                              listed=on_listed),
                                   name=f"kopf watch of {stream}")
        return task, keeper

    streams = orchestration.Streams(spawn=spawn, exit_timeout=GRACEFUL_EXIT_TIMEOUT,
                                    daemons_timeout=config.background.exit_timeout, indexes=indexes,
                                    reconciliation=reconciliation)
    initial = orchestration.desired_streams(insights.resources, insights.namespaces)
    for stream in initial:
        if registry.get_indexing_handlers(stream.resource):
            indexes.expect(stream.listing)  # before any stream starts: handlers wait for all of the start
        if reconciliation.relates(stream.resource):
            reconciliation.expect(stream.listing)  # the first reconciliations see the children of the start
    if readiness is not None:
        readiness.expect({stream.listing: str(stream) for stream in initial})
    insights.revised.clear()
    streams.follow(initial)
    if health is not None:
        health.watching(streams.tasks)
    if ready_flag is not None:
        ready_flag.set()
    closing: asyncio.Task[Any] | None = None
    try:
        failure = await _follow(streams, insights, stop)
        closing = asyncio.create_task(streams.close_daemons(), name='kopf stopping daemons')
        reconciled = asyncio.create_task(reconciliation.close(), name='kopf stopping the reconciliations')
        if peers is not None:
            await asyncio.wait([closing, reconciled])  # the next owner must not start them while ours still run
            await peers.step_down(timeout=config.batching.exit_timeout)
        stop.set()
        streams.stop()
        await streams.wait(timeout=GRACEFUL_EXIT_TIMEOUT)
        if failure is not None:
            error = failure[1].exception()
            assert error is not None
            raise OperatorError(watch_failure(error, failure[0].resource, failure[0].namespace)) from error
    finally:
        await streams.cancel()
        await (closing or streams.close_daemons())
        await reconciliation.close()
        logging.getLogger('kopf.objects').removeHandler(handler)
        await _drain(queue, timeout=1.0)
        poster.cancel()
        await asyncio.gather(poster, return_exceptions=True)


async def _follow(
        streams: orchestration.Streams,
        insights: observation.Insights,
        stop: asyncio.Event,
) -> tuple[orchestration.Stream, asyncio.Task[Any]] | None:
    """
    Start and stop the streams as the insights change, until stopped or until a stream fails.

    Returns the failed stream and its task, if one has failed (the operator
    then stops); a stream that has ended by itself (its resource gone for
    good) is cleaned up, and the rest go on.
    """
    stopped = asyncio.create_task(stop.wait(), name='kopf waiting for the stop')
    try:
        while not stop.is_set():
            revised = asyncio.create_task(insights.revised.wait(), name='kopf waiting for the insights')
            try:
                done, _ = await asyncio.wait([stopped, revised, *streams.tasks], return_when=asyncio.FIRST_COMPLETED)
            finally:
                revised.cancel()
            for task in done:
                stream = streams.stream_of(task)
                if stream is None:
                    continue
                if not task.cancelled() and task.exception() is not None:
                    return stream, task
                streams.ended(task)
            if insights.revised.is_set() and not stop.is_set():
                insights.revised.clear()
                streams.follow(orchestration.desired_streams(insights.resources, insights.namespaces))
        return None
    finally:
        stopped.cancel()


def _keeper(
        registry: OperatorRegistry,
        resource: Resource,
        context: APIContext,
        *,
        gate: fencing.Gate | None,
) -> Daemons | None:
    """The keeper of the stream's daemons and timers, if its resource has any."""
    if not registry.has_spawning_handlers(resource):
        return None
    return Daemons(patcher=functools.partial(patch_object, context=context, resource=resource),
                   fence=gate)


def watch_failure(error: BaseException, resource: Resource, namespace: str | None) -> str:
    """One line for a watch that has failed for good: what was watched, why, and what to do."""
    where = f"{resource}" + (f" in {namespace!r}" if namespace is not None else " cluster-wide")
    if isinstance(error, APIForbiddenError):
        return (f"Watching {where} is forbidden: {error}. Grant the operator's user or service account the "
                f"'list' and 'watch' verbs on {resource.plural} in its Role or ClusterRole (see docs/install.rst).")
    if isinstance(error, (APIError, APIConnectionError)):
        return f"Watching {where} has failed: {describe_api_failure(error)}"
    return f"Watching {where} has failed: {type(error).__name__}: {error}"


async def _watch_one(
        watch: processing.ResourceWatch,
        *,
        namespace: str | None,
        stop: asyncio.Event,
        gate: fencing.Gate | None = None,
        insights: observation.Insights | None = None,
        indexes: indexing.OperatorIndexes | None = None,
        listed: Callable[[Hashable], None] | None = None,
        reconciliation: reconciling.OperatorReconciliation | None = None,
) -> None:
    """
    Watch one resource in one namespace (or cluster-wide) and handle its objects, until stopped.

    A ``404`` means that the resource is not served any more (its CRD is
    being deleted, or has just been re-created and is not served yet). When
    the resources are kept current, the watch asks for them to be resolved
    anew and tries again from time to time, until it is stopped (the
    resource is gone) or the resource is served again; otherwise it stops
    with one warning, and the rest of the operator goes on.
    """
    where = f"{watch.resource}" + (f" in {namespace!r}" if namespace is not None else " cluster-wide")
    settings = watch.config.watching
    delay = settings.reconnect_backoff
    while not stop.is_set():
        try:
            await _handle_stream(watch, namespace=namespace, stop=stop, gate=gate, indexes=indexes,
                                 reconciliation=reconciliation, listed=listed)
            return
        except APINotFoundError as e:
            if insights is None or not insights.scanning:
                logger.warning("Watching %s has stopped: the cluster does not serve %s any more (%s); its CRD is "
                               "probably deleted. It is watched again after the operator restarts%s.", where,
                               watch.resource.plural, e, "" if insights is None else
                               " (resources that appear later are noticed only when the CRDs can be watched and "
                               "settings.scanning.disabled is not set)")
                return
            insights.suspect(watch.resource)
            logger.debug("Watching %s has met a 404 (%s); trying again in %gs unless the resource is gone.",
                         where, e, delay)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=delay)
        delay = min(delay * 2, max(settings.max_reconnect_backoff, settings.reconnect_backoff))


async def _handle_stream(
        watch: processing.ResourceWatch,
        *,
        namespace: str | None,
        stop: asyncio.Event,
        gate: fencing.Gate | None,
        indexes: indexing.OperatorIndexes | None,
        listed: Callable[[Hashable], None] | None = None,
        reconciliation: reconciling.OperatorReconciliation | None = None,
) -> None:
    listing = (watch.selector, namespace)
    related = reconciliation is not None and reconciliation.relates(watch.resource)
    callbacks = [functools.partial(indexes.listed, listing)] if indexes is not None else []
    if listed is not None:
        callbacks.append(functools.partial(listed, listing))
    if reconciliation is not None and related:
        callbacks.append(functools.partial(reconciliation.listed, listing, watch.resource))

    def on_listed() -> None:
        for callback in callbacks:
            callback()

    def open_stream(until: asyncio.Event) -> AsyncIterator[RawEvent]:
        return watching.infinite_watch(context=watch.context, resource=watch.resource, namespace=namespace,
                                       settings=watch.config.watching, stop=until,
                                       on_listed=on_listed if callbacks else None)

    stream: AsyncIterator[RawEvent]
    stream = open_stream(stop) if gate is None else fencing.gated_stream(gate, open_stream, stop=stop)
    if indexes is not None and watch.registry.get_indexing_handlers(watch.resource):
        # Every replica indexes every event, before the gate decides which objects it handles.
        stream = indexes.indexed(stream, listing=listing, registry=watch.registry, selector=watch.resource,
                                 resource=watch.resource, config=watch.config, memo=watch.memo, memos=watch.memos)
    if reconciliation is not None and related:
        # Every replica sees every child: a child belongs to its owner's replica, not to its own uid's.
        stream = reconciliation.watched(stream, resource=watch.resource, listing=listing)
    if watch.registry.is_related_only(watch.resource):
        async for _ in stream:  # watched for the reconcile handlers of other resources only: nothing to handle
            pass
        return
    await queueing.watch_objects(stream=stream, processor=functools.partial(processing.process_event, watch),
                                 settings=watch.config.batching, gate=gate, admission=watch.context.slots,
                                 probe=recording.current().queue(watch.resource, gate),
                                 at_rest=functools.partial(processing.at_rest, watch))


async def _post(context: APIContext, settings: PostingConfig, item: posting.K8sEvent) -> None:
    await events.post_event(context=context, ref=item.ref, type=item.type, reason=item.reason,
                            message=item.message, component=settings.reporting_component,
                            instance=settings.reporting_instance, name_prefix=settings.event_name_prefix)


async def _drain(queue: asyncio.Queue[posting.K8sEvent], *, timeout: float) -> None:
    """Give the last queued events a moment to be posted before exiting."""
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(queue.join(), timeout=timeout)


async def _relay_stop_flag(flag: StopFlag, stop: asyncio.Event) -> None:
    """Turn an external (possibly cross-thread) stop flag into the operator's own stop event."""
    if isinstance(flag, asyncio.Event):
        await flag.wait()
    else:
        while True:  # a threading.Event cannot be awaited; polling keeps no thread blocked
            if flag.is_set():
                break
            await asyncio.sleep(0.1)
    logger.info("Stop requested; stopping gracefully.")
    stop.set()


@contextlib.contextmanager
def _stop_on_signals(stop: asyncio.Event) -> Any:
    """SIGINT/SIGTERM stop the operator gracefully, where signals can be handled (the main thread)."""
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, _on_signal, sig, stop)
                installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


def _on_signal(sig: signal.Signals, stop: asyncio.Event) -> None:
    logger.info("Signal %s received; stopping gracefully.", sig.name)
    stop.set()
