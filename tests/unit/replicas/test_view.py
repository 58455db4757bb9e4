"""
What the rest of the operator may ask: who keeps a shared object, who else is alive.
"""
import asyncio
import types

from kopf._replicas.elector import ALONE_PERIODS
from kopf._replicas.view import ReplicaView
from tests.unit.replicas.conftest import LEASE, RETRY, Context, converged, settle, until


def view_of(replica):
    view = ReplicaView()
    view.attach(types.SimpleNamespace(replica=replica.impl, gate=replica.gate), context=Context('operator'))
    return view


async def alone(clock, view):
    """Ask, moving the clock while the view watches the released Lease; the answer and how long it took."""
    started = clock.monotonic()
    asking = asyncio.create_task(view.alone())
    await until(clock, asking.done, within=3 * ALONE_PERIODS * RETRY)
    return asking.result(), clock.monotonic() - started


async def test_the_ha_leader_keeps_shared_objects_and_is_not_alone_when_a_standby_takes_over(start, clock):
    leader = start('ha', 'a')
    await until(clock, lambda: leader.gate.active, within=RETRY)
    standby = start('ha', 'b')
    view = view_of(leader)
    assert view.identity == 'a' and view.steward('admission:x')
    assert view.handover_timeout == LEASE
    await until(clock, lambda: standby.impl.leader == 'a', within=RETRY)  # the standby is polling
    await leader.leave()
    assert not view.steward('admission:x')
    answer, _ = await alone(clock, view)
    assert answer is False


async def test_the_last_ha_replica_is_alone_after_a_few_retry_periods(start, clock):
    leader = start('ha', 'a')
    await until(clock, lambda: leader.gate.active, within=RETRY)
    view = view_of(leader)
    await leader.leave()
    answer, took = await alone(clock, view)
    assert answer is True
    assert took == ALONE_PERIODS * RETRY  # a standby would have taken the lease by then


async def test_one_shard_keeps_a_shared_object_and_knows_the_live_others(start, clock):
    members = [start('shards', name) for name in 'ab']
    await until(clock, converged(*members), within=LEASE)
    views = [view_of(member) for member in members]
    assert sum(view.steward('admission:x') for view in views) == 1
    assert not await views[0].alone()
    await members[1].leave()
    await until(clock, lambda: not members[0].impl.live_others, within=LEASE)
    assert await views[0].alone()


async def test_before_the_coordination_this_replica_keeps_nothing_and_knows_nobody_else(start, clock):
    view = ReplicaView()
    assert view.identity is None and not view.steward('admission:x')
    assert view.revision == 0 and view.handover_timeout == 0
    assert await view.alone()
    waiting = asyncio.create_task(view.revised(0))
    await settle()
    assert not waiting.done()
    leader = start('ha', 'a')
    view.attach(types.SimpleNamespace(replica=leader.impl, gate=leader.gate), context=Context('operator'))
    await settle()
    assert waiting.done()  # attached: the stewardship may have changed
    revision = view.revision
    waiting = asyncio.create_task(view.revised(revision))
    await until(clock, waiting.done, within=RETRY)  # the leader's gate changes
    assert view.steward('admission:x')
