"""
HA replicas against the in-memory Lease store, on the fake clock: who leads, and when the others take over.
"""
import asyncio
import dataclasses

import pytest

from kopf._replicas import priorities
from kopf._replicas.fencing import FencedError
from kopf._replicas.leases import LeaseSpec
from kopf._replicas.settings import PeeringError
from tests.unit.replicas.conftest import KEYS, LEASE, RENEW, RETRY, at_most_one_active, holder, passes, settle, until


async def test_one_replica_leads_and_a_standby_takes_over_only_after_the_lease_expires(start, clock):
    leader = start('ha', 'a')
    await until(clock, lambda: leader.gate.active, within=RETRY)
    standby = start('ha', 'b')
    with pytest.raises(AssertionError, match='timed out'):
        await until(clock, lambda: standby.gate.active, within=2 * LEASE, sample=at_most_one_active(leader, standby))
    last_renewal = leader.impl.fences.renewed_at
    killed = clock.monotonic()
    await leader.kill()
    took_over = await until(clock, lambda: standby.gate.active, within=3 * LEASE)
    assert took_over - last_renewal >= LEASE
    assert took_over - killed < LEASE + 3 * RETRY


async def test_a_released_lease_is_taken_over_within_a_retry_period(start, clock):
    leader = start('ha', 'a')
    await until(clock, lambda: leader.gate.active, within=RETRY)
    standby = start('ha', 'b')
    await passes(clock, 3 * RETRY)
    await leader.leave()
    released = clock.monotonic()
    took_over = await until(clock, lambda: standby.gate.active, within=LEASE)
    assert took_over - released <= RETRY


async def test_a_leader_cut_off_from_the_server_stops_before_its_lease_can_expire(start, store, clock):
    leader = start('ha', 'a')
    await until(clock, lambda: leader.gate.active, within=RETRY)
    standby = start('ha', 'b')
    await passes(clock, 3 * RETRY)
    store.cut_off.add(leader.context)
    last_renewal = leader.impl.fences.renewed_at
    stopped = await until(clock, lambda: not leader.gate.active, within=LEASE)
    assert stopped - last_renewal == RENEW - RETRY  # the soft fence, to the moment
    leader.gate.check_write()  # a cycle that had begun to patch may finish it ...
    with pytest.raises(FencedError):  # ... until the renew deadline
        await until(clock, lambda: False, within=RENEW - (stopped - last_renewal), sample=leader.gate.check_write)
    assert clock.monotonic() - last_renewal == RENEW
    took_over = await until(clock, lambda: standby.gate.active, within=3 * LEASE,
                            sample=at_most_one_active(leader, standby))
    assert took_over - last_renewal >= LEASE
    store.cut_off.clear()  # back, but the lease is the standby's now
    with pytest.raises(AssertionError, match='timed out'):
        await until(clock, lambda: leader.gate.active, within=5 * RETRY, sample=at_most_one_active(leader, standby))
    assert leader.impl.leader == 'b'


async def test_forbidden_lease_verbs_stop_the_replica_naming_the_verb(start, store, clock):
    store.forbidden.add('update')
    leader = start('ha', 'a')
    await until(clock, lambda: leader.task.done(), within=LEASE)  # it creates the lease, then fails to renew it
    with pytest.raises(PeeringError, match=r'forbids to update leases\.coordination\.k8s\.io'):
        leader.task.result()


async def test_transient_failures_are_retried_at_the_next_period(start, store, clock, caplog):
    leader = start('ha', 'a')
    await until(clock, lambda: leader.gate.active, within=RETRY)
    store.cut_off.add(leader.context)
    await passes(clock, RETRY)
    assert ("Cannot coordinate through the lease(s) in 'ns' right now: APIConnectionError: cut off; retrying."
            in caplog.text)
    store.cut_off.clear()
    await passes(clock, RETRY)
    assert leader.gate.active and not leader.task.done()


async def test_the_gate_permits_everything_to_the_leader(start, clock):
    leader = start('ha', 'a')
    await until(clock, lambda: leader.gate.active, within=RETRY)
    assert all(leader.gate.admits(key) for key in KEYS)


async def test_a_leader_whose_lease_is_taken_stops_handling_at_its_next_renewal(start, store, clock, caplog):
    leader = start('ha', 'a')
    await until(clock, lambda: leader.gate.active, within=RETRY)
    store.leases['ns', 'op'] = dataclasses.replace(store.leases['ns', 'op'], resource_version='x',
                                                   spec=LeaseSpec(holder='intruder', duration=LEASE))
    stopped = await until(clock, lambda: not leader.gate.active, within=LEASE)
    assert stopped - leader.impl.fences.renewed_at <= RETRY
    assert "The lease is held by intruder now: stopped handling." in caplog.text


# Priorities (Kopf's --priority and --dev).

async def test_a_higher_priority_takes_the_lease_over_and_handles_once_the_leader_has_surely_stopped(
        start, store, clock):
    leader = start('ha', 'a')
    await until(clock, lambda: leader.gate.active, within=RETRY)
    started = clock.monotonic()
    dev = start('ha', 'dev', priority=666)
    taken = await until(clock, lambda: holder(store) == 'dev', within=LEASE, sample=at_most_one_active(leader, dev))
    assert taken - started < 3 * RETRY  # the lease is taken at once ...
    handling = await until(clock, lambda: dev.gate.active, within=3 * LEASE, sample=at_most_one_active(leader, dev))
    assert handling - taken >= LEASE - RETRY  # ... but the handling starts a lease duration later
    assert not leader.gate.active
    assert store.leases['ns', 'op'].annotations[priorities.PRIORITY_ANNOTATION] == '666'


async def test_lower_and_equal_priorities_never_take_the_lease_from_the_leader(start, store, clock):
    leader = start('ha', 'a', priority=5)
    await until(clock, lambda: leader.gate.active, within=RETRY)
    others = [start('ha', 'b', priority=5), start('ha', 'c', priority=1), start('ha', 'd')]
    with pytest.raises(AssertionError, match='timed out'):
        await until(clock, lambda: holder(store) != 'a', within=3 * LEASE, sample=at_most_one_active(leader, *others))
    assert leader.gate.active


async def test_when_the_higher_priority_leaves_the_others_take_over_at_once(start, clock):
    first = start('ha', 'a')
    await until(clock, lambda: first.gate.active, within=RETRY)
    dev = start('ha', 'dev', priority=666)
    await until(clock, lambda: dev.gate.active, within=3 * LEASE)
    await dev.leave()
    released = clock.monotonic()
    took_over = await until(clock, lambda: first.gate.active, within=LEASE)
    assert took_over - released < 3 * RETRY


async def test_a_replica_that_steps_down_renews_but_takes_nothing(start, store, clock):
    leader = start('ha', 'a')
    await until(clock, lambda: leader.gate.active, within=RETRY)
    standby = start('ha', 'b')
    await settle()
    assert await standby.impl.step_down(timeout=0)
    await leader.leave()
    await passes(clock, 2 * LEASE)
    assert holder(store) is None and not standby.gate.active  # released, and nobody took it
    version = store.leases['ns', 'op'].resource_version
    closing = start('ha', 'c')
    await until(clock, lambda: closing.gate.active, within=RETRY)
    assert await closing.impl.step_down(timeout=0)
    await passes(clock, 2 * RETRY)
    assert holder(store) == 'c' and store.leases['ns', 'op'].resource_version != version  # still renewed
    assert not closing.gate.active


async def test_a_leaving_leader_releases_the_lease_even_after_a_renewal_whose_answer_it_never_got(start, store,
                                                                                                  clock):
    leader = start('ha', 'a')
    await until(clock, lambda: leader.gate.active, within=RETRY)
    leader.task.cancel()  # the loop stops first, as at the operator's exit
    await asyncio.gather(leader.task, return_exceptions=True)
    # Its last renewal reached the server, but the stop cut its answer off: the server has a newer version.
    known = store.leases['ns', 'op']
    store._store('ns', 'op', known.spec, known.labels, known.annotations)
    await leader.impl.release()
    assert holder(store) is None
