"""Traces: the spans of a cycle and its handlers, the exporter that says once that it cannot export, the setup."""
import logging

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from kopf._observability import metrics, tracing
from kopf._structs.resources import Resource
from kopf.errors import TemporaryError

RESOURCE = Resource(group='kopf.dev', version='v1', plural='kopfexamples', kind='KopfExample')
BODY = {'kind': 'KopfExample', 'metadata': {'name': 'ex', 'namespace': 'ns', 'uid': 'u-1'}}


@pytest.fixture()
def exporter():
    return InMemorySpanExporter()


@pytest.fixture()
def provider(exporter):
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def test_a_cycle_span_holds_the_handler_spans_and_the_handlers_own_spans(provider, exporter):
    recorder = tracing.TracingRecorder(provider)
    with recorder.cycle(RESOURCE, BODY, 'ADDED'):
        with recorder.handler(RESOURCE, 'create', 'fn') as call:
            with provider.get_tracer('user').start_as_current_span('own'):
                pass
            call.ended(final=False, error=TemporaryError("later"))
        recorder.caused('create', 5.0)
    spans = {span.name: span for span in exporter.get_finished_spans()}
    cycle, handler, own = spans['kopf.cycle'], spans['kopf.handler'], spans['own']
    assert cycle.parent is None
    assert handler.parent.span_id == cycle.context.span_id
    assert own.parent.span_id == handler.context.span_id
    assert dict(cycle.attributes) == {'kopf.resource': 'kopfexamples.kopf.dev', 'kopf.object.kind': 'KopfExample',
                                      'kopf.object.name': 'ex', 'kopf.object.uid': 'u-1', 'kopf.event': 'ADDED',
                                      'k8s.namespace.name': 'ns', 'kopf.cause': 'create'}
    assert dict(handler.attributes) == {'kopf.handler': 'fn', 'kopf.cause': 'create',
                                        'kopf.outcome': 'temporary_error'}
    assert handler.status.status_code == StatusCode.ERROR
    assert [event.name for event in handler.events] == ['exception']
    assert trace.get_current_span() is trace.INVALID_SPAN  # nothing stays current after the cycle


def test_the_inner_recorder_still_records_the_metrics(provider, clock):
    inner = metrics.MetricsRecorder(clock=clock, process=False)
    recorder = tracing.TracingRecorder(provider, inner=inner)
    with recorder.cycle(RESOURCE, BODY, 'ADDED'):
        with recorder.handler(RESOURCE, 'create', 'fn') as call:
            call.ended(final=True, error=None)
        recorder.caused('create', None)
    recorder.webhook('hook', 'allowed')
    samples = inner.registry
    assert samples.get_sample_value('kopf_cycles_total', {'resource': 'kopfexamples.kopf.dev', 'cause': 'create'}) == 1
    assert samples.get_sample_value('kopf_handler_calls_total', {'resource': 'kopfexamples.kopf.dev', 'handler': 'fn',
                                                                 'cause': 'create', 'outcome': 'success'}) == 1
    assert samples.get_sample_value('kopf_webhook_requests_total', {'handler': 'hook', 'outcome': 'allowed'}) == 1
    with recorder.api_request('GET', 'https://k/api/v1/pods') as request:
        request.answered(200)
    assert samples.get_sample_value('kopf_api_requests_total', {'verb': 'LIST', 'resource': 'pods', 'code': '200'}) == 1


def test_an_exception_through_a_cycle_marks_its_span(provider, exporter):
    recorder = tracing.TracingRecorder(provider)
    with pytest.raises(RuntimeError), recorder.cycle(RESOURCE, BODY, None):
        raise RuntimeError("boom")
    [span] = exporter.get_finished_spans()
    assert span.status.status_code == StatusCode.ERROR
    assert span.attributes['kopf.event'] == 'LISTED'


class Failing:
    """An exporter whose collector is down until ``up`` is set."""

    def __init__(self):
        self.up = False
        self.calls = 0

    def export(self, spans):
        self.calls += 1
        if self.up:
            return SpanExportResult.SUCCESS
        raise ConnectionRefusedError("connection refused")

    def shutdown(self):
        pass

    def force_flush(self, timeout_millis=30000):
        return True


def test_an_exporter_that_cannot_export_is_warned_about_once_and_its_recovery_once(caplog):
    inner = Failing()
    quiet = tracing.QuietExporter(inner, what='http://collector:4318 (otlp)')
    with caplog.at_level(logging.INFO, logger='kopf._observability.tracing'):
        for _ in range(5):
            assert quiet.export([object(), object()]) == SpanExportResult.FAILURE
        inner.up = True
        assert quiet.export([object()]) == SpanExportResult.SUCCESS
        assert quiet.export([object()]) == SpanExportResult.SUCCESS
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2, messages
    assert messages[0].startswith("Cannot export the traces to http://collector:4318 (otlp): "
                                  "ConnectionRefusedError: connection refused; the spans are dropped")
    assert messages[1] == "The traces are exported again to http://collector:4318 (otlp) (10 spans were dropped)."
    assert inner.calls == 7


def test_nothing_is_traced_unless_configured(monkeypatch):
    monkeypatch.setattr(trace, 'get_tracer_provider', lambda: trace.ProxyTracerProvider())
    assert tracing.configured_provider({}) is None
    assert tracing.configured_provider({'OTEL_TRACES_EXPORTER': 'none'}) is None
    assert tracing.configured_provider({'OTEL_EXPORTER_OTLP_ENDPOINT': 'http://c:4318',
                                        'OTEL_SDK_DISABLED': 'true'}) is None


def test_the_otel_variables_configure_a_batching_provider_with_a_quiet_exporter(monkeypatch):
    monkeypatch.setattr(trace, 'get_tracer_provider', lambda: trace.ProxyTracerProvider())
    monkeypatch.setenv('OTEL_EXPORTER_OTLP_ENDPOINT', 'http://c:4318')
    monkeypatch.setenv('OTEL_SERVICE_NAME', 'my-operator')  # the SDK reads it from the environment itself
    provider = tracing.configured_provider()
    try:
        assert isinstance(provider, TracerProvider)
        assert provider.resource.attributes['service.name'] == 'my-operator'
        [processor] = provider._active_span_processor._span_processors
        exporter = processor._batch_processor._exporter
        assert isinstance(exporter, tracing.QuietExporter)
        assert exporter.what == 'http://c:4318 (otlp)'
    finally:
        provider.shutdown()


def test_the_applications_own_provider_is_used(monkeypatch, provider):
    monkeypatch.setattr(trace, 'get_tracer_provider', lambda: provider)
    assert tracing.configured_provider({}) is provider


def test_an_exporter_that_is_not_installed_is_named(monkeypatch):
    monkeypatch.setattr(trace, 'get_tracer_provider', lambda: trace.ProxyTracerProvider())
    with pytest.raises(tracing.TracingError, match=r"'otlp_proto_grpc', which is not installed: install "
                                                   r"opentelemetry-exporter-otlp-proto-grpc"):
        tracing.configured_provider({'OTEL_TRACES_EXPORTER': 'otlp', 'OTEL_EXPORTER_OTLP_PROTOCOL': 'grpc'})


def test_the_libraries_loggers_are_quieted_and_restored():
    library = logging.getLogger('opentelemetry.exporter')
    assert library.level == logging.NOTSET
    previous = tracing.quiet_libraries()
    try:
        assert library.level == logging.CRITICAL
    finally:
        tracing.restore_libraries(previous)
    assert library.level == logging.NOTSET
