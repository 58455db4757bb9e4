"""
OpenTelemetry traces of the handling (``kopf[tracing]``): a span per cycle, per handler call, per API request.

The spans nest as the work does: a handling cycle of an object (its kind,
namespace, name, uid, the event and the cause as attributes) holds the spans
of the handlers that it calls and of the API requests that it sends. A
handler's span is the current span while the handler runs (the context
variables of OpenTelemetry, copied into the threads of sync handlers too), so
that the handler's own spans -- ``tracer.start_as_current_span(...)`` --
nest under it, and so does whatever its libraries trace.

Tracing is off unless it is configured: a tracer provider set by the
application (``opentelemetry.trace.set_tracer_provider``, or the
``opentelemetry-instrument`` wrapper), or given in ``config.tracing``, or
the standard ``OTEL_*`` environment variables that name an exporter
(``OTEL_TRACES_EXPORTER``, ``OTEL_EXPORTER_OTLP_ENDPOINT``,
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``); ``OTEL_SDK_DISABLED=true`` keeps it
off. Spans are exported in batches from a thread of the SDK: an exporter
that cannot reach its collector logs one warning and drops spans
(:class:`QuietExporter`); the handling never waits for it.

This module imports ``opentelemetry``: only the runtime imports it, and only
when tracing is configured.
"""
from __future__ import annotations

import importlib.metadata
import logging
import os
import threading
import types
from collections.abc import Mapping, Sequence, Sized
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource as OTelResource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from kopf._observability import labels
from kopf._observability.outcomes import handler_outcome
from kopf._observability.recording import (
    NULL,
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

logger = logging.getLogger('kopf._observability.tracing')

# The libraries' own loggers that would report every failed batch and every dropped span: quiet while we report.
_NOISY_LOGGERS = ('opentelemetry.exporter', 'opentelemetry.sdk._shared_internal', 'opentelemetry.sdk.trace.export')


class TracingError(Exception):
    """Tracing is configured but cannot be set up; the message names the setting and what to do."""


def configured_provider(environ: Mapping[str, str] = os.environ) -> trace.TracerProvider | None:
    """
    The tracer provider to use, if tracing is configured: the application's own, else one from ``OTEL_*``.

    ``None`` when nothing asks for traces. The exporters are those installed
    under the SDK's entry points (``otlp`` is the OTLP/HTTP one, or gRPC
    with ``OTEL_EXPORTER_OTLP_PROTOCOL=grpc``; ``console``).
    """
    if environ.get('OTEL_SDK_DISABLED', '').strip().lower() == 'true':
        return None
    existing = trace.get_tracer_provider()
    if not isinstance(existing, trace.ProxyTracerProvider):
        return existing  # the application's (or opentelemetry-instrument's)
    names = [name.strip() for name in environ.get('OTEL_TRACES_EXPORTER', '').split(',') if name.strip()]
    if not names and (environ.get('OTEL_EXPORTER_OTLP_ENDPOINT') or environ.get('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT')):
        names = ['otlp']
    names = [name for name in names if name != 'none']
    if not names:
        return None
    provider = TracerProvider(resource=OTelResource.create())  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    for name in names:
        exporter = _exporter(name, environ)
        provider.add_span_processor(BatchSpanProcessor(QuietExporter(exporter, what=_destination(name, environ))))
    return provider


def _exporter(name: str, environ: Mapping[str, str]) -> SpanExporter:
    if name == 'otlp':
        protocol = environ.get('OTEL_EXPORTER_OTLP_TRACES_PROTOCOL') or environ.get('OTEL_EXPORTER_OTLP_PROTOCOL')
        name = 'otlp_proto_grpc' if (protocol or '').strip() == 'grpc' else 'otlp_proto_http'
    found = list(importlib.metadata.entry_points(group='opentelemetry_traces_exporter', name=name))
    if not found:
        package = {'otlp_proto_http': 'opentelemetry-exporter-otlp-proto-http',
                   'otlp_proto_grpc': 'opentelemetry-exporter-otlp-proto-grpc'}.get(name, f"the one providing {name!r}")
        raise TracingError(f"OTEL_TRACES_EXPORTER asks for the trace exporter {name!r}, which is not installed: "
                           f"install {package} (pip install 'kopf[tracing]' has the OTLP/HTTP one).")
    exporter: SpanExporter = found[0].load()()
    return exporter


def _destination(name: str, environ: Mapping[str, str]) -> str:
    """Where an exporter sends the spans, for the messages: its endpoint (if known) and its name."""
    endpoint = environ.get('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT') or environ.get('OTEL_EXPORTER_OTLP_ENDPOINT')
    return f"{endpoint} ({name})" if endpoint and name.startswith('otlp') else f"the {name} exporter"


class QuietExporter(SpanExporter):
    """
    An exporter that says once that it cannot export, and again once it can; the spans meanwhile are dropped.

    The SDK's batch processor calls it from its own thread; the handling only
    queues finished spans (a bounded queue: the oldest are dropped when full).
    """

    def __init__(self, exporter: SpanExporter, *, what: str) -> None:
        self.exporter = exporter
        self.what = what
        self.failing = False
        self.dropped = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.exporter.export(spans)
            problem = None if result == SpanExportResult.SUCCESS else "the export has failed"
        except Exception as e:
            result, problem = SpanExportResult.FAILURE, f"{type(e).__name__}: {e}"
        if problem is not None:
            self.dropped += len(spans)
            if not self.failing:
                self.failing = True
                logger.warning("Cannot export the traces to %s: %s; the spans are dropped until it can be "
                               "reached. Is the collector running, and OTEL_EXPORTER_OTLP_ENDPOINT right?",
                               self.what, problem)
        elif self.failing:
            self.failing = False
            logger.info("The traces are exported again to %s (%d spans were dropped).", self.what, self.dropped)
        return result

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.exporter.force_flush(timeout_millis)


def quiet_libraries() -> dict[str, int]:
    """Keep the SDK's own loggers from repeating every failure (we say it once); their previous levels."""
    previous: dict[str, int] = {}
    for name in _NOISY_LOGGERS:
        library = logging.getLogger(name)
        if library.level == logging.NOTSET:
            previous[name] = library.level
            library.setLevel(logging.CRITICAL)
    return previous


def restore_libraries(previous: Mapping[str, int]) -> None:
    for name, level in previous.items():
        logging.getLogger(name).setLevel(level)


def shut_down(provider: trace.TracerProvider, *, timeout: float) -> None:
    """Export what is left and stop the provider's threads -- in a thread, waited for at most ``timeout``."""
    stop = getattr(provider, 'shutdown', None)
    if stop is None:
        return
    thread = threading.Thread(target=stop, name='kopf tracing shutdown', daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        logger.warning("The last traces were not exported within %gs of the exit; they are dropped.", timeout)


class TracingRecorder(Recorder):
    """Spans for cycles, handler calls and API requests; everything else goes to the ``inner`` recorder."""

    enabled = True

    def __init__(self, provider: trace.TracerProvider, *, inner: Recorder = NULL) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer('kopf')
        self.inner = inner

    # What makes spans.

    def cycle(self, resource: ResourceKey, body: Mapping[str, Any], event: str | None) -> CycleScope:
        meta = body.get('metadata') or {}
        attributes = {
            'kopf.resource': labels.resource_label(resource),
            'kopf.object.kind': str(body.get('kind') or resource.kind or ''),
            'kopf.object.name': str(meta.get('name') or ''),
            'kopf.object.uid': str(meta.get('uid') or ''),
            'kopf.event': event or 'LISTED',
        }
        if meta.get('namespace'):
            attributes['k8s.namespace.name'] = str(meta['namespace'])
        return _CycleSpan(self.tracer, attributes, self.inner.cycle(resource, body, event))

    def caused(self, cause: str, delay: float | None) -> None:
        span = trace.get_current_span()
        if span.is_recording():
            span.set_attribute('kopf.cause', cause)
        self.inner.caused(cause, delay)

    def handler(self, resource: ResourceKey | None, cause: str, handler_id: str) -> HandlerScope:
        return _HandlerSpan(self.tracer, handler_id, cause, self.inner.handler(resource, cause, handler_id))

    def api_request(self, method: str, url: str) -> RequestScope:
        return _RequestSpan(self.tracer, method, url, self.inner.api_request(method, url))

    # Everything else is the inner recorder's.

    def cycle_failed(self, resource: ResourceKey) -> None:
        span = trace.get_current_span()
        if span.is_recording():
            span.set_status(Status(StatusCode.ERROR, "the handling has failed"))
        self.inner.cycle_failed(resource)

    def patched(self, resource: ResourceKey, patch: Mapping[str, Any], *, size: int | None = None) -> None:
        self.inner.patched(resource, patch, size=size)

    def patch_refused(self, resource: ResourceKey, outcome: str) -> None:
        span = trace.get_current_span()
        if span.is_recording():
            span.add_event('kopf.patch_refused', {'kopf.outcome': outcome})
        self.inner.patch_refused(resource, outcome)

    def queue(self, resource: ResourceKey, gate: Gate | None = None) -> QueueProbe:
        return self.inner.queue(resource, gate)

    def webhook(self, handler_id: str, outcome: str) -> None:
        self.inner.webhook(handler_id, outcome)

    def daemon_started(self, resource: ResourceKey | None, kind: str) -> None:
        self.inner.daemon_started(resource, kind)

    def daemon_ended(self, resource: ResourceKey | None, kind: str) -> None:
        self.inner.daemon_ended(resource, kind)

    def daemon_restarted(self, resource: ResourceKey | None, handler_id: str, kind: str) -> None:
        self.inner.daemon_restarted(resource, handler_id, kind)

    def api_retry(self, method: str, url: str, *, throttled: bool, delay: float) -> None:
        self.inner.api_retry(method, url, throttled=throttled, delay=delay)

    def watch(self, resource: ResourceKey, namespace: str | None) -> WatchProbe:
        return self.inner.watch(resource, namespace)

    def lease_renewed(self, mode: str, seconds: float) -> None:
        self.inner.lease_renewed(mode, seconds)

    def lease_failed(self, mode: str, error: BaseException) -> None:
        self.inner.lease_failed(mode, error)

    def follow_indexes(self, indexes: Mapping[str, Sized]) -> None:
        self.inner.follow_indexes(indexes)

    def follow_replica(self, state: Any) -> None:
        self.inner.follow_replica(state)

    def follow_readiness(self, problem: Any) -> None:
        self.inner.follow_readiness(problem)


class _RequestSpan(RequestScope):
    """A client span of one API request, a child of the current span (a cycle's, a handler's); not made current."""

    __slots__ = ('_inner', '_method', '_span', '_tracer', '_url')

    def __init__(self, tracer: trace.Tracer, method: str, url: str, inner: RequestScope) -> None:
        self._tracer = tracer
        self._method = method
        self._url = url
        self._inner = inner
        self._span: Span | None = None

    def __enter__(self) -> _RequestSpan:
        verb, resource = labels.request_labels(self._method, self._url)
        self._span = self._tracer.start_span(f"{verb} {resource}", kind=SpanKind.CLIENT, attributes={
            'http.request.method': self._method, 'url.full': self._url.split('?', 1)[0], 'kopf.verb': verb,
            'kopf.resource': resource})
        self._inner.__enter__()
        return self

    def answered(self, status: int) -> None:
        self._inner.answered(status)
        if self._span is not None:
            self._span.set_attribute('http.response.status_code', status)
            if status >= 400:
                self._span.set_status(Status(StatusCode.ERROR, str(status)))

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: types.TracebackType | None) -> None:
        self._inner.__exit__(exc_type, exc, tb)
        if self._span is not None:
            if exc is not None and not isinstance(exc, GeneratorExit):
                self._span.record_exception(exc)
                self._span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            self._span.end()


class _CurrentSpan:
    """A span that is the current one from entering to exiting (in this task, and what it starts)."""

    __slots__ = ('_inner', '_span', '_token')

    def _open(self, tracer: trace.Tracer, name: str, attributes: Mapping[str, Any]) -> None:
        self._span = tracer.start_span(name, attributes=attributes)
        self._token = otel_context.attach(trace.set_span_in_context(self._span))

    def _close(self, exc: BaseException | None) -> None:
        otel_context.detach(self._token)
        if exc is not None:
            self._span.record_exception(exc)
            self._span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        self._span.end()


class _CycleSpan(_CurrentSpan, CycleScope):
    __slots__ = ('_attributes', '_tracer')

    def __init__(self, tracer: trace.Tracer, attributes: Mapping[str, Any], inner: CycleScope) -> None:
        self._tracer = tracer
        self._attributes = attributes
        self._inner = inner

    def __enter__(self) -> _CycleSpan:
        self._open(self._tracer, 'kopf.cycle', self._attributes)
        self._inner.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: types.TracebackType | None) -> None:
        try:
            self._inner.__exit__(exc_type, exc, tb)
        finally:
            self._close(exc)


class _HandlerSpan(_CurrentSpan, HandlerScope):
    __slots__ = ('_cause', '_handler_id', '_tracer')

    def __init__(self, tracer: trace.Tracer, handler_id: str, cause: str, inner: HandlerScope) -> None:
        self._tracer = tracer
        self._handler_id = handler_id
        self._cause = cause
        self._inner = inner

    def __enter__(self) -> _HandlerSpan:
        self._open(self._tracer, 'kopf.handler', {'kopf.handler': self._handler_id, 'kopf.cause': self._cause})
        self._inner.__enter__()
        return self

    def ended(self, *, final: bool, error: BaseException | None) -> None:
        outcome = handler_outcome(final=final, error=error)
        self._span.set_attribute('kopf.outcome', outcome)
        if error is not None:
            self._span.record_exception(error)
            self._span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"[:200]))
        self._inner.ended(final=final, error=error)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: types.TracebackType | None) -> None:
        try:
            self._inner.__exit__(exc_type, exc, tb)
        finally:
            self._close(exc)


__all__ = ['QuietExporter', 'ReplicaState', 'TracingError', 'TracingRecorder', 'configured_provider',
           'quiet_libraries', 'restore_libraries', 'shut_down']
