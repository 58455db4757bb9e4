"""
An operator for the tracing test: one create handler that makes a span of its own, traced into memory.

The spans are kept by the OpenTelemetry SDK's in-memory exporter and written
at the exit, as JSON lines, into ``$E2E_SPANS`` (name, ids, parent, attributes),
so that the test checks the tree of one handling cycle.
"""
import json
import os
import pathlib

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import kopf

SPANS = pathlib.Path(os.environ['E2E_SPANS'])
EXPORTER = InMemorySpanExporter()
PROVIDER = TracerProvider()
PROVIDER.add_span_processor(SimpleSpanProcessor(EXPORTER))


@kopf.on.startup()
def configure(settings, **_):
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage()
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage()
    settings.posting.enabled = False
    settings.tracing.provider = PROVIDER


@kopf.on.create('configmaps', labels={'e2e': 'traced'})
def traced(**_):
    with PROVIDER.get_tracer('the-handler').start_as_current_span('handler-work') as span:
        span.set_attribute('work', 'done')


@kopf.on.cleanup()
def dump(**_):
    with SPANS.open('w') as f:
        for span in EXPORTER.get_finished_spans():
            f.write(json.dumps({
                'name': span.name,
                'span': format(span.context.span_id, '016x'),
                'trace': format(span.context.trace_id, '032x'),
                'parent': format(span.parent.span_id, '016x') if span.parent is not None else None,
                'attributes': dict(span.attributes or {}),
            }) + '\n')
