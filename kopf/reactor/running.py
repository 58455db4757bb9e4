"""
Running an operator: startup, login, watching every resource, and a graceful exit.

``kopf.run()`` blocks (for ``kopf run`` and scripts); ``await kopf.operator()``
runs inside an existing event loop; ``await kopf.spawn_tasks()`` returns the
operator's tasks for applications that orchestrate tasks themselves.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
import threading
from collections.abc import AsyncIterator, Collection
from typing import Any

from kopf.clients import auth, discovery, events, watching
from kopf.clients.auth import APIContext
from kopf.config import OperatorConfig
from kopf.engines import posting
from kopf.reactor import fencing, handling, peering, processing, queueing
from kopf.reactor.registries import Activity, OperatorRegistry, get_default_registry
from kopf.structs.credentials import ConnectionInfo
from kopf.structs.ephemera import Memo
from kopf.structs.resources import Resource, Selector

logger = logging.getLogger('kopf.reactor.running')

StopFlag = threading.Event | asyncio.Event

# The longest the operator waits for its tasks to finish after a stop request.
GRACEFUL_EXIT_TIMEOUT = 10.0


class OperatorError(Exception):
    """The operator cannot start or run; the message says why."""


def run(**kwargs: Any) -> None:
    """Run the operator until it is stopped (SIGINT/SIGTERM or the stop flag); blocks."""
    asyncio.run(operator(**kwargs))


async def operator(
        *,
        registry: OperatorRegistry | None = None,
        config: OperatorConfig | None = None,
        memo: Any = None,
        namespaces: Collection[str] = (),
        clusterwide: bool = False,
        standalone: bool = False,
        ha: bool = False,
        shards: bool = False,
        peering_name: str | None = None,
        peering_namespace: str | None = None,
        identity: str | None = None,
        stop_flag: StopFlag | None = None,
        ready_flag: StopFlag | None = None,
) -> None:
    """Run the operator in the current event loop until it is stopped."""
    tasks = await spawn_tasks(registry=registry, config=config, memo=memo, namespaces=namespaces,
                              clusterwide=clusterwide, standalone=standalone, ha=ha, shards=shards,
                              peering_name=peering_name, peering_namespace=peering_namespace, identity=identity,
                              stop_flag=stop_flag, ready_flag=ready_flag)
    await asyncio.gather(*tasks)


async def spawn_tasks(
        *,
        registry: OperatorRegistry | None = None,
        config: OperatorConfig | None = None,
        memo: Any = None,
        namespaces: Collection[str] = (),
        clusterwide: bool = False,
        standalone: bool = False,
        ha: bool = False,
        shards: bool = False,
        peering_name: str | None = None,
        peering_namespace: str | None = None,
        identity: str | None = None,
        stop_flag: StopFlag | None = None,
        ready_flag: StopFlag | None = None,
) -> list[asyncio.Task[None]]:
    """
    Create the operator's task, for embedding into applications with their own event loop.

    ``ha``/``shards`` make replicas coordinate through Leases (see
    docs/replicas.rst); ``standalone`` (the default) means no coordination.
    These arguments go into ``config.peering`` before the startup handlers,
    which may still change it.
    """
    config = config or OperatorConfig()
    _configure_peering(config, standalone=standalone, ha=ha, shards=shards, name=peering_name,
                       namespace=peering_namespace, identity=identity)
    task = asyncio.create_task(_serve(
        registry=registry or get_default_registry(),
        config=config,
        memo=memo if memo is not None else Memo(),
        namespaces=tuple(namespaces),
        clusterwide=clusterwide or not namespaces,
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
) -> None:
    chosen = [option for option, flag in [('standalone', standalone), ('ha', ha), ('shards', shards)] if flag]
    if len(chosen) > 1:
        raise OperatorError(f"Choose one of standalone, ha, shards; got {' and '.join(chosen)}: "
                            "a standalone operator does not coordinate, HA and shards coordinate differently.")
    if chosen:
        config.peering.mode = chosen[0]
    for field, value in [('name', name), ('namespace', namespace), ('identity', identity)]:
        if value is not None:
            setattr(config.peering, field, value)


async def _serve(
        *,
        registry: OperatorRegistry,
        config: OperatorConfig,
        memo: Any,
        namespaces: tuple[str, ...],
        clusterwide: bool,
        stop_flag: StopFlag | None,
        ready_flag: StopFlag | None,
) -> None:
    stop = asyncio.Event()
    # An embedding application that passes its own stop flag keeps its own signal handling.
    with _stop_on_signals(stop) if stop_flag is None else contextlib.nullcontext():
        stopper = asyncio.create_task(_relay_stop_flag(stop_flag, stop)) if stop_flag is not None else None
        try:
            await handling.run_activity(registry=registry, activity=Activity.STARTUP, config=config,
                                        memo=memo, logger=logger)
            config.persistence.freeze()
            info = await _login(registry=registry, config=config, memo=memo)
            async with APIContext(info) as context:
                resources = await _resolve(context, registry.selectors)
                try:
                    async with peering.peering(context=context, config=config.peering, namespaces=namespaces,
                                               clusterwide=clusterwide, stop=stop) as peers:
                        await _watch_all(context=context, resources=resources, registry=registry, config=config,
                                         memo=memo, namespaces=(None,) if clusterwide else namespaces,
                                         stop=stop, ready_flag=ready_flag, peers=peers)
                except peering.PeeringError as e:
                    raise OperatorError(str(e)) from None
        finally:
            if stopper is not None:
                stopper.cancel()
            await handling.run_activity(registry=registry, activity=Activity.CLEANUP, config=config,
                                        memo=memo, logger=logger)
    logger.info("The operator has stopped.")


async def _login(*, registry: OperatorRegistry, config: OperatorConfig, memo: Any) -> ConnectionInfo:
    """Credentials from the login handlers if there are any, else from the environment."""
    results = await handling.run_activity(registry=registry, activity=Activity.LOGIN, config=config,
                                          memo=memo, logger=logger)
    for result in results.values():
        if isinstance(result, ConnectionInfo):
            return result
    if results:
        raise OperatorError("The login handlers returned no kopf.ConnectionInfo.")
    return await asyncio.get_running_loop().run_in_executor(None, auth.login_default)


async def _resolve(context: APIContext, selectors: Collection[Selector]) -> dict[Selector, Resource]:
    """Resolve every resource of the handlers; an unknown one stops the operator with its name."""
    resolved: dict[Selector, Resource] = {}
    for selector in selectors:
        try:
            resolved[selector] = await discovery.resolve(context=context, selector=selector)
        except (discovery.ResourceNotFoundError, discovery.AmbiguousResourceError) as e:
            raise OperatorError(f"Cannot serve the resource {selector}: {e}") from e
        logger.info("Serving %s as %s.", selector, resolved[selector])
    return resolved


async def _watch_all(
        *,
        context: APIContext,
        resources: dict[Selector, Resource],
        registry: OperatorRegistry,
        config: OperatorConfig,
        memo: Any,
        namespaces: Collection[str | None],
        stop: asyncio.Event,
        ready_flag: StopFlag | None,
        peers: peering.Peering | None = None,
) -> None:
    """
    Watch every resource in every namespace, and post events, until stopped.

    With replicas (``peers``), only what the gate permits is handled, and on
    stopping, the running cycles finish while the Lease is still held.
    """
    queue: asyncio.Queue[posting.K8sEvent] = asyncio.Queue()
    posting.event_queue_var.set(queue)
    posting.event_loop_var.set(asyncio.get_running_loop())
    poster = asyncio.create_task(posting.poster(queue=queue, post=functools.partial(_post, context)))
    handler = posting.PostingHandler(enabled=lambda: config.posting.enabled, level=lambda: config.posting.level)
    logging.getLogger('kopf.objects').addHandler(handler)
    gate = peers.gate if peers is not None else None
    watch_stop = stop if peers is None else asyncio.Event()  # with peers: only after stepping down
    handling_context = context if gate is None else fencing.FencedAPIContext(context, gate)
    watchers = [
        asyncio.create_task(_watch_one(
            processing.ResourceWatch(context=handling_context, resource=resource, selector=selector,
                                     registry=registry, config=config, memo=memo),
            namespace=namespace if resource.namespaced else None, stop=watch_stop, gate=gate))
        for selector, resource in resources.items()
        for namespace in (namespaces if resource.namespaced else (None,))
    ]
    if ready_flag is not None:
        ready_flag.set()
    try:
        stopped = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait([stopped, *watchers], return_when=asyncio.FIRST_COMPLETED)
        if peers is not None:
            await peers.step_down(timeout=config.batching.exit_timeout)
        stop.set()
        watch_stop.set()
        failed = [task for task in done if task is not stopped and task.exception() is not None]
        await asyncio.wait_for(asyncio.gather(*watchers, return_exceptions=True), GRACEFUL_EXIT_TIMEOUT)
        if failed:
            error = failed[0].exception()
            raise OperatorError(f"Watching has failed: {type(error).__name__}: {error}") from error
    finally:
        for task in watchers:
            task.cancel()
        logging.getLogger('kopf.objects').removeHandler(handler)
        await _drain(queue, timeout=1.0)
        poster.cancel()
        await asyncio.gather(poster, return_exceptions=True)


async def _watch_one(
        watch: processing.ResourceWatch,
        *,
        namespace: str | None,
        stop: asyncio.Event,
        gate: fencing.Gate | None = None,
) -> None:
    def open_stream(until: asyncio.Event) -> AsyncIterator[watching.RawEvent]:
        return watching.infinite_watch(context=watch.context, resource=watch.resource, namespace=namespace,
                                       settings=watch.config.watching, stop=until)

    stream = open_stream(stop) if gate is None else fencing.gated_stream(gate, open_stream, stop=stop)
    await queueing.watch_objects(stream=stream, processor=functools.partial(processing.process_event, watch),
                                 settings=watch.config.batching, gate=gate)


async def _post(context: APIContext, item: posting.K8sEvent) -> None:
    await events.post_event(context=context, ref=item.ref, type=item.type, reason=item.reason,
                            message=item.message)


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
