"""
Operator configuration: one object with a group of settings per concern.

Startup handlers receive it (as ``config`` and as ``settings``) and may change
it; the framework reads it once startup is over.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import socket
from collections.abc import Iterable
from typing import Any

from kopf._storage import conventions
from kopf._storage.diffbase import AnnotationsDiffBaseStorage, DiffBaseStorage
from kopf._storage.progress import ProgressStorage, SmartProgressStorage
from kopf._structs.reviews import WebhookServerProtocol

logger = logging.getLogger('kopf.config')

DEFAULT_FINALIZER = 'kopf.zalando.org/KopfFinalizerMarker'
DEFAULT_MAX_UNPERSISTED_TIME = 1.0


class PersistenceConfig:
    """
    Where handler progress and the last-handled configuration are kept, and how often it is written.

    ``max_unpersisted_time`` (seconds, default 1.0): handlers that are due
    run one after another within one handling cycle, and their outcomes are
    written together in one patch -- but once the handlers of a cycle have
    run this long, their outcomes are persisted before the next handler
    starts. ``0`` persists after every handler.

    Assignments are type-checked, so a misconfiguration fails in the startup
    handler rather than in the middle of handling. Once the operator has
    started, the settings are frozen: later assignments are ignored, loudly.
    """

    _TYPES: dict[str, type] = {
        'progress_storage': ProgressStorage,
        'diffbase_storage': DiffBaseStorage,
        'finalizer': str,
        'max_unpersisted_time': float,
        'fail_on_pruning': bool,
        'consistency_timeout': float,  # Kopf's; accepted, with no effect (see docs/configuration.rst)
    }

    progress_storage: ProgressStorage
    diffbase_storage: DiffBaseStorage
    finalizer: str
    max_unpersisted_time: float
    fail_on_pruning: bool
    consistency_timeout: float

    def __init__(
            self,
            *,
            progress_storage: ProgressStorage | None = None,
            diffbase_storage: DiffBaseStorage | None = None,
            finalizer: str = DEFAULT_FINALIZER,
            max_unpersisted_time: float = DEFAULT_MAX_UNPERSISTED_TIME,
            fail_on_pruning: bool = False,
    ) -> None:
        object.__setattr__(self, '_frozen', False)
        self.progress_storage = progress_storage if progress_storage is not None else SmartProgressStorage()
        self.diffbase_storage = diffbase_storage if diffbase_storage is not None else AnnotationsDiffBaseStorage()
        self.finalizer = finalizer
        self.max_unpersisted_time = max_unpersisted_time
        self.fail_on_pruning = fail_on_pruning
        self.consistency_timeout = 5.0

    def __setattr__(self, name: str, value: Any) -> None:
        expected = self._TYPES.get(name)
        if expected is None:
            raise AttributeError(f"Unknown persistence setting {name!r}; known: {sorted(self._TYPES)}.")
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if expected is float and isinstance(value, float) and not value >= 0:
            raise ValueError(f"config.persistence.{name} must be a number of seconds >= 0, got {value!r}.")
        if not isinstance(value, expected):
            raise TypeError(
                f"config.persistence.{name} must be a {_public_name(expected)}, "
                f"got {type(value).__name__}: {value!r}.")
        if name == 'finalizer' and isinstance(value, str):
            _check_finalizer(value)
        if getattr(self, '_frozen', False):
            logger.warning(
                "config.persistence.%s was set after the operator has started; "
                "it has no effect. Configure persistence in an @kopf.on.startup handler.", name)
            return
        object.__setattr__(self, name, value)

    def freeze(self) -> None:
        """Called by the framework when startup is over: later changes are ignored."""
        object.__setattr__(self, '_frozen', True)

    def __repr__(self) -> str:
        return (f"PersistenceConfig(progress_storage={self.progress_storage!r}, "
                f"diffbase_storage={self.diffbase_storage!r}, finalizer={self.finalizer!r}, "
                f"max_unpersisted_time={self.max_unpersisted_time!r}, fail_on_pruning={self.fail_on_pruning!r})")


def _check_finalizer(value: str) -> None:
    """A finalizer is a qualified name, as Kubernetes requires: ``[prefix/]name``, ideally with a domain."""
    prefix, name = conventions.split_key(value)
    try:
        if prefix is not None:
            conventions.validate_prefix(prefix)
        conventions.validate_name(name)
    except ValueError:
        raise ValueError(
            f"config.persistence.finalizer must be a valid finalizer name, got {value!r}: a domain and a name, "
            f"e.g. 'my-op.example.com/finalizer' (the domain in lowercase letters, digits, '-' and '.'; "
            f"the name of 1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or a digit)."
        ) from None


def _public_name(cls: type) -> str:
    return f"kopf.{cls.__name__}" if cls.__module__.startswith('kopf') else cls.__name__


@dataclasses.dataclass
class PostingConfig:
    """
    Which messages become Kubernetes Events about the objects (as in Kopf).

    ``enabled``: any at all. ``level``: the lowest level posted, both of the
    explicit ``kopf.info`` (INFO), ``kopf.warn`` (WARNING), ``kopf.exception``
    (ERROR) -- ``kopf.event`` is always posted -- and of log messages.
    ``loggers``: whether the per-object log messages of handlers and of the
    framework are posted too (reason ``Logging``); off by default.
    ``reporting_component`` and ``reporting_instance``: who the Events say
    posted them (the instance is this machine's, or the pod's, name; Kopf's
    default is ``'dev'``). ``event_name_prefix``: the Events' names start
    with it, the API server adds a unique suffix.
    """

    enabled: bool = True
    level: int = logging.INFO
    loggers: bool = False
    reporting_component: str = 'kopf'
    reporting_instance: str = dataclasses.field(default_factory=lambda: socket.gethostname()[:128])
    event_name_prefix: str = 'kopf-event-'


@dataclasses.dataclass
class ProbingConfig:
    """
    The liveness endpoint (``kopf run --liveness URL``): how long probe results are reused.

    The ``@kopf.on.probe`` handlers run on a request at most once per
    ``cache_period`` seconds; requests in between get the cached results.
    """

    cache_period: float = 10.0


@dataclasses.dataclass
class WatchingConfig:
    """
    Watch requests: timeouts (seconds), reconnects, and the listing before watching.

    ``server_timeout`` is asked of the server (it closes the stream then;
    ``None``: the server's default); ``client_timeout`` limits one watch
    request on our side (``None``: no limit); ``connect_timeout`` limits
    connecting (``None``: the networking one). ``inactivity_timeout``: a
    stream that carries nothing for this long — not even the server's
    periodic bookmarks — is taken for a dead connection, reported, and
    re-opened from the last seen resourceVersion (``None``: never).
    ``reconnect_backoff`` is the first pause after a failed watch, doubling
    up to ``max_reconnect_backoff``; an established stream resets it.
    ``list_limit`` is the page size of the listings (``None``: one page).
    """

    server_timeout: float | None = None
    client_timeout: float | None = None
    connect_timeout: float | None = None
    inactivity_timeout: float | None = 180.0
    reconnect_backoff: float = 0.1
    max_reconnect_backoff: float = 30.0
    list_limit: int | None = 500


@dataclasses.dataclass
class NetworkingConfig:
    """
    All requests to the API server: timeouts (seconds), keepalive, and retries.

    ``request_timeout`` limits one attempt of one request; ``connect_timeout``
    limits connecting to the server. ``tcp_keepalive`` is how long a
    connection may be idle before the kernel probes that the server is still
    there (``None``: off). ``error_backoffs`` are the pauses before the
    retries of a request after a connection error, a timeout, or a 5xx
    (``None`` or empty: no retries). ``429 Too Many Requests`` is waited out
    as the server asks in ``Retry-After`` (at most ``max_retry_after``
    seconds), up to ``throttle_retries`` times per request. At most
    ``max_concurrent_requests`` requests are in flight at once (watch
    streams apart); the others wait for a free slot. Pooled connections that
    have carried no request for ``idle_connection_timeout`` seconds are
    closed, and their buffers freed (``None``: kept open).

    ``error_backoffs`` may be one number, as in Kopf: one retry after that
    many seconds. Kopf's ``trust_env`` and ``enforce_retry_after`` are here
    with Kopf's defaults (see docs/configuration.rst for what they do here).
    """

    request_timeout: float | None = 60.0
    connect_timeout: float | None = 10.0
    tcp_keepalive: float | None = 30.0
    error_backoffs: Iterable[float] | None = (0.5, 1.0, 2.0, 4.0)
    max_retry_after: float = 60.0
    throttle_retries: int = 20
    max_concurrent_requests: int = 32
    idle_connection_timeout: float | None = 5.0
    trust_env: bool = False
    enforce_retry_after: bool = False

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, _backoffs(value) if name == 'error_backoffs' else value)


# Kopf's default throttling of the objects whose handling fails in the framework (seconds): Fibonacci, 1 s to 10 min.
KOPF_ERROR_DELAYS: tuple[float, ...] = (1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610)


def _backoffs(value: Any) -> Any:
    """Kopf's shorthand: one number is one backoff; anything else is kept as it is (any re-iterable)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (value,)
    return value


@dataclasses.dataclass
class BatchingConfig:
    """
    How per-object workers collect events and how long they live.

    ``error_delays`` is Kopf's setting, kept with Kopf's default (one number is
    one delay, as in Kopf); see docs/configuration.rst for how failed objects
    are retried here.
    """

    worker_limit: int | None = None
    idle_timeout: float = 5.0
    batch_window: float = 0.1
    exit_timeout: float = 2.0
    error_delays: Iterable[float] = KOPF_ERROR_DELAYS

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, _backoffs(value) if name == 'error_delays' else value)


class ExecutionConfig:
    """
    The executor for synchronous handlers; ``max_workers`` resizes it.

    ``default_backoff`` is the retry delay after an unexpected exception of
    the handlers without ``backoff=`` (60 seconds, as in Kopf).
    """

    def __init__(self, *, max_workers: int | None = None) -> None:
        self.default_backoff: float = 60
        self._max_workers = max_workers
        self.executor: concurrent.futures.Executor = concurrent.futures.ThreadPoolExecutor(max_workers=max_workers)

    @property
    def max_workers(self) -> int | None:
        return self._max_workers

    @max_workers.setter
    def max_workers(self, value: int | None) -> None:
        if value is not None and value < 1:
            raise ValueError(f"max_workers must be positive, got {value}.")
        self._max_workers = value
        self.executor.shutdown(wait=False)
        self.executor = concurrent.futures.ThreadPoolExecutor(max_workers=value)


@dataclasses.dataclass
class AdmissionConfig:
    """
    Admission webhooks: the server that receives the reviews, and the configurations to keep.

    ``server`` is a webhook server or tunnel, e.g. ``kopf.WebhookServer(...)``;
    it is needed when there are ``@kopf.on.validate``/``@kopf.on.mutate``
    handlers. ``managed`` names the Validating/MutatingWebhookConfiguration
    objects that the operator creates, keeps up to date and removes on exit
    (e.g. ``'auto.kopf.dev'``); ``None`` leaves the configurations to the user.
    """

    server: WebhookServerProtocol | None = None
    managed: str | None = None
PEERING_MODES = ('standalone', 'ha', 'shards')


@dataclasses.dataclass
class PeeringConfig:
    """
    How replicas of one operator coordinate through Kubernetes Leases (see docs/replicas.rst).

    ``mode``: ``'standalone'`` (no coordination), ``'ha'`` (one leader
    handles, the other replicas stand by) or ``'shards'`` (every replica
    handles its share of the objects). ``name``: the Lease's name (HA) or
    the prefix and label of the member Leases (shards); by default derived
    from the operator's code. ``namespace``: where the Leases are; by
    default the one served namespace, else the credentials' namespace, else
    ``default``. ``identity``: this replica's name among its peers, unique;
    by default the host name with a random suffix. The timing (seconds) is
    that of Kubernetes' own controllers: a Lease is valid for
    ``lease_duration`` after its last renewal; its holder renews it every
    ``retry_period`` and stops handling if it has not renewed it for
    ``renew_deadline``; replicas without a Lease try to get one every
    ``retry_period``. ``priority`` (Kopf's ``settings.peering.priority``):
    in HA mode, a replica of a higher priority than the leader's takes the
    Lease over and leads once the previous leader has surely stopped.
    ``mandatory`` (Kopf's): ``True`` makes a standalone operator coordinate
    as HA replicas, as Kopf's mandatory peering does (``--peering NAME``
    does the same); reading it says whether replicas coordinate.
    ``stealth`` (Kopf's) is accepted: there are no keep-alive logs to hide.
    """

    mode: str = 'standalone'
    name: str | None = None
    namespace: str | None = None
    identity: str | None = None
    lease_duration: int = 15
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    priority: int = 0
    stealth: bool = False

    @property
    def mandatory(self) -> bool:
        """Kopf 1.x's spelling: whether the replicas must coordinate (here: HA or shards)."""
        return self.mode != 'standalone'

    @mandatory.setter
    def mandatory(self, value: bool) -> None:
        if value and self.mode == 'standalone':
            self.mode = 'ha'

    @property
    def standalone(self) -> bool:
        """Kopf 1.x's spelling: whether replicas do not coordinate at all."""
        return self.mode == 'standalone'

    @standalone.setter
    def standalone(self, value: bool) -> None:
        if value:
            self.mode = 'standalone'
        elif self.mode == 'standalone':
            raise ValueError("config.peering.standalone = False needs a way to coordinate: "
                             "set config.peering.mode to 'ha' or 'shards' instead.")

    def validate(self) -> None:
        """Raise ``ValueError`` naming the setting if the combination cannot work."""
        if self.mode not in PEERING_MODES:
            raise ValueError(f"config.peering.mode must be one of {', '.join(PEERING_MODES)}; got {self.mode!r}.")
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise ValueError(f"config.peering.priority must be a whole number; got {self.priority!r}.")
        if isinstance(self.lease_duration, bool) or not isinstance(self.lease_duration, int):
            raise ValueError("config.peering.lease_duration must be a whole number of seconds "
                             f"(Leases count in seconds); got {self.lease_duration!r}.")
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "config.peering needs 0 < retry_period < renew_deadline < lease_duration; got "
                f"retry_period={self.retry_period}, renew_deadline={self.renew_deadline}, "
                f"lease_duration={self.lease_duration}.")


@dataclasses.dataclass
class MetricsConfig:
    """
    Prometheus metrics (``kopf run --metrics URL``; they need ``pip install 'kopf[metrics]'``).

    ``endpoint``: where to serve them, e.g. ``'http://0.0.0.0:9090/metrics'``
    (the liveness endpoint's port may be shared); ``None``: not served.
    ``registry``: a ``prometheus_client.CollectorRegistry`` to record into
    instead of the operator's own (e.g. one that the application serves
    itself): recording happens when either is set. ``process``: the standard
    process and Python metrics too (only into the operator's own registry).
    The names and labels are listed in docs/observability.rst.
    """

    endpoint: str | None = None
    registry: Any = None
    process: bool = True


@dataclasses.dataclass
class TracingConfig:
    """
    OpenTelemetry traces (they need ``pip install 'kopf[tracing]'``): a span per handling cycle and handler call.

    ``enabled``: ``None`` (the default) traces when the application has set a
    tracer provider, or the standard ``OTEL_*`` environment variables name an
    exporter (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_TRACES_EXPORTER``);
    ``False`` never traces. ``provider``: a tracer provider to use instead
    (e.g. the SDK's with an in-memory exporter, in tests). ``exit_timeout``:
    how long the last spans are given to be exported at the exit (seconds).
    """

    enabled: bool | None = None
    provider: Any = None
    exit_timeout: float = 2.0


@dataclasses.dataclass
class BackgroundConfig:
    """
    Daemons and timers (Kopf's ``settings.background``): how their stops are waited for.

    ``cancellation_polling`` (seconds): a daemon that is asked to stop but has
    no ``cancellation_timeout`` of its own is waited for without limit; it is
    reported this often while it is still running (a daemon's own
    ``cancellation_polling=`` wins). ``instant_exit_timeout`` (seconds): when
    an object's daemons are asked to stop, the handling of the event waits
    this long for them to exit at once, so that a deletion completes in the
    same handling cycle; ``None`` waits only for
    ``instant_exit_zero_time_cycles`` turns of the event loop (enough for
    ``async`` daemons that wait on ``stopped``, rarely for threads).
    ``exit_timeout`` (seconds): at the operator's exit, how long all daemons
    and timers together get to stop (their own cancellation options apply
    within it); then those left are cancelled, and threads are left to end
    with the process.
    """

    cancellation_polling: float = 60.0
    instant_exit_timeout: float | None = 0.5
    instant_exit_zero_time_cycles: int = 10
    exit_timeout: float = 5.0


@dataclasses.dataclass
class ProcessConfig:
    """Kopf's ``settings.process``: accepted for compatibility, with no effect (see docs/configuration.rst)."""

    ultimate_exiting_timeout: float | None = None


@dataclasses.dataclass
class ScanningConfig:
    """Kopf's ``settings.scanning``: accepted for compatibility, with no effect (see docs/configuration.rst)."""

    disabled: bool = False


class OperatorConfig:
    """
    All settings of one operator; ``kopf.OperatorSettings`` is the same class.

    ``queueing`` is Kopf's newer name of ``batching`` (the same object).
    """

    def __init__(self) -> None:
        self.persistence = PersistenceConfig()
        self.posting = PostingConfig()
        self.watching = WatchingConfig()
        self.networking = NetworkingConfig()
        self.batching = BatchingConfig()
        self.execution = ExecutionConfig()
        self.admission = AdmissionConfig()
        self.probing = ProbingConfig()
        self.background = BackgroundConfig()
        self.peering = PeeringConfig()
        self.metrics = MetricsConfig()
        self.tracing = TracingConfig()
        self.process = ProcessConfig()
        self.scanning = ScanningConfig()

    @property
    def queueing(self) -> BatchingConfig:
        return self.batching

    @queueing.setter
    def queueing(self, value: BatchingConfig) -> None:
        self.batching = value


OperatorSettings = OperatorConfig
