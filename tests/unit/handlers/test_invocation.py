import asyncio
import concurrent.futures
import contextvars
import functools
import threading

import pytest

import kopf
from kopf._handlers.invocation import Stopwatch, body_kwargs, invoke, is_async
from kopf._structs.bodies import Body

var: contextvars.ContextVar[str] = contextvars.ContextVar('var')


async def test_async_functions_are_awaited_in_the_loop():
    async def fn(x, **_):
        return x, threading.get_ident()

    assert await invoke(fn, kwargs={'x': 1, 'y': 2}) == (1, threading.get_ident())


async def test_sync_functions_run_in_the_given_executor():
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix='handlers') as executor:
        def fn(x, **_):
            return x, threading.current_thread().name

        result, thread_name = await invoke(fn, kwargs={'x': 1}, executor=executor)

    assert result == 1
    assert thread_name.startswith('handlers')


async def test_context_variables_reach_sync_functions_and_share_mutable_values():
    collected: list[str] = []
    var.set('value')

    def fn(**_):
        collected.append(var.get())
        var.set('changed-in-thread')  # must not leak back

    await invoke(fn, kwargs={})

    assert collected == ['value']
    assert var.get() == 'value'


async def test_exceptions_propagate():
    def fn(**_):
        raise ValueError('boom')

    try:
        await invoke(fn, kwargs={})
    except ValueError as e:
        assert str(e) == 'boom'
    else:
        raise AssertionError('not raised')


async def test_sync_callables_returning_awaitables_are_awaited():
    async def coro():
        return 'done'

    assert await invoke(lambda **_: coro(), kwargs={}) == 'done'


def test_async_detection():
    async def fn(**_):
        pass

    class Callable:
        async def __call__(self, **_):
            pass

    assert is_async(fn)
    assert is_async(functools.partial(fn, a=1))
    assert is_async(Callable())
    assert not is_async(lambda **_: None)


def test_body_kwargs():
    body = Body({'metadata': {'name': 'n', 'namespace': 'ns', 'uid': 'u', 'labels': {'l': '1'},
                              'annotations': {'a': '2'}}, 'spec': {'s': 1}, 'status': {'t': 2}})

    kwargs = body_kwargs(body)

    assert kwargs['body'] is body
    assert kwargs['spec'] == {'s': 1}
    assert kwargs['status'] == {'t': 2}
    assert kwargs['meta']['name'] == 'n'
    assert (kwargs['name'], kwargs['namespace'], kwargs['uid']) == ('n', 'ns', 'u')
    assert kwargs['labels'] == {'l': '1'}
    assert kwargs['annotations'] == {'a': '2'}


@pytest.mark.parametrize('sync', [True, False], ids=['sync', 'async'])
async def test_the_object_is_the_default_owner_only_during_the_call(sync):
    body = Body({'metadata': {'name': 'owner', 'uid': 'u'}})
    children = []

    def adopt_child(**_):
        child = {'metadata': {}}
        kopf.adopt(child)
        children.append(child)

    async def adopt_child_async(**_):
        adopt_child()

    await invoke(adopt_child if sync else adopt_child_async, kwargs={'body': body})

    assert children[0]['metadata']['ownerReferences'][0]['name'] == 'owner'
    with pytest.raises(LookupError, match='owner'):
        kopf.adopt({'metadata': {}})  # the caller's context does not keep the object


class FakeMonotonic:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class QueueingExecutor(concurrent.futures.ThreadPoolExecutor):
    """An executor that reports every call it is given (from the loop), so that a test can wait for them to queue."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.submitted = asyncio.Queue()

    def submit(self, fn, /, *args, **kwargs):
        self.submitted.put_nowait(fn)
        return super().submit(fn, *args, **kwargs)


async def test_the_stopwatch_counts_only_the_functions_own_time():
    clock = FakeMonotonic()
    release = threading.Event()

    def blocker():
        release.wait(5)
        clock.now += 10  # the time spent waiting for the only thread

    def fn(**_):
        clock.now += 2

    stopwatch = Stopwatch(clock)
    with QueueingExecutor(max_workers=1) as executor:
        blocked = asyncio.get_running_loop().run_in_executor(executor, blocker)
        call = asyncio.create_task(invoke(fn, kwargs={}, executor=executor, stopwatch=stopwatch))
        await executor.submitted.get()  # the blocker
        await executor.submitted.get()  # the call, queued behind the blocker for the only thread
        release.set()
        await blocked
        await call

    assert stopwatch.elapsed == 2


async def test_the_stopwatch_counts_async_functions_and_can_be_paused():
    clock = FakeMonotonic()
    stopwatch = Stopwatch(clock)

    async def fn(**_):
        clock.now += 1
        assert stopwatch.stop()
        clock.now += 100  # e.g. sub-handlers, which count themselves
        stopwatch.start()
        clock.now += 1

    await invoke(fn, kwargs={}, stopwatch=stopwatch)

    assert stopwatch.elapsed == 2
    assert not stopwatch.stop()  # stopped after the call
