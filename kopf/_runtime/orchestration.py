"""
Orchestration: one watch stream per served resource and namespace, started and stopped as they come and go.

What is served changes while the operator runs (:mod:`~kopf._runtime.observation`):
a CRD is created, a namespace that matches the patterns appears, another is
deleted. The decisions are pure (:func:`desired_streams`, :func:`plan`);
:class:`Streams` carries them out:

* a new stream starts at once; if its resource has indexes, it does not hold
  the handlers back (only the streams of the start do, until they have
  listed once);
* a stream that is no longer wanted is stopped: its watch ends, its objects'
  workers finish their current step, its daemons and timers are stopped
  (``RESOURCE_DELETED``: the namespace or the CRD is gone, and so are its
  objects), and what it has indexed leaves the indexes. The other streams
  and the handling of their objects go on meanwhile.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Collection, Mapping
from typing import Any

from kopf._daemons.keeper import Daemons
from kopf._indexing import indexing
from kopf._reconciliation import reconciling
from kopf._structs.resources import Resource, Selector
from kopf._structs.stoppers import DaemonStoppingReason

logger = logging.getLogger('kopf._runtime.orchestration')


@dataclasses.dataclass(frozen=True)
class Stream:
    """One watch: a resource (as the handlers' selector names it) in one namespace, or cluster-wide (``None``)."""

    selector: Selector
    resource: Resource
    namespace: str | None

    @property
    def listing(self) -> tuple[Selector, str | None]:
        """The key of the stream's listing in the indexes."""
        return (self.selector, self.namespace)

    def __str__(self) -> str:
        return f"{self.resource}" + (f" in {self.namespace!r}" if self.namespace is not None else " cluster-wide")


@dataclasses.dataclass(frozen=True)
class Plan:
    """Which streams to start and which to stop to serve what is wanted now."""

    start: tuple[Stream, ...] = ()
    stop: tuple[Stream, ...] = ()


def desired_streams(resources: Mapping[Selector, Resource], namespaces: Collection[str | None]) -> frozenset[Stream]:
    """
    Every stream that serves these resources in these namespaces.

    Cluster-scoped resources are watched once, cluster-wide, whatever the
    namespaces; namespaced ones once per namespace (``None``: cluster-wide).
    A resource that several selectors name is watched once, under the first
    of them: its handlers are found by the resource.
    """
    first: dict[Resource, Selector] = {}
    for selector, resource in resources.items():
        first.setdefault(resource, selector)
    return frozenset(Stream(selector=selector, resource=resource, namespace=namespace)
                     for resource, selector in first.items()
                     for namespace in (namespaces if resource.namespaced else (None,)))


def plan(running: Collection[Stream], desired: Collection[Stream]) -> Plan:
    """What to start and what to stop, in a stable order (for the logs)."""
    wanted, current = set(desired), set(running)
    start = sorted(wanted - current, key=_order)
    stop = sorted(current - wanted, key=_order)
    return Plan(start=tuple(start), stop=tuple(stop))


def _order(stream: Stream) -> tuple[str, str]:
    return (str(stream.resource), stream.namespace or '')


@dataclasses.dataclass
class _Running:
    stream: Stream
    task: asyncio.Task[None]
    stop: asyncio.Event
    keeper: Daemons | None


# Starts a stream's task, given the stream and its stop flag; returns the task and its daemons' keeper (if any).
Spawn = Callable[[Stream, asyncio.Event], tuple[asyncio.Task[None], 'Daemons | None']]


class Streams:
    """
    The watch streams that run now, and those being stopped.

    ``spawn`` starts one; ``exit_timeout`` is how long a stopped stream's
    watch and workers get to finish before they are cancelled;
    ``daemons_timeout`` is how long its daemons and timers get to stop.
    """

    def __init__(
            self,
            *,
            spawn: Spawn,
            exit_timeout: float,
            daemons_timeout: float,
            indexes: indexing.OperatorIndexes | None = None,
            reconciliation: reconciling.OperatorReconciliation | None = None,
    ) -> None:
        self._spawn = spawn
        self._exit_timeout = exit_timeout
        self._daemons_timeout = daemons_timeout
        self._indexes = indexes
        self._reconciliation = reconciliation
        self._running: dict[Stream, _Running] = {}
        self._tasks: dict[asyncio.Task[None], Stream] = {}
        self._retiring: set[asyncio.Task[None]] = set()

    @property
    def tasks(self) -> Collection[asyncio.Task[None]]:
        """The tasks of the running streams: a live view (for the liveness probe)."""
        return self._tasks.keys()

    @property
    def streams(self) -> Collection[Stream]:
        return self._running.keys()

    def stream_of(self, task: asyncio.Task[Any]) -> Stream | None:
        return self._tasks.get(task)

    def follow(self, desired: Collection[Stream]) -> None:
        """Start the streams that are wanted and not running; stop those running and not wanted any more."""
        decision = plan(self._running, desired)
        for stream in decision.stop:
            logger.debug("Stopping the watch of %s.", stream)
            self._retire(stream)
        for stream in decision.start:
            logger.debug("Starting the watch of %s.", stream)
            stop = asyncio.Event()
            task, keeper = self._spawn(stream, stop)
            self._running[stream] = _Running(stream=stream, task=task, stop=stop, keeper=keeper)
            self._tasks[task] = stream

    def ended(self, task: asyncio.Task[Any]) -> None:
        """A stream's task has ended on its own (its resource is gone for good): clean up after it."""
        stream = self._tasks.get(task)
        if stream is not None:
            self._retire(stream)

    def _retire(self, stream: Stream) -> None:
        running = self._running.pop(stream)
        del self._tasks[running.task]
        running.stop.set()
        retiring = asyncio.create_task(self._stopped(running), name=f"kopf stopping the watch of {stream}")
        self._retiring.add(retiring)
        retiring.add_done_callback(self._retiring.discard)

    async def _stopped(self, running: _Running) -> None:
        await _finish(running.task, timeout=self._exit_timeout)
        if running.keeper is not None:
            await running.keeper.close(timeout=self._daemons_timeout, reason=DaemonStoppingReason.RESOURCE_DELETED)
        if self._indexes is not None:
            self._indexes.forget(running.stream.listing)
        if self._reconciliation is not None:
            self._reconciliation.forget(running.stream.listing)
        logger.debug("The watch of %s has stopped.", running.stream)

    async def close_daemons(self) -> None:
        """At the exit: stop the daemons and timers of every running stream (the streams go on meanwhile)."""
        keepers = [running.keeper for running in self._running.values() if running.keeper is not None]
        await asyncio.gather(*(keeper.close(timeout=self._daemons_timeout) for keeper in keepers))

    def stop(self) -> None:
        """At the exit: ask every stream to stop."""
        for running in self._running.values():
            running.stop.set()

    async def wait(self, *, timeout: float) -> None:
        """At the exit: wait for the streams (and those being stopped) to end; cancel those left."""
        tasks = [*self._tasks, *self._retiring]
        if tasks:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout)
        await self.cancel()

    async def cancel(self) -> None:
        tasks = [*self._tasks, *self._retiring]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _finish(task: asyncio.Task[None], *, timeout: float) -> None:
    """Wait for a stopped stream's task to end by itself, else cancel it; its outcome is of no interest now."""
    done, _ = await asyncio.wait([task], timeout=timeout)
    if not done:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    elif not task.cancelled() and task.exception() is not None:
        logger.debug("The watch has failed while stopping: %r", task.exception())
