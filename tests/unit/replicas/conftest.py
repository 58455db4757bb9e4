"""
What the specifications of the replicas share: an in-memory Lease store, replicas on a fake clock, and a driver.

The store is linearizable and versions every write, as the API server is:
a replace or delete with a stale ``resourceVersion`` is a conflict. Replicas
are "killed" by cancelling their loop (a partition: their own fences still
strike) and "cut off" by failing their requests.

Time is the fake clock's: the replicas' loops, their fences and the gates all
go by it, and :func:`until` moves it from one sleeper's deadline to the next,
letting every task settle at each moment -- so the moments the tests assert
are exact, and no test waits for real time.
"""
import asyncio
import dataclasses
import itertools
import threading

import pytest

from kopf._kube.errors import APIConflictError, APIConnectionError, APIForbiddenError, APINotFoundError
from kopf._replicas import leases, ownership
from kopf._replicas.elector import Elector
from kopf._replicas.fencing import Gate
from kopf._replicas.leases import Lease, LeaseSpec
from kopf._replicas.member import Member
from kopf._replicas.replica import Replica as Executor
from kopf._replicas.settings import PeeringSettings
from tests.unit.conftest import FakeClock

KEYS = [f'uid-{i}' for i in range(300)]
LEASE, RENEW, RETRY = 15, 10, 2  # as Kubernetes' own controllers have them: the clock is fake anyway


class SteppingClock(FakeClock):
    """The cycle's fake clock, safe to sleep on from the Lease thread too, and telling its next deadline."""

    def __init__(self):
        super().__init__()
        self.lock = threading.RLock()

    async def sleep(self, seconds):
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self.lock:
            self.sleepers.append((self.mono + seconds, loop, future))
            self._wake()
        await future

    def advance(self, seconds):
        with self.lock:
            super().advance(seconds)

    def next_deadline(self):
        """The earliest moment at which a sleeper wakes up (``None`` if nobody sleeps)."""
        with self.lock:
            return min((deadline for deadline, _, future in self.sleepers if not future.done()), default=None)


@pytest.fixture()
def clock():
    return SteppingClock()


async def settle(sample=None):
    """
    Let every task run until all of them wait -- for the clock, or for each other.

    The loop has settled when nothing is ready to run but this very task
    (the loop's queue of ready callbacks is empty when it resumes).
    ``sample`` checks an invariant at every step meanwhile.
    """
    loop = asyncio.get_running_loop()
    for _ in range(10_000):
        await asyncio.sleep(0)
        if sample is not None:
            sample()
        if not loop._ready:  # asyncio tells no other way whether anything else is ready to run
            return
    raise AssertionError("the tasks keep running while the clock stands")


async def until(clock, condition, *, within, sample=None):
    """
    Move the clock from one sleeper's deadline to the next until the condition holds; return that moment.

    Raises ``AssertionError('timed out')`` if it does not hold within the given
    time, with the clock moved to the end of that time.
    """
    limit = clock.monotonic() + within
    while True:
        await settle(sample)
        if condition():
            return clock.monotonic()
        deadline = clock.next_deadline()
        if deadline is None or deadline > limit:
            clock.advance(max(0.0, limit - clock.monotonic()))
            await settle(sample)
            if condition():
                return clock.monotonic()
            raise AssertionError("timed out")
        clock.advance(max(0.0, deadline - clock.monotonic()))


async def passes(clock, seconds, *, sample=None):
    """Move the clock this far, sleeper by sleeper, checking the invariant all the way."""
    with pytest.raises(AssertionError, match='timed out'):
        await until(clock, lambda: False, within=seconds, sample=sample)


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
        self.written = threading.Condition()  # for the tests whose replicas run in the Lease thread
        self.writes = 0

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
        with self.written:
            self.writes += 1
            self.written.notify_all()
        return lease

    def wait_for_writes(self, count, *, timeout=5.0):
        """Block the calling thread (and so its event loop) until so many writes have been done in all."""
        with self.written:
            assert self.written.wait_for(lambda: self.writes >= count, timeout=timeout), "timed out"

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


def lease(rv='1', *, holder='other', duration=LEASE, name='op', renewed=None, annotations=None):
    spec = LeaseSpec(holder=holder, duration=duration, renewed=renewed)
    return Lease(namespace='ns', name=name, resource_version=rv, spec=spec, annotations=annotations or {})


def holder(store):
    lease = store.leases.get(('ns', 'op'))
    return lease.spec.holder if lease is not None else None


@dataclasses.dataclass
class Replica:
    identity: str
    context: Context
    gate: Gate
    impl: Executor
    task: asyncio.Task

    async def kill(self):
        """As by ``kill -9``: the process and its gate are gone at once."""
        self.task.cancel()
        self.impl.fences.cancel()
        await asyncio.gather(self.task, return_exceptions=True)

    async def leave(self):
        """As at the operator's exit: the loop stops, the Lease is given up."""
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self.impl.release()


@pytest.fixture()
async def start(store, clock):
    started = []

    def start(mode, identity, **overrides):
        gate = Gate(clock=clock)
        context = Context(identity)
        cls = Elector if mode == 'ha' else Member
        impl = cls(context=context, gate=gate, settings=settings(mode, identity, **overrides), clock=clock)
        replica = Replica(identity, context, gate, impl, asyncio.create_task(impl.run()))
        started.append(replica)
        return replica

    yield start
    for replica in started:
        await replica.kill()


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
