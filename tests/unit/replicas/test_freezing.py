"""
Kopf's ``kopf freeze`` and ``kopf resume``: the commands alone, and HA replicas on the fake clock while frozen.
"""
import datetime

import pytest

from kopf._replicas import freezing, priorities
from kopf._replicas.leases import LeaseSpec, microtime
from tests.unit.replicas.conftest import LEASE, RETRY, Context, at_most_one_active, holder, lease, passes, until

LIFETIME = 3600  # far beyond the leaders' lease duration


async def freeze(clock, **kwargs):
    return await freezing.freeze(**{'context': Context('cli'), 'namespace': 'ns', 'name': 'op', 'id': 'me@host',
                                    'lifetime': LIFETIME, 'clock': clock, **kwargs})


async def resume(clock, **kwargs):
    return await freezing.resume(**{'context': Context('cli'), 'namespace': 'ns', 'name': 'op', 'id': 'me@host',
                                    'clock': clock, **kwargs})


async def test_a_freeze_stops_the_leader_and_resume_gives_the_lease_back_to_it(start, store, clock):
    leader = start('ha', 'a')
    await until(clock, lambda: leader.gate.active, within=RETRY)
    standby = start('ha', 'b')
    await passes(clock, 3 * RETRY)
    text = await freeze(clock, message='maintenance')
    assert f"Frozen the replicas of the lease ns/op for {LIFETIME}s as me@host" in text
    assert holder(store) == 'frozen:me@host'
    await until(clock, lambda: not leader.gate.active, within=3 * RETRY)
    with pytest.raises(AssertionError, match='timed out'):  # far beyond the leader's lease duration
        await until(clock, lambda: leader.gate.active or standby.gate.active, within=3 * LEASE)
    text = await resume(clock)
    assert "given back to a" in text
    await until(clock, lambda: leader.gate.active, within=3 * RETRY, sample=at_most_one_active(leader, standby))
    assert priorities.FREEZE_ANNOTATION not in store.leases['ns', 'op'].annotations
    assert not standby.gate.active


async def test_a_resume_right_after_the_freeze_never_lets_two_replicas_handle(start, store, clock):
    leader = start('ha', 'a')
    await until(clock, lambda: leader.gate.active, within=RETRY)
    standby = start('ha', 'b')
    await passes(clock, 3 * RETRY)
    await freeze(clock)
    await resume(clock)  # before the leader could even notice the freeze
    await until(clock, lambda: False if holder(store) != 'a' else leader.gate.active, within=3 * LEASE,
                sample=at_most_one_active(leader, standby))
    with pytest.raises(AssertionError, match='timed out'):
        await until(clock, lambda: standby.gate.active, within=2 * LEASE, sample=at_most_one_active(leader, standby))


async def test_a_freeze_ends_by_itself_after_its_lifetime(start, store, clock):
    leader = start('ha', 'a')
    await until(clock, lambda: leader.gate.active, within=RETRY)
    frozen = clock.monotonic()
    await freeze(clock, lifetime=2 * LEASE)
    await until(clock, lambda: not leader.gate.active, within=3 * RETRY)
    resumed = await until(clock, lambda: leader.gate.active, within=3 * LEASE + 2)
    assert resumed - frozen >= 2 * LEASE
    assert holder(store) == 'a'


async def test_a_freeze_lasts_at_least_the_leaders_lease_duration(start, store, clock):
    leader = start('ha', 'a', lease_duration=40, renew_deadline=30)
    await until(clock, lambda: leader.gate.active, within=RETRY)
    text = await freeze(clock, lifetime=20)
    assert "for 40s (not shorter than the leader's lease duration, 40s)" in text
    assert store.leases['ns', 'op'].spec.duration == 40


async def test_a_freeze_does_not_pause_a_leader_of_a_higher_priority(start, store, clock):
    leader = start('ha', 'dev', priority=666)
    await until(clock, lambda: leader.gate.active, within=RETRY)
    with pytest.raises(freezing.FreezeError, match=r"held by dev with the priority 666, not lower than "
                                                   r"the freeze's 100: .* --priority 667 or higher"):
        await freeze(clock)
    assert leader.gate.active
    await freeze(clock, priority=700)
    await until(clock, lambda: not leader.gate.active, within=3 * RETRY)


async def test_a_higher_priority_than_the_freezes_takes_the_lease_over(start, store, clock):
    leader = start('ha', 'a')
    await until(clock, lambda: leader.gate.active, within=RETRY)
    await freeze(clock)
    await until(clock, lambda: not leader.gate.active, within=3 * RETRY)
    dev = start('ha', 'dev', priority=666)
    await until(clock, lambda: dev.gate.active, within=4 * LEASE, sample=at_most_one_active(leader, dev))
    assert holder(store) == 'dev'


async def test_a_freeze_is_resumed_only_by_its_own_id(store, clock):
    await freeze(clock)
    with pytest.raises(freezing.FreezeError, match="frozen by me@host, not by you@there: resume it with "
                                                   "--id 'me@host'"):
        await resume(clock, id='you@there')
    assert "released" in await resume(clock)  # nobody held it before the freeze
    assert holder(store) is None
    assert "is not frozen: nothing to resume" in await resume(clock)


async def test_sharded_replicas_are_not_frozen_but_told_so(start, store, clock):
    member = start('shards', 'a')
    await until(clock, lambda: member.gate.active, within=2 * RETRY)
    with pytest.raises(freezing.FreezeError, match=r"run with --shards .* --peering op"):
        await freeze(clock)


async def test_the_lifetime_of_a_freeze_is_at_least_a_second(store, clock):
    with pytest.raises(freezing.FreezeError, match="at least 1 second; got 0"):
        await freeze(clock, lifetime=0)


# The plans alone: what the commands write.

NOW = datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)


def plan_freeze(current, **kwargs):
    return freezing.plan_freeze(current, **{'namespace': 'ns', 'name': 'op', 'id': 'me@host', 'lifetime': 60,
                                            'priority': 100, 'message': None, 'now': NOW, **kwargs})


def test_a_freeze_records_the_holder_before_it_and_its_own_priority():
    leader = lease('5', holder='a', duration=LEASE, annotations={priorities.PRIORITY_ANNOTATION: '3', 'x': 'y'})
    plan = plan_freeze(leader, message='why')
    assert plan.spec == LeaseSpec(holder='frozen:me@host', duration=60, acquired=microtime(NOW),
                                  renewed=microtime(NOW), transitions=1)
    record = priorities.Freeze.from_lease(lease(holder=plan.spec.holder, annotations=plan.annotations))
    assert record == priorities.Freeze(by='me@host', message='why', previous='a', previous_duration=LEASE,
                                       previous_priority=3)
    assert plan.annotations['x'] == 'y' and plan.annotations[priorities.PRIORITY_ANNOTATION] == '100'


def test_a_freeze_of_a_freeze_keeps_the_holder_from_before_the_first_one():
    first = plan_freeze(lease(holder='a', duration=LEASE))
    frozen = lease('6', holder=first.spec.holder, duration=first.spec.duration, annotations=first.annotations)
    again = plan_freeze(frozen, id='you@there', message='longer')
    record = priorities.Freeze.from_lease(lease(holder=again.spec.holder, annotations=again.annotations))
    assert record.previous == 'a' and record.by == 'you@there' and again.spec.transitions == 0


def test_a_leader_of_a_higher_priority_stops_a_freeze_only_while_its_lease_is_alive_by_the_wall_clock():
    dev = lease(holder='dev', duration=LEASE, renewed=microtime(NOW - datetime.timedelta(seconds=LEASE - 1)),
                annotations={priorities.PRIORITY_ANNOTATION: '666'})
    with pytest.raises(freezing.FreezeError, match="held by dev with the priority 666"):
        plan_freeze(dev)
    assert plan_freeze(dev, now=NOW + datetime.timedelta(seconds=1)).spec.holder == 'frozen:me@host'
