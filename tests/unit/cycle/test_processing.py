"""
Processing: sending the handling's patch, and never losing it on API failures.

The API server is an ``aresponses`` mock; the handling itself is replaced by
a fixed result where only the sending matters.
"""
import asyncio
import contextlib
import dataclasses
import gc
import json
import logging
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web

import kopf
from kopf._cycle import cycle, processing
from kopf._cycle.cycle import HandlingResult
from kopf._handlers import execution
from kopf._handlers.registries import OperatorRegistry
from kopf._indexing.indexing import OperatorIndexes
from kopf._observability import metrics, recording
from kopf._storage.progress import AnnotationsProgressStorage, ProgressStorage
from kopf._structs import dormancy, patches
from kopf._structs.bodies import Body
from kopf._structs.patches import Patch
from kopf._structs.resources import Resource, Selector
from kopf.config import OperatorConfig
from tests.unit.conftest import idle

RESOURCE = Resource(group='kopf.dev', version='v1', plural='kopfexamples', kind='KopfExample',
                    subresources=frozenset({'status'}))
PATH = '/apis/kopf.dev/v1/namespaces/ns/kopfexamples/ex'
STATUS = f'{PATH}/status'
OURS = 'kopf.zalando.org/KopfFinalizerMarker'


def raw(rv='1', finalizers=(), annotations=None):
    return {'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
            'metadata': {'name': 'ex', 'namespace': 'ns', 'uid': 'u', 'resourceVersion': rv,
                         'finalizers': list(finalizers), 'annotations': annotations or {}},
            'spec': {}}


@pytest.fixture()
def watch(context):
    return processing.ResourceWatch(context=context, resource=RESOURCE, selector=Selector.from_args('kopfexamples'),
                                    registry=OperatorRegistry(), config=OperatorConfig(), memo=None)


@pytest.fixture()
def result(monkeypatch):
    """Make the handling produce the given patch and delay."""
    def set_result(patch, delay=None, essential=None, extras=(), settled=False):
        async def fake_handle_object(**_):
            return HandlingResult(patch=Patch(patch), delay=delay, cause='create', done=delay is None,
                                  essential=Patch(essential) if essential is not None else None, extras=extras,
                                  settled=settled)
        monkeypatch.setattr(cycle, 'handle_object', fake_handle_object)
    monkeypatch.setattr(processing, 'PATCH_PAUSE', 0)
    return set_result


def patched(sent_bodies, rv, state=None):
    """The server's answer to a PATCH; with a ``state``, a server that keeps the object between requests."""
    async def handler(request):
        body = await request.json()
        sent_bodies.append(body)
        if state is not None:
            state.update(patches.apply(state, body))
            return web.json_response({**state, 'metadata': {**state['metadata'], 'resourceVersion': rv}})
        return web.json_response({**raw(rv), **body, 'metadata': {**raw(rv)['metadata'], **body.get('metadata', {}),
                                                                   'resourceVersion': rv}})
    return handler


async def test_the_patch_is_sent_and_the_patched_object_is_remembered(aresponses, host, watch, result):
    sent = []
    result({'metadata': {'annotations': {'kopf.zalando.org/fn': '{}'}}}, delay=5)
    aresponses.add(host, PATH, 'PATCH', patched(sent, '2'))
    outcome = await processing.process_event(watch, {'type': 'ADDED', 'object': raw()}, False)
    assert sent == [{'metadata': {'annotations': {'kopf.zalando.org/fn': '{}'}}}]
    assert outcome.delay == 5
    assert outcome.resource_version == '2'
    assert outcome.body['metadata']['resourceVersion'] == '2'


async def test_an_empty_patch_sends_nothing(watch, result):
    result({}, delay=3)
    outcome = await processing.process_event(watch, {'type': 'ADDED', 'object': raw()}, False)
    assert outcome.delay == 3
    assert outcome.resource_version is None


async def test_a_conflict_rebases_our_finalizer_on_the_fresh_list(aresponses, host, watch, result):
    sent = []
    result({'metadata': {'finalizers': [OURS], 'resourceVersion': '1'}})
    aresponses.add(host, PATH, 'PATCH', aresponses.Response(status=409, text=json.dumps(
        {'kind': 'Status', 'code': 409, 'reason': 'Conflict', 'message': 'the object has been modified'})))
    aresponses.add(host, PATH, 'GET', web.json_response(raw('7', finalizers=['foreign/fin'])))
    aresponses.add(host, PATH, 'PATCH', patched(sent, '8'))
    outcome = await processing.process_event(watch, {'type': 'ADDED', 'object': raw()}, False)
    assert sent == [{'metadata': {'finalizers': ['foreign/fin', OURS], 'resourceVersion': '7'}}]
    assert outcome.resource_version == '8'


async def test_transient_failures_resend_the_same_patch(aresponses, host, watch, result, caplog):
    sent = []
    patch = {'metadata': {'annotations': {'kopf.zalando.org/fn': '{"success":true}'}}}
    result(patch)
    for _ in range(3):  # the client's own retries (2) + 1: one failed attempt of processing
        aresponses.add(host, PATH, 'PATCH', aresponses.Response(status=503, text='{}'))
    aresponses.add(host, PATH, 'PATCH', patched(sent, '2'))
    with caplog.at_level(logging.DEBUG):
        outcome = await processing.process_event(watch, {'type': 'ADDED', 'object': raw()}, False)
    assert sent == [patch]
    assert outcome.resource_version == '2'
    assert 'attempt 1 of' in caplog.text
    # The server was away (503): said once, and that it is back; the attempts themselves are debug lines.
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 2 and 'unreachable' in warnings[0] and 'reachable again' in warnings[1], warnings


async def test_a_failing_patch_of_one_object_is_a_warning_of_its_own(aresponses, host, watch, result, caplog):
    sent = []
    patch = {'metadata': {'annotations': {'kopf.zalando.org/fn': '{"success":true}'}}}
    result(patch)
    for _ in range(3):
        aresponses.add(host, PATH, 'PATCH', aresponses.Response(status=500, text='{}'))
    aresponses.add(host, PATH, 'PATCH', patched(sent, '2'))
    with caplog.at_level(logging.WARNING):
        await processing.process_event(watch, {'type': 'ADDED', 'object': raw()}, False)
    assert sent == [patch]
    assert 'Failed to patch the object (attempt 1 of' in caplog.text
    assert 'unreachable' not in caplog.text


async def test_a_gone_object_ends_the_processing_quietly(aresponses, host, watch, result):
    result({'metadata': {'annotations': {'a': 'b'}}}, delay=1)
    aresponses.add(host, PATH, 'PATCH', aresponses.Response(status=404, text='{}'))
    outcome = await processing.process_event(watch, {'type': 'MODIFIED', 'object': raw()}, False)
    assert outcome == processing.ProcessingOutcome(gone=True)  # its worker awaits the deletion, nothing older


async def test_a_rejected_patch_is_reported_and_retried_later(aresponses, host, watch, result, caplog):
    result({'metadata': {'annotations': {'bad key!': 'x'}}})
    aresponses.add(host, PATH, 'PATCH', aresponses.Response(status=422, text=json.dumps(
        {'kind': 'Status', 'code': 422, 'reason': 'Invalid', 'message': 'invalid annotation key'})))
    with caplog.at_level(logging.ERROR):
        outcome = await processing.process_event(watch, {'type': 'MODIFIED', 'object': raw()}, False)
    assert outcome.delay == processing.REJECTED_PATCH_DELAY
    assert 'invalid annotation key' in caplog.text


def invalid(message):
    return json.dumps({'kind': 'Status', 'code': 422, 'reason': 'Invalid', 'message': message})


PROGRESS = {'metadata': {'annotations': {'kopf.zalando.org/fn': '{"success":true}'}}}
COMBINED = {**PROGRESS, 'status': {'fn': 'not-an-integer'}}


async def test_a_rejected_result_is_reported_once_and_the_progress_is_sent_alone(
        aresponses, host, watch, result, caplog):
    sent = []
    result(COMBINED, delay=2, essential=PROGRESS, extras=('status.fn',))
    aresponses.add(host, STATUS, 'PATCH', aresponses.Response(status=422, text=invalid('status.fn: must be integer')))
    aresponses.add(host, PATH, 'PATCH', patched(sent, '5'))
    with caplog.at_level(logging.ERROR):
        outcome = await processing.process_event(watch, {'type': 'MODIFIED', 'object': raw()}, False)
    assert sent == [PROGRESS]
    assert outcome.resource_version == '5'
    assert outcome.delay == 2  # the handling goes on as planned: the progress has landed
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert 'status.fn: must be integer' in errors[0] and 'Not stored: status.fn' in errors[0]


async def test_a_settling_patch_settles_the_object_once_it_has_landed_whole(aresponses, host, watch, result):
    sent, server = [], raw()
    result(COMBINED, essential=PROGRESS, extras=('status.fn',), settled=True)
    aresponses.add(host, STATUS, 'PATCH', patched(sent, '4', server))
    aresponses.add(host, PATH, 'PATCH', patched(sent, '5', server))
    outcome = await processing.process_event(watch, {'type': 'MODIFIED', 'object': raw()}, False)
    assert outcome.settled and outcome.resource_version == '5'


async def test_a_settling_patch_with_empty_sections_settles_an_object_without_them(
        aresponses, host, watch, result):
    # The server omits empty maps and lists (the object's own, and those a patch leaves empty).
    sent, server = [], {**raw(), 'metadata': {'name': 'ex', 'namespace': 'ns', 'uid': 'u'}}
    result({'metadata': {'annotations': {'kopf.zalando.org/fn': '{}'}, 'labels': {}}, 'status': {}}, settled=True)
    aresponses.add(host, PATH, 'PATCH', patched(sent, '5', server))
    outcome = await processing.process_event(watch, {'type': 'MODIFIED', 'object': raw()}, False)
    assert outcome.settled


@pytest.mark.parametrize('written_meanwhile', [
    pytest.param({'metadata': {'annotations': {'kopf.zalando.org/other': '{"started":"2026-12-01T00:00:00"}'}}},
                 id='progress-in-annotations'),
    pytest.param({'status': {'kopf': {'progress': {'other': {'started': '2026-12-01T00:00:00'}}}}},
                 id='progress-in-status'),
    pytest.param({'spec': {'field': 'changed by a user, its event still on its way'}}, id='spec'),
])
async def test_a_settling_patch_over_what_was_written_meanwhile_does_not_settle_the_object(
        aresponses, host, watch, result, written_meanwhile):
    # E.g. the last patch of a killed operator process, which landed after this one had read the object:
    # its progress stays beside our diff-base, so the patch's own event must be handled, not skipped.
    sent, server = [], patches.apply(raw(), written_meanwhile)
    result(PROGRESS, settled=True)
    aresponses.add(host, PATH, 'PATCH', patched(sent, '5', server))
    outcome = await processing.process_event(watch, {'type': 'MODIFIED', 'object': raw()}, False)
    assert sent == [PROGRESS]
    assert outcome.resource_version == '5'
    assert not outcome.settled


@pytest.mark.parametrize('answer, as_patched', [
    pytest.param({'spec': {'a': 1, 'b': [{}]}, 'metadata': {'name': 'ex', 'annotations': {'x': 'y'}}}, True,
                 id='exactly'),
    pytest.param({'spec': {'a': 1, 'b': [{}]}, 'metadata': {'name': 'ex', 'annotations': {'x': 'y'},
                                                             'resourceVersion': '9', 'generation': 2,
                                                             'managedFields': [{'manager': 'kopf'}]}}, True,
                 id='with-what-every-write-changes'),
    pytest.param({'spec': {'a': 1, 'b': [{}], 'c': {'d': {}}, 'e': []}, 'kind': 'Other', 'apiVersion': 'v2',
                  'metadata': {'name': 'ex', 'annotations': {'x': 'y'}}}, True,
                 id='with-empty-maps-and-lists-and-another-kind'),
    pytest.param({'spec': {'a': 1, 'b': [[]]}, 'metadata': {'name': 'ex', 'annotations': {'x': 'y'}}}, False,
                 id='a-list-item-of-another-type'),
    pytest.param({'spec': {'a': 1, 'b': [{}], 'c': None}, 'metadata': {'name': 'ex', 'annotations': {'x': 'y'}}},
                 False, id='a-null-where-nothing-was'),
    pytest.param({'spec': {'a': 1, 'b': [{}]}, 'metadata': {'name': 'ex', 'annotations': {'x': 'z'}}}, False,
                 id='another-annotation'),
    pytest.param({'spec': {'a': 1}, 'metadata': {'name': 'ex', 'annotations': {'x': 'y'}}}, False,
                 id='a-list-gone'),
])
def test_the_servers_answer_is_compared_with_the_patched_object_but_for_what_it_omits_or_changes_itself(
        answer, as_patched):
    body = Body({'apiVersion': 'v1', 'kind': 'KopfExample', 'spec': {'a': 1, 'b': [{}], 'c': {}},
                 'metadata': {'name': 'ex', 'resourceVersion': '1', 'labels': {}}})
    assert processing._as_patched(body, Patch({'metadata': {'annotations': {'x': 'y'}}}), answer) is as_patched


async def test_a_settling_patch_refused_in_part_does_not_settle_the_object(aresponses, host, watch, result):
    sent = []
    result(COMBINED, essential=PROGRESS, extras=('status.fn',), settled=True)
    aresponses.add(host, STATUS, 'PATCH', aresponses.Response(status=422, text=invalid('status.fn: must be integer')))
    aresponses.add(host, PATH, 'PATCH', patched(sent, '5'))
    outcome = await processing.process_event(watch, {'type': 'MODIFIED', 'object': raw()}, False)
    assert sent == [PROGRESS]
    assert not outcome.settled


async def test_a_rejected_essential_part_is_retried_later(aresponses, host, watch, result, caplog):
    result(COMBINED, essential=PROGRESS, extras=('status.fn',))
    aresponses.add(host, STATUS, 'PATCH', aresponses.Response(status=422, text=invalid('bad result')))
    aresponses.add(host, PATH, 'PATCH', aresponses.Response(status=422, text=invalid('annotations too long')))
    with caplog.at_level(logging.ERROR):
        outcome = await processing.process_event(watch, {'type': 'MODIFIED', 'object': raw()}, False)
    assert outcome.delay == processing.REJECTED_PATCH_DELAY
    assert outcome.resource_version is None
    assert 'annotations too long' in caplog.text


async def test_a_rejected_patch_without_progress_is_only_reported(aresponses, host, watch, result, caplog):
    result({'metadata': {'labels': {'x': '!'}}}, essential={}, extras=('metadata.labels.x',))
    aresponses.add(host, PATH, 'PATCH', aresponses.Response(status=422, text=invalid('bad label')))
    with caplog.at_level(logging.ERROR):
        outcome = await processing.process_event(watch, {'type': 'MODIFIED', 'object': raw()}, False)
    assert outcome.delay is None
    assert 'bad label' in caplog.text and 'metadata.labels.x' in caplog.text


async def test_after_a_conflict_the_essential_part_is_rebased_too(aresponses, host, watch, result):
    sent = []
    essential = {'metadata': {'finalizers': [OURS], 'resourceVersion': '1'}}
    result({**essential, 'status': {'fn': 'x'}}, essential=essential, extras=('status.fn',))
    aresponses.add(host, STATUS, 'PATCH', patched([], '2'))  # the status first: it has no version to conflict on
    aresponses.add(host, PATH, 'PATCH', aresponses.Response(status=409, text=json.dumps(
        {'kind': 'Status', 'code': 409, 'reason': 'Conflict', 'message': 'modified'})))
    aresponses.add(host, PATH, 'GET', web.json_response(raw('7', finalizers=['foreign/fin'])))
    aresponses.add(host, STATUS, 'PATCH', aresponses.Response(status=422, text=invalid('bad result')))
    aresponses.add(host, PATH, 'PATCH', patched(sent, '8'))
    outcome = await processing.process_event(watch, {'type': 'MODIFIED', 'object': raw()}, False)
    assert sent == [{'metadata': {'finalizers': ['foreign/fin', OURS], 'resourceVersion': '7'}}]
    assert outcome.resource_version == '8'


async def test_a_wake_up_touches_the_object_instead_of_handling(aresponses, host, watch, monkeypatch):
    sent = []

    async def must_not_handle(**_):
        raise AssertionError("handled instead of touched")

    monkeypatch.setattr(cycle, 'handle_object', must_not_handle)
    aresponses.add(host, PATH, 'PATCH', patched(sent, '3'))
    outcome = await processing.process_event(watch, {'type': 'MODIFIED', 'object': raw()}, True)
    assert list(sent[0]['metadata']['annotations']) == ['kopf.zalando.org/touch-dummy']
    assert outcome.resource_version == '3'


async def test_a_wake_up_without_a_touch_marker_handles_directly(watch, monkeypatch):
    handled = []

    class External(ProgressStorage):
        def fetch(self, *, key, body): return None
        def store(self, *, key, record, body, patch): pass
        def purge(self, *, key, body, patch): pass

    watch.config.persistence.progress_storage = External()

    async def fake_handle_object(**kwargs):
        handled.append(kwargs['body'])
        return HandlingResult(patch=Patch(), delay=None, cause='create', done=True)

    monkeypatch.setattr(cycle, 'handle_object', fake_handle_object)
    await processing.process_event(watch, {'type': 'MODIFIED', 'object': raw()}, True)
    assert len(handled) == 1


async def test_first_sight_is_reported_once_per_object(watch, monkeypatch):
    firsts = []

    async def fake_handle_object(**kwargs):
        firsts.append(kwargs['first_seen'])
        return HandlingResult(patch=Patch(), delay=None, cause='noop', done=True)

    monkeypatch.setattr(cycle, 'handle_object', fake_handle_object)
    for _ in range(2):
        await processing.process_event(watch, {'type': None, 'object': raw()}, False)
    assert firsts == [True, False]


def test_rebase_keeps_a_removal_of_our_finalizer():
    fresh = Body(raw('9', finalizers=[OURS, 'foreign/new']))
    rebased = processing.rebase(Patch({'metadata': {'finalizers': [], 'resourceVersion': '1'}}), fresh,
                                finalizer=OURS)
    assert rebased == {'metadata': {'finalizers': ['foreign/new'], 'resourceVersion': '9'}}


async def test_nothing_of_a_processed_event_is_kept(aresponses, host, watch):
    refs = []

    def create_fn(body, patch, logger, **_):
        refs.extend([weakref.ref(body), weakref.ref(patch), weakref.ref(logger)])
        return 'done'
    kopf.on.create('kopfexamples', id='create_fn', registry=watch.registry)(create_fn)
    sent = []
    aresponses.add(host, f'{PATH}/status', 'PATCH', patched(sent, '2'))
    aresponses.add(host, PATH, 'PATCH', patched(sent, '3'))

    outcome = await processing.process_event(watch, {'type': 'ADDED', 'object': raw()}, False)

    assert outcome.resource_version == '3'
    assert sent[0] == {'status': {'create_fn': 'done'}}
    assert len(refs) == 3
    watch.config.execution.executor.shutdown(wait=True)  # its thread lets go of its last call after the result
    await idle()  # and what it has sent to the event loop is done with, too
    gc.collect()
    assert [ref() for ref in refs] == [None, None, None]


async def test_handlers_get_the_served_resource_and_the_operators_indexes(context):
    seen = []
    registry = OperatorRegistry()
    kopf.index('kopfexamples', id='names', registry=registry)(lambda name, **_: name)
    kopf.on.event('kopfexamples', registry=registry)(lambda **kwargs: seen.append(kwargs))
    indexes = OperatorIndexes(registry)
    watch = processing.ResourceWatch(context=context, resource=RESOURCE, selector=Selector.from_args('kopfexamples'),
                                     registry=registry, config=OperatorConfig(), memo=None, indexes=indexes)
    await processing.process_event(watch, {'type': 'ADDED', 'object': raw()}, False)
    [kwargs] = seen
    assert kwargs['resource'] == RESOURCE
    assert isinstance(kwargs['resource'], kopf.Resource)
    assert kwargs['names'] is indexes['names']


def status(code, reason, message, **details):
    return json.dumps({'kind': 'Status', 'code': code, 'reason': reason, 'message': message,
                       **({'details': details} if details else {})})


def errors_in(caplog):
    return [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_credentials_refused_after_logging_in_again_end_the_cycle_with_one_line(
        aresponses, host, watch, result, caplog):
    result(PROGRESS)
    aresponses.add(host, PATH, 'PATCH', aresponses.Response(status=401, text=status(401, 'Unauthorized', 'no')))
    outcome = await processing.process_event(watch, {'type': 'MODIFIED', 'object': raw()}, False)
    assert outcome.delay == processing.REJECTED_PATCH_DELAY
    [error] = errors_in(caplog)
    assert error.exc_info is None
    assert error.getMessage().startswith("Cannot store the outcome of the handling: the Kubernetes API refuses "
                                         "the operator's credentials, also after logging in again (401 Unauthorized")


async def test_throttling_beyond_the_clients_patience_ends_the_cycle_with_one_line(
        aresponses, host, watch, result, caplog):
    watch.context.throttle_retries = 0
    result(PROGRESS)
    aresponses.add(host, PATH, 'PATCH', aresponses.Response(status=429, text=status(429, 'TooManyRequests', 'slow'),
                                                            headers={'Retry-After': '1'}))
    outcome = await processing.process_event(watch, {'type': 'MODIFIED', 'object': raw()}, False)
    assert outcome.delay == processing.REJECTED_PATCH_DELAY
    [error] = errors_in(caplog)
    assert error.exc_info is None
    assert 'keeps throttling the operator (429 TooManyRequests: slow' in error.getMessage()
    assert 'also after waiting 0 times as it asked' in error.getMessage()


@pytest.mark.parametrize('code, reason', [(401, 'Unauthorized'), (429, 'TooManyRequests')])
async def test_a_patch_the_api_would_not_take_is_sent_again_before_any_handling(
        aresponses, host, watch, result, monkeypatch, code, reason):
    watch.context.throttle_retries = 0
    result(COMBINED, delay=7)
    aresponses.add(host, STATUS, 'PATCH', aresponses.Response(status=code, text=status(code, reason, 'not now'),
                                                            headers={'Retry-After': '1'}))
    outcome = await processing.process_event(watch, {'type': 'MODIFIED', 'object': raw()}, False)
    assert outcome.delay == processing.REJECTED_PATCH_DELAY

    handled = []

    async def handle_object(**_):
        handled.append(1)
        raise AssertionError("The handlers must not run again before their outcomes are stored.")
    monkeypatch.setattr(cycle, 'handle_object', handle_object)
    sent = []
    aresponses.add(host, STATUS, 'PATCH', patched(sent, '2'))
    aresponses.add(host, PATH, 'PATCH', patched(sent, '3'))
    outcome = await processing.process_event(watch, {'type': 'MODIFIED', 'object': raw()}, True)  # the wake-up
    assert sent == [{'status': COMBINED['status']}, PROGRESS]  # the same patch, results and all
    assert outcome.resource_version == '3' and outcome.delay == 7
    assert handled == [] and watch.unsent == {}


async def test_a_patch_kept_for_a_deleted_object_is_dropped(aresponses, host, watch, result):
    watch.context.throttle_retries = 0
    result(PROGRESS)
    aresponses.add(host, PATH, 'PATCH', aresponses.Response(status=401, text=status(401, 'Unauthorized', 'no')))
    await processing.process_event(watch, {'type': 'MODIFIED', 'object': raw()}, False)
    assert watch.unsent
    await processing.process_event(watch, {'type': 'DELETED', 'object': raw()}, False)
    assert watch.unsent == {}


async def test_a_forbidden_patch_names_the_verb_and_the_resource(aresponses, host, watch, result, caplog):
    result(PROGRESS)
    message = ('kopfexamples.kopf.dev "ex" is forbidden: User "op" cannot patch resource "kopfexamples" '
               'in API group "kopf.dev" in the namespace "ns"')
    aresponses.add(host, PATH, 'PATCH', aresponses.Response(status=403, text=status(403, 'Forbidden', message)))
    outcome = await processing.process_event(watch, {'type': 'MODIFIED', 'object': raw()}, False)
    assert outcome.delay == processing.REJECTED_PATCH_DELAY
    [error] = errors_in(caplog)
    assert error.exc_info is None
    assert 'The operator may not patch kopfexamples: 403 Forbidden: ' in error.getMessage()
    assert 'cannot patch resource "kopfexamples"' in error.getMessage()
    assert "Grant it the 'patch' verb on kopfexamples (and on kopfexamples/status)" in error.getMessage()


async def test_a_forbidden_status_loses_the_results_only(aresponses, host, watch, result, caplog):
    sent = []
    result(COMBINED, delay=2, essential=PROGRESS, extras=('status.fn',))
    aresponses.add(host, STATUS, 'PATCH', aresponses.Response(
        status=403, text=status(403, 'Forbidden', 'cannot patch resource "kopfexamples/status"')))
    aresponses.add(host, PATH, 'PATCH', patched(sent, '6'))
    outcome = await processing.process_event(watch, {'type': 'MODIFIED', 'object': raw()}, False)
    assert sent == [PROGRESS]
    assert outcome.delay == 2 and outcome.resource_version == '6'
    [error] = errors_in(caplog)
    assert 'The server refused the patch: 403 Forbidden' in error.getMessage()
    assert 'Not stored: status.fn' in error.getMessage()


@pytest.mark.parametrize('code, reason, message', [
    (400, 'BadRequest', 'the body of the request was in an unknown format'),
    (413, 'RequestEntityTooLarge', 'the request is too large'),
    (500, 'InternalError', 'etcdserver: request is too large'),
])
async def test_other_refusals_of_a_result_are_reported_once_not_retried(
        aresponses, host, watch, result, caplog, code, reason, message):
    sent = []
    result(COMBINED, delay=2, essential=PROGRESS, extras=('status.fn',))
    aresponses.add(host, STATUS, 'PATCH', aresponses.Response(status=code, text=status(code, reason, message)))
    aresponses.add(host, PATH, 'PATCH', patched(sent, '5'))
    outcome = await processing.process_event(watch, {'type': 'MODIFIED', 'object': raw()}, False)
    assert sent == [PROGRESS]
    assert outcome.delay == 2
    [error] = errors_in(caplog)
    assert message in error.getMessage() and 'Not stored: status.fn' in error.getMessage()
    assert 'Failed to patch the object' not in caplog.text  # not retried as if transient


async def test_a_patch_too_large_is_not_sent_with_the_results(aresponses, host, watch, result, caplog):
    sent = []
    huge = {**PROGRESS, 'status': {'fn': 'x' * (processing.MAX_PATCH_SIZE + 1)}}
    result(huge, delay=2, essential=PROGRESS, extras=('status.fn',))
    aresponses.add(host, PATH, 'PATCH', patched(sent, '5'))
    outcome = await processing.process_event(watch, {'type': 'MODIFIED', 'object': raw()}, False)
    assert sent == [PROGRESS]
    assert outcome.delay == 2
    [error] = errors_in(caplog)
    assert error.getMessage().startswith('The patch is too large to be sent (1,048,669 bytes; at most 1,048,576). '
                                         'Not stored: status.fn.')


async def test_a_rejection_never_dumps_the_object(aresponses, host, watch, result, caplog):
    dump = 'map[string]interface {}{"apiVersion":"kopf.dev/v1", ' + '"x": "y", ' * 200 + '}'
    causes = [{'reason': 'FieldValueInvalid', 'field': 'status.fn', 'message': 'Invalid value: "s": must be integer'},
              {'reason': 'FieldValueInvalid', 'field': '<nil>', 'message': f'Invalid value: {dump}'}]
    result(COMBINED, essential=PROGRESS, extras=('status.fn',))
    aresponses.add(host, STATUS, 'PATCH', aresponses.Response(status=422, text=status(
        422, 'Invalid', f'KopfExample "ex" is invalid: status.fn: must be integer, <nil>: {dump}', causes=causes)))
    aresponses.add(host, PATH, 'PATCH', patched([], '5'))
    await processing.process_event(watch, {'type': 'MODIFIED', 'object': raw()}, False)
    [error] = errors_in(caplog)
    assert 'status.fn: Invalid value: "s": must be integer' in error.getMessage()
    assert len(error.getMessage()) < 600


async def test_unexpected_failures_name_the_object_and_the_handlers_and_the_object_is_retried(
        monkeypatch, watch, caplog):
    async def failing_cycle(**_):
        execution.attempted.get().extend(['create_fn', 'other_fn'])
        raise RuntimeError('the storage is down')
    monkeypatch.setattr(cycle, 'handle_object', failing_cycle)
    outcome = await processing.process_event(watch, {'type': 'MODIFIED', 'object': raw()}, False)
    assert outcome == processing.ProcessingOutcome(delay=processing.FAILURE_DELAY)
    [error] = errors_in(caplog)
    assert error.getMessage() == (
        "The handling of KopfExample ns/ex has failed after running the handlers 'create_fn', 'other_fn': "
        "RuntimeError: the storage is down. Their outcomes are not stored: they will run again. "
        "Retrying in 60s or on the next change.")
    assert error.exc_info is not None  # the first time, with the traceback: it may be a bug to report


async def test_repeated_identical_failures_are_reported_rarely_with_a_count(monkeypatch, watch, caplog):
    now = [0.0]
    watch.repeats.clock = lambda: now[0]

    async def failing_cycle(**_):
        raise RuntimeError('the storage is down')
    monkeypatch.setattr(cycle, 'handle_object', failing_cycle)
    for _ in range(5):
        await processing.process_event(watch, {'type': 'MODIFIED', 'object': raw()}, False)
    assert len(errors_in(caplog)) == 1
    now[0] += watch.repeats.interval
    await processing.process_event(watch, {'type': 'MODIFIED', 'object': raw()}, False)
    errors = errors_in(caplog)
    assert len(errors) == 2
    assert 'the same failure 4 more time(s) before, not logged' in errors[1].getMessage()


async def test_a_first_sight_that_failed_is_still_the_first_sight(monkeypatch, watch):
    seen = []

    async def failing_once(first_seen, **_):
        seen.append(first_seen)
        if len(seen) == 1:
            raise RuntimeError('once')
        return HandlingResult(patch=Patch(), delay=None, cause='resume', done=True)
    monkeypatch.setattr(cycle, 'handle_object', failing_once)
    await processing.process_event(watch, {'type': 'ADDED', 'object': raw()}, False)
    await processing.process_event(watch, {'type': 'MODIFIED', 'object': raw()}, False)
    await processing.process_event(watch, {'type': 'MODIFIED', 'object': raw()}, False)
    assert seen == [True, True, False]


async def test_a_refusal_of_the_same_object_is_not_repeated_in_the_log(aresponses, host, watch, result, caplog):
    result(PROGRESS)
    for _ in range(3):
        aresponses.add(host, PATH, 'PATCH', aresponses.Response(status=403, text=status(403, 'Forbidden', 'no')))
        outcome = await processing.process_event(watch, {'type': 'MODIFIED', 'object': raw()}, False)
        assert outcome.delay == processing.REJECTED_PATCH_DELAY
    assert len(errors_in(caplog)) == 1


def concluding(sent):
    """A PATCH handler that remembers where each part went, and answers with the object as patched."""
    async def handler(request):
        body = await request.json()
        sent.append((request.path, body))
        meta = raw('5')['metadata']
        return web.json_response({**raw('5'), **body, 'metadata': {
            **meta, 'annotations': {**meta['annotations'], **body.get('metadata', {}).get('annotations', {})}}})
    return handler


def annotation_budget_registry(annotation_size, *, spec_size=0, result='ok'):
    registry = OperatorRegistry()

    @kopf.on.create('kopfexamples', id='create_fn', registry=registry)
    def create_fn(patch, **_):
        patch.metadata.annotations['example.com/big'] = 'a' * annotation_size
        if spec_size:
            patch.spec['big'] = 'b' * spec_size
        return result

    return registry


async def test_the_annotation_budget_decides_first_then_the_size_limit_refuses_only_what_is_still_too_large(
        aresponses, host, context, caplog):
    # 300 KB of annotations do not fit into the 256 KiB budget; without them, the rest is still over 1 MiB.
    registry = annotation_budget_registry(300_000, spec_size=600_000, result='r' * 500_000)
    watch = processing.ResourceWatch(context=context, resource=RESOURCE, selector=Selector.from_args('kopfexamples'),
                                     registry=registry, config=OperatorConfig(), memo=None)
    sent = []
    aresponses.add(host, PATH, 'PATCH', concluding(sent))
    outcome = await processing.process_event(watch, {'type': 'ADDED', 'object': raw()}, False)

    # The handler's progress (here: the cause concluded with the diff-base) lands, alone.
    [(path, body)] = sent
    assert path == PATH
    assert set(body['metadata']['annotations']) == {'kopf.zalando.org/last-handled-configuration'}
    assert 'spec' not in body and 'status' not in body
    assert outcome.resource_version == '5'

    # Each limit reports what it left out, and nothing twice.
    budget_error, size_error = [r.getMessage() for r in errors_in(caplog)]
    assert "would take" in budget_error and "over Kubernetes' limit of 262144 bytes" in budget_error
    assert "the handlers' annotations were not stored: example.com/big" in budget_error
    assert size_error.startswith("The patch is too large to be sent (")
    assert "at most 1,048,576). Not stored: status.create_fn, spec.big. " in size_error
    assert size_error.endswith("The handlers' progress is stored without it; they are not run again.")
    assert 'example.com/big' not in size_error


async def test_what_the_annotation_budget_leaves_out_does_not_make_the_patch_too_large(
        aresponses, host, context, caplog):
    # 1.1 MB in one annotation: the budget leaves it out, so the rest of the patch fits and is sent.
    registry = annotation_budget_registry(1_100_000)
    watch = processing.ResourceWatch(context=context, resource=RESOURCE, selector=Selector.from_args('kopfexamples'),
                                     registry=registry, config=OperatorConfig(), memo=None)
    sent = []
    aresponses.add(host, PATH, 'PATCH', concluding(sent))
    aresponses.add(host, f'{PATH}/status', 'PATCH', concluding(sent))
    await processing.process_event(watch, {'type': 'ADDED', 'object': raw()}, False)

    [(status_path, status_part), (main_path, main)] = sent
    assert main_path == PATH and status_path == f'{PATH}/status'
    assert set(main['metadata']['annotations']) == {'kopf.zalando.org/last-handled-configuration'}
    assert status_part == {'status': {'create_fn': 'ok'}}  # the result is stored
    [budget_error] = [r.getMessage() for r in errors_in(caplog)]
    assert "the handlers' annotations were not stored: example.com/big" in budget_error
    assert 'too large to be sent' not in caplog.text


async def test_first_sight_is_remembered_while_the_memory_of_it_is_packed(watch, monkeypatch, clock):
    monkeypatch.setattr(dormancy, 'MIN_PACKED', 1)
    watch = dataclasses.replace(watch, seen=dormancy.DormantSet(quiet=0.05, clock=clock))
    firsts = []

    async def fake_handle_object(**kwargs):
        firsts.append(kwargs['first_seen'])
        return HandlingResult(patch=Patch(), delay=None, cause='noop', done=True)

    monkeypatch.setattr(cycle, 'handle_object', fake_handle_object)
    await processing.process_event(watch, {'type': None, 'object': raw()}, False)
    clock.advance(0.2)
    await idle()
    assert watch.seen.packed
    await processing.process_event(watch, {'type': None, 'object': raw()}, False)
    assert firsts == [True, False]


# The transformation functions of the handlers' patch (patch.fns).

def transformations(monkeypatch, patch, fns, delay=None):
    async def fake_handle_object(**_):
        return HandlingResult(patch=Patch(patch), delay=delay, cause='create', done=delay is None, fns=tuple(fns))
    monkeypatch.setattr(cycle, 'handle_object', fake_handle_object)
    monkeypatch.setattr(processing, 'PATCH_PAUSE', 0)


def json_patched(sent, rv):
    async def handler(request):
        sent.append((request.content_type, await request.json()))
        return web.json_response(raw(rv, finalizers=['mine']))
    return handler


def add_mine(body):
    body['metadata']['finalizers'].append('mine')


async def test_functions_alone_change_the_events_object_and_their_patch_is_awaited(
        aresponses, host, watch, monkeypatch):
    sent = []
    transformations(monkeypatch, {}, [add_mine], delay=7)
    aresponses.add(host, PATH, 'PATCH', json_patched(sent, '2'))

    outcome = await processing.process_event(watch, {'type': 'ADDED', 'object': raw()}, False)

    assert sent == [('application/json-patch+json', [
        {'op': 'test', 'path': '/metadata/resourceVersion', 'value': '1'},
        {'op': 'add', 'path': '/metadata/finalizers/0', 'value': 'mine'}])]
    assert (outcome.delay, outcome.resource_version) == (7, '2')  # the worker awaits the latest of our changes


async def test_functions_follow_the_merge_patch_on_the_object_it_has_left(aresponses, host, watch, monkeypatch):
    sent = []
    transformations(monkeypatch, {'spec': {'x': 1}}, [add_mine])
    aresponses.add(host, PATH, 'PATCH', patched([], '2'))
    aresponses.add(host, PATH, 'PATCH', json_patched(sent, '3'))

    outcome = await processing.process_event(watch, {'type': 'ADDED', 'object': raw()}, False)

    assert sent[0][1][0] == {'op': 'test', 'path': '/metadata/resourceVersion', 'value': '2'}
    assert outcome.resource_version == '3'


async def test_a_failing_function_is_reported_and_the_merge_patch_stays(aresponses, host, watch, monkeypatch, caplog):
    sent = []

    def broken(body):
        raise ValueError("no list here")

    transformations(monkeypatch, {'spec': {'x': 1}}, [broken])
    aresponses.add(host, PATH, 'PATCH', patched(sent, '2'))

    with caplog.at_level(logging.ERROR):
        outcome = await processing.process_event(watch, {'type': 'ADDED', 'object': raw()}, False)

    assert sent == [{'spec': {'x': 1}}]
    assert outcome.resource_version == '2'  # the merge-patch has landed: its event is awaited
    record, = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert record.getMessage().endswith(
        "The transformation function test_a_failing_function_is_reported_and_the_merge_patch_stays.<locals>.broken "
        "of patch.fns has failed: ValueError: no list here. "
        "The changes of the transformation functions (patch.fns) are not stored.")
    assert record.k8s_ref['name'] == 'ex'


async def test_refused_functions_are_reported(aresponses, host, watch, monkeypatch, caplog):
    transformations(monkeypatch, {}, [add_mine])
    aresponses.add(host, PATH, 'PATCH', aresponses.Response(status=403, text=json.dumps(
        {'kind': 'Status', 'code': 403, 'message': 'finalizers are not yours'})))

    with caplog.at_level(logging.ERROR):
        await processing.process_event(watch, {'type': 'ADDED', 'object': raw()}, False)

    assert "The server refused the patch: " in caplog.text
    assert "The changes of the transformation functions (patch.fns) are not stored." in caplog.text


# The objects' memos.

def kex(name, uid, event_type='MODIFIED'):
    return {'type': event_type, 'object': {**raw(), 'metadata': {**raw()['metadata'], 'name': name, 'uid': uid}}}


async def test_each_object_keeps_its_memo_until_it_is_gone(context):
    registry = OperatorRegistry()
    seen = []

    @kopf.on.event('kopfexamples', registry=registry)
    def count(memo, name, type, **_):
        memo.events = memo.get('events', 0) + 1
        seen.append((name, memo.events, memo.shared))

    operator_memo = kopf.Memo(shared='operator')
    watch = processing.ResourceWatch(context=context, resource=RESOURCE, selector=Selector.from_args('kopfexamples'),
                                     registry=registry, config=OperatorConfig(), memo=operator_memo)
    for event in [kex('a', 'ua'), kex('b', 'ub'), kex('a', 'ua'), kex('a', 'ua', 'DELETED'), kex('b', 'ub')]:
        await processing.process_event(watch, event, False)

    assert seen == [('a', 1, 'operator'), ('b', 1, 'operator'), ('a', 2, 'operator'), ('a', 3, 'operator'),
                    ('b', 2, 'operator')]
    assert len(watch.memos) == 1  # only b's: a is gone
    assert operator_memo == {'shared': 'operator'}


async def test_no_memo_is_kept_for_objects_whose_handlers_do_not_change_it(context):
    registry = OperatorRegistry()
    kopf.on.event('kopfexamples', registry=registry)(lambda memo, **_: memo.get('anything'))
    watch = processing.ResourceWatch(context=context, resource=RESOURCE, selector=Selector.from_args('kopfexamples'),
                                     registry=registry, config=OperatorConfig(), memo=kopf.Memo(flag=1))

    for index in range(300):
        await processing.process_event(watch, kex(f'o{index}', f'u{index}'), False)
    gc.collect()

    assert len(watch.memos) == 0


async def test_a_daemon_and_the_handlers_of_its_object_share_one_memo(context):
    from kopf._daemons.keeper import Daemons

    registry = OperatorRegistry()
    noticed = asyncio.Event()

    @kopf.daemon('kopfexamples', registry=registry, optional=True)
    async def watcher(memo, stopped, **_):
        while not stopped and not memo.get('told'):  # unchanged until the event handler changes it
            await stopped.wait(0.01)
        noticed.set()

    @kopf.on.event('kopfexamples', registry=registry)
    def tell(memo, type, **_):
        if type == 'MODIFIED':
            memo.told = True

    async def patcher(body, patch, logger):
        pass

    keeper = Daemons(patcher=patcher)
    watch = processing.ResourceWatch(context=context, resource=RESOURCE, selector=Selector.from_args('kopfexamples'),
                                     registry=registry, config=OperatorConfig(), memo=kopf.Memo(),
                                     stages=[*cycle.STAGES, keeper])
    try:
        await processing.process_event(watch, kex('a', 'ua', 'ADDED'), False)
        await processing.process_event(watch, kex('a', 'ua'), False)
        await asyncio.wait_for(noticed.wait(), timeout=5)
    finally:
        await keeper.close(timeout=1)


async def test_the_functions_of_a_patch_the_api_would_not_take_are_kept_with_it(
        aresponses, host, watch, monkeypatch):
    watch.context.throttle_retries = 0
    transformations(monkeypatch, {'spec': {'x': 1}}, [add_mine])
    aresponses.add(host, PATH, 'PATCH', aresponses.Response(status=429, text=status(429, 'TooManyRequests', 'slow'),
                                                            headers={'Retry-After': '1'}))
    await processing.process_event(watch, {'type': 'MODIFIED', 'object': raw()}, False)

    sent = []
    aresponses.add(host, PATH, 'PATCH', patched([], '2'))
    aresponses.add(host, PATH, 'PATCH', json_patched(sent, '3'))
    outcome = await processing.process_event(watch, {'type': 'MODIFIED', 'object': raw()}, True)

    assert [ops[-1] for _, ops in sent] == [{'op': 'add', 'path': '/metadata/finalizers/0', 'value': 'mine'}]
    assert outcome.resource_version == '3'


@contextlib.contextmanager
def recorded() -> Iterator[metrics.MetricsRecorder]:
    """A metrics recorder installed for what runs inside (the operator installs its own likewise)."""
    recorder = metrics.MetricsRecorder(process=False)
    token = recording.install(recorder)
    try:
        yield recorder
    finally:
        recording.uninstall(token)


def json_size(body: Any) -> int:
    return len(json.dumps(body, separators=(',', ':')).encode('utf-8'))


async def test_the_cycle_its_cause_and_its_patch_conflict_are_recorded(aresponses, host, watch, result):
    result({'metadata': {'annotations': {'kopf.zalando.org/fn': '{}'}}}, delay=5)
    aresponses.add(host, PATH, 'PATCH', aresponses.Response(status=409, text=json.dumps(
        {'kind': 'Status', 'code': 409, 'reason': 'Conflict', 'message': 'the object has been modified'})))
    aresponses.add(host, PATH, 'GET', web.json_response(raw('7')))
    sent: list[dict[str, Any]] = []
    aresponses.add(host, PATH, 'PATCH', patched(sent, '8'))
    with recorded() as recorder:
        await processing.process_event(watch, {'type': 'ADDED', 'object': raw()}, False)
    samples = recorder.registry
    label = {'resource': 'kopfexamples.kopf.dev'}
    assert samples.get_sample_value('kopf_cycles_total', {**label, 'cause': 'create'}) == 1
    assert samples.get_sample_value('kopf_queue_retries_total', label) == 1  # it asked to come back in 5 s
    assert samples.get_sample_value('kopf_patch_outcomes_total', {**label, 'outcome': 'conflict_rebased'}) == 1
    assert samples.get_sample_value('kopf_patch_outcomes_total', {**label, 'outcome': 'sent'}) == 1
    # The size of the patch as it landed: re-based on the fresh object, so no longer the first one's.
    assert samples.get_sample_value('kopf_patch_size_bytes_sum', label) == json_size(sent[-1])


async def test_the_size_of_a_patch_is_that_of_what_was_sent(aresponses, host, watch, result):
    result({'metadata': {'annotations': {'kopf.zalando.org/fn': '{"started": "2026-12-02T05:30:00.000000Z"}'}}})
    sent: list[dict[str, Any]] = []
    aresponses.add(host, PATH, 'PATCH', patched(sent, '2'))
    with recorded() as recorder:
        await processing.process_event(watch, {'type': 'ADDED', 'object': raw()}, False)
    label = {'resource': 'kopfexamples.kopf.dev'}
    assert recorder.registry.get_sample_value('kopf_patch_size_bytes_sum', label) == json_size(sent[0])
    assert recorder.registry.get_sample_value('kopf_patch_size_bytes_count', label) == 1


async def test_a_refused_patch_is_recorded_as_rejected(aresponses, host, watch, result):
    result({'status': {'fn': 'x'}, 'metadata': {'annotations': {'kopf.zalando.org/fn': '{}'}}},
           essential={'metadata': {'annotations': {'kopf.zalando.org/fn': '{}'}}}, extras=('status.fn',))
    aresponses.add(host, STATUS, 'PATCH', aresponses.Response(status=422, text=json.dumps(
        {'kind': 'Status', 'code': 422, 'reason': 'Invalid', 'message': 'no'})))
    aresponses.add(host, PATH, 'PATCH', patched([], '2'))
    with recorded() as recorder:
        await processing.process_event(watch, {'type': 'ADDED', 'object': raw()}, False)
    outcomes = {'resource': 'kopfexamples.kopf.dev'}
    assert recorder.registry.get_sample_value('kopf_patch_outcomes_total', {**outcomes, 'outcome': 'rejected'}) == 1
    assert recorder.registry.get_sample_value('kopf_patch_outcomes_total', {**outcomes, 'outcome': 'sent'}) == 1


HANDLED = {'kopf.zalando.org/last-handled-configuration': '{"spec":{}}'}  # as raw() is now


def with_create_handler(watch):
    kopf.on.create('kopfexamples', registry=watch.registry)(lambda **_: None)
    return watch


async def test_a_listed_object_at_rest_is_seen_and_recorded_as_a_noop_cycle(watch):
    with_create_handler(watch)
    with recorded() as recorder:
        assert await processing.at_rest(watch, {'type': None, 'object': raw(annotations=HANDLED)})
    assert 'u' in watch.seen  # its next event is not its first sight
    label = {'resource': 'kopfexamples.kopf.dev'}
    assert recorder.registry.get_sample_value('kopf_cycles_total', {**label, 'cause': 'noop'}) == 1


async def test_a_listed_object_at_rest_is_logged_as_a_noop_cycle_when_verbose(watch, caplog):
    with_create_handler(watch)
    with caplog.at_level(logging.DEBUG, logger='kopf.objects'):
        assert await processing.at_rest(watch, {'type': None, 'object': raw(annotations=HANDLED)})
    assert caplog.messages == ["Handling cycle for KopfExample ns/ex: noop."]


async def test_a_listed_object_that_needs_a_cycle_is_left_to_it(watch):
    with_create_handler(watch)
    assert not await processing.at_rest(watch, {'type': None, 'object': raw()})  # never handled
    assert 'u' not in watch.seen


async def test_the_cycle_of_a_listed_object_found_not_at_rest_does_not_judge_that_body_again(watch, monkeypatch):
    with_create_handler(watch)
    judged, restless = [], []
    real_at_rest = cycle.at_rest

    async def counted_at_rest(**kwargs):
        judged.append(kwargs['body'].raw)
        return await real_at_rest(**kwargs)

    async def fake_handle_object(**kwargs):
        restless.append(kwargs['restless'])
        return HandlingResult(patch=Patch(), delay=None, cause='create', done=True)

    monkeypatch.setattr(cycle, 'at_rest', counted_at_rest)
    monkeypatch.setattr(cycle, 'handle_object', fake_handle_object)
    listed, newer = {'type': None, 'object': raw()}, {'type': 'MODIFIED', 'object': raw(rv='2')}
    assert not await processing.at_rest(watch, listed)
    await processing.process_event(watch, listed, False)
    await processing.process_event(watch, listed, False)  # judged once only: the next time, the cycle asks
    assert not await processing.at_rest(watch, listed)
    await processing.process_event(watch, newer, False)  # another body than the judged one
    assert judged == [listed['object'], listed['object']]
    assert restless == [True, False, False]
    assert not watch.restless


async def test_an_object_with_a_patch_to_send_is_never_at_rest(watch):
    with_create_handler(watch)
    watch.unsent['u'] = processing.Unsent(patch=Patch({'metadata': {'annotations': {'x': 'y'}}}), delay=None,
                                          essential=None, extras=())
    assert not await processing.at_rest(watch, {'type': None, 'object': raw(annotations=HANDLED)})


async def test_a_failure_while_judging_is_left_to_the_cycle_which_reports_it(context, caplog):
    class Broken(AnnotationsProgressStorage):
        def clear(self, **_):
            raise RuntimeError("storage down")

    config = OperatorConfig()
    config.persistence.progress_storage = Broken()
    watch = with_create_handler(processing.ResourceWatch(
        context=context, resource=RESOURCE, selector=Selector.from_args('kopfexamples'),
        registry=OperatorRegistry(), config=config, memo=None))
    with caplog.at_level(logging.ERROR):
        assert not await processing.at_rest(watch, {'type': None, 'object': raw(annotations=HANDLED)})
        outcome = await processing.process_event(watch, {'type': None, 'object': raw(annotations=HANDLED)}, False)
    assert outcome.delay == processing.FAILURE_DELAY
    assert 'storage down' in caplog.text
