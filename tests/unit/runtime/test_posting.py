import asyncio
import contextvars
import logging

import pytest

import kopf
from kopf._handlers.loggers import LocalObjectLogger, ObjectLogger
from kopf._runtime import posting
from kopf.config import PostingConfig
from tests.unit.conftest import until

BODY = {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': 'n', 'namespace': 'ns', 'uid': 'u'}}


def bind_queue():
    queue = asyncio.Queue()
    posting.event_queue_var.set(queue)
    posting.event_loop_var.set(asyncio.get_running_loop())
    posting.event_settings_var.set(PostingConfig())
    return queue


async def test_event_functions_queue_events_about_bodies():
    queue = bind_queue()
    posting.info(BODY, reason='Created', message='all good')
    posting.warn([BODY, BODY], reason='Odd', message='hmm')
    events = [queue.get_nowait() for _ in range(queue.qsize())]
    assert [(e.type, e.reason, e.message) for e in events] == [
        ('Normal', 'Created', 'all good'), ('Warning', 'Odd', 'hmm'), ('Warning', 'Odd', 'hmm')]
    assert events[0].ref['uid'] == 'u'


async def test_exception_events_describe_the_current_exception():
    queue = bind_queue()
    try:
        raise ValueError('boom')
    except ValueError:
        posting.exception(BODY, message='Failed.')
    item = queue.get_nowait()
    assert (item.type, item.reason, item.message) == ('Error', 'ValueError', 'Failed. boom')  # as Kopf words it


async def test_events_from_threads_reach_the_loop():
    queue = bind_queue()
    ctx = contextvars.copy_context()
    await asyncio.get_running_loop().run_in_executor(
        None, lambda: ctx.run(posting.info, BODY, reason='r', message='m'))
    item = await asyncio.wait_for(queue.get(), timeout=1)
    assert item.message == 'm'


def test_without_an_operator_events_are_not_lost_silently(caplog):
    ctx = contextvars.Context()
    with caplog.at_level(logging.WARNING):
        ctx.run(posting.info, BODY, reason='r', message='lonely')
    assert 'not posted' in caplog.text


def posting_logger(name, settings):
    handler = posting.PostingHandler(settings=lambda: settings)
    log = logging.getLogger(name)
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    return log, handler


async def test_log_messages_are_not_posted_by_default_as_in_kopf():
    queue = bind_queue()
    log, handler = posting_logger('test.posting.default', PostingConfig())
    try:
        ObjectLogger(body=BODY, logger=log).error("failed")
        ObjectLogger(body=BODY, logger=log).info("handled")
    finally:
        log.removeHandler(handler)
    assert queue.empty()


async def test_log_records_at_or_above_the_level_become_events_when_loggers_are_posted():
    queue = bind_queue()
    log, handler = posting_logger('test.posting.loggers', PostingConfig(loggers=True))
    try:
        obj_logger = ObjectLogger(body=BODY, logger=log)
        obj_logger.debug("too low")
        obj_logger.info("handled")
        obj_logger.error("failed")
        log.error("not about an object")
        LocalObjectLogger(body=BODY, logger=log).error("local only")
    finally:
        log.removeHandler(handler)
    events = [queue.get_nowait() for _ in range(queue.qsize())]
    assert [(e.type, e.reason, e.message) for e in events] == [
        ('Normal', 'Logging', 'handled'), ('Warning', 'Logging', 'failed')]


@pytest.mark.parametrize('api_version', ['v1', 'events.k8s.io/v1'])
async def test_log_messages_about_events_are_never_posted(api_version):
    queue = bind_queue()
    event = {'apiVersion': api_version, 'kind': 'Event', 'metadata': {'name': 'e', 'namespace': 'ns', 'uid': 'e'}}
    log, handler = posting_logger('test.posting.events', PostingConfig(loggers=True))
    try:
        ObjectLogger(body=event, logger=log).error("about an event")
        ObjectLogger(body=BODY, logger=log).error("about a config map")
    finally:
        log.removeHandler(handler)
    assert [e.ref['name'] for e in [queue.get_nowait() for _ in range(queue.qsize())]] == ['n']


async def test_disabled_posting_queues_nothing():
    queue = bind_queue()
    log, handler = posting_logger('test.posting.disabled', PostingConfig(enabled=False, loggers=True))
    try:
        ObjectLogger(body=BODY, logger=log).error("failed")
    finally:
        log.removeHandler(handler)
    assert queue.empty()


async def test_an_object_loggers_own_settings_win_over_the_operators():
    queue = bind_queue()
    own = kopf.OperatorSettings()
    own.posting.loggers = True
    log, handler = posting_logger('test.posting.own', PostingConfig())
    try:
        kopf.ObjectLogger(body=BODY, settings=own, logger=log).warning("mine")
        kopf.ObjectLogger(body=BODY, logger=log).warning("operator's")
    finally:
        log.removeHandler(handler)
    assert [queue.get_nowait().message for _ in range(queue.qsize())] == ['mine']


@pytest.mark.parametrize('level, expected', [
    (logging.DEBUG, ['info', 'warn', 'error', 'event']),
    (logging.INFO, ['info', 'warn', 'error', 'event']),
    (logging.WARNING, ['warn', 'error', 'event']),
    (logging.CRITICAL, ['event']),
])
async def test_explicit_events_follow_the_posting_level_except_kopf_event(level, expected):
    queue = bind_queue()
    posting.event_settings_var.set(PostingConfig(level=level))
    posting.info(BODY, reason='r', message='info')
    posting.warn(BODY, reason='r', message='warn')
    try:
        raise ValueError('x')
    except ValueError:
        posting.exception(BODY, reason='r', message='error')
    posting.event(BODY, type='Custom', reason='r', message='event')
    messages = [queue.get_nowait().message for _ in range(queue.qsize())]
    assert [m.split(' ')[0] for m in messages] == expected


async def test_explicit_events_are_not_posted_when_posting_is_disabled():
    queue = bind_queue()
    posting.event_settings_var.set(PostingConfig(enabled=False))
    posting.event(BODY, type='Custom', reason='r', message='event')
    posting.warn(BODY, reason='r', message='warn')
    assert queue.empty()


async def test_poster_sends_and_survives_failures():
    queue = asyncio.Queue()
    sent = []

    async def post(item):
        if item.message == 'bad':
            raise RuntimeError('API down')
        sent.append(item.message)

    task = asyncio.create_task(posting.poster(queue=queue, post=post))
    for message in ['a', 'bad', 'b']:
        queue.put_nowait(posting.K8sEvent(ref={'name': 'n'}, type='Normal', reason='r', message=message))
    await until(lambda: 'b' in sent)  # the last one: the others are done with
    task.cancel()
    assert sent == ['a', 'b']
