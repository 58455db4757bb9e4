"""
Kopf's Kubernetes Events (its "Events" page): what is posted about which objects.
"""
import asyncio

import kopf
from kopf.config import PostingConfig
from kopf.engines import posting

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
