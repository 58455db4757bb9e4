"""
Kopf's Kubernetes Events (its "Events" page): what is posted about which objects.
"""
import asyncio
import logging

import kopf
from kopf._cycle import processing
from kopf._handlers.registries import OperatorRegistry
from kopf._runtime import posting
from kopf._structs.resources import Resource, Selector
from kopf.config import OperatorConfig, PostingConfig

KEX = Resource(group='kopf.dev', version='v1', plural='kopfexamples', kind='KopfExample')

EVENT = {'apiVersion': 'v1', 'kind': 'Event', 'metadata': {'name': 'e1', 'namespace': 'ns', 'uid': 'u1'}}
CONFIGMAP = {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': 'cm', 'namespace': 'ns', 'uid': 'u2'}}


async def test_no_events_are_posted_about_events_and_nothing_is_raised_as_in_kopf():
    queue = asyncio.Queue()
    posting.event_queue_var.set(queue)
    posting.event_loop_var.set(asyncio.get_running_loop())
    posting.event_settings_var.set(PostingConfig())

    kopf.event(EVENT, type='SomeType', reason='SomeReason', message='Some message')
    kopf.info([EVENT, CONFIGMAP], reason='SomeReason', message='Some message')
    kopf.warn(EVENT, reason='SomeReason', message='Some message')

    items = [queue.get_nowait() for _ in range(queue.qsize())]
    assert [item.ref['name'] for item in items] == ['cm']


async def test_per_object_messages_go_through_the_kopf_objects_logger_as_in_kopf():
    registry = OperatorRegistry()
    seen = []

    class ExcludeGreetings(logging.Filter):
        def filter(self, record):
            seen.append(record.getMessage())
            return 'hello' not in record.getMessage()

    @kopf.on.event('kopfexamples', registry=registry)
    def greet(logger, **_):
        logger.info("hello from the handler")

    watch = processing.ResourceWatch(context=None, resource=KEX, selector=Selector.from_args('kopfexamples'),
                                     registry=registry, config=OperatorConfig(), memo=kopf.Memo())
    log = logging.getLogger('kopf.objects')
    level = log.level
    log.setLevel(logging.INFO)  # as ``kopf run`` configures it
    log.addFilter(ExcludeGreetings())
    try:
        await processing.process_event(watch, {'type': 'ADDED', 'object': {
            'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
            'metadata': {'name': 'kex1', 'namespace': 'ns', 'uid': 'u', 'resourceVersion': '1'}}}, False)
    finally:
        log.filters.clear()
        log.setLevel(level)

    assert "hello from the handler" in seen
