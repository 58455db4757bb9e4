"""The Prometheus recorder: what each instrumented place counts, times and measures, on a clock moved by hand."""
import asyncio

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from kopf._observability import metrics
from kopf._observability.recording import ReplicaState
from kopf._structs.resources import Resource
from kopf.errors import HandlerRetriesError, PermanentError, TemporaryError

RESOURCE = Resource(group='kopf.dev', version='v1', plural='kopfexamples')
OTHER = Resource(group='', version='v1', plural='configmaps')
BODY = {'metadata': {'name': 'ex', 'namespace': 'ns', 'uid': 'u'}}


@pytest.fixture()
def recorder(clock):
    return metrics.MetricsRecorder(clock=clock, process=False)


def value(recorder, name, **labels):
    found = recorder.registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


def test_handler_calls_are_counted_by_outcome_and_timed(recorder, clock):
    for final, error, seconds in [(True, None, 0.2), (False, TemporaryError("x"), 1.5), (True, PermanentError("y"), 0),
                                  (True, HandlerRetriesError("z"), 0)]:
        with recorder.handler(RESOURCE, 'create', 'fn') as call:
            clock.advance(seconds)
            call.ended(final=final, error=error)
    labels = {'resource': 'kopfexamples.kopf.dev', 'handler': 'fn', 'cause': 'create'}
    assert value(recorder, 'kopf_handler_calls_total', **labels, outcome='success') == 1
    assert value(recorder, 'kopf_handler_calls_total', **labels, outcome='temporary_error') == 1
    assert value(recorder, 'kopf_handler_calls_total', **labels, outcome='permanent_error') == 1
    assert value(recorder, 'kopf_handler_calls_total', **labels, outcome='exhausted') == 1
    assert value(recorder, 'kopf_handler_duration_seconds_count', **labels) == 4
    assert value(recorder, 'kopf_handler_duration_seconds_sum', **labels) == pytest.approx(1.7)
    assert value(recorder, 'kopf_handler_duration_seconds_bucket', **labels, le='0.25') == 3


def test_a_handler_call_cancelled_midway_is_counted_as_cancelled(recorder):
    with pytest.raises(KeyboardInterrupt), recorder.handler(RESOURCE, 'update', 'fn'):
        raise KeyboardInterrupt
    assert value(recorder, 'kopf_handler_calls_total', resource='kopfexamples.kopf.dev', handler='fn',
                 cause='update', outcome='cancelled') == 1


def test_cycles_are_counted_and_timed_by_their_cause_and_retries_by_their_delay(recorder, clock):
    with recorder.cycle(RESOURCE, BODY, 'ADDED'):
        clock.advance(0.5)
        recorder.caused('create', 10.0)
    with recorder.cycle(RESOURCE, BODY, 'MODIFIED'):
        recorder.caused('noop', None)
    with recorder.cycle(RESOURCE, BODY, 'MODIFIED'):
        recorder.cycle_failed(RESOURCE)
    assert recorder.caused('outside', 1.0) is None  # no cycle: nothing to tell
    label = 'kopfexamples.kopf.dev'
    assert value(recorder, 'kopf_cycles_total', resource=label, cause='create') == 1
    assert value(recorder, 'kopf_cycles_total', resource=label, cause='noop') == 1
    assert value(recorder, 'kopf_cycles_total', resource=label, cause='none') == 1
    assert value(recorder, 'kopf_cycle_duration_seconds_sum', resource=label, cause='create') == 0.5
    assert value(recorder, 'kopf_queue_retries_total', resource=label) == 1
    assert value(recorder, 'kopf_cycle_failures_total', resource=label) == 1


def test_patches_are_counted_by_outcome_and_measured(recorder):
    recorder.patched(RESOURCE, {'metadata': {'annotations': {'a': 'b'}}})
    recorder.patch_refused(RESOURCE, 'conflict_rebased')
    recorder.patch_refused(RESOURCE, 'conflict_rebased')
    recorder.patch_refused(RESOURCE, 'too_large')
    label = 'kopfexamples.kopf.dev'
    assert value(recorder, 'kopf_patch_outcomes_total', resource=label, outcome='sent') == 1
    assert value(recorder, 'kopf_patch_outcomes_total', resource=label, outcome='conflict_rebased') == 2
    assert value(recorder, 'kopf_patch_outcomes_total', resource=label, outcome='too_large') == 1
    assert value(recorder, 'kopf_patch_size_bytes_sum', resource=label) == len('{"metadata":{"annotations":{"a":"b"}}}')


def test_the_queue_shows_what_waits_and_the_latency_to_the_first_handler(recorder, clock):
    queue = recorder.queue(RESOURCE)
    queue.arrived('a')
    clock.advance(2)
    queue.arrived('b')
    queue.arrived('a')  # the oldest unhandled event of 'a' is still the first one
    clock.advance(1)
    label = 'kopfexamples.kopf.dev'
    assert value(recorder, 'kopf_queue_waiting_objects', resource=label) == 2
    assert value(recorder, 'kopf_queue_oldest_waiting_seconds', resource=label) == 3

    queue.taken('a', woken_up=False)
    clock.advance(0.5)
    with recorder.handler(RESOURCE, 'create', 'first'):
        pass
    with recorder.handler(RESOURCE, 'create', 'second'):  # the event's latency is to its first handler only
        pass
    assert value(recorder, 'kopf_queue_latency_seconds_count', resource=label) == 1
    assert value(recorder, 'kopf_queue_latency_seconds_sum', resource=label) == 3.5
    assert value(recorder, 'kopf_queue_waiting_objects', resource=label) == 1
    assert value(recorder, 'kopf_queue_oldest_waiting_seconds', resource=label) == 1.5

    queue.taken('b', woken_up=True)  # a wake-up is not an event: no latency, 'b' still waits
    with recorder.handler(RESOURCE, 'create', 'first'):
        pass
    assert value(recorder, 'kopf_queue_latency_seconds_count', resource=label) == 1
    queue.forget('b')  # its worker has ended
    assert value(recorder, 'kopf_queue_waiting_objects', resource=label) == 0
    assert value(recorder, 'kopf_queue_oldest_waiting_seconds', resource=label) == 0


def test_the_objects_owned_are_those_the_gate_admits_now(recorder):
    class Gate:
        mine = {'a', 'b'}

        def admits(self, key):
            return key in self.mine

    gate = Gate()
    queue = recorder.queue(RESOURCE, gate)
    for key in ('a', 'b'):
        queue.arrived(key)
    assert value(recorder, 'kopf_replica_objects_owned', resource='kopfexamples.kopf.dev') == 2
    gate.mine = {'b'}  # a new ring: 'a' has moved away
    assert value(recorder, 'kopf_replica_objects_owned', resource='kopfexamples.kopf.dev') == 1
    queue.arrived('b', deleted=True)
    assert value(recorder, 'kopf_replica_objects_owned', resource='kopfexamples.kopf.dev') == 0


def test_watches_count_events_and_restarts_and_show_the_open_streams_and_the_age_of_the_last_event(recorder, clock):
    watch = recorder.watch(OTHER, 'ns')
    watch.listed(5)
    watch.opened()
    clock.advance(3)
    watch.event('ADDED')
    watch.event('MODIFIED')
    watch.event('MODIFIED')
    clock.advance(4)
    watch.restarted('expired')
    assert value(recorder, 'kopf_watch_events_total', resource='configmaps', type='LISTED') == 5
    assert value(recorder, 'kopf_watch_events_total', resource='configmaps', type='MODIFIED') == 2
    assert value(recorder, 'kopf_watch_restarts_total', resource='configmaps', reason='expired') == 1
    assert value(recorder, 'kopf_watch_streams_open', resource='configmaps') == 1
    assert value(recorder, 'kopf_watch_last_event_age_seconds', resource='configmaps', namespace='ns') == 4
    watch.closed()
    assert value(recorder, 'kopf_watch_streams_open', resource='configmaps') == 0
    del watch  # the watch has ended for good: its stream is no longer shown
    assert recorder.registry.get_sample_value('kopf_watch_last_event_age_seconds',
                                              {'resource': 'configmaps', 'namespace': 'ns'}) is None


async def test_api_requests_are_counted_by_verb_resource_and_code_and_timed(recorder, clock):
    url = 'https://k/apis/kopf.dev/v1/namespaces/ns/kopfexamples/ex'
    with recorder.api_request('PATCH', url) as call:
        clock.advance(0.04)
        call.answered(409)
        clock.advance(1.0)  # the body is read: not in the latency
    with pytest.raises(OSError), recorder.api_request('GET', 'https://k/api/v1/pods?watch=true'):
        raise OSError()
    with pytest.raises(asyncio.CancelledError), recorder.api_request('GET', 'https://k/api/v1/pods'):
        raise asyncio.CancelledError()  # not the server's doing: not counted
    labels = {'verb': 'PATCH', 'resource': 'kopfexamples.kopf.dev'}
    assert value(recorder, 'kopf_api_requests_total', **labels, code='409') == 1
    assert value(recorder, 'kopf_api_request_duration_seconds_sum', **labels) == pytest.approx(0.04)
    assert value(recorder, 'kopf_api_requests_total', verb='WATCH', resource='pods', code='error') == 1
    assert value(recorder, 'kopf_api_requests_total', verb='LIST', resource='pods') == 0

    recorder.api_retry('GET', 'https://k/api/v1/namespaces/ns/pods', throttled=True, delay=3.0)
    recorder.api_retry('GET', 'https://k/api/v1/namespaces/ns/pods', throttled=False, delay=0.5)
    assert value(recorder, 'kopf_api_retries_total', verb='LIST', resource='pods', reason='throttled') == 1
    assert value(recorder, 'kopf_api_retries_total', verb='LIST', resource='pods', reason='error') == 1
    assert value(recorder, 'kopf_api_throttled_seconds_total', verb='LIST', resource='pods') == 3


def test_daemons_webhooks_and_leases(recorder):
    recorder.daemon_started(RESOURCE, 'daemon')
    recorder.daemon_started(RESOURCE, 'daemon')
    recorder.daemon_started(RESOURCE, 'timer')
    recorder.daemon_ended(RESOURCE, 'daemon')
    recorder.daemon_restarted(RESOURCE, 'fn', 'daemon')
    recorder.webhook('validate', 'rejected')
    recorder.lease_renewed('ha', 0.02)
    recorder.lease_failed('shards', TimeoutError())
    label = 'kopfexamples.kopf.dev'
    assert value(recorder, 'kopf_daemons_running', resource=label, kind='daemon') == 1
    assert value(recorder, 'kopf_daemons_running', resource=label, kind='timer') == 1
    assert value(recorder, 'kopf_daemon_restarts_total', resource=label, handler='fn', kind='daemon') == 1
    assert value(recorder, 'kopf_webhook_requests_total', handler='validate', outcome='rejected') == 1
    assert value(recorder, 'kopf_lease_renew_duration_seconds_count', mode='ha') == 1
    assert value(recorder, 'kopf_lease_renew_failures_total', mode='shards', reason='TimeoutError') == 1


def test_what_is_read_at_every_scrape(recorder):
    recorder.follow_indexes({'by_label': {'a': 1, 'b': 2}})
    state = ReplicaState(mode='shards', leading=True, members=3, admitting=True, writable=False)
    recorder.follow_replica(lambda: state)
    problems = ["not yet"]
    recorder.follow_readiness(lambda: problems[0])
    assert value(recorder, 'kopf_index_keys', index='by_label') == 2
    assert value(recorder, 'kopf_replica_leading', mode='shards') == 1
    assert value(recorder, 'kopf_replica_members', mode='shards') == 3
    assert value(recorder, 'kopf_replica_writable', mode='shards') == 0
    assert value(recorder, 'kopf_ready') == 0
    problems[0] = None
    assert value(recorder, 'kopf_ready') == 1


def test_the_exposition_parses_and_has_the_process_collectors_in_the_operators_own_registry():
    recorder = metrics.MetricsRecorder()
    recorder.patched(RESOURCE, {})
    body, content_type = metrics.render(recorder.registry, '')
    assert content_type.startswith('text/plain')
    names = {family.name for family in text_string_to_metric_families(body.decode())}
    assert {'kopf_patch_outcomes', 'process_cpu_seconds', 'python_gc_objects_collected', 'python_info'} <= names
    openmetrics, content_type = metrics.render(recorder.registry, 'application/openmetrics-text; version=1.0.0')
    assert content_type.startswith('application/openmetrics-text')
    assert openmetrics.endswith(b'# EOF\n')


def test_a_registry_of_the_application_gets_the_metrics_but_not_the_process_collectors():
    registry = CollectorRegistry()
    recorder = metrics.MetricsRecorder(registry=registry)
    recorder.webhook('fn', 'allowed')
    assert registry.get_sample_value('kopf_webhook_requests_total', {'handler': 'fn', 'outcome': 'allowed'}) == 1
    assert registry.get_sample_value('process_cpu_seconds_total') is None
