"""
A replica cut off from the API server while it runs, and a replica whose Lease renewals fail.

One replica talks to the server through the fault proxy; the others directly.
The proxy's log of what it forwarded tells, from the server's side, when the
cut-off replica's last Lease renewal and its last object write arrived: no
object write may arrive later than its Lease could be taken over. From the
handlers' call logs and an independent watch: no handler of one object runs
on two replicas at once, everything finishes, nothing is re-run after its
success was visible. When the partition heals, the cut-off replica rejoins
(as a standby, or as a member of the ring) without a restart.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kopf.testing import ControlPlane, KubeAPI, wait_for
from tests.e2e import test_replicas
from tests.e2e.faultproxy import Fault, FaultProxy, Forwarded, Request
from tests.e2e.harness import OperatorProcess, read_calls
from tests.e2e.test_replicas import (
    LEASE,
    calls_of,
    collection,
    create_objects,
    finished,
    overlaps,
    shards_adopted,
)
from tests.e2e.witnesses import Witness

# The fixtures of the replica tests: the CRD, the replicas of its operator, the witness of persisted successes.
crd, replicas, witness = test_replicas.crd, test_replicas.replicas, test_replicas.witness

ENV = {'E2E_WORK': '0.2', 'E2E_FAILS': '1', 'E2E_DELAY': '0.5', 'E2E_REQUEST_TIMEOUT': '3'}


class LeaseFaults:
    """The proxy's policy: while on, every request for a Lease gets a 503; everything else flows."""

    def __init__(self) -> None:
        self.on = False

    def __call__(self, request: Request) -> Fault | None:
        if self.on and '/leases' in request.path:
            return Fault('status', status=503)
        return None


@pytest.fixture()
def proxy(control_plane: ControlPlane, tmp_path: Path) -> Iterator[FaultProxy]:
    proxy = FaultProxy(control_plane, tmp_path / 'proxy', policy=LeaseFaults()).start()
    yield proxy
    proxy.stop()


def lease_renewals(proxy: FaultProxy) -> list[Forwarded]:
    return [entry for entry in proxy.writes() if '/leases' in entry.path and entry.status < 300]


def object_writes(proxy: FaultProxy, namespace: str) -> list[Forwarded]:
    return [entry for entry in proxy.writes() if entry.path.startswith(collection(namespace))]


def check_fenced(proxy: FaultProxy, namespace: str, since: float) -> tuple[float, float]:
    """
    No object write of the cut-off replica arrived after its Lease could have been taken over.

    Between its last renewal before the fault and its first one after it (when
    it rejoins), its writes must end within the Lease's duration. Renewals are
    judged by when their answers came back, which is later than the server's
    acceptance: the bound is generous to the server, strict to the replica.
    Returns the last renewal and the last write within that time.
    """
    renewals = [entry.time for entry in lease_renewals(proxy)]
    renewed = max(t for t in renewals if t < since)
    rejoined = min((t for t in renewals if t > since), default=math.inf)
    writes = [entry.time for entry in object_writes(proxy, namespace) if renewed <= entry.time < rejoined]
    last_write = max(writes, default=renewed)
    assert last_write < renewed + LEASE, (renewed, writes)
    return renewed, last_write


def check_outcome(kube: KubeAPI, namespace: str, witness: Witness, calls: Path, names: list[str]) -> None:
    wait_for(lambda: witness.finished(names), timeout=60, what="all objects to be handled")
    assert finished(kube, namespace) == set(names)
    every = calls_of(calls, killed={})
    assert overlaps(every, killed={}) == []
    assert witness.reruns(every) == []


def ha_pair_at_work(kube: KubeAPI, namespace: str, replicas: Callable[..., OperatorProcess], proxy: FaultProxy,
                    tmp_path: Path) -> tuple[OperatorProcess, OperatorProcess, list[str]]:
    """A leader behind the proxy, a standby connected directly, and the leader in the middle of 20 objects."""
    leader = replicas('--ha', kubeconfig=proxy.kubeconfig, **ENV)
    leader.wait_for_output('Leading as')
    standby = replicas('--ha', **ENV)
    standby.wait_for_output('Standing by')
    names = [f'obj-{i}' for i in range(20)]
    create_objects(kube, namespace, names)
    leader.wait(lambda: len(read_calls(tmp_path / 'calls.jsonl')) >= 8, what="the leader at work")
    return leader, standby, names


def test_ha_leader_cut_off_stops_writing_before_its_lease_expires_and_rejoins_as_a_standby(
        kube: KubeAPI, namespace: str, replicas: Callable[..., OperatorProcess], witness: Witness,
        proxy: FaultProxy, tmp_path: Path) -> None:
    leader, standby, names = ha_pair_at_work(kube, namespace, replicas, proxy, tmp_path)

    cut = time.time()
    proxy.blackhole(math.inf)
    standby.wait_for_output('Took over the lease', timeout=LEASE + 15)
    wait_for(lambda: witness.finished(names), timeout=60, what="the standby to finish everything")
    standing_by = leader.output.count('Standing by')
    proxy.heal()
    leader.wait(lambda: leader.output.count('Standing by') > standing_by, what="the old leader to stand by",
                timeout=30)

    check_outcome(kube, namespace, witness, tmp_path / 'calls.jsonl', names)
    renewed, last_write = check_fenced(proxy, namespace, since=cut)
    assert leader.process.poll() is None  # it has rejoined without a restart
    assert 'has not been renewed within the renew deadline' in leader.output
    print(f"Cut off at +0; last renewal {renewed - cut:+.2f}s, last object write {last_write - cut:+.2f}s.")


def test_shard_cut_off_stops_writing_before_its_lease_expires_and_rejoins_the_ring(
        kube: KubeAPI, namespace: str, replicas: Callable[..., OperatorProcess], witness: Witness,
        proxy: FaultProxy, tmp_path: Path) -> None:
    cut_off = replicas('--shards', kubeconfig=proxy.kubeconfig, **ENV)
    others = [replicas('--shards', **ENV) for _ in range(2)]
    for replica in [cut_off, *others]:
        replica.wait(lambda replica=replica: shards_adopted(replica, 3), what="a ring of 3 members")
    names = [f'obj-{i:02}' for i in range(30)]
    create_objects(kube, namespace, names)
    pid = cut_off.process.pid
    cut_off.wait(lambda: len([c for c in read_calls(tmp_path / 'calls.jsonl') if c['pid'] == pid]) >= 4,
                 what="the replica at work")

    cut = time.time()
    proxy.blackhole(math.inf)
    for replica in others:
        replica.wait(lambda replica=replica: shards_adopted(replica, 2), what="a ring of the 2 others",
                     timeout=LEASE + 15)
    wait_for(lambda: witness.finished(names), timeout=60, what="the others to finish everything")
    rings = shards_adopted(cut_off, 3)
    proxy.heal()
    cut_off.wait(lambda: shards_adopted(cut_off, 3) > rings, what="the cut-off replica to rejoin", timeout=30)
    for replica in others:
        replica.wait(lambda replica=replica: shards_adopted(replica, 3) >= 2, what="the ring of 3 again")

    # Some of them are the rejoined replica's: it wins none of n objects with a chance of (2/3)**n (1e-7 here).
    more = [f'after-{i:02}' for i in range(40)]
    create_objects(kube, namespace, more)
    check_outcome(kube, namespace, witness, tmp_path / 'calls.jsonl', names + more)
    renewed, last_write = check_fenced(proxy, namespace, since=cut)
    assert cut_off.process.poll() is None
    assert any(c['pid'] == pid and c['name'].startswith('after-') for c in read_calls(tmp_path / 'calls.jsonl'))
    print(f"Cut off at +0; last renewal {renewed - cut:+.2f}s, last object write {last_write - cut:+.2f}s.")


def test_ha_leader_whose_renewals_fail_while_its_watches_flow_stops_handling_in_time(
        kube: KubeAPI, namespace: str, replicas: Callable[..., OperatorProcess], witness: Witness,
        proxy: FaultProxy, tmp_path: Path) -> None:
    leader, standby, names = ha_pair_at_work(kube, namespace, replicas, proxy, tmp_path)

    policy = proxy.policy
    assert isinstance(policy, LeaseFaults)
    cut = time.time()
    policy.on = True
    standby.wait_for_output('Took over the lease', timeout=LEASE + 15)
    more = [f'later-{i}' for i in range(5)]  # their events reach the old leader too: it must leave them alone
    create_objects(kube, namespace, more)
    wait_for(lambda: witness.finished(names + more), timeout=60, what="the new leader to finish everything")
    standing_by = leader.output.count('Standing by')
    policy.on = False
    leader.wait(lambda: leader.output.count('Standing by') > standing_by, what="the old leader to stand by",
                timeout=30)

    check_outcome(kube, namespace, witness, tmp_path / 'calls.jsonl', names + more)
    renewed, last_write = check_fenced(proxy, namespace, since=cut)
    assert leader.process.poll() is None
    assert not [c for c in read_calls(tmp_path / 'calls.jsonl')
                if c['pid'] == leader.process.pid and c['name'].startswith('later-')]
    print(f"Renewals failing from +0; last renewal {renewed - cut:+.2f}s, last object write {last_write - cut:+.2f}s.")
