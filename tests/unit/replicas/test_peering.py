"""
Leader election and shard membership, against an in-memory Lease store with the API's semantics.

The store is linearizable and versions every write, as the API server is:
a replace or delete with a stale ``resourceVersion`` is a conflict. Replicas
are "killed" by cancelling their loop (a partition: their own fences still
strike) and "cut off" by failing their requests.
"""
import asyncio
import dataclasses
import itertools
import time
import types

import pytest

from kopf._kube import access
from kopf._kube.errors import APIConflictError, APIConnectionError, APIForbiddenError, APINotFoundError
from kopf._replicas import freezing, leases, ownership, peering
from kopf._replicas.fencing import FencedError, Gate
from kopf._replicas.leases import Lease
from kopf._replicas.peering import PeeringError, PeeringSettings
from kopf._structs.credentials import ConnectionInfo
from kopf.config import PeeringConfig

KEYS = [f'uid-{i}' for i in range(300)]
LEASE, RENEW, RETRY = 1, 0.6, 0.1


class Context:
    """A stand-in for an API context: the store tells the replicas apart by it."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f'Context({self.name})'

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc_info):
        pass


class FakeLeases:
    """The Lease API in memory: versioned, with conflicts, forbidden verbs and cut-off clients."""

    def __init__(self):
        self.leases: dict[tuple[str, str], Lease] = {}
        self.versions = itertools.count(1)
        self.cut_off: set[Context] = set()
        self.forbidden: set[str] = set()
        self.requests = 0

    async def _enter(self, context, verb):
        await asyncio.sleep(0)
        self.requests += 1
        if context in self.cut_off:
            raise APIConnectionError("cut off")
        if verb in self.forbidden:
            raise APIForbiddenError(f"403 Forbidden: cannot {verb}", status=403)

    def _store(self, namespace, name, spec, labels, annotations):
        lease = Lease(namespace=namespace, name=name, resource_version=str(next(self.versions)), spec=spec,
                      labels=dict(labels or {}), annotations=dict(annotations or {}))
        self.leases[namespace, name] = lease
        return lease

    async def read_lease(self, *, context, namespace, name, timeout=None):
        await self._enter(context, 'get')
        return self.leases.get((namespace, name))

    async def list_leases(self, *, context, namespace, labels, timeout=None):
        await self._enter(context, 'list')
        return [lease for (ns, _), lease in sorted(self.leases.items())
                if ns == namespace and all(lease.labels.get(k) == v for k, v in labels.items())]

    async def create_lease(self, *, context, namespace, name, spec, labels=None, annotations=None, timeout=None):
        await self._enter(context, 'create')
        if (namespace, name) in self.leases:
            raise APIConflictError("409 exists", status=409)
        return self._store(namespace, name, spec, labels, annotations)

    async def replace_lease(self, *, lease, context, spec, labels=None, annotations=None, timeout=None):
        await self._enter(context, 'update')
        current = self.leases.get((lease.namespace, lease.name))
        if current is None:
            raise APINotFoundError("404", status=404)
        if current.resource_version != lease.resource_version:
            raise APIConflictError("409 changed", status=409)
        return self._store(lease.namespace, lease.name, spec,
                           lease.labels if labels is None else labels,
                           lease.annotations if annotations is None else annotations)

    async def delete_lease(self, *, lease, context, timeout=None):
        await self._enter(context, 'delete')
        current = self.leases.get((lease.namespace, lease.name))
        if current is None:
            return False
        if current.resource_version != lease.resource_version:
            raise APIConflictError("409 changed", status=409)
        del self.leases[lease.namespace, lease.name]
        return True


@pytest.fixture()
def store(monkeypatch):
    fake = FakeLeases()
    for name in ['read_lease', 'list_leases', 'create_lease', 'replace_lease', 'delete_lease']:
        monkeypatch.setattr(leases, name, getattr(fake, name))
    return fake


def settings(mode, identity, **overrides):
    return PeeringSettings(**{'mode': mode, 'name': 'op', 'namespace': 'ns', 'identity': identity,
                              'lease_duration': LEASE, 'renew_deadline': RENEW, 'retry_period': RETRY, **overrides})


@dataclasses.dataclass
class Replica:
    identity: str
    context: Context
    gate: Gate
    impl: peering._Replica
    task: asyncio.Task

    async def kill(self):
        """As by ``kill -9``: the process and its gate are gone at once."""
        self.task.cancel()
        self.impl.fences.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


@pytest.fixture()
async def start(store):
    started = []

    def start(mode, identity, **overrides):
        gate = Gate()
        context = Context(identity)
        cls = peering._Elector if mode == 'ha' else peering._Member
        impl = cls(context=context, gate=gate, settings=settings(mode, identity, **overrides))
        replica = Replica(identity, context, gate, impl, asyncio.create_task(impl.run()))
        started.append(replica)
        return replica

    yield start
    for replica in started:
        await replica.kill()


async def until(condition, *, timeout=5.0, sample=None):
    """Wait for a condition, checking an invariant (``sample``) every few milliseconds meanwhile."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if sample is not None:
            sample()
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.005)
    return loop.time()


def at_most_one_active(*replicas):
    def sample():
        assert sum(replica.gate.active for replica in replicas) <= 1
    return sample


def at_most_one_owner(*replicas):
    def sample():
        for key in KEYS:
            assert sum(replica.gate.admits(key) for replica in replicas) <= 1, key
    return sample


def converged(*replicas):
    ring = ownership.make_ring(replica.identity for replica in replicas)

    def condition():
        return (all(replica.impl.published == ring for replica in replicas) and
                all(sum(replica.gate.admits(key) for replica in replicas) == 1 for key in KEYS))
    return condition


# Settings.

def test_the_namespace_is_the_explicit_one_then_the_served_one_then_the_credentials_one():
    config = PeeringConfig(mode='ha', name='op', identity='me')
    assert peering.resolve(config, namespaces=['a'], clusterwide=False, default_namespace='c').namespace == 'a'
    assert peering.resolve(config, namespaces=['a', 'b'], clusterwide=False, default_namespace='c').namespace == 'c'
    assert peering.resolve(config, namespaces=[], clusterwide=True, default_namespace=None).namespace == 'default'
    config.namespace = 'x'
    assert peering.resolve(config, namespaces=['a'], clusterwide=False, default_namespace='c').namespace == 'x'


def test_names_and_identities_must_fit_into_lease_names():
    with pytest.raises(PeeringError, match="identity 'Not_Valid'"):
        peering.resolve(PeeringConfig(mode='ha', name='op', identity='Not_Valid'), namespaces=[],
                        clusterwide=True, default_namespace=None)
    with pytest.raises(PeeringError, match="name 'a,b'"):
        peering.resolve(PeeringConfig(mode='shards', name='a,b', identity='me'), namespaces=[],
                        clusterwide=True, default_namespace=None)


def test_the_timing_must_leave_a_margin_before_the_lease_expires():
    config = PeeringConfig(mode='ha', name='op', identity='me', renew_deadline=20)
    with pytest.raises(PeeringError, match='retry_period < renew_deadline < lease_duration'):
        peering.resolve(config, namespaces=[], clusterwide=True, default_namespace=None)


def test_default_names_come_from_the_operators_code():
    assert peering.default_name(['path/to/my_op.py', 'pkg.mod']) == 'kopf-my-op-pkg-mod'
    assert len(peering.default_name(['x' * 100 + '.py'])) <= 63


def test_default_identities_are_valid_and_unique():
    identities = {peering.default_identity() for _ in range(10)}
    assert len(identities) == 10
    assert all(peering._NAME_RE.match(identity) and len(identity) <= 63 for identity in identities)


# Renew-time semantics.

def lease(rv, holder='other', duration=10):
    spec = leases.LeaseSpec(holder=holder, duration=duration)
    return Lease(namespace='ns', name='op', resource_version=rv, spec=spec)


def test_a_lease_expires_only_after_its_duration_since_it_was_seen_changing():
    observations = peering._Observations(default_duration=15)
    observations.observe(lease('1'), now=100.0)
    assert not observations.expired(lease('1'), now=109.0)
    observations.observe(lease('2'), now=109.0)  # renewed: the clock starts again
    assert not observations.expired(lease('2'), now=115.0)
    observations.observe(lease('2'), now=119.0)
    assert observations.expired(lease('2'), now=119.0)


def test_the_other_machines_timestamps_are_never_compared_with_ours():
    observations = peering._Observations(default_duration=15)
    stale = Lease(namespace='ns', name='op', resource_version='1',
                  spec=leases.LeaseSpec(holder='other', duration=10, renewed='2000-01-01T00:00:00.000000Z'))
    observations.observe(stale, now=100.0)
    assert not observations.expired(stale, now=100.0)  # ancient by its clock, but we have just seen it


def test_a_released_lease_is_free_at_once():
    observations = peering._Observations(default_duration=15)
    released = lease('1', holder=None)
    observations.observe(released, now=100.0)
    assert observations.expired(released, now=100.0)


# High availability.

async def test_one_replica_leads_and_a_standby_takes_over_only_after_the_lease_expires(start):
    leader = start('ha', 'a')
    await until(lambda: leader.gate.active)
    standby = start('ha', 'b')
    loop = asyncio.get_running_loop()
    with pytest.raises(AssertionError, match='timed out'):
        await until(lambda: standby.gate.active, timeout=2 * LEASE, sample=at_most_one_active(leader, standby))
    last_renewal = leader.impl.fences.renewed_at
    killed = loop.time()
    await leader.kill()
    took_over = await until(lambda: standby.gate.active, timeout=3 * LEASE)
    assert took_over - last_renewal >= LEASE
    assert took_over - killed < LEASE + 3 * RETRY


async def test_a_released_lease_is_taken_over_within_a_retry_period(start):
    leader = start('ha', 'a')
    await until(lambda: leader.gate.active)
    standby = start('ha', 'b')
    await asyncio.sleep(3 * RETRY)
    loop = asyncio.get_running_loop()
    leader.task.cancel()
    await leader.impl.release()
    released = loop.time()
    took_over = await until(lambda: standby.gate.active, timeout=LEASE)
    assert took_over - released < 3 * RETRY


async def test_a_leader_cut_off_from_the_server_stops_before_its_lease_can_expire(start, store):
    leader = start('ha', 'a')
    await until(lambda: leader.gate.active)
    standby = start('ha', 'b')
    await asyncio.sleep(3 * RETRY)
    store.cut_off.add(leader.context)
    last_renewal = leader.impl.fences.renewed_at
    stopped = await until(lambda: not leader.gate.active, timeout=LEASE)
    assert stopped - last_renewal < RENEW
    with pytest.raises(FencedError):
        await until(lambda: False, timeout=RENEW - (stopped - last_renewal) + 0.05,
                    sample=leader.gate.check_write)
    took_over = await until(lambda: standby.gate.active, timeout=3 * LEASE,
                            sample=at_most_one_active(leader, standby))
    assert took_over - last_renewal >= LEASE
    store.cut_off.clear()  # back, but the lease is the standby's now
    with pytest.raises(AssertionError, match='timed out'):
        await until(lambda: leader.gate.active, timeout=5 * RETRY, sample=at_most_one_active(leader, standby))
    assert leader.impl.leader == 'b'


async def test_stepping_down_finishes_the_cycles_first_and_then_releases_the_lease(store):
    gate = Gate()
    stop = asyncio.Event()
    peers = peering.Peering(gate=gate, replica=peering._Elector(context=Context('a'), gate=gate,
                                                                settings=settings('ha', 'a')), stop=stop)
    await until(lambda: gate.active)

    async def running_cycle():
        async with gate.handling('k') as admitted:
            assert admitted
            await asyncio.sleep(3 * RETRY)
            assert store.leases['ns', 'op'].spec.holder == 'a'  # still ours while the cycle runs

    cycle = asyncio.create_task(running_cycle())
    await asyncio.sleep(0.01)
    await peers.step_down(timeout=LEASE)
    await cycle
    assert store.leases['ns', 'op'].spec.holder is None
    assert not gate.admits('k')
    assert stop.is_set()  # the coordination is over: the operator stops too (it is stopping anyway)


async def test_renewals_continue_while_the_handling_keeps_the_event_loop_busy(store):
    gate = Gate()
    peers = peering.Peering(gate=gate, replica=peering._Elector(context=Context('a'), gate=gate,
                                                                settings=settings('ha', 'a')), stop=asyncio.Event())
    try:
        await until(lambda: gate.active)
        version = store.leases['ns', 'op'].resource_version
        time.sleep(2 * RENEW)  # noqa: ASYNC251 -- the operator's loop is stuck, as behind CPU-bound handlers
        assert store.leases['ns', 'op'].resource_version != version  # renewed meanwhile, in its own thread
        assert gate.active and gate.admits('k')
        gate.check_write()  # no fence has struck
    finally:
        await peers.release()


# Shards.

async def test_members_converge_to_one_owner_per_object_and_never_two(start):
    members = [start('shards', name) for name in 'abc']
    await until(converged(*members), sample=at_most_one_owner(*members))
    joining = start('shards', 'd')
    await until(converged(*members, joining), sample=at_most_one_owner(*members, joining))
    moved = [key for key in KEYS if joining.gate.admits(key)]
    assert 0.1 < len(moved) / len(KEYS) < 0.4


async def test_a_cut_off_member_is_replaced_only_after_its_fences_have_struck(start, store):
    members = [start('shards', name) for name in 'abc']
    await until(converged(*members))
    lost = members[0]
    store.cut_off.add(lost.context)
    last_renewal = lost.impl.fences.renewed_at
    await until(converged(*members[1:]), timeout=5 * LEASE, sample=at_most_one_owner(*members))
    assert asyncio.get_running_loop().time() - last_renewal >= LEASE
    assert not lost.gate.active
    store.cut_off.clear()  # it comes back and joins anew
    await until(converged(*members), timeout=5 * LEASE, sample=at_most_one_owner(*members))


async def test_a_leaving_member_hands_its_objects_over_at_once(start, store):
    members = [start('shards', name) for name in 'ab']
    await until(converged(*members))
    leaving = members[0]
    leaving.task.cancel()
    await leaving.impl.release()
    assert ('ns', 'op-a') not in store.leases
    loop = asyncio.get_running_loop()
    left = loop.time()
    await until(converged(members[1]), timeout=LEASE)
    assert loop.time() - left < 3 * RETRY + 0.1


async def test_an_object_moves_only_after_its_running_cycle_has_finished(start):
    first = start('shards', 'a')
    await until(converged(first))
    moving = next(key for key in KEYS if ownership.owner(key, ('a', 'b')) == 'b')
    finished = []

    async def running_cycle():
        async with first.gate.handling(moving) as admitted:
            assert admitted
            await asyncio.sleep(5 * RETRY)
            finished.append(asyncio.get_running_loop().time())

    cycle = asyncio.create_task(running_cycle())
    await asyncio.sleep(0.01)
    second = start('shards', 'b')
    taken = await until(lambda: second.gate.admits(moving), timeout=3 * LEASE,
                        sample=at_most_one_owner(first, second))
    await cycle
    assert finished and taken >= finished[0]


async def test_forbidden_lease_verbs_stop_the_replica_naming_the_verb(start, store):
    store.forbidden.add('update')
    leader = start('ha', 'a')
    await until(lambda: leader.task.done(), timeout=LEASE)  # it creates the lease, then fails to renew it
    with pytest.raises(PeeringError, match=r'forbids to update leases\.coordination\.k8s\.io'):
        leader.task.result()


# The entry point.

class PeeringContext(Context):
    info = ConnectionInfo(server='https://example.invalid', default_namespace='ns')


async def test_rbac_is_checked_at_start_naming_every_missing_verb(monkeypatch):
    async def denied_verbs(**kwargs):
        assert kwargs['verbs'] == ('list', 'create', 'update', 'delete')
        return ['update', 'delete']

    monkeypatch.setattr(access, 'denied_verbs', denied_verbs)
    config = PeeringConfig(mode='shards', name='op', identity='me')
    with pytest.raises(PeeringError, match=r"forbids to update, delete leases\.coordination\.k8s\.io .* 'ns'"):
        async with peering.peering(context=PeeringContext('x'), config=config, namespaces=['ns'],  # type: ignore
                                   clusterwide=False, stop=asyncio.Event()):
            pass


async def test_standalone_operators_do_not_coordinate():
    async with peering.peering(context=PeeringContext('x'), config=PeeringConfig(), namespaces=[],  # type: ignore
                               clusterwide=True, stop=asyncio.Event()) as peers:
        assert peers is None


async def test_a_failed_coordination_stops_the_operator_and_is_raised(monkeypatch, store):
    async def denied_verbs(**kwargs):
        return []

    monkeypatch.setattr(access, 'denied_verbs', denied_verbs)
    store.forbidden.add('get')
    stop = asyncio.Event()
    config = PeeringConfig(mode='ha', name='op', identity='me', lease_duration=LEASE, renew_deadline=RENEW,
                           retry_period=RETRY)
    with pytest.raises(PeeringError, match='forbids to get'):
        async with peering.peering(context=PeeringContext('x'), config=config, namespaces=['ns'],  # type: ignore
                                   clusterwide=False, stop=stop) as peers:
            assert peers is not None
            await asyncio.wait_for(stop.wait(), timeout=1)


async def test_the_gate_permits_everything_to_the_leader(start):
    leader = start('ha', 'a')
    await until(lambda: leader.gate.active)
    assert all(leader.gate.admits(key) for key in KEYS)


# Priorities (Kopf's --priority and --dev).

def holder(store):
    lease = store.leases.get(('ns', 'op'))
    return lease.spec.holder if lease is not None else None


async def test_a_higher_priority_takes_the_lease_over_and_handles_once_the_leader_has_surely_stopped(start, store):
    leader = start('ha', 'a')
    await until(lambda: leader.gate.active)
    loop = asyncio.get_running_loop()
    started = loop.time()
    dev = start('ha', 'dev', priority=666)
    taken = await until(lambda: holder(store) == 'dev', timeout=LEASE, sample=at_most_one_active(leader, dev))
    assert taken - started < 3 * RETRY  # the lease is taken at once ...
    handling = await until(lambda: dev.gate.active, timeout=3 * LEASE, sample=at_most_one_active(leader, dev))
    assert handling - taken >= LEASE - RETRY  # ... but the handling starts a lease duration later
    assert not leader.gate.active
    assert store.leases['ns', 'op'].annotations[freezing.PRIORITY_ANNOTATION] == '666'


async def test_lower_and_equal_priorities_never_take_the_lease_from_the_leader(start, store):
    leader = start('ha', 'a', priority=5)
    await until(lambda: leader.gate.active)
    others = [start('ha', 'b', priority=5), start('ha', 'c', priority=1), start('ha', 'd')]
    with pytest.raises(AssertionError, match='timed out'):
        await until(lambda: holder(store) != 'a', timeout=3 * LEASE, sample=at_most_one_active(leader, *others))
    assert leader.gate.active


async def test_when_the_higher_priority_leaves_the_others_take_over_at_once(start, store):
    first = start('ha', 'a')
    await until(lambda: first.gate.active)
    dev = start('ha', 'dev', priority=666)
    await until(lambda: dev.gate.active, timeout=3 * LEASE)
    dev.task.cancel()
    await dev.impl.release()
    loop = asyncio.get_running_loop()
    released = loop.time()
    took_over = await until(lambda: first.gate.active, timeout=LEASE)
    assert took_over - released < 3 * RETRY


def test_the_priority_must_be_a_whole_number():
    config = PeeringConfig(mode='ha', name='op', identity='me', priority='high')  # type: ignore[arg-type]
    with pytest.raises(PeeringError, match=r"config\.peering\.priority must be a whole number; got 'high'"):
        peering.resolve(config, namespaces=[], clusterwide=True, default_namespace=None)


# Freezing (Kopf's kopf freeze / kopf resume).

async def freeze(**kwargs):
    return await freezing.freeze(**{'context': Context('cli'), 'namespace': 'ns', 'name': 'op', 'id': 'me@host',
                                    'lifetime': 30, **kwargs})


async def resume(**kwargs):
    return await freezing.resume(**{'context': Context('cli'), 'namespace': 'ns', 'name': 'op', 'id': 'me@host',
                                    **kwargs})


async def test_a_freeze_stops_the_leader_and_resume_gives_the_lease_back_to_it(start, store):
    leader = start('ha', 'a')
    await until(lambda: leader.gate.active)
    standby = start('ha', 'b')
    await asyncio.sleep(3 * RETRY)
    text = await freeze(message='maintenance')
    assert "Frozen the replicas of the lease ns/op for 30s as me@host" in text
    assert holder(store) == 'frozen:me@host'
    await until(lambda: not leader.gate.active, timeout=3 * RETRY)
    with pytest.raises(AssertionError, match='timed out'):  # far beyond the leader's lease duration
        await until(lambda: leader.gate.active or standby.gate.active, timeout=3 * LEASE)
    text = await resume()
    assert "given back to a" in text
    await until(lambda: leader.gate.active, timeout=3 * RETRY, sample=at_most_one_active(leader, standby))
    assert freezing.FREEZE_ANNOTATION not in store.leases['ns', 'op'].annotations
    assert not standby.gate.active


async def test_a_resume_right_after_the_freeze_never_lets_two_replicas_handle(start, store):
    leader = start('ha', 'a')
    await until(lambda: leader.gate.active)
    standby = start('ha', 'b')
    await asyncio.sleep(3 * RETRY)
    await freeze()
    await resume()  # before the leader could even notice the freeze
    await until(lambda: False if holder(store) != 'a' else leader.gate.active, timeout=3 * LEASE,
                sample=at_most_one_active(leader, standby))
    with pytest.raises(AssertionError, match='timed out'):
        await until(lambda: standby.gate.active, timeout=2 * LEASE, sample=at_most_one_active(leader, standby))


async def test_a_freeze_ends_by_itself_after_its_lifetime(start, store):
    leader = start('ha', 'a')
    await until(lambda: leader.gate.active)
    loop = asyncio.get_running_loop()
    frozen = loop.time()
    await freeze(lifetime=2)
    await until(lambda: not leader.gate.active, timeout=3 * RETRY)
    resumed = await until(lambda: leader.gate.active, timeout=3 * LEASE + 2)
    assert resumed - frozen >= 2
    assert holder(store) == 'a'


async def test_a_freeze_lasts_at_least_the_leaders_lease_duration(start, store):
    leader = start('ha', 'a', lease_duration=3, renew_deadline=2, retry_period=RETRY)
    await until(lambda: leader.gate.active)
    text = await freeze(lifetime=1)
    assert "for 3s (not shorter than the leader's lease duration, 3s)" in text
    assert store.leases['ns', 'op'].spec.duration == 3


async def test_a_freeze_does_not_pause_a_leader_of_a_higher_priority(start, store):
    leader = start('ha', 'dev', priority=666)
    await until(lambda: leader.gate.active)
    with pytest.raises(freezing.FreezeError, match=r"held by dev with the priority 666, not lower than "
                                                   r"the freeze's 100: .* --priority 667 or higher"):
        await freeze()
    assert leader.gate.active
    await freeze(priority=700)
    await until(lambda: not leader.gate.active, timeout=3 * RETRY)


async def test_a_higher_priority_than_the_freezes_takes_the_lease_over(start, store):
    leader = start('ha', 'a')
    await until(lambda: leader.gate.active)
    await freeze()
    await until(lambda: not leader.gate.active, timeout=3 * RETRY)
    dev = start('ha', 'dev', priority=666)
    await until(lambda: dev.gate.active, timeout=4 * LEASE, sample=at_most_one_active(leader, dev))
    assert holder(store) == 'dev'


async def test_a_freeze_is_resumed_only_by_its_own_id(store):
    await freeze()
    with pytest.raises(freezing.FreezeError, match="frozen by me@host, not by you@there: resume it with "
                                                   "--id 'me@host'"):
        await resume(id='you@there')
    assert "released" in await resume()  # nobody held it before the freeze
    assert holder(store) is None
    assert "is not frozen: nothing to resume" in await resume()


async def test_sharded_replicas_are_not_frozen_but_told_so(start, store):
    member = start('shards', 'a')
    await until(lambda: member.gate.active)
    with pytest.raises(freezing.FreezeError, match=r"run with --shards .* --peering op"):
        await freeze()


def test_a_freeze_is_over_by_the_wall_clock_only_after_a_lease_duration_since_it_was_seen():
    elector = peering._Elector(context=Context('a'), gate=None, settings=settings('ha', 'a'))  # type: ignore
    record = freezing.Freeze(by='me', previous='a', previous_duration=LEASE)
    spec = leases.LeaseSpec(holder='frozen:me', duration=5, renewed='2000-01-01T00:00:00.000000Z')
    frozen = Lease(namespace='ns', name='op', resource_version='7', spec=spec,
                   annotations={freezing.FREEZE_ANNOTATION: record.to_json()})
    elector.observations.observe(frozen, now=100.0)
    assert not elector._free(frozen, now=100.0 + LEASE - 0.1)  # long over by its clock, but just seen
    assert elector._free(frozen, now=100.0 + LEASE)
    current = dataclasses.replace(frozen, resource_version='8',
                                  spec=dataclasses.replace(spec, renewed=leases.now()))
    elector.observations.observe(current, now=200.0)
    assert not elector._free(current, now=200.0 + LEASE)  # not over by its clock either


async def test_replicas_need_credentials_not_a_session_of_the_login_handlers():
    context = PeeringContext('x')
    context.custom_session = True  # type: ignore[attr-defined]
    config = PeeringConfig(mode='ha', name='op', identity='me')
    with pytest.raises(PeeringError, match=r"kopf\.AiohttpSession.* Return kopf\.ConnectionInfo"):
        async with peering.peering(context=context, config=config, namespaces=['ns'],  # type: ignore
                                   clusterwide=False, stop=asyncio.Event()):
            pass


# Duplicate identities.

def held(rv, *, instance, holder='me', duration=10, name='op'):
    spec = leases.LeaseSpec(holder=holder, duration=duration)
    annotations = {peering.INSTANCE_ANNOTATION: instance} if instance is not None else {}
    return Lease(namespace='ns', name=name, resource_version=rv, spec=spec, annotations=annotations)


def test_a_lease_under_our_identity_is_ours_only_with_our_instance_token():
    observations = peering._Observations(default_duration=15)
    ours = held('1', instance='mine')
    observations.observe(ours, now=100.0)
    observations.observe(held('2', instance='mine'), now=101.0)  # our own renewal
    assert peering.namesake(held('2', instance='mine'), instance='mine', observations=observations,
                            now=101.0) is peering.Namesake.OURS


def test_a_lease_under_our_identity_renewed_by_another_process_is_a_duplicate():
    observations = peering._Observations(default_duration=15)
    observations.observe(held('1', instance='theirs'), now=100.0)
    judge = dict(instance='mine', observations=observations)
    assert peering.namesake(held('1', instance='theirs'), now=100.0, **judge) is peering.Namesake.UNKNOWN
    observations.observe(held('2', instance='theirs'), now=100.5)  # written while we watch: alive
    assert peering.namesake(held('2', instance='theirs'), now=100.5, **judge) is peering.Namesake.ALIVE
    assert peering.namesake(held('2', instance='theirs'), now=500.0, **judge) is peering.Namesake.ALIVE


def test_a_lease_under_our_identity_left_by_an_ended_process_is_taken_over_once_expired():
    observations = peering._Observations(default_duration=15)
    stale = held('1', instance=None)  # e.g. written before instance tokens, or by a killed process
    observations.observe(stale, now=100.0)
    judge = dict(instance='mine', observations=observations)
    assert peering.namesake(stale, now=109.9, **judge) is peering.Namesake.UNKNOWN  # its duration is 10s
    observations.observe(stale, now=110.0)
    assert peering.namesake(stale, now=110.0, **judge) is peering.Namesake.GONE


def test_the_duplicate_error_names_the_identity_the_lease_and_what_to_do():
    error = peering.duplicate_error(settings('shards', 'same'), held('1', instance='x', name='op-same'))
    assert str(error).startswith("Another replica runs with the identity 'same': the lease ns/op-same is renewed")
    assert "unique --identity" in str(error) and "leave it to the default" in str(error)


@pytest.mark.parametrize('mode', ['ha', 'shards'])
async def test_a_second_replica_with_the_same_identity_refuses_to_join_and_the_first_goes_on(start, store, mode):
    first = start(mode, 'same')
    await until(lambda: first.gate.active)
    second = start(mode, 'same')
    await until(lambda: second.task.done(), timeout=3 * RETRY + 0.5, sample=at_most_one_active(first, second))
    with pytest.raises(PeeringError, match="Another replica runs with the identity 'same'"):
        second.task.result()
    await second.impl.release()  # as at its exit: it must not touch the first one's lease
    assert not second.gate.active
    version = next(iter(store.leases.values())).resource_version
    await until(lambda: next(iter(store.leases.values())).resource_version != version, timeout=3 * RETRY)
    assert first.gate.active and not first.task.done()
    lease, = store.leases.values()
    assert lease.annotations[peering.INSTANCE_ANNOTATION] == first.impl.instance


class FakeClock:
    """A monotonic clock that moves only when told to."""

    def __init__(self):
        self.time = 5000.0

    def monotonic(self):
        return self.time


@pytest.mark.parametrize('mode', ['ha', 'shards'])
async def test_a_restarted_replica_with_a_stable_identity_takes_its_predecessors_lease_once_expired(store, mode):
    clock = FakeClock()
    cls = peering._Elector if mode == 'ha' else peering._Member

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
    clock.time += LEASE - 0.01
    await successor.tick()
    assert not successor.gate.active
    clock.time += 0.01  # unchanged for its whole duration, by our clock: the predecessor has ended
    await successor.tick()
    if mode == 'shards':
        await successor.tick()  # its ring is published now: the next listing permits by it
    assert successor.gate.active
    lease, = store.leases.values()
    assert lease.annotations[peering.INSTANCE_ANNOTATION] == successor.instance
    successor.fences.cancel()


async def test_a_duplicate_is_refused_at_the_first_renewal_seen_however_little_time_has_passed(store):
    clock = FakeClock()

    def replica():
        return peering._Member(context=Context('same'), gate=Gate(clock=clock), settings=settings('shards', 'same'),
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


# What the rest of the operator may ask: who keeps a shared object, who else is alive.

def view_of(replica):
    view = peering.ReplicaView()
    view.attach(types.SimpleNamespace(replica=replica.impl, gate=replica.gate), context=Context('operator'))
    return view


async def test_the_ha_leader_keeps_shared_objects_and_is_not_alone_when_a_standby_takes_over(start):
    leader = start('ha', 'a')
    await until(lambda: leader.gate.active)
    standby = start('ha', 'b')
    view = view_of(leader)
    assert view.identity == 'a' and view.steward('admission:x')
    await until(lambda: standby.impl.leader == 'a')  # the standby is polling
    leader.task.cancel()
    await leader.impl.release()
    assert not view.steward('admission:x')
    assert await view.alone() is False


async def test_the_last_ha_replica_is_alone_after_a_few_retry_periods(start):
    leader = start('ha', 'a')
    await until(lambda: leader.gate.active)
    view = view_of(leader)
    leader.task.cancel()
    await leader.impl.release()
    assert await view.alone() is True


async def test_one_shard_keeps_a_shared_object_and_knows_the_live_others(start):
    members = [start('shards', name) for name in 'ab']
    await until(converged(*members))
    views = [view_of(member) for member in members]
    assert sum(view.steward('admission:x') for view in views) == 1
    assert not await views[0].alone()
    members[1].task.cancel()
    await members[1].impl.release()
    await until(lambda: not members[0].impl.live_others, timeout=LEASE)
    assert await views[0].alone()
    assert await peering.ReplicaView().alone()  # not coordinating (yet): nobody else is known
