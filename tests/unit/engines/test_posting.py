import asyncio
import contextvars
import logging

from kopf.engines import posting
from kopf.engines.loggers import ObjectLogger

BODY = {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': 'n', 'namespace': 'ns', 'uid': 'u'}}


def bind_queue():
    queue = asyncio.Queue()
    posting.event_queue_var.set(queue)
    posting.event_loop_var.set(asyncio.get_running_loop())
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
    assert (item.type, item.reason, item.message) == ('Error', 'ValueError', 'Failed. ValueError: boom')


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


async def test_log_records_at_or_above_the_level_become_events():
    queue = bind_queue()
    handler = posting.PostingHandler(enabled=lambda: True, level=lambda: logging.INFO)
    log = logging.getLogger('test.posting')
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        obj_logger = ObjectLogger(body=BODY, logger=log)
        obj_logger.debug("too low")
        obj_logger.info("handled")
        obj_logger.error("failed")
        log.error("not about an object")
    finally:
        log.removeHandler(handler)
    events = [queue.get_nowait() for _ in range(queue.qsize())]
    assert [(e.type, e.message) for e in events] == [('Normal', 'handled'), ('Warning', 'failed')]


async def test_disabled_posting_queues_nothing():
    queue = bind_queue()
    handler = posting.PostingHandler(enabled=lambda: False, level=lambda: logging.DEBUG)
    log = logging.getLogger('test.posting.disabled')
    log.addHandler(handler)
    try:
        ObjectLogger(body=BODY, logger=log).error("failed")
    finally:
        log.removeHandler(handler)
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
    await asyncio.sleep(0.05)
    task.cancel()
    assert sent == ['a', 'b']
