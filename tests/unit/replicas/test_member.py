"""
Sharded replicas against the in-memory Lease store, on the fake clock: one owner per object, and hand-overs.
"""
import asyncio
import dataclasses
import logging

from kopf._replicas import ownership
from tests.unit.replicas.conftest import KEYS, LEASE, RETRY, at_most_one_owner, converged, settle, until


async def test_members_converge_to_one_owner_per_object_and_never_two(start, clock):
    members = [start('shards', name) for name in 'abc']
    await until(clock, converged(*members), within=LEASE, sample=at_most_one_owner(*members))
    joining = start('shards', 'd')
    await until(clock, converged(*members, joining), within=LEASE, sample=at_most_one_owner(*members, joining))
    moved = [key for key in KEYS if joining.gate.admits(key)]
    assert 0.1 < len(moved) / len(KEYS) < 0.4


async def test_a_cut_off_member_is_replaced_only_after_its_fences_have_struck(start, store, clock):
    members = [start('shards', name) for name in 'abc']
    await until(clock, converged(*members), within=LEASE)
    lost = members[0]
    store.cut_off.add(lost.context)
    last_renewal = lost.impl.fences.renewed_at
    replaced = await until(clock, converged(*members[1:]), within=5 * LEASE, sample=at_most_one_owner(*members))
    assert replaced - last_renewal >= LEASE
    assert not lost.gate.active
    store.cut_off.clear()  # it comes back and joins anew
    await until(clock, converged(*members), within=5 * LEASE, sample=at_most_one_owner(*members))


async def test_a_leaving_member_hands_its_objects_over_at_once(start, store, clock):
    members = [start('shards', name) for name in 'ab']
    await until(clock, converged(*members), within=LEASE)
    leaving = members[0]
    await leaving.leave()
    assert ('ns', 'op-a') not in store.leases
    left = clock.monotonic()
    taken = await until(clock, converged(members[1]), within=LEASE)
    assert taken - left < 3 * RETRY


async def test_an_object_moves_only_after_its_running_cycle_has_finished(start, clock):
    first = start('shards', 'a')
    await until(clock, converged(first), within=LEASE)
    moving = next(key for key in KEYS if ownership.owner(key, ('a', 'b')) == 'b')
    finished = []

    async def running_cycle():
        async with first.gate.handling(moving) as admitted:
            assert admitted
            await clock.sleep(5 * RETRY)
            finished.append(clock.monotonic())

    cycle = asyncio.create_task(running_cycle())
    await settle()
    second = start('shards', 'b')
    taken = await until(clock, lambda: second.gate.admits(moving), within=3 * LEASE,
                        sample=at_most_one_owner(first, second))
    await until(clock, cycle.done, within=5 * RETRY)
    assert finished and taken >= finished[0]


async def test_the_members_delete_the_lease_of_a_member_that_has_stopped(start, store, clock, caplog):
    caplog.set_level(logging.INFO)
    members = [start('shards', name) for name in 'ab']
    await until(clock, converged(*members), within=LEASE)
    await members[0].kill()  # its lease stays behind
    await until(clock, lambda: ('ns', 'op-a') not in store.leases, within=2 * LEASE)
    assert "The member a has left (its lease op-a has expired)." in caplog.text
    assert members[1].impl.live_others == frozenset()


async def test_a_member_whose_lease_was_taken_for_expired_stops_and_joins_anew(start, store, clock, caplog):
    member = start('shards', 'a')
    await until(clock, converged(member), within=LEASE)
    del store.leases['ns', 'op-a']  # as by the others, e.g. after a long pause of this process
    await until(clock, lambda: not member.gate.active, within=RETRY)
    assert "Our member lease is gone (the others took it for expired): stopped handling; joining anew." in caplog.text
    await until(clock, converged(member), within=LEASE)


async def test_a_leaving_member_deletes_its_lease_even_after_a_renewal_whose_answer_it_never_got(
        start, store, clock, caplog):
    caplog.set_level(logging.INFO)
    members = [start('shards', name) for name in 'ab']
    await until(clock, converged(*members), within=LEASE)
    leaving = members[0]
    leaving.task.cancel()  # the loop stops first, as at the operator's exit
    await asyncio.gather(leaving.task, return_exceptions=True)
    # Its last renewal reached the server, but the stop cut its answer off: the server has a newer version.
    known = store.leases['ns', 'op-a']
    store._store('ns', 'op-a', known.spec, known.labels, known.annotations)
    await leaving.impl.release()
    assert ('ns', 'op-a') not in store.leases
    assert "Left the shards: deleted the member lease op-a." in caplog.text


async def test_a_leaving_member_leaves_a_lease_that_another_holder_has_taken_alone(start, store, clock, caplog):
    caplog.set_level(logging.INFO)
    members = [start('shards', name) for name in 'ab']
    await until(clock, converged(*members), within=LEASE)
    leaving = members[0]
    leaving.task.cancel()
    await asyncio.gather(leaving.task, return_exceptions=True)
    known = store.leases['ns', 'op-a']
    store._store('ns', 'op-a', dataclasses.replace(known.spec, holder='someone-else'), known.labels, known.annotations)
    await leaving.impl.release()
    assert store.leases['ns', 'op-a'].spec.holder == 'someone-else'
    assert "Cannot delete the member lease op-a" in caplog.text
