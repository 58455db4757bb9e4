"""
Kopf's embedding and shutdown forms (its "Embedding", "Startup" and "Shutdown" pages), in-process.

The operator's connection to a cluster is replaced where it would start: these
tests are about how the operator is entered and left, not about handling.
"""
import asyncio

import kopf
from kopf._handlers.registries import OperatorRegistry
from kopf._runtime import running


def test_run_takes_an_event_loop_as_in_kopf(monkeypatch):
    seen = {}

    async def operator(**kwargs):
        seen.update(kwargs, loop=asyncio.get_running_loop())

    monkeypatch.setattr(running, 'operator', operator)
    loop = asyncio.new_event_loop()
    try:
        kopf.run(loop=loop, standalone=True)
    finally:
        loop.close()

    assert seen == {'standalone': True, 'loop': loop}


async def test_cancelling_the_operators_task_runs_the_cleanup_handlers_as_in_kopf(monkeypatch):
    registry = OperatorRegistry()
    started, cleaned = asyncio.Event(), []

    @kopf.on.startup(registry=registry)
    async def startup_fn(memo, **_):
        memo.lock = asyncio.Lock()  # loop-bound objects are made in the operator's loop

    @kopf.on.cleanup(registry=registry)
    async def cleanup_fn(memo, **_):
        cleaned.append(isinstance(memo.lock, asyncio.Lock))

    async def serving(**_):  # instead of logging in: the operator is up and serving
        started.set()
        await asyncio.Event().wait()

    monkeypatch.setattr(running, '_login', serving)
    task = asyncio.create_task(kopf.operator(registry=registry, memo=kopf.Memo()))
    await asyncio.wait_for(started.wait(), timeout=10)

    task.cancel()
    await asyncio.gather(task, return_exceptions=True)

    assert cleaned == [True]
