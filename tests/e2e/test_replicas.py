"""
Replicas on a real API server: high availability and sharding over Leases.

Real ``kopf run`` processes (the operator in ``operators/replicas.py``) run
in a namespace of their own; each handler call is logged with its process id
and start and end times, and an independent watch notes when each handler's
success first reached the server. From both, the tests check what matters:
everything finishes, no two replicas ever handle one object at the same
time, and no handler runs again once its success was persisted.
"""
from __future__ import annotations

import collections
import dataclasses
import datetime
import itertools
import re
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kopf.testing import KubeAPI, KubeAPIError, wait_for
from tests.e2e.harness import OPERATORS, REPO, OperatorProcess, kopf_run, read_calls
from tests.e2e.witnesses import Witness

GROUP, VERSION, PLURAL = 'e2e.kopf.dev', 'v1', 'shardeds'
CRD: dict[str, Any] = {
    'apiVersion': 'apiextensions.k8s.io/v1',
    'kind': 'CustomResourceDefinition',
    'metadata': {'name': f'{PLURAL}.{GROUP}'},
    'spec': {
        'group': GROUP,
        'scope': 'Namespaced',
        'names': {'plural': PLURAL, 'singular': 'sharded', 'kind': 'Sharded'},
        'versions': [{
            'name': VERSION, 'served': True, 'storage': True,
            'subresources': {'status': {}},
            'schema': {'openAPIV3Schema': {'type': 'object', 'properties': {
                'spec': {'type': 'object', 'x-kubernetes-preserve-unknown-fields': True},
                'status': {'type': 'object', 'x-kubernetes-preserve-unknown-fields': True},
            }}},
        }],
    },
}
PREFIX = 'kopf.zalando.org'
LAST_HANDLED = f'{PREFIX}/last-handled-configuration'
HANDLERS = ('slow', 'flaky')
LEASE, RENEW, RETRY = 4, 3.0, 0.5  # seconds: short, so that the tests are quick


# Infrastructure: objects, operators, call logs, and the witness of persisted successes.

@pytest.fixture(scope='module')
def crd(kube: KubeAPI) -> None:
    kube.apply_crd(CRD)


def collection(namespace: str) -> str:
    return f'/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}'


def create_objects(kube: KubeAPI, namespace: str, names: list[str]) -> None:
    for name in names:
        kube.create(collection(namespace), {'apiVersion': f'{GROUP}/{VERSION}', 'kind': 'Sharded',
                                            'metadata': {'name': name}, 'spec': {'field': name}})


def finished(kube: KubeAPI, namespace: str) -> set[str]:
    items = kube.get(collection(namespace))['items']
    return {item['metadata']['name'] for item in items if LAST_HANDLED in item['metadata'].get('annotations', {})}


@pytest.fixture()
def replicas(kubeconfig: Path, namespace: str, tmp_path: Path) -> Iterator[Callable[..., OperatorProcess]]:
    """Start replicas of the operator (``kopf run ... --shards`` etc.); all are killed at the end.

    ``E2E_OPERATOR`` chooses another operator script than ``replicas.py``.
    """
    started: list[OperatorProcess] = []

    def start(*args: str, kubeconfig: Path = kubeconfig, **env: str) -> OperatorProcess:
        script = env.pop('E2E_OPERATOR', 'replicas.py')
        argv = kopf_run(OPERATORS / script, namespace=namespace) + list(args)
        process = OperatorProcess(argv, kubeconfig=kubeconfig, log=tmp_path / f'replica-{len(started)}.log', env={
            'E2E_RESOURCE': f'{PLURAL}.{GROUP}', 'E2E_CALLS': str(tmp_path / 'calls.jsonl'),
            'E2E_LEASE': str(LEASE), 'E2E_RENEW': str(RENEW), 'E2E_RETRY': str(RETRY), **env})
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()


@dataclasses.dataclass(frozen=True)
class Call:
    name: str
    handler: str
    retry: int
    pid: int
    start: float
    end: float | None  # None: the process was killed during the call
    outcome: str | None


def calls_of(path: Path, killed: dict[int, float] | None = None) -> list[Call]:
    """
    Every handler call so far, paired from its start and end records, in the order of their starts.

    Calls without an end are running (``end=None``); with ``killed`` given,
    every call is over, and only a killed process may have left one unended.
    """
    pending: dict[tuple[str, str, int, int], float] = {}
    calls: list[Call] = []
    for record in read_calls(path):
        key = (record['name'], record['handler'], record['retry'], record['pid'])
        if record['event'] == 'start':
            pending[key] = record['t']
        else:
            calls.append(Call(*key, start=pending.pop(key), end=record['t'], outcome=record['outcome']))
    for (name, handler, retry, pid), start in pending.items():
        if killed is not None:
            assert pid in killed, f"A call of {handler} for {name} in {pid} never ended, but it was not killed."
        calls.append(Call(name, handler, retry, pid, start=start, end=None, outcome=None))
    return sorted(calls, key=lambda call: call.start)


def overlaps(calls: list[Call], killed: dict[int, float]) -> list[tuple[Call, Call]]:
    """Pairs of calls for the same object from different processes that ran at the same time."""
    by_object: dict[str, list[Call]] = collections.defaultdict(list)
    for call in calls:
        by_object[call.name].append(call)
    found = []
    for object_calls in by_object.values():
        for i, a in enumerate(object_calls):
            a_end = a.end if a.end is not None else killed[a.pid]
            for b in object_calls[i + 1:]:
                if b.pid != a.pid and b.start < a_end:
                    found.append((a, b))
    return found


@pytest.fixture()
def witness(kube: KubeAPI, namespace: str, crd: None) -> Iterator[Witness]:
    witness = Witness(kube, collection(namespace), handlers=HANDLERS, prefix=PREFIX)
    yield witness
    witness.stop()


def logged_at(output: str, text: str) -> float:
    """The time of the first log line with this text (the full log format: local time, milliseconds)."""
    line = next(line for line in output.splitlines() if text in line)
    stamp = re.match(r'\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]', line)
    assert stamp is not None, line
    return datetime.datetime.strptime(stamp.group(1), '%Y-%m-%d %H:%M:%S,%f').timestamp()


def shards_adopted(process: OperatorProcess, members: int) -> int:
    """How many times the replica has adopted a ring of this many members so far."""
    return process.output.count(f'Shard members ({members}):')


# High availability.

def test_ha_standby_takes_over_a_killed_leader_within_the_lease(
        kube: KubeAPI, namespace: str, replicas: Callable[..., OperatorProcess], witness: Witness,
        tmp_path: Path) -> None:
    leader = replicas('--ha', E2E_WORK='0.3', E2E_FAILS='1', E2E_DELAY='0.5')
    leader.wait_for_output('Leading as')
    standby = replicas('--ha', E2E_WORK='0.3', E2E_FAILS='1', E2E_DELAY='0.5')
    standby.wait_for_output('Standing by')
    names = [f'obj-{i}' for i in range(20)]
    create_objects(kube, namespace, names)

    def leader_is_handling() -> bool:
        mine = [call for call in calls_of(tmp_path / 'calls.jsonl') if call.pid == leader.process.pid]
        return len(mine) >= 8 and any(call.end is None for call in mine)

    leader.wait(leader_is_handling, what="the leader to be in the middle of its work")
    leader.kill()
    killed = {leader.process.pid: time.time()}

    wait_for(lambda: witness.finished(names), timeout=60, what="all objects to be handled")
    assert finished(kube, namespace) == set(names)
    calls = calls_of(tmp_path / 'calls.jsonl', killed)
    by_leader = [call for call in calls if call.pid == leader.process.pid]
    by_standby = [call for call in calls if call.pid == standby.process.pid]
    assert by_leader and by_standby
    assert {call.pid for call in calls} == {leader.process.pid, standby.process.pid}
    # Never both: every call of the standby starts after the leader's death.
    assert min(call.start for call in by_standby) > killed[leader.process.pid]
    # The takeover: after the lease has expired, and within its duration (plus the standby's polling: the
    # leader's last renewal is seen up to one period late, and the expiry up to one period late too).
    took_over = logged_at(standby.output, 'Took over the lease') - killed[leader.process.pid]
    assert LEASE - 3 * RETRY <= took_over <= LEASE + 2 * RETRY + 0.5, took_over
    assert witness.reruns(calls) == []


# Sharding.

def test_shards_share_objects_and_survive_a_killed_and_a_new_replica(
        kube: KubeAPI, namespace: str, replicas: Callable[..., OperatorProcess], witness: Witness,
        tmp_path: Path) -> None:
    env = {'E2E_WORK': '0.05', 'E2E_FAILS': '2', 'E2E_DELAY': '2'}
    first = [replicas('--shards', **env) for _ in range(3)]
    for replica in first:
        replica.wait(lambda replica=replica: shards_adopted(replica, 3), what="a ring of 3 members")
    names = [f'obj-{i:03}' for i in range(300)]
    create_objects(kube, namespace, names[:200])

    victim, survivor = first[0], first[1]
    victim.wait(lambda: len(witness.done) >= 40, what="some objects to be handled", timeout=60)
    victim.kill()
    killed = {victim.process.pid: time.time()}
    survivor.wait(lambda: shards_adopted(survivor, 2), what="the survivors' ring of 2", timeout=LEASE + 10)
    create_objects(kube, namespace, names[200:])  # in their retries when the fourth replica joins
    fourth = replicas('--shards', **env)
    fourth.wait(lambda: shards_adopted(fourth, 3), what="the fourth replica to join", timeout=20)

    wait_for(lambda: witness.finished(names), timeout=120, what="all objects to be handled")
    assert finished(kube, namespace) == set(names)
    calls = calls_of(tmp_path / 'calls.jsonl', killed)
    assert overlaps(calls, killed) == []
    assert witness.reruns(calls) == []
    pids = collections.Counter(call.pid for call in calls)
    assert set(pids) == {replica.process.pid for replica in [*first, fourth]}, pids

    # The flaky handler's retry count continues across replicas: it never starts over.
    flaky: dict[str, list[Call]] = collections.defaultdict(list)
    for call in calls:
        if call.handler == 'flaky':
            flaky[call.name].append(call)
    continued = 0
    for name, object_calls in flaky.items():
        retries = [call.retry for call in object_calls]
        assert retries == sorted(retries), (name, object_calls)
        for a, b in itertools.pairwise(object_calls):
            if a.retry == b.retry:  # repeated: only if the first attempt died with its replica, unpersisted
                assert a.pid == victim.process.pid, (name, object_calls)
            if a.pid != b.pid and b.retry > 0:
                continued += 1
        assert object_calls[-1].retry == 2 and object_calls[-1].outcome == 'success', (name, object_calls)
    assert continued >= 5, f"only {continued} objects changed hands in the middle of their retries"
    moved_to_fourth = {name for name, object_calls in flaky.items()
                       if object_calls[0].pid != fourth.process.pid and object_calls[-1].pid == fourth.process.pid}
    assert moved_to_fourth, "no object in progress has moved to the new replica"


def test_graceful_rolling_restart_while_objects_are_created_loses_nothing(
        kube: KubeAPI, namespace: str, replicas: Callable[..., OperatorProcess], witness: Witness,
        tmp_path: Path) -> None:
    env = {'E2E_WORK': '0.05', 'E2E_FAILS': '1', 'E2E_DELAY': '0.5'}
    current = [replicas('--shards', **env) for _ in range(3)]
    started = {replica.process.pid for replica in current}
    for replica in current:
        replica.wait(lambda replica=replica: shards_adopted(replica, 3), what="a ring of 3 members")

    names: list[str] = []
    created: list[float] = []
    stop_creating = threading.Event()

    def create_continuously() -> None:
        while not stop_creating.is_set():
            name = f'obj-{len(names):03}'
            create_objects(kube, namespace, [name])
            names.append(name)
            created.append(time.time())
            stop_creating.wait(0.1)  # about ten a second: a pace, not a wait for anything

    creator = threading.Thread(target=create_continuously, daemon=True)
    creator.start()
    wait_for(lambda: bool(created), timeout=20, what="the first object to be created")
    restarts: list[tuple[float, float]] = []
    try:
        for index in range(3):
            old = current[index]
            stopping = time.time()
            assert old.stop() == 0, old.output
            assert 'Left the shards' in old.output
            new = replicas('--shards', **env)
            new.wait(lambda new=new: shards_adopted(new, 3), what="the new replica to join", timeout=20)
            restarts.append((stopping, time.time()))
            current[index] = new
        handed_over = restarts[-1][1]
        wait_for(lambda: len([moment for moment in created if moment > handed_over]) >= 3, timeout=20,
                 what="objects created right after the last hand-over, too")
    finally:
        stop_creating.set()
        creator.join()

    for begin, end in restarts:  # objects were being created during every step of the rolling restart
        assert any(begin <= moment <= end for moment in created), (begin, end, created)
    wait_for(lambda: witness.finished(names), timeout=60, what="all objects to be handled")
    assert finished(kube, namespace) == set(names)
    calls = calls_of(tmp_path / 'calls.jsonl')
    assert overlaps(calls, {}) == []
    assert witness.reruns(calls) == []
    attempts = collections.Counter((call.name, call.handler, call.retry) for call in calls)
    assert [attempt for attempt, count in attempts.items() if count > 1] == []  # nothing repeated, nothing lost
    assert len(attempts) == 3 * len(names)  # slow, flaky (failing once), flaky (succeeding)
    successors = {replica.process.pid for replica in current}
    handlers = {call.pid for call in calls}
    assert handlers <= started | successors, handlers
    assert handlers & successors, "the new replicas handled nothing"
    assert handlers & started, "the first replicas handled nothing"


# RBAC.

def documented_rbac(namespace: str, user: str, *, without: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """
    The Role and RoleBinding of docs/install.rst, for a namespace, a user and our resource.

    Only names change: the namespace, the subject, and the served resource
    (``kopfexamples.kopf.dev`` there, ours here); the rules and verbs stay
    as documented, except the Lease verbs removed on purpose.
    """
    text = (REPO / 'docs' / 'install.rst').read_text()
    blocks = re.findall(r'\.\. code-block:: yaml\n\n((?:    .*\n|\n)+)', text)
    documents = [doc for block in blocks for doc in yaml.safe_load_all(re.sub(r'(?m)^    ', '', block))]
    role = next(doc for doc in documents if doc['kind'] == 'Role')
    binding = next(doc for doc in documents if doc['kind'] == 'RoleBinding')
    assert any('leases' in rule['resources'] for rule in role['rules']), "The documented Role lacks Leases."
    role['metadata']['namespace'] = binding['metadata']['namespace'] = namespace
    for rule in role['rules']:
        if 'leases' in rule['resources']:
            rule['verbs'] = [verb for verb in rule['verbs'] if verb not in without]
        rule['apiGroups'] = [GROUP if group == 'kopf.dev' else group for group in rule['apiGroups']]
        rule['resources'] = [resource.replace('kopfexamples', PLURAL) for resource in rule['resources']]
    binding['subjects'] = [{'kind': 'User', 'name': user, 'apiGroup': 'rbac.authorization.k8s.io'}]
    return [role, binding]


def grant(kube: KubeAPI, namespace: str, documents: list[dict[str, Any]], suffix: str) -> None:
    role, binding = documents
    role['metadata']['name'] = binding['roleRef']['name'] = f"{role['metadata']['name']}-{suffix}"
    binding['metadata']['name'] = f"{binding['metadata']['name']}-{suffix}"
    kube.create(f'/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles', role)
    kube.create(f'/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings', binding)


def test_replicas_run_as_a_user_with_only_the_documented_role(
        kube: KubeAPI, namespace: str, replicas: Callable[..., OperatorProcess], witness: Witness,
        user_kubeconfig: Callable[..., Path]) -> None:
    user = f'replica-{namespace}'
    config = user_kubeconfig(user, ('kopf-operators',))
    with pytest.raises(KubeAPIError):  # not an admin: the user can do nothing before the role is bound
        KubeAPIAs(kube, config).get(collection(namespace))
    grant(kube, namespace, documented_rbac(namespace, user), 'full')
    wait_for(lambda: KubeAPIAs(kube, config).allowed(collection(namespace)), what="the role to be in effect")

    sharded = [replicas('--shards', kubeconfig=config, E2E_WORK='0.05', E2E_FAILS='1', E2E_DELAY='0.5')
               for _ in range(2)]
    for replica in sharded:
        replica.wait(lambda replica=replica: shards_adopted(replica, 2), what="a ring of 2 members")
    names = [f'obj-{i}' for i in range(10)]
    create_objects(kube, namespace, names)
    wait_for(lambda: witness.finished(names), timeout=30, what="all objects to be handled")
    for replica in sharded:
        assert replica.stop() == 0, replica.output
        assert 'Forbidden' not in replica.output  # 403s are reported as "403 Forbidden: ..."

    leader = replicas('--ha', kubeconfig=config, E2E_WORK='0.05', E2E_FAILS='0')
    leader.wait_for_output('Leading as')
    create_objects(kube, namespace, ['obj-ha'])
    wait_for(lambda: witness.finished(['obj-ha']), timeout=30, what="the object to be handled")
    assert leader.stop() == 0, leader.output
    assert 'Released the lease' in leader.output


def test_a_replica_without_the_lease_verbs_exits_naming_them(
        kube: KubeAPI, namespace: str, replicas: Callable[..., OperatorProcess], crd: None,
        user_kubeconfig: Callable[..., Path]) -> None:
    user = f'limited-{namespace}'
    config = user_kubeconfig(user)
    grant(kube, namespace, documented_rbac(namespace, user, without=('update', 'delete')), 'limited')
    wait_for(lambda: KubeAPIAs(kube, config).allowed(collection(namespace)), what="the role to be in effect")

    replica = replicas('--shards', kubeconfig=config)
    assert replica.process.wait(timeout=30) == 1, replica.output
    assert 'update, delete leases.coordination.k8s.io' in replica.output, replica.output
    assert 'Traceback' not in replica.output


def test_standalone_with_ha_or_shards_exits_with_a_clear_error(
        namespace: str, replicas: Callable[..., OperatorProcess]) -> None:
    for flags in [('--standalone', '--ha'), ('--standalone', '--shards'), ('--ha', '--shards')]:
        replica = replicas(*flags)
        assert replica.process.wait(timeout=30) == 2, replica.output
        assert 'Use only one of --standalone, --ha, --shards' in replica.output
        assert 'Traceback' not in replica.output


class KubeAPIAs(KubeAPI):
    """The plain client, but authenticated as the user of a kubeconfig from ``user_kubeconfig``."""

    def __init__(self, admin: KubeAPI, kubeconfig: Path) -> None:
        config = yaml.safe_load(kubeconfig.read_text())
        user = config['users'][0]['user']
        self.server = admin.server
        self.ssl = ssl.create_default_context(cafile=config['clusters'][0]['cluster']['certificate-authority'])
        self.ssl.load_cert_chain(user['client-certificate'], user['client-key'])
        self.headers = {}

    def allowed(self, path: str) -> bool:
        try:
            self.get(path)
        except KubeAPIError:
            return False
        return True



# Daemons at hand-overs.

@dataclasses.dataclass(frozen=True)
class Run:
    """One daemon run of one object in one process: where its start and stop lines are in the calls file."""

    name: str
    pid: int
    started: int  # the line number of its start: the file's order is the order of writing
    stopped: int | None  # None: still running
    start: float
    stop: float | None


def daemon_runs(path: Path) -> list[Run]:
    starts: dict[str, tuple[int, dict[str, Any]]] = {}
    runs: list[Run] = []
    for index, record in enumerate(read_calls(path)):
        if record['event'] == 'start':
            starts[record['run']] = (index, record)
        else:
            began, first = starts.pop(record['run'])
            runs.append(Run(first['name'], first['pid'], began, index, first['t'], record['t']))
    runs.extend(Run(first['name'], first['pid'], began, None, first['t'], None) for began, first in starts.values())
    return sorted(runs, key=lambda run: run.started)


def overlapping_runs(runs: list[Run]) -> list[tuple[Run, Run]]:
    """
    Pairs of daemon runs of one object in different processes that ran at the same time.

    Judged by the order of the lines in the calls file, which is the order in
    which they were written: a run that began before another run's stop was
    written overlaps it. (The wall-clock times are only shown: on one machine
    they agree with that order.)
    """
    found = []
    for a, b in itertools.combinations(runs, 2):
        if a.name == b.name and a.pid != b.pid:
            first, second = (a, b) if a.started < b.started else (b, a)
            if first.stopped is None or second.started < first.stopped:
                found.append((first, second))
    return found


def all_running(runs: list[Run], names: list[str], *, since: int = -1, pids: set[int] | None = None) -> bool:
    """Whether every object has a daemon running (begun after the line ``since``, in one of ``pids``)."""
    running = {run.name for run in runs
               if run.stopped is None and run.started > since and (pids is None or run.pid in pids)}
    return set(names) <= running


def wait_for_daemons(condition: Callable[[], bool], *, calls: Path, processes: list[OperatorProcess],
                     what: str) -> None:
    """
    Wait until the daemons are where the condition wants them; on a timeout, show where they are and the logs.

    A hand-over involves every replica, so the failure shows each one's
    recent output (the rings adopted, the relistings) beside the daemon
    runs that are still going, by object and process.
    """
    try:
        wait_for(condition, timeout=30, what=what)
    except AssertionError as e:
        running = sorted((run.name, run.pid) for run in daemon_runs(calls) if run.stopped is None)
        logs = '\n'.join(f"--- replica pid {process.process.pid} (exit code {process.process.poll()}), "
                         f"its last lines ---\n" + '\n'.join(process.output.splitlines()[-60:])
                         for process in processes)
        raise AssertionError(f"{e}\nDaemons running (object, pid): {running}\n{logs}") from None


def test_daemons_never_run_on_two_shards_at_once_and_move_with_their_objects(
        kube: KubeAPI, namespace: str, replicas: Callable[..., OperatorProcess], crd: None,
        tmp_path: Path) -> None:
    calls = tmp_path / 'calls.jsonl'

    def start() -> OperatorProcess:
        return replicas('--shards', E2E_OPERATOR='replicas_daemons.py', E2E_CLEANUP='1')

    first = [start() for _ in range(2)]
    for replica in first:
        replica.wait(lambda replica=replica: shards_adopted(replica, 2), what="a ring of 2 members")
    # Which objects move is up to the hash of the replicas' random identities and the objects' uids: the new
    # replica wins none of n objects with a chance of (2/3)**n -- 0.8% with 12 objects, 1e-7 with these 40.
    names = [f'obj-{i:02}' for i in range(40)]
    create_objects(kube, namespace, names)
    wait_for_daemons(lambda: all_running(daemon_runs(calls), names), calls=calls, processes=first,
                     what="a daemon for every object")

    joining = start()  # 2 -> 3: about a third of the objects move to it
    for replica in [*first, joining]:
        replica.wait(lambda replica=replica: shards_adopted(replica, 3), what="a ring of 3 members", timeout=30)
    wait_for_daemons(lambda: all_running(daemon_runs(calls), names) and
                     any(run.pid == joining.process.pid for run in daemon_runs(calls)),
                     calls=calls, processes=[*first, joining],
                     what="a daemon for every object, some on the new replica")
    joined = len(read_calls(calls))

    leaving, staying = first  # 3 -> 2: the leaving replica's objects move to the others
    assert leaving.stop() == 0, leaving.output
    remaining = {staying.process.pid, joining.process.pid}
    wait_for_daemons(lambda: all_running(daemon_runs(calls), names, pids=remaining), calls=calls,
                     processes=[staying, joining], what="a daemon for every object on the remaining replicas")
    left = len(read_calls(calls))
    for replica in (staying, joining):
        assert replica.stop() == 0, replica.output

    runs = daemon_runs(calls)
    assert overlapping_runs(runs) == []
    assert all(run.stopped is not None for run in runs)  # every daemon has exited with its replica
    moved_in = {run.name for run in runs if run.pid == joining.process.pid and run.started < joined}
    moved_out = {run.name for run in runs if run.pid == leaving.process.pid}
    assert moved_in and moved_out
    # Every object's daemon ran again somewhere after each hand-over. ``joined`` and ``left`` are counts of
    # lines, i.e. the index of the first line written after that moment: a stop in that very line counts.
    for since in (joined, left):
        assert {run.name for run in runs if run.stopped is not None and run.stopped >= since} == set(names)


def test_a_daemon_of_a_paused_ha_leader_is_cancelled_before_the_next_leader_starts_it(
        kube: KubeAPI, namespace: str, replicas: Callable[..., OperatorProcess], crd: None,
        tmp_path: Path) -> None:
    calls = tmp_path / 'calls.jsonl'
    env = {'E2E_OPERATOR': 'replicas_daemons.py', 'E2E_CLEANUP': str(LEASE * 3)}  # longer than any margin
    leader = replicas('--ha', **env)
    leader.wait_for_output('Leading as')
    names = [f'obj-{i}' for i in range(5)]
    create_objects(kube, namespace, names)
    wait_for_daemons(lambda: all_running(daemon_runs(calls), names), calls=calls, processes=[leader],
                     what="a daemon for every object")
    preempting = replicas('--ha', '--priority', '10', **env)
    preempting.wait_for_output('Took over the lease')
    wait_for_daemons(lambda: all_running(daemon_runs(calls), names, pids={preempting.process.pid}), calls=calls,
                     processes=[leader, preempting], what="the daemons on the new leader")
    assert 'Paused:' in leader.output
    runs = daemon_runs(calls)
    assert overlapping_runs(runs) == []
    old = [run for run in runs if run.pid == leader.process.pid]
    assert len(old) == len(names) and all(run.stopped is not None for run in old)
    assert {record['how'] for record in read_calls(calls) if record['event'] == 'stop'} == {'cancelled'}


# Identities.

@pytest.mark.parametrize('mode', ['--shards', '--ha'])
def test_a_second_replica_with_the_same_identity_exits_naming_it_and_the_first_goes_on(
        kube: KubeAPI, namespace: str, replicas: Callable[..., OperatorProcess], witness: Witness,
        mode: str) -> None:
    env = {'E2E_WORK': '0.05', 'E2E_FAILS': '0'}
    first = replicas(mode, '--identity', 'same', **env)
    first.wait_for_output('Shard members (1)' if mode == '--shards' else 'Leading as')
    second = replicas(mode, '--identity', 'same', **env)
    assert second.process.wait(timeout=30) == 1, second.output
    lease = 'kopf-replicas-same' if mode == '--shards' else 'kopf-replicas'
    refusals = [line for line in second.output.splitlines() if 'Another replica runs with the identity' in line]
    assert len(refusals) == 1, second.output
    assert f"the identity 'same': the lease {namespace}/{lease} is renewed" in refusals[0]
    assert 'unique --identity' in refusals[0]
    assert 'Traceback' not in second.output
    assert 'Shard members' not in second.output and 'Leading as' not in second.output

    create_objects(kube, namespace, ['after'])  # the first one goes on as before
    wait_for(lambda: witness.finished(['after']), timeout=30, what="the object to be handled")
    assert first.process.poll() is None
    assert first.stop() == 0, first.output
    assert 'Another replica' not in first.output
