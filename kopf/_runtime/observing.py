"""
Observing the operator: the recorder of its metrics and traces, and the endpoints of metrics and readiness.

:func:`observing` is entered once the startup handlers have configured the
operator (``config.metrics``, ``config.tracing``): it makes the recorder
(Prometheus metrics, OpenTelemetry traces, both, or the null recorder that
costs nothing), installs it for the operator's tasks, and serves
``/metrics`` and ``/readyz`` -- on the liveness endpoint's server when they
share its port. Asked-for metrics without ``prometheus_client``, or
exporters that are not installed, or endpoints that cannot be served, stop
the operator at the start with one line (:class:`ObservabilityError`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator
from typing import Any

from kopf._observability import recording, serving
from kopf._observability.readiness import Readiness
from kopf._observability.recording import Recorder
from kopf.config import OperatorConfig

logger = logging.getLogger('kopf._runtime.observing')


class ObservabilityError(Exception):
    """Metrics, traces or readiness are asked for but cannot be had; the message says what to do."""


@contextlib.asynccontextmanager
async def observing(
        *,
        config: OperatorConfig,
        readiness: Readiness,
        liveness: serving.EndpointServer | None = None,
        readiness_endpoint: str | None = None,
) -> AsyncIterator[Recorder]:
    """Record and serve for the operator's lifetime; the recorder is installed for the tasks started within."""
    metrics = _metrics(config)
    recorder: Recorder = metrics if metrics is not None else recording.NULL
    provider, quieted = _tracing(config)
    if provider is not None:
        from kopf._observability import tracing
        recorder = tracing.TracingRecorder(provider, inner=recorder)
    servers = serving.Servers()
    if liveness is not None:
        servers.adopt(liveness)
    token = recording.install(recorder)
    try:
        try:
            await _serve(servers, config=config, metrics=metrics, readiness=readiness, liveness=liveness,
                         readiness_endpoint=readiness_endpoint)
        except serving.EndpointError as e:
            raise ObservabilityError(str(e)) from e
        recorder.follow_readiness(readiness.problem)
        yield recorder
    finally:
        await servers.stop()
        recording.uninstall(token)
        if provider is not None and config.tracing.provider is None:
            from kopf._observability import tracing
            tracing.shut_down(provider, timeout=config.tracing.exit_timeout)
            tracing.restore_libraries(quieted)


def _metrics(config: OperatorConfig) -> Any:
    """The metrics recorder if metrics are asked for (``None`` if not)."""
    settings = config.metrics
    if settings.endpoint is None and settings.registry is None:
        return None
    try:
        from kopf._observability import metrics
    except ImportError as e:
        asked = f"--metrics {settings.endpoint}" if settings.endpoint else "config.metrics.registry"
        raise ObservabilityError(f"{asked} needs the prometheus_client library, which is not installed ({e}): "
                                 f"pip install 'kopf[metrics]'.") from None
    return metrics.MetricsRecorder(registry=settings.registry, process=settings.process)


def _tracing(config: OperatorConfig) -> tuple[Any, dict[str, int]]:
    """The tracer provider if tracing is configured (``None`` if not), and the loggers quieted for it."""
    settings = config.tracing
    if settings.enabled is False:
        return None, {}
    try:
        from kopf._observability import tracing
    except ImportError as e:
        if settings.provider is not None or settings.enabled:
            raise ObservabilityError(f"Tracing needs the OpenTelemetry SDK, which is not installed ({e}): "
                                     f"pip install 'kopf[tracing]'.") from None
        return None, {}  # the OTEL_* variables may be meant for other programs: without the SDK, no traces
    try:
        provider = settings.provider if settings.provider is not None else tracing.configured_provider()
    except tracing.TracingError as e:
        raise ObservabilityError(str(e)) from None
    if provider is None:
        if settings.enabled:
            raise ObservabilityError("config.tracing.enabled is True, but nothing says where the traces go: "
                                     "set OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_TRACES_EXPORTER), "
                                     "or config.tracing.provider.")
        return None, {}
    logger.info("Tracing the handling with OpenTelemetry.")
    return provider, tracing.quiet_libraries() if settings.provider is None else {}


async def _serve(
        servers: serving.Servers,
        *,
        config: OperatorConfig,
        metrics: Any,
        readiness: Readiness,
        liveness: serving.EndpointServer | None,
        readiness_endpoint: str | None,
) -> None:
    """Serve ``/metrics`` (if asked for) and ``/readyz`` (where asked for, else beside liveness or metrics)."""
    metrics_address: serving.Address | None = None
    if metrics is not None and config.metrics.endpoint is not None:
        metrics_address = serving.Address.parse(config.metrics.endpoint, what="metrics endpoint", option='--metrics',
                                                example='http://0.0.0.0:9090/metrics')
        registry = metrics.registry
        url = await servers.serve(metrics_address, serving.metrics_handler(lambda accept: _render(registry, accept)),
                                  what=f"the metrics endpoint {config.metrics.endpoint}", option='--metrics')
        logger.info("Serving the metrics at %s.", url)
    if readiness_endpoint is not None:
        address = serving.Address.parse(readiness_endpoint, what="readiness endpoint", option='--readiness',
                                        example='http://0.0.0.0:8080/readyz')
        what = f"the readiness endpoint {readiness_endpoint}"
    elif liveness is not None:
        if serving.READINESS_PATH in liveness.routes:
            return  # served there since the start (:func:`serve_readiness_beside`)
        address = serving.Address(liveness.host, liveness.port, serving.READINESS_PATH)
        what = f"the readiness endpoint beside the liveness one ({serving.READINESS_PATH})"
    elif metrics_address is not None:
        address = dataclasses.replace(metrics_address, path=serving.READINESS_PATH)
        what = f"the readiness endpoint beside the metrics ({serving.READINESS_PATH})"
    else:
        return
    url = await servers.serve(address, serving.readiness_handler(readiness.problem), what=what, option='--readiness')
    logger.info("Serving the readiness endpoint at %s.", url)



def serve_readiness_beside(liveness: serving.EndpointServer, readiness: Readiness) -> None:
    """Serve ``/readyz`` on the liveness endpoint's server, as soon as it runs (before the startup handlers)."""
    if serving.READINESS_PATH not in liveness.routes:
        liveness.route(serving.READINESS_PATH, serving.readiness_handler(readiness.problem))
        logger.info("Serving the readiness endpoint at %s.", liveness.url_of(serving.READINESS_PATH))


def _render(registry: Any, accept: str) -> tuple[bytes, str]:
    from kopf._observability import metrics
    return metrics.render(registry, accept)
