"""
What both modes share: the loop on the clock, and duplicate identities (one process per identity).
"""
import logging

import pytest

from kopf._replicas.elector import Elector
from kopf._replicas.fencing import Gate
from kopf._replicas.member import Member
from kopf._replicas.observations import INSTANCE_ANNOTATION
from kopf._replicas.replica import duplicate_error
from kopf._replicas.settings import PeeringError
from tests.unit.replicas.conftest import LEASE, RETRY, Context, at_most_one_active, lease, settings, until


@pytest.mark.parametrize('mode', ['ha', 'shards'])
async def test_the_lease_is_looked_at_every_retry_period_by_the_clock(start, store, clock, mode):
    replica = start(mode, 'a')
    await until(clock, lambda: replica.gate.active, within=2 * RETRY)
    requests, started = store.requests, clock.monotonic()
    await until(clock, lambda: store.requests > requests, within=RETRY)
    assert clock.monotonic() - started == RETRY


def test_the_duplicate_error_names_the_identity_the_lease_and_what_to_do():
    error = duplicate_error(settings('shards', 'same'), lease(name='op-same', holder='same'))
    assert str(error).startswith("Another replica runs with the identity 'same': the lease ns/op-same is renewed")
    assert "unique --identity" in str(error) and "leave it to the default" in str(error)


@pytest.mark.parametrize('mode', ['ha', 'shards'])
async def test_a_second_replica_with_the_same_identity_refuses_to_join_and_the_first_goes_on(
        start, store, clock, mode):
    first = start(mode, 'same')
    await until(clock, lambda: first.gate.active, within=2 * RETRY)
    second = start(mode, 'same')
    await until(clock, lambda: second.task.done(), within=3 * RETRY, sample=at_most_one_active(first, second))
    with pytest.raises(PeeringError, match="Another replica runs with the identity 'same'"):
        second.task.result()
    await second.impl.release()  # as at its exit: it must not touch the first one's lease
    assert not second.gate.active
    version = next(iter(store.leases.values())).resource_version
    await until(clock, lambda: next(iter(store.leases.values())).resource_version != version, within=3 * RETRY)
    assert first.gate.active and not first.task.done()
    lease, = store.leases.values()
    assert lease.annotations[INSTANCE_ANNOTATION] == first.impl.instance


@pytest.mark.parametrize('mode', ['ha', 'shards'])
async def test_a_restarted_replica_with_a_stable_identity_takes_its_predecessors_lease_once_expired(
        store, clock, caplog, mode):
    caplog.set_level(logging.INFO)
    cls = Elector if mode == 'ha' else Member

    def replica():
        return cls(context=Context('stable'), gate=Gate(clock=clock), settings=settings(mode, 'stable'), clock=clock)

    predecessor = replica()
    await predecessor.tick()
    await predecessor.tick()  # shards: a ring is published first, then permitted by
    assert predecessor.gate.active
    predecessor.fences.cancel()  # killed: its lease stays behind, unchanged
    successor = replica()
    await successor.tick()
    assert not successor.gate.active  # a duplicate, or an ended predecessor? not known yet
    assert "is held under our identity 'stable' by another process: waiting up to 15s" in caplog.text
    clock.advance(LEASE - 1)
    await successor.tick()
    assert not successor.gate.active
    clock.advance(1)  # unchanged for its whole duration, by our clock: the predecessor has ended
    await successor.tick()
    if mode == 'shards':
        await successor.tick()  # its ring is published now: the next listing permits by it
    assert successor.gate.active
    assert "of a previous process with our identity 'stable' has expired; taking it over." in caplog.text
    lease, = store.leases.values()
    assert lease.annotations[INSTANCE_ANNOTATION] == successor.instance
    successor.fences.cancel()


async def test_a_duplicate_is_refused_at_the_first_renewal_seen_however_little_time_has_passed(store, clock):
    def replica():
        return Member(context=Context('same'), gate=Gate(clock=clock), settings=settings('shards', 'same'),
                      clock=clock)

    first, second = replica(), replica()
    await first.tick()
    await first.tick()
    await second.tick()  # sees the lease for the first time: not known yet
    await first.tick()  # a renewal, in no time at all by the clock
    with pytest.raises(PeeringError, match="Another replica runs with the identity 'same'"):
        await second.tick()
    assert not second.gate.active and first.gate.active
    first.fences.cancel()
