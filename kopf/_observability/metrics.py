"""
Prometheus metrics of the operator (``kopf[metrics]``): the recorder that counts, times and measures.

Counters and histograms are updated as the work happens, through children
bound to their labels once and kept (a resource's, a handler's), so that a
handler call costs a dictionary lookup and a few additions. Gauges of what
*is* (objects waiting, open streams, the age of the last event, index sizes,
the replica's role) are read from their sources at every scrape instead
(:class:`_Gauges`): keeping them current would cost every event something.

Names follow Prometheus' conventions (``_total`` for counters, base units
in the names); the table of them is in ``docs/observability.rst``. The
labels never carry an object's name or uid.

This module imports ``prometheus_client``: only the runtime imports it, and
only when metrics are asked for.
"""
from __future__ import annotations

import asyncio
import contextvars
import json
import types
import weakref
from collections.abc import Callable, Iterator, Mapping, Sized
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    gc_collector,
    platform_collector,
    process_collector,
)
from prometheus_client.core import GaugeMetricFamily, Metric

from kopf._observability import labels
from kopf._observability.outcomes import handler_outcome
from kopf._observability.recording import (
    CycleScope,
    Gate,
    HandlerScope,
    QueueProbe,
    Recorder,
    ReplicaState,
    RequestScope,
    ResourceKey,
    WatchProbe,
)
from kopf._structs.clocks import SYSTEM_CLOCK, Clock

# Seconds: from a millisecond to minutes (handlers may run long; most take milliseconds).
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                    120.0, 300.0)
# Seconds of API requests and Lease renewals: the API server answers in milliseconds, or is in trouble.
REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# Bytes of patches: progress annotations are small, results may be large (etcd keeps ~1.5 MiB per object).
SIZE_BUCKETS = (128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0, 65536.0, 262144.0, 1048576.0)

# The time of arrival of the event that the current cycle handles, until its first handler starts.
_arrival: contextvars.ContextVar[list[float | None] | None] = contextvars.ContextVar('kopf.arrival', default=None)
# The cycle being handled, to learn its cause.
_cycle: contextvars.ContextVar[_Cycle | None] = contextvars.ContextVar('kopf.cycle', default=None)


class MetricsRecorder(Recorder):
    """
    Records into a Prometheus registry: the operator's own, unless one is given.

    ``process``: also the standard process, platform and garbage collector
    metrics (``process_*``, ``python_*``) -- into the operator's own registry
    only (the default registry of ``prometheus_client`` has them already).
    """

    enabled = True

    def __init__(self, *, registry: CollectorRegistry | None = None, process: bool = True,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        own = registry is None
        self.registry = registry if registry is not None else CollectorRegistry()
        self.clock = clock
        r = self.registry
        self.handler_calls = Counter('kopf_handler_calls', "Handler calls, by their outcome.",
                                     ['resource', 'handler', 'cause', 'outcome'], registry=r)
        self.handler_duration = Histogram('kopf_handler_duration_seconds', "How long handler calls take.",
                                          ['resource', 'handler', 'cause'], buckets=DURATION_BUCKETS, registry=r)
        self.cycles = Counter('kopf_cycles', "Handling cycles, by their cause.", ['resource', 'cause'], registry=r)
        self.cycle_duration = Histogram('kopf_cycle_duration_seconds', "How long handling cycles take, "
                                        "the patch included.", ['resource', 'cause'], buckets=DURATION_BUCKETS,
                                        registry=r)
        self.cycle_failures = Counter('kopf_cycle_failures', "Handling cycles that failed unexpectedly "
                                      "(retried later).", ['resource'], registry=r)
        self.patch_outcomes = Counter('kopf_patch_outcomes', "The cycles' patches: sent, conflict_rebased, "
                                      "rejected, too_large, deferred.", ['resource', 'outcome'], registry=r)
        self.patch_size = Histogram('kopf_patch_size_bytes', "The size of the cycles' patches that have landed.",
                                    ['resource'], buckets=SIZE_BUCKETS, registry=r)
        self.queue_latency = Histogram('kopf_queue_latency_seconds', "From an event's arrival to the start "
                                       "of the first handler that it causes.", ['resource'],
                                       buckets=DURATION_BUCKETS, registry=r)
        self.retries = Counter('kopf_queue_retries', "Cycles that end asking to come back later (a retry, "
                               "a sleeping handler).", ['resource'], registry=r)
        self.watch_events = Counter('kopf_watch_events', "Objects listed (LISTED) and watch events, by type.",
                                    ['resource', 'type'], registry=r)
        self.watch_restarts = Counter('kopf_watch_restarts', "Watch requests started over, by the reason.",
                                      ['resource', 'reason'], registry=r)
        self.api_requests = Counter('kopf_api_requests', "API requests (each attempt), by the status code.",
                                    ['verb', 'resource', 'code'], registry=r)
        self.api_duration = Histogram('kopf_api_request_duration_seconds', "From sending an API request to "
                                      "its response's headers.", ['verb', 'resource'], buckets=REQUEST_BUCKETS,
                                      registry=r)
        self.api_retries = Counter('kopf_api_retries', "API requests repeated: after an error, or a 429 waited "
                                   "out (throttled).", ['verb', 'resource', 'reason'], registry=r)
        self.api_throttled = Counter('kopf_api_throttled_seconds', "Time waited as the API server asked "
                                     "(429 Retry-After).", ['verb', 'resource'], registry=r)
        self.daemons = Gauge('kopf_daemons_running', "Daemons and timers running, of all objects.",
                             ['resource', 'kind'], registry=r)
        self.daemon_restarts = Counter('kopf_daemon_restarts', "Daemons called again after a failure "
                                       "(timers: calls retried).", ['resource', 'handler', 'kind'], registry=r)
        self.webhooks = Counter('kopf_webhook_requests', "Admission handlers' answers, by the outcome.",
                                ['handler', 'outcome'], registry=r)
        self.lease_renewals = Histogram('kopf_lease_renew_duration_seconds', "How long renewing (or taking) "
                                        "the replica's Lease takes.", ['mode'], buckets=REQUEST_BUCKETS, registry=r)
        self.lease_failures = Counter('kopf_lease_renew_failures', "Failed looks at or renewals of the "
                                      "replica's Lease(s), by the error.", ['mode', 'reason'], registry=r)
        self.gauges = _Gauges(self)
        r.register(self.gauges)
        if own and process:
            process_collector.ProcessCollector(registry=r)
            platform_collector.PlatformCollector(registry=r)
            gc_collector.GCCollector(registry=r)
        # Children bound to their labels, by what the callers have at hand.
        self._handlers: dict[tuple[ResourceKey | None, str, str], _HandlerInstruments] = {}
        self._resources: dict[ResourceKey, str] = {}
        self._patches: dict[tuple[ResourceKey, str], Any] = {}
        self._sizes: dict[ResourceKey, Any] = {}
        self._cycles: dict[tuple[ResourceKey, str], tuple[Any, Any]] = {}
        self._requests: dict[tuple[str, str, str], tuple[Any, Any]] = {}

    def label(self, resource: ResourceKey | None) -> str:
        if resource is None:
            return ''
        value = self._resources.get(resource)
        if value is None:
            value = self._resources[resource] = labels.resource_label(resource)
        return value

    # The handling cycle.

    def cycle(self, resource: ResourceKey, body: Mapping[str, Any], event: str | None) -> CycleScope:
        return _Cycle(self, resource)

    def caused(self, cause: str, delay: float | None) -> None:
        scope = _cycle.get()
        if scope is not None:
            scope.cause = cause
            if delay is not None:
                self.retries.labels(self.label(scope.resource)).inc()

    def cycle_failed(self, resource: ResourceKey) -> None:
        self.cycle_failures.labels(self.label(resource)).inc()

    def patched(self, resource: ResourceKey, patch: Mapping[str, Any], *, size: int | None = None) -> None:
        self._patch_outcome(resource, 'sent').inc()
        child = self._sizes.get(resource)
        if child is None:
            child = self._sizes[resource] = self.patch_size.labels(self.label(resource))
        child.observe(_size(patch) if size is None else size)

    def patch_refused(self, resource: ResourceKey, outcome: str) -> None:
        self._patch_outcome(resource, outcome).inc()

    def _patch_outcome(self, resource: ResourceKey, outcome: str) -> Any:
        child = self._patches.get((resource, outcome))
        if child is None:
            child = self._patches[resource, outcome] = self.patch_outcomes.labels(self.label(resource), outcome)
        return child

    def queue(self, resource: ResourceKey, gate: Gate | None = None) -> QueueProbe:
        probe = _Queue(self, self.label(resource), gate)
        self.gauges.queues.add(probe)
        return probe

    # Handlers.

    def handler(self, resource: ResourceKey | None, cause: str, handler_id: str) -> HandlerScope:
        key = (resource, cause, handler_id)
        instruments = self._handlers.get(key)
        if instruments is None:
            label = labels.resource_label(resource)
            instruments = self._handlers[key] = _HandlerInstruments(self, label, cause, handler_id)
        return _Handler(instruments, self.clock)

    def webhook(self, handler_id: str, outcome: str) -> None:
        self.webhooks.labels(handler_id, outcome).inc()

    # Daemons and timers.

    def daemon_started(self, resource: ResourceKey | None, kind: str) -> None:
        self.daemons.labels(self.label(resource), kind).inc()

    def daemon_ended(self, resource: ResourceKey | None, kind: str) -> None:
        self.daemons.labels(self.label(resource), kind).dec()

    def daemon_restarted(self, resource: ResourceKey | None, handler_id: str, kind: str) -> None:
        self.daemon_restarts.labels(self.label(resource), handler_id, kind).inc()

    # The API client.

    def api_request(self, method: str, url: str) -> RequestScope:
        return _Request(self, method, url)

    def _requested(self, method: str, url: str, code: str, seconds: float | None) -> None:
        verb, resource = labels.request_labels(method, url)
        children = self._requests.get((verb, resource, code))
        if children is None:
            children = self._requests[verb, resource, code] = (self.api_requests.labels(verb, resource, code),
                                                               self.api_duration.labels(verb, resource))
        children[0].inc()
        if seconds is not None:
            children[1].observe(seconds)

    def _cycle_children(self, resource: ResourceKey, cause: str) -> tuple[Any, Any]:
        children = self._cycles.get((resource, cause))
        if children is None:
            label = self.label(resource)
            children = self._cycles[resource, cause] = (self.cycles.labels(label, cause),
                                                        self.cycle_duration.labels(label, cause))
        return children

    def api_retry(self, method: str, url: str, *, throttled: bool, delay: float) -> None:
        verb, resource = labels.request_labels(method, url)
        self.api_retries.labels(verb, resource, 'throttled' if throttled else 'error').inc()
        if throttled:
            self.api_throttled.labels(verb, resource).inc(delay)

    def watch(self, resource: ResourceKey, namespace: str | None) -> WatchProbe:
        probe = _Watch(self, self.label(resource), namespace or '')
        self.gauges.watches.add(probe)
        return probe

    # Replicas.

    def lease_renewed(self, mode: str, seconds: float) -> None:
        self.lease_renewals.labels(mode).observe(seconds)

    def lease_failed(self, mode: str, error: BaseException) -> None:
        self.lease_failures.labels(mode, type(error).__name__).inc()

    # What is read at every scrape.

    def follow_indexes(self, indexes: Mapping[str, Sized]) -> None:
        self.gauges.indexes = indexes

    def follow_replica(self, state: Callable[[], ReplicaState | None]) -> None:
        self.gauges.replica = state

    def follow_readiness(self, problem: Callable[[], str | None]) -> None:
        self.gauges.readiness = problem


class _Cycle(CycleScope):
    """Times one cycle; its cause comes when it is known (``caused``)."""

    __slots__ = ('_recorder', '_started', '_token', 'cause', 'resource')

    def __init__(self, recorder: MetricsRecorder, resource: ResourceKey) -> None:
        self._recorder = recorder
        self.resource = resource
        self.cause = 'none'
        self._started = 0.0
        self._token: contextvars.Token[_Cycle | None] | None = None

    def __enter__(self) -> _Cycle:
        self._started = self._recorder.clock.monotonic()
        self._token = _cycle.set(self)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: types.TracebackType | None) -> None:
        if self._token is not None:
            _cycle.reset(self._token)
        recorder = self._recorder
        count, duration = recorder._cycle_children(self.resource, self.cause)
        count.inc()
        duration.observe(recorder.clock.monotonic() - self._started)


class _Request(RequestScope):
    """One API request: counted by its status (``error`` without one), timed until its status has arrived."""

    __slots__ = ('_method', '_recorder', '_started', '_status', '_url')

    def __init__(self, recorder: MetricsRecorder, method: str, url: str) -> None:
        self._recorder = recorder
        self._method = method
        self._url = url
        self._started = 0.0
        self._status: int | None = None

    def __enter__(self) -> _Request:
        self._started = self._recorder.clock.monotonic()
        return self

    def answered(self, status: int) -> None:
        self._status = status
        seconds = self._recorder.clock.monotonic() - self._started
        self._recorder._requested(self._method, self._url, str(status), seconds)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: types.TracebackType | None) -> None:
        if self._status is None and not isinstance(exc, asyncio.CancelledError):  # cancelled: not the server's
            self._recorder._requested(self._method, self._url, 'error' if exc is not None else 'none', None)


class _HandlerInstruments:
    """The children of one handler of one resource and cause, bound once."""

    __slots__ = ('calls', 'duration', 'latency', 'outcomes', 'values')

    def __init__(self, recorder: MetricsRecorder, resource: str, cause: str, handler_id: str) -> None:
        self.calls = recorder.handler_calls
        self.values = (resource, handler_id, cause)
        self.duration = recorder.handler_duration.labels(*self.values)
        self.latency = recorder.queue_latency.labels(resource)
        self.outcomes: dict[str, Any] = {}

    def outcome(self, outcome: str) -> Any:
        child = self.outcomes.get(outcome)
        if child is None:
            child = self.outcomes[outcome] = self.calls.labels(*self.values, outcome)
        return child


class _Handler(HandlerScope):
    """One handler call: its duration, its outcome, and the latency from its event (if it is the first)."""

    __slots__ = ('_clock', '_instruments', '_outcome', '_started')

    def __init__(self, instruments: _HandlerInstruments, clock: Clock) -> None:
        self._instruments = instruments
        self._clock = clock
        self._started = 0.0
        self._outcome: str | None = None

    def __enter__(self) -> _Handler:
        self._started = now = self._clock.monotonic()
        arrival = _arrival.get()
        if arrival is not None and arrival[0] is not None:
            self._instruments.latency.observe(max(0.0, now - arrival[0]))
            arrival[0] = None  # the event's latency is to its first handler
        return self

    def ended(self, *, final: bool, error: BaseException | None) -> None:
        self._outcome = handler_outcome(final=final, error=error)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: types.TracebackType | None) -> None:
        outcome = self._outcome or ('cancelled' if exc is not None else 'unknown')
        self._instruments.outcome(outcome).inc()
        self._instruments.duration.observe(self._clock.monotonic() - self._started)


class _Queue(QueueProbe):
    """What waits in one stream's queue: the arrival of the oldest unhandled event per object."""

    __slots__ = ('_clock', '_gate', 'keys', 'label', 'pending')

    def __init__(self, recorder: MetricsRecorder, label: str, gate: Gate | None) -> None:
        self._clock = recorder.clock
        self._gate = gate
        self.label = label
        self.pending: dict[str, float] = {}
        self.keys: set[str] | None = set() if gate is not None else None  # the objects admitted, with replicas

    def arrived(self, key: str, *, deleted: bool = False) -> None:
        if key not in self.pending:
            self.pending[key] = self._clock.monotonic()
        if self.keys is not None:
            if deleted:
                self.keys.discard(key)
            else:
                self.keys.add(key)

    def taken(self, key: str, *, woken_up: bool) -> None:
        arrival = None if woken_up else self.pending.pop(key, None)
        _arrival.set([arrival] if arrival is not None else None)

    def forget(self, key: str) -> None:
        self.pending.pop(key, None)

    def owned(self) -> int | None:
        """How many of the objects seen are this replica's now (``None`` without replicas)."""
        if self.keys is None or self._gate is None:
            return None
        gate = self._gate
        return sum(1 for key in self.keys if gate.admits(key))


class _Watch(WatchProbe):
    """One watch across its reconnects: whether a request is open, and when the last event came."""

    __slots__ = ('_clock', '_events', '_recorder', '_restarts', 'label', 'last', 'namespace', 'open')

    def __init__(self, recorder: MetricsRecorder, label: str, namespace: str) -> None:
        self._recorder = recorder
        self._clock = recorder.clock
        self.label = label
        self.namespace = namespace
        self.open = False
        self.last: float | None = None
        self._events: dict[str, Any] = {}
        self._restarts: dict[str, Any] = {}

    def listed(self, count: int) -> None:
        self.last = self._clock.monotonic()
        self._event_child('LISTED').inc(count)

    def opened(self) -> None:
        self.open = True

    def closed(self) -> None:
        self.open = False

    def event(self, kind: str) -> None:
        self.last = self._clock.monotonic()
        self._event_child(kind).inc()

    def restarted(self, reason: str) -> None:
        child = self._restarts.get(reason)
        if child is None:
            child = self._restarts[reason] = self._recorder.watch_restarts.labels(self.label, reason)
        child.inc()

    def _event_child(self, kind: str) -> Any:
        child = self._events.get(kind)
        if child is None:
            child = self._events[kind] = self._recorder.watch_events.labels(self.label, kind)
        return child


class _Gauges:
    """What is read at every scrape: the live queues and watches, the indexes, the replica, the readiness."""

    def __init__(self, recorder: MetricsRecorder) -> None:
        self._clock = recorder.clock
        self.queues: weakref.WeakSet[_Queue] = weakref.WeakSet()
        self.watches: weakref.WeakSet[_Watch] = weakref.WeakSet()
        self.indexes: Mapping[str, Sized] | None = None
        self.replica: Callable[[], ReplicaState | None] | None = None
        self.readiness: Callable[[], str | None] | None = None

    def describe(self) -> list[Metric]:
        return []  # nothing to check at registration: the names are our own

    def collect(self) -> Iterator[Metric]:
        now = self._clock.monotonic()
        yield from self._queues(now)
        yield from self._watches(now)
        yield from self._indexes()
        yield from self._replica()
        if self.readiness is not None:
            yield GaugeMetricFamily('kopf_ready', "Whether the operator is ready (as its /readyz says).",
                                    value=0.0 if self.readiness() is not None else 1.0)

    def _queues(self, now: float) -> Iterator[Metric]:
        waiting = GaugeMetricFamily('kopf_queue_waiting_objects', "Objects with events waiting for their "
                                    "worker.", labels=['resource'])
        oldest = GaugeMetricFamily('kopf_queue_oldest_waiting_seconds', "How long the oldest waiting event "
                                   "has waited.", labels=['resource'])
        owned = GaugeMetricFamily('kopf_replica_objects_owned', "Objects seen that are this replica's to handle "
                                  "now.", labels=['resource'])
        counts: dict[str, int] = {}
        ages: dict[str, float] = {}
        owns: dict[str, int] = {}
        for queue in list(self.queues):
            counts[queue.label] = counts.get(queue.label, 0) + len(queue.pending)
            age = now - min(queue.pending.values()) if queue.pending else 0.0
            ages[queue.label] = max(ages.get(queue.label, 0.0), age)
            mine = queue.owned()
            if mine is not None:
                owns[queue.label] = owns.get(queue.label, 0) + mine
        for label, count in counts.items():
            waiting.add_metric([label], count)
            oldest.add_metric([label], ages[label])
        for label, count in owns.items():
            owned.add_metric([label], count)
        yield waiting
        yield oldest
        if owns:
            yield owned

    def _watches(self, now: float) -> Iterator[Metric]:
        streams = GaugeMetricFamily('kopf_watch_streams_open', "Watch requests established now.",
                                    labels=['resource'])
        age = GaugeMetricFamily('kopf_watch_last_event_age_seconds', "Since the last event (or listing) of "
                                "each watched resource and namespace.", labels=['resource', 'namespace'])
        opened: dict[str, int] = {}
        ages: dict[tuple[str, str], float] = {}
        for watch in list(self.watches):
            opened[watch.label] = opened.get(watch.label, 0) + (1 if watch.open else 0)
            if watch.last is not None:
                key = (watch.label, watch.namespace)
                ages[key] = min(ages.get(key, now - watch.last), now - watch.last)
        for label, count in opened.items():
            streams.add_metric([label], count)
        for (label, namespace), seconds in ages.items():
            age.add_metric([label, namespace], seconds)
        yield streams
        yield age

    def _indexes(self) -> Iterator[Metric]:
        if self.indexes is None:
            return
        keys = GaugeMetricFamily('kopf_index_keys', "Keys in each in-memory index.", labels=['index'])
        for name, index in list(self.indexes.items()):
            keys.add_metric([name], len(index))
        yield keys

    def _replica(self) -> Iterator[Metric]:
        state = self.replica() if self.replica is not None else None
        if state is None:
            return
        for name, value, text in [
            ('kopf_replica_leading', state.leading, "HA: whether this replica leads; shards: whether it is a "
                                                    "member that handles its share."),
            ('kopf_replica_admitting', state.admitting, "Whether the fence admits new handling cycles."),
            ('kopf_replica_writable', state.writable, "Whether the fence lets the handling write."),
        ]:
            family = GaugeMetricFamily(name, text, labels=['mode'])
            family.add_metric([state.mode], 1.0 if value else 0.0)
            yield family
        members = GaugeMetricFamily('kopf_replica_members', "The live replicas, this one included, as last seen.",
                                    labels=['mode'])
        members.add_metric([state.mode], state.members)
        yield members


def _size(patch: Mapping[str, Any]) -> int:
    """The size of a patch as JSON (as it is sent)."""
    try:
        return len(json.dumps(patch, separators=(',', ':')).encode('utf-8'))
    except (TypeError, ValueError):
        return 0


def render(registry: CollectorRegistry, accept: str) -> tuple[bytes, str]:
    """The exposition of the registry in the format the scraper accepts (text, or OpenMetrics), and its type."""
    from prometheus_client import exposition
    encoder, content_type = exposition.choose_encoder(accept)
    return encoder(registry), content_type
