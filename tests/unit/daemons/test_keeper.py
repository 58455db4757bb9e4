"""
The keeper, as a specification: which daemons run for an object as its events come, and the holding of its deletion.
"""
import asyncio
import gc
import threading
import weakref

import pytest

import kopf
from kopf._daemons.keeper import PATROL_INTERVAL, Daemons
from kopf._replicas.fencing import Gate
from kopf._structs.resources import Selector
from kopf._structs.stoppers import DaemonStoppingReason
from tests.unit.conftest import FINALIZER, LAST_HANDLED, RESOURCE, SELECTOR, FakeClock
from tests.unit.daemons.conftest import eventually, settle


def logging_daemon(registry, **options):
    """A daemon that logs its start and the reasons of its stop: the log."""
    log = []

    @kopf.daemon(*RESOURCE, registry=registry, **options)
    async def monitor(stopped, **_):
        log.append('start')
        await stopped.wait()
        log.append(stopped.reason)

    return log


# Filters.

async def test_a_daemon_stops_when_the_object_stops_matching_and_starts_again_when_it_matches(cluster, registry):
    log = logging_daemon(registry, labels={'watched': 'yes'})

    await cluster.event('ADDED')
    await settle()
    assert log == []  # not matching: nothing starts, nothing is remembered
    assert len(cluster.keeper) == 0 and cluster.keeper.running == 0

    await cluster.change({'metadata': {'labels': {'watched': 'yes'}}})
    await eventually(lambda: log == ['start'])
    await cluster.change({'metadata': {'labels': {'watched': 'no'}}})
    await eventually(lambda: log == ['start', DaemonStoppingReason.FILTERS_MISMATCH])
    await eventually(lambda: len(cluster.keeper) == 0, what="the object forgotten")

    await cluster.change({'metadata': {'labels': {'watched': 'yes'}}})
    await eventually(lambda: log[-1] == 'start' and len(log) == 3, what="the daemon started again")


async def test_when_filters_receive_the_handlers_keyword_arguments(cluster, registry):
    started = []

    @kopf.daemon(*RESOURCE, registry=registry, when=lambda spec, name, **_: spec['field'] == 'y' and name == 'ex1')
    async def monitor(stopped, **_):
        started.append(True)
        await stopped.wait()

    await cluster.event('ADDED')
    await settle()
    assert not started and cluster.keeper.running == 0
    await cluster.change({'spec': {'field': 'y'}})
    await eventually(lambda: started)


# Deletion and the finalizer.

def tidy_daemon(registry, clock):
    """A daemon that tidies up for 0.5s of the clock when stopped, longer than the cycle waits at once: its log."""
    log = []

    @kopf.daemon(*RESOURCE, registry=registry)
    async def monitor(stopped, **_):
        log.append('started')
        await stopped.wait()
        await clock.sleep(0.5)
        log.append('exited')

    return log


async def test_the_deletion_waits_for_the_daemons_to_stop_and_then_completes(cluster, registry, clock):
    log = tidy_daemon(registry, clock)

    result = await cluster.event('ADDED')
    assert result.cause == 'finalizer'
    assert FINALIZER in cluster.raw['metadata']['finalizers']
    await eventually(lambda: log == ['started'])

    result = await cluster.delete()
    assert result.cause == 'delete'
    assert not result.done and result.delay is not None
    assert FINALIZER in cluster.raw['metadata']['finalizers']  # held while the daemon stops
    assert log == ['started']  # not exited yet

    await cluster.settle_deletion()
    assert log == ['started', 'exited']
    assert len(cluster.keeper) == 0 and cluster.keeper.running == 0


async def test_a_daemon_that_exits_at_once_lets_the_deletion_complete_in_the_same_cycle(cluster, registry, config):
    config.background.instant_exit_timeout = 0.2  # by the clock, which stands: until the thread has exited
    started = threading.Event()

    @kopf.daemon(*RESOURCE, registry=registry)
    def monitor(stopped, **_):
        started.set()
        stopped.wait(10)

    await cluster.event('ADDED')
    await eventually(started.is_set)
    result = await cluster.delete()
    assert result.done
    assert cluster.gone


async def test_the_cycle_waits_for_the_daemons_to_exit_at_once_for_the_instant_exit_timeout_by_the_clock(
        cluster, registry, config, clock):
    config.background.instant_exit_timeout = 0.2
    log = tidy_daemon(registry, clock)

    await cluster.event('ADDED')
    await eventually(lambda: log == ['started'])
    deleting = asyncio.create_task(cluster.delete())
    await clock.awaited_by(3)  # the cycle, the daemon's tidying up, the guard of its stop (the polling period)
    assert clock.waits == [pytest.approx(0.2), pytest.approx(0.5), pytest.approx(60)]
    await settle()
    assert not deleting.done()  # the cycle waits, by the clock
    clock.advance(0.2)
    result = await deleting
    assert not result.done and result.delay is not None
    assert FINALIZER in cluster.raw['metadata']['finalizers'] and log == ['started']
    config.background.instant_exit_timeout = None  # the next cycles do not wait by the clock
    await cluster.settle_deletion()


async def test_daemons_alone_store_no_diff_base_and_change_nothing_but_the_finalizer(cluster, registry):
    @kopf.daemon(*RESOURCE, registry=registry)
    async def monitor(stopped, **_):
        await stopped.wait()

    results = [await cluster.event('ADDED'), await cluster.event(), await cluster.change({'spec': {'field': 'z'}})]
    assert [r.cause for r in results] == ['finalizer', 'noop', 'noop']
    assert LAST_HANDLED not in cluster.raw['metadata'].get('annotations', {})


async def test_an_optional_daemon_does_not_add_the_finalizer_and_stops_on_deletion(cluster, registry):
    reasons = []
    started = []

    @kopf.daemon(*RESOURCE, registry=registry, optional=True)
    async def monitor(stopped, **_):
        started.append(True)
        await stopped.wait()
        reasons.append(stopped.reason)

    await cluster.event('ADDED')
    assert 'finalizers' not in cluster.raw['metadata']
    await eventually(lambda: started)
    await cluster.delete()
    await eventually(lambda: reasons == [DaemonStoppingReason.RESOURCE_DELETED])


async def test_delete_handlers_run_while_daemons_stop_and_are_not_run_again(cluster, registry):
    calls = []
    started = []
    release = asyncio.Event()

    @kopf.on.delete(*RESOURCE, registry=registry)
    def cleanup(**_):
        calls.append('cleanup')

    @kopf.daemon(*RESOURCE, registry=registry)
    async def monitor(stopped, **_):
        started.append(True)
        await stopped.wait()
        await release.wait()

    await cluster.event('ADDED')
    await cluster.event()
    await eventually(lambda: started)
    result = await cluster.delete()
    assert calls == ['cleanup']
    assert not result.done and FINALIZER in cluster.raw['metadata']['finalizers']
    result = await cluster.event()
    assert not result.done and calls == ['cleanup']  # its success is kept while the daemon stops

    release.set()
    await cluster.settle_deletion()
    assert calls == ['cleanup']


# The operator's exit and memory.

async def test_the_operators_exit_stops_every_daemon_within_the_exit_timeout(cluster, registry):
    reasons = []
    started = []
    release = threading.Event()

    @kopf.daemon(*RESOURCE, registry=registry)
    async def polite(stopped, **_):
        started.append('polite')
        await stopped.wait()
        reasons.append(stopped.reason)

    @kopf.daemon(*RESOURCE, registry=registry)
    def stubborn(**_):
        started.append('stubborn')
        release.wait(30)

    @kopf.timer(*RESOURCE, registry=registry, interval=0.01)
    async def ping(**_):
        pass

    await cluster.event('ADDED')
    await eventually(lambda: len(started) == 2)
    assert cluster.keeper.running == 3
    took = await cluster.close(timeout=0.3)
    assert took == pytest.approx(0.3)  # of the clock: the exit timeout, then the stubborn one is cancelled
    assert reasons == [DaemonStoppingReason.OPERATOR_EXITING]
    assert cluster.keeper.running == 0
    await cluster.event()
    await settle()
    assert cluster.keeper.running == 0  # nothing starts once closed
    release.set()


async def test_nothing_of_an_object_is_kept_once_it_is_gone(cluster, registry):
    bodies = []

    @kopf.daemon(*RESOURCE, registry=registry)
    async def monitor(stopped, body, **_):
        bodies.append(weakref.ref(body))
        await stopped.wait()

    @kopf.timer(*RESOURCE, registry=registry, interval=0.01)
    async def ping(**_):
        pass

    await cluster.event('ADDED')
    await eventually(lambda: bodies)
    assert len(cluster.keeper) == 1
    await cluster.event('DELETED')
    await eventually(lambda: cluster.keeper.running == 0)
    await settle()  # the guards of their stops see them exited
    assert len(cluster.keeper) == 0
    gc.collect()
    assert bodies[0]() is None


# Replicas.

def replica_gate(clock, keys, *, admit=100, write=100):
    """A replica's gate that permits the given keys (a mutable set), with the deadlines far ahead of its clock."""
    gate = Gate(clock=clock)
    gate.permit(lambda key: key in keys, resync=True)
    gate.extend(admit_until=clock.mono + admit, write_until=clock.mono + write)
    return gate


async def test_with_replicas_the_daemons_stop_as_soon_as_the_object_is_not_this_replicas_any_more(
        cluster, registry, clock):
    ours = {'uid1'}
    gate = replica_gate(FakeClock(), ours)
    cluster.keeper = Daemons(patcher=cluster._patch, fence=gate, clock=clock)  # the clock stands: no patrol
    log = logging_daemon(registry)

    await cluster.event('ADDED')
    await eventually(lambda: log == ['start'])
    assert gate.residents == 1 and gate.busy(lambda key: False)
    ours.clear()
    gate.permit(lambda key: key in ours, resync=False)  # handed over: its events do not come here any more
    await eventually(lambda: log == ['start', DaemonStoppingReason.OPERATOR_PAUSING])
    assert await gate.drain(lambda key: False, timeout=1.0)  # the hand-over can be acknowledged now
    assert gate.residents == 0 and len(cluster.keeper) == 0
    ours.add('uid1')  # back again: its events (a fresh listing) start it anew
    gate.permit(lambda key: key in ours, resync=True)
    await cluster.event()
    await eventually(lambda: log[-1] == 'start' and len(log) == 3)
    await cluster.close(timeout=0.3)
    assert gate.residents == 0


async def test_with_replicas_the_patrol_stops_the_daemons_once_the_permit_has_lapsed_by_time(
        cluster, registry, clock):
    gate = replica_gate(clock, {'uid1'}, admit=PATROL_INTERVAL * 4.5)  # no change of the gate: only time passes
    cluster.keeper = Daemons(patcher=cluster._patch, fence=gate, clock=clock)
    log = logging_daemon(registry)

    await cluster.event('ADDED')
    await eventually(lambda: log == ['start'])
    await clock.run(PATROL_INTERVAL * 4.9)
    assert not gate.admits('uid1')  # lapsed at 4.5 intervals; the patrol comes at 5
    assert log == ['start']
    await clock.run(PATROL_INTERVAL * 0.2)
    assert log == ['start', DaemonStoppingReason.OPERATOR_PAUSING]
    assert gate.residents == 0


async def test_with_replicas_a_hand_over_waits_for_the_daemons_cleanup(cluster, registry, clock):
    ours = {'uid1'}
    gate = replica_gate(FakeClock(), ours)
    cluster.keeper = Daemons(patcher=cluster._patch, fence=gate, clock=clock)
    cleaning = asyncio.Event()
    cleaned = asyncio.Event()

    @kopf.daemon(*RESOURCE, registry=registry, cancellation_backoff=10, cancellation_timeout=10)
    async def monitor(stopped, **_):
        await stopped.wait()
        cleaning.set()
        await cleaned.wait()  # a slow cleanup after the stop was asked

    await cluster.event('ADDED')
    await eventually(lambda: cluster.keeper.running == 1)
    ours.clear()
    gate.permit(lambda key: key in ours, resync=False)
    await eventually(cleaning.is_set)
    draining = asyncio.create_task(gate.drain(lambda key: False, timeout=1))  # by the gate's clock, which stands
    await settle()
    assert not draining.done()  # not acknowledged while it cleans up
    cleaned.set()
    assert await asyncio.wait_for(draining, timeout=1)


async def test_with_replicas_the_daemons_are_cancelled_at_once_when_the_lease_is_lost(cluster, registry, clock):
    gate_clock = FakeClock()
    gate = replica_gate(gate_clock, {'uid1'})
    cluster.keeper = Daemons(patcher=cluster._patch, fence=gate, clock=clock)
    log = []

    @kopf.daemon(*RESOURCE, registry=registry, cancellation_backoff=100)  # would wait long to cancel
    async def monitor(stopped, **_):
        try:
            await stopped.wait()
            await clock.sleep(100)  # a cleanup longer than the lease
        except asyncio.CancelledError:
            log.append('cancelled')
            raise

    await cluster.event('ADDED')
    await eventually(lambda: cluster.keeper.running == 1)
    gate_clock.advance(101)  # past the deadlines, as if the loop had been stuck; the hard fence strikes
    gate.harden()
    await eventually(lambda: log == ['cancelled'], timeout=1)
    await eventually(lambda: gate.residents == 0, what="its departure from the gate")


# Declaring them.

def test_kopf_on_daemon_and_timer_are_the_same_decorators():
    assert kopf.on.daemon is kopf.daemon
    assert kopf.on.timer is kopf.timer


@pytest.mark.parametrize('decorator, options, message', [
    (kopf.daemon, {'cancellation_timeout': -1}, 'cancellation_timeout= must be a number of seconds'),
    (kopf.daemon, {'cancellation_polling': 0}, 'cancellation_polling= must be a positive number'),
    (kopf.daemon, {'initial_delay': 'soon'}, 'initial_delay= must be a number of seconds'),
    (kopf.timer, {'interval': 0}, 'interval= must be a positive number of seconds'),
    (kopf.timer, {'idle': -5}, 'idle= must be a number of seconds'),
    (kopf.timer, {'retries': 0}, 'retries= is the number of attempts'),
])
def test_bad_options_fail_at_declaration_with_the_option_named(decorator, options, message, registry):
    with pytest.raises(ValueError, match=message):
        decorator(*RESOURCE, registry=registry, **options)


def test_two_daemons_or_timers_with_one_id_are_refused(registry):
    kopf.daemon(*RESOURCE, registry=registry, id='same')(lambda **_: None)
    with pytest.raises(kopf.DuplicateHandlerError, match="share the id 'same'"):
        kopf.timer(*RESOURCE, registry=registry, id='same', interval=1)(lambda **_: None)


def test_a_resource_with_only_daemons_or_timers_is_watched(registry):
    kopf.timer('pods', registry=registry, interval=1)(lambda **_: None)
    kopf.daemon(*RESOURCE, registry=registry)(lambda **_: None)
    assert registry.selectors == (Selector.from_args('pods'), SELECTOR)
