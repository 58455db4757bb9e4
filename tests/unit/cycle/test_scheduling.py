"""
Scheduling: which due handlers run in a cycle, in what order, and when the cycle stops to persist.
"""
import asyncio
import json
import logging

import pytest

import kopf.on
from kopf._cycle import scheduling
from kopf._handlers import lifecycles
from kopf._handlers.execution import HandlerOutcome
from kopf._handlers.progression import HandlerState
from kopf._handlers.registries import ChangingHandler
from kopf._storage.diffbase import AnnotationsDiffBaseStorage
from kopf._storage.persistence import Persistence
from kopf._storage.progress import AnnotationsProgressStorage
from kopf._structs.bodies import Body
from kopf._structs.ids import HandlerId
from kopf._structs.patches import apply
from kopf.errors import PermanentError, TemporaryError
from tests.unit.conftest import LAST_HANDLED, RESOURCE, fetch, make_handler, names


def register(registry, calls, *ids, **options):
    for handler_id in ids:
        kopf.on.create(*RESOURCE, id=handler_id, registry=registry)(make_handler(calls, handler_id, **options))


def failing_once(calls, name, delay=0):
    return make_handler(calls, name, failures=[TemporaryError('again', delay=delay)])


# Lifecycles keep their meaning.

async def test_all_at_once_runs_every_due_handler_in_one_cycle(server, registry):
    calls = []
    register(registry, calls, 'a', 'b', 'c')

    result = await server.cycle(lifecycle=lifecycles.all_at_once)

    assert names(calls) == ['a', 'b', 'c']
    assert result.done


async def test_the_default_lifecycle_is_used(server, registry, monkeypatch):
    calls = []
    kopf.on.create(*RESOURCE, id='a', registry=registry)(failing_once(calls, 'a'))
    register(registry, calls, 'b')
    monkeypatch.setattr(lifecycles, '_default_lifecycle', lifecycles.one_by_one)

    result = await server.cycle()

    assert names(calls) == ['a']  # asap would run 'b' after the failed 'a'
    assert not result.done


async def test_one_by_one_stops_at_a_failing_handler(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, id='a', registry=registry)(failing_once(calls, 'a'))
    register(registry, calls, 'b', 'c')

    results = await server.run(lifecycle=lifecycles.one_by_one)

    assert names(calls) == ['a', 'a', 'b', 'c']
    assert len(results) == 2  # the retry of 'a' belongs to the next cycle; 'b' and 'c' follow it there


async def test_asap_lets_the_untried_go_before_a_retry(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, id='a', registry=registry)(failing_once(calls, 'a'))
    register(registry, calls, 'b', 'c')

    first = await server.cycle(lifecycle=lifecycles.asap)
    assert names(calls) == ['a', 'b', 'c']
    assert not first.done and first.delay == 0

    second = await server.cycle(lifecycle=lifecycles.asap)
    assert names(calls) == ['a', 'b', 'c', 'a']
    assert second.done


async def test_shuffled_runs_each_due_handler_once(server, registry):
    calls = []
    register(registry, calls, 'a', 'b', 'c', 'd')

    result = await server.cycle(lifecycle=lifecycles.shuffled)

    assert sorted(names(calls)) == ['a', 'b', 'c', 'd']
    assert result.done


async def test_randomized_runs_one_at_a_time_and_each_once(server, registry):
    calls = []
    register(registry, calls, 'a', 'b', 'c')

    results = await server.run(lifecycle=lifecycles.randomized)

    assert sorted(names(calls)) == ['a', 'b', 'c']
    assert results[-1].done


async def test_lifecycles_receive_the_state_and_the_kwargs(server, registry):
    seen = []

    def lifecycle(handlers, *, state, body, reason, patch, **_):
        seen.append(([h.id for h in handlers], {h: s.retries for h, s in state.items()}, reason, body['spec']))
        return handlers[:1]
    register(registry, [], 'a', 'b')

    await server.run(lifecycle=lifecycle)

    assert seen == [(['a', 'b'], {'a': 0, 'b': 0}, 'create', {'field': 'x', 'other': 1}),
                    (['b'], {'a': 1, 'b': 0}, 'create', {'field': 'x', 'other': 1})]


# The budget.

@pytest.mark.parametrize('lifecycle', [lifecycles.all_at_once, lifecycles.asap, lifecycles.one_by_one])
async def test_a_zero_budget_persists_after_every_handler(server, registry, config, lifecycle):
    config.persistence.max_unpersisted_time = 0
    calls = []
    register(registry, calls, 'a', 'b', 'c')

    results = await server.run(lifecycle=lifecycle)

    assert names(calls) == ['a', 'b', 'c']
    assert len(results) == 3
    assert len(server.patches) == 3


async def test_the_first_handler_of_a_cycle_always_runs(server, registry, clock):
    calls = []
    register(registry, calls, 'slow1', 'slow2', duration=5, clock=clock)

    results = await server.run()

    assert names(calls) == ['slow1', 'slow2']
    assert len(results) == 2


async def test_the_budget_is_read_from_the_config(server, registry, config, clock):
    config.persistence.max_unpersisted_time = 10
    calls = []
    register(registry, calls, 'a', 'b', 'c', duration=3, clock=clock)

    results = await server.run()

    assert len(results) == 1


async def test_sub_handlers_count_once_not_again_in_their_parent(server, registry, clock):
    calls = []

    async def parent(**_):
        clock.advance(0.1)
        await kopf.on.execute(fns={'a': make_handler(calls, 'a', duration=0.4, clock=clock),
                                   'b': make_handler(calls, 'b', duration=0.4, clock=clock)})
    kopf.on.create(*RESOURCE, id='parent', registry=registry)(parent)
    register(registry, calls, 'next')

    result = await server.cycle()

    # 0.1 + 0.4 + 0.4 < 1.0: 'next' still fits; counting the sub-handlers twice (1.7) would have deferred it.
    assert names(calls) == ['a', 'b', 'next']
    assert result.done


# A broken lifecycle is reported by name and stalls only this object's handlers.

def broken(handlers, **_):
    raise RuntimeError("boom")


async def test_a_failing_lifecycle_is_reported_and_the_handlers_wait(server, registry, caplog):
    calls = []
    register(registry, calls, 'a')

    result = await server.cycle(lifecycle=broken)

    assert calls == []
    assert not result.done
    assert result.delay == scheduling.STALL_DELAY
    assert 'retries' not in json.loads(server.annotations['kopf.zalando.org/a'])  # only the start is noted
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any(f"{__name__}.broken has failed: boom" in message for message in errors)

    results = await server.run(lifecycle=lifecycles.asap)  # fixed
    assert names(calls) == ['a']
    assert results[-1].done


async def test_a_lifecycle_choosing_handlers_that_are_not_due_is_reported(server, registry, clock, caplog):
    calls = []
    kopf.on.create(*RESOURCE, id='sleepy', registry=registry)(failing_once(calls, 'sleepy', delay=100))
    register(registry, calls, 'fine')
    await server.cycle(lifecycle=lifecycles.one_by_one)
    assert names(calls) == ['sleepy', 'fine']

    def stubborn(handlers, *, state, **_):
        return [ChangingHandler(fn=lambda **_: None, id=HandlerId('sleepy'))]
    kopf.on.create(*RESOURCE, id='late', registry=registry)(make_handler(calls, 'late'))
    server.change({'metadata': {'labels': {'poke': 'yes'}}})
    result = await server.cycle(lifecycle=stubborn)

    assert names(calls) == ['sleepy', 'fine']
    assert result.delay == scheduling.STALL_DELAY
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("stubborn has chosen handlers that are not due" in m and "'sleepy'" in m for m in messages)
    assert any("stubborn has chosen no handler, but 1 are due ('late')" in m for m in messages)


async def test_a_lifecycle_choosing_some_valid_handlers_runs_them(server, registry, caplog):
    calls = []
    register(registry, calls, 'a', 'b')

    def sloppy(handlers, **_):
        return ['not a handler', *handlers]

    result = await server.cycle(lifecycle=sloppy)

    assert names(calls) == ['a', 'b']
    assert result.done
    assert any("sloppy has chosen handlers that are not due: 'not a handler'" in r.getMessage()
               for r in caplog.records)


# Sub-handlers.

async def test_subhandlers_run_within_the_cycle_of_their_parent(server, registry):
    calls = []

    def parent(**_):
        for index in range(3):
            kopf.on.register(make_handler(calls, f'item{index}'), id=f'item{index}')
    kopf.on.create(*RESOURCE, id='parent', registry=registry)(parent)

    results = await server.run()

    assert names(calls) == ['item0', 'item1', 'item2']
    assert len(results) == 1


async def test_subhandlers_of_sync_handlers_with_persistence_after_each(server, registry, config):
    config.persistence.max_unpersisted_time = 0
    calls = []

    def parent(**_):
        for index in range(3):
            kopf.on.register(make_handler(calls, f'item{index}'), id=f'item{index}')
    kopf.on.create(*RESOURCE, id='parent', registry=registry)(parent)

    results = await server.run()

    assert names(calls) == ['item0', 'item1', 'item2']
    assert len(results) == 3  # one sub-handler per cycle


async def test_subhandlers_keep_their_own_progress_and_the_parent_waits(server, registry, clock, config):
    config.persistence.max_unpersisted_time = 0
    calls = []
    child1 = make_handler(calls, 'child1')
    child2 = make_handler(calls, 'child2', result='c2', failures=[TemporaryError('later', delay=3)])

    async def parent(**_):
        calls.append(('parent', {}))
        kopf.on.register(child1, id='c1')
        kopf.on.register(child2, id='c2')
    kopf.on.create(*RESOURCE, id='parent', registry=registry)(parent)

    result = await server.cycle()
    assert not result.done
    assert names(calls) == ['parent', 'child1']
    assert fetch(server, 'parent/c1')['success'] is True
    assert 'success' not in fetch(server, 'parent/c2')
    assert 'success' not in fetch(server, 'parent')

    result = await server.cycle()
    assert names(calls) == ['parent', 'child1', 'parent', 'child2']
    assert result.delay == 3

    clock.advance(3)
    result = await server.cycle()

    assert result.done
    assert names(calls) == ['parent', 'child1', 'parent', 'child2', 'parent', 'child2']
    assert server.raw['status']['parent/c2'] == 'c2'
    assert list(server.annotations) == [LAST_HANDLED]


async def test_execute_runs_subhandlers_inside_an_async_handler(server, registry):
    calls = []
    seen = []

    async def parent(**_):
        await kopf.on.execute(fns={'a': make_handler(calls, 'a'), 'b': make_handler(calls, 'b')},
                              lifecycle=lifecycles.all_at_once)
        seen.append('after-execute')
        return 'parent-done'
    kopf.on.create(*RESOURCE, id='parent', registry=registry)(parent)

    results = await server.run()

    assert len(results) == 1
    assert names(calls) == ['a', 'b']
    assert seen == ['after-execute']
    assert server.raw['status']['parent'] == 'parent-done'


async def test_execute_raises_until_subhandlers_are_done_and_never_reruns_them(server, registry, clock):
    calls = []
    outcomes = []
    flaky = make_handler(calls, 'flaky', failures=[TemporaryError('later', delay=2)])
    steady = make_handler(calls, 'steady')

    async def parent(**_):
        try:
            await kopf.on.execute(fns=[steady, flaky], lifecycle=lifecycles.all_at_once)
        except BaseException as e:
            outcomes.append(type(e).__name__)
            raise
        outcomes.append('ok')
    kopf.on.create(*RESOURCE, id='parent', registry=registry)(parent)

    results = await server.run()

    assert names(calls) == ['steady', 'flaky', 'flaky']
    assert outcomes == ['HandlerChildrenRetry', 'ok']
    assert results[0].delay == 2


async def test_failed_subhandler_fails_its_parent(server, registry, caplog):
    calls = []

    async def parent(**_):
        kopf.on.register(make_handler(calls, 'bad', failures=[PermanentError('broken')]), id='bad')
    kopf.on.create(*RESOURCE, id='parent', registry=registry)(parent)

    results = await server.run()

    assert results[-1].done
    assert len(results) == 1
    assert any('parent/bad' in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)


async def test_a_failing_lifecycle_of_subhandlers_makes_the_parent_wait(server, registry, caplog):
    calls = []

    async def parent(**_):
        await kopf.on.execute(fns={'a': make_handler(calls, 'a')}, lifecycle=broken)
    kopf.on.create(*RESOURCE, id='parent', registry=registry)(parent)

    result = await server.cycle()

    assert calls == []
    assert result.delay == scheduling.STALL_DELAY
    assert json.loads(server.annotations['kopf.zalando.org/parent'])['retries'] == 1


async def test_register_outside_of_a_handler_is_an_error():
    with pytest.raises(RuntimeError, match='inside'):
        kopf.on.register(lambda **_: None)


# Forgetting progress.

async def test_forget_follows_subrefs_recursively_through_the_storage(clock):
    storage = AnnotationsProgressStorage()
    parent = HandlerState.from_scratch(clock=clock).with_outcome(HandlerOutcome(final=True, subrefs=frozenset({'p/c'})))
    child = HandlerState.from_scratch(clock=clock).with_outcome(HandlerOutcome(final=True,
                                                                               subrefs=frozenset({'p/c/g'})))
    grandchild = HandlerState.from_scratch(clock=clock).with_outcome(HandlerOutcome(final=True))
    raw = {'metadata': {'name': 'n', 'annotations': {
        f'kopf.zalando.org/{key}': json.dumps(state.as_record())
        for key, state in {'p': parent, 'p.c-': child, 'unrelated': grandchild}.items()
    }}}
    for key, state in {'p/c': child, 'p/c/g': grandchild}.items():
        patch = kopf.Patch()
        storage.store(key=HandlerId(key), record=state.as_record(), body=Body(raw), patch=patch)
        raw = apply(raw, patch)
    facade = Persistence(progress=storage, diffbase=AnnotationsDiffBaseStorage(), body=Body(raw))

    await scheduling.forget(facade, [HandlerId('p')])

    annotations = apply(raw, await facade.commit())['metadata']['annotations']
    assert sorted(annotations) == ['kopf.zalando.org/p.c-', 'kopf.zalando.org/unrelated']


# Finished work is persisted before another handler runs long.

async def until(condition):
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("The condition never came true.")


def slow_handler(clock, started, seconds, result=None):
    async def fn(**_):
        started.set()
        await clock.sleep(seconds)
        return result
    return fn


async def test_a_finished_handler_is_stored_while_the_next_one_runs_long(server, registry, clock):
    started = asyncio.Event()
    kopf.on.create(*RESOURCE, id='quick', registry=registry)(make_handler([], 'quick', result='q'))
    kopf.on.create(*RESOURCE, id='slow', registry=registry)(slow_handler(clock, started, 25, result='s'))

    cycle = asyncio.create_task(server.cycle(early=True))
    await asyncio.wait_for(started.wait(), 5)
    assert server.early == []
    clock.advance(0.9)
    await asyncio.sleep(0)
    assert server.early == []  # within the budget: it waits for the cycle's patch
    clock.advance(0.2)
    await until(lambda: server.early)
    assert fetch(server, 'quick')['success'] is True
    assert server.raw['status'] == {'quick': 'q'}
    assert not fetch(server, 'slow').get('success') and not fetch(server, 'slow').get('stopped')

    clock.advance(24)
    result = await cycle
    assert result.done
    assert len(server.early) == 1
    assert server.raw['status'] == {'quick': 'q', 'slow': 's'}


async def test_a_finished_subhandler_is_stored_while_a_sibling_runs_long(server, registry, clock):
    started = asyncio.Event()

    @kopf.on.create(*RESOURCE, id='parent', registry=registry)
    def parent(**_):
        kopf.register(make_handler([], 'quick', result='q'), id='quick')
        kopf.register(slow_handler(clock, started, 25), id='slow')

    cycle = asyncio.create_task(server.cycle(early=True))
    await asyncio.wait_for(started.wait(), 5)
    clock.advance(1)
    await until(lambda: server.early)
    assert fetch(server, 'parent/quick')['success'] is True
    assert server.raw['status'] == {'parent/quick': 'q'}
    assert not fetch(server, 'parent').get('stopped')

    clock.advance(24)
    await cycle
    await server.run()
    assert not any(fetch(server, key) for key in ['parent', 'parent/quick', 'parent/slow'])


async def test_the_finished_work_includes_the_changes_of_the_finished_handlers_only(server, registry, clock):
    started = asyncio.Event()

    @kopf.on.create(*RESOURCE, id='first', registry=registry)
    def first(patch, **_):
        patch.status['first'] = 'done'

    @kopf.on.create(*RESOURCE, id='second', registry=registry)
    async def second(patch, **_):
        started.set()
        patch.status['second'] = 'half-way'  # not finished: not to be stored early
        await clock.sleep(10)

    cycle = asyncio.create_task(server.cycle(early=True))
    await asyncio.wait_for(started.wait(), 5)
    clock.advance(1)
    await until(lambda: server.early)
    assert server.early[0]['status'] == {'first': 'done'}
    clock.advance(9)
    await cycle
    assert server.raw['status'] == {'first': 'done', 'second': 'half-way'}


async def test_quick_handlers_send_nothing_early(server, registry, clock):
    for handler_id in ['a', 'b', 'c']:
        kopf.on.create(*RESOURCE, id=handler_id, registry=registry)(make_handler([], handler_id, result=1))
    await server.cycle(early=True)
    clock.advance(5)
    await asyncio.sleep(0)
    assert server.early == []
    assert len(server.patches) == 1


async def test_a_lone_long_handler_sends_nothing_early(server, registry, clock):
    started = asyncio.Event()
    kopf.on.create(*RESOURCE, id='slow', registry=registry)(slow_handler(clock, started, 25))
    cycle = asyncio.create_task(server.cycle(early=True))
    await asyncio.wait_for(started.wait(), 5)
    clock.advance(25)
    await cycle
    assert server.early == []  # nothing had finished before it: the start records wait for the cycle's patch


async def test_a_failed_early_write_leaves_everything_to_the_cycles_patch(server, registry, clock):
    started = asyncio.Event()
    attempts = []

    async def refuse(patch, essential):
        attempts.append(patch)
        return None

    kopf.on.create(*RESOURCE, id='quick', registry=registry)(make_handler([], 'quick', result='q'))
    kopf.on.create(*RESOURCE, id='slow', registry=registry)(slow_handler(clock, started, 25))
    server.send_early = refuse
    cycle = asyncio.create_task(server.cycle(early=True))
    await asyncio.wait_for(started.wait(), 5)
    clock.advance(1)
    await until(lambda: attempts)
    clock.advance(24)
    result = await cycle
    assert result.done
    assert server.raw['status'] == {'quick': 'q'}
