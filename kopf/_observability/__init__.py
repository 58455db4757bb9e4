"""
Observability: what the operator tells about its work -- metrics, traces, readiness -- and where it is served.

The tour:

* :mod:`.recording` is what the rest of the operator calls: the recording
  interface, the recorder that ignores everything (the default, which costs
  a method call per instrumented place and nothing else), and the context
  variable that holds the operator's recorder;
* :mod:`.metrics` records Prometheus metrics (``kopf[metrics]``):
  counters and histograms as the work happens, gauges read at every scrape;
* :mod:`.tracing` makes OpenTelemetry spans (``kopf[tracing]``) of the
  handling cycles, the handler calls and the API requests, and sets the
  tracing up from the standard ``OTEL_*`` variables;
* :mod:`.readiness` decides whether the operator is ready (``/readyz``);
* :mod:`.serving` serves the operator's endpoints (liveness, readiness,
  metrics), one server per port;
* :mod:`.labels` and :mod:`.outcomes` name what is recorded, in few words.

This package sits low, below the API client, so that everything that does
work can record it; it imports only the data structures, the public errors,
and -- in :mod:`.metrics` and :mod:`.tracing` alone, which only the runtime
imports, when asked -- ``prometheus_client`` and ``opentelemetry``.
"""
