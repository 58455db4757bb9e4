"""The observing of an operator: which recorder, what is served where, and what is said when it cannot be."""
import sys

import aiohttp
import pytest
from opentelemetry.sdk.trace import TracerProvider

import kopf._observability
from kopf._observability import recording
from kopf._observability.readiness import Readiness
from kopf._runtime import observing, probing
from kopf.config import OperatorConfig


async def fetch(url):
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.text()


async def test_nothing_asked_nothing_recorded_nothing_served():
    config = OperatorConfig()
    config.tracing.enabled = False
    async with observing.observing(config=config, readiness=Readiness()) as recorder:
        assert recorder is recording.NULL
        assert recording.current() is recording.NULL


async def test_metrics_and_readiness_share_the_liveness_port(clock):
    config = OperatorConfig()
    config.tracing.enabled = False
    readiness = Readiness()
    liveness = probing.LivenessServer('http://127.0.0.1:0/healthz', health=probing.Health(),
                                      probes=probing.ProbeCache(lambda: {}, period=lambda: 10))
    await liveness.start()
    try:
        config.metrics.endpoint = f'http://127.0.0.1:{liveness.bound_port}/metrics'
        async with observing.observing(config=config, readiness=readiness, liveness=liveness) as recorder:
            assert recording.current() is recorder
            assert recorder.enabled
            base = f'http://127.0.0.1:{liveness.bound_port}'
            status, text = await fetch(f'{base}/metrics')
            assert status == 200 and 'kopf_ready 0.0' in text
            assert (await fetch(f'{base}/readyz'))[0] == 503
            readiness.expect({})
            assert await fetch(f'{base}/readyz') == (200, '{"ready": true}')
            assert 'kopf_ready 1.0' in (await fetch(f'{base}/metrics'))[1]
        assert recording.current() is recording.NULL
        assert (await fetch(f'{base}/readyz'))[0] == 404  # the liveness server is its owner's: it stays
    finally:
        await liveness.stop()


async def test_readiness_is_served_beside_liveness_from_the_start_and_observing_keeps_it():
    config = OperatorConfig()
    config.tracing.enabled = False
    readiness = Readiness()
    liveness = probing.LivenessServer('http://127.0.0.1:0/healthz', health=probing.Health(),
                                      probes=probing.ProbeCache(lambda: {}, period=lambda: 10))
    await liveness.start()
    try:
        base = f'http://127.0.0.1:{liveness.bound_port}'
        observing.serve_readiness_beside(liveness, readiness)  # before the startup handlers, as the runtime does
        status, text = await fetch(f'{base}/readyz')
        assert status == 503 and 'not started watching yet' in text
        async with observing.observing(config=config, readiness=readiness, liveness=liveness):
            readiness.expect({})
            assert await fetch(f'{base}/readyz') == (200, '{"ready": true}')
    finally:
        await liveness.stop()


async def test_readiness_is_beside_the_metrics_without_liveness_or_where_asked():
    config = OperatorConfig()
    config.tracing.enabled = False
    config.metrics.endpoint = 'http://127.0.0.1:0/metrics'
    async with observing.observing(config=config, readiness=Readiness(),
                                   readiness_endpoint='http://127.0.0.1:0/ready') as recorder:
        assert recorder.enabled
    config.metrics.endpoint = None
    async with observing.observing(config=config, readiness=Readiness()) as recorder:
        assert recorder is recording.NULL


async def test_metrics_without_prometheus_client_are_an_error_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, 'prometheus_client', None)
    monkeypatch.delitem(sys.modules, 'kopf._observability.metrics', raising=False)
    monkeypatch.delattr(kopf._observability, 'metrics', raising=False)
    config = OperatorConfig()
    config.metrics.endpoint = 'http://0.0.0.0:9090/metrics'
    expected = r"^--metrics http://0.0.0.0:9090/metrics needs the prometheus_client library, .*'kopf\[metrics\]'"
    with pytest.raises(observing.ObservabilityError, match=expected):
        async with observing.observing(config=config, readiness=Readiness()):
            pass


async def test_a_given_tracer_provider_traces_and_is_left_to_its_owner():
    provider = TracerProvider()
    config = OperatorConfig()
    config.tracing.provider = provider
    async with observing.observing(config=config, readiness=Readiness()) as recorder:
        assert recorder.enabled and recorder.provider is provider
    assert provider.get_tracer('still').start_span('usable').is_recording()  # not shut down


async def test_tracing_asked_for_with_nowhere_to_go_is_an_error(monkeypatch):
    for name in ('OTEL_EXPORTER_OTLP_ENDPOINT', 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', 'OTEL_TRACES_EXPORTER'):
        monkeypatch.delenv(name, raising=False)
    config = OperatorConfig()
    config.tracing.enabled = True
    with pytest.raises(observing.ObservabilityError, match="nothing says where the traces go"):
        async with observing.observing(config=config, readiness=Readiness()):
            pass
