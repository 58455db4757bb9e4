"""
The decisions of HA replicas, one Lease state at a time.

Every row is a Lease as just read (or none), what this replica has seen of
it (when each version was first seen, by its monotonic clock), the replica's
settings, and the time; the expected decision follows.
"""
import dataclasses
import datetime

import pytest

from kopf._replicas import election
from kopf._replicas.election import Acquire, Create, Refuse, Renew, StandBy, Takeover
from kopf._replicas.leases import LeaseSpec, microtime
from kopf._replicas.observations import INSTANCE_ANNOTATION, Observations
from kopf._replicas.priorities import FREEZE_ANNOTATION, PRIORITY_ANNOTATION, Freeze
from tests.unit.conftest import T0
from tests.unit.replicas.conftest import LEASE, lease, settings

ME = 'mine'  # our instance token
NOW = 1000.0  # monotonic
WALL = T0 + datetime.timedelta(hours=1)


def ours(rv='1'):
    return lease(rv, holder='a', annotations={INSTANCE_ANNOTATION: ME})


def namesake(rv='1'):
    return lease(rv, holder='a', annotations={INSTANCE_ANNOTATION: 'theirs'})


def prioritized(priority, rv='1'):
    return lease(rv, holder='b', annotations={PRIORITY_ANNOTATION: str(priority)})


def frozen(rv='1', *, renewed=WALL, duration=30, previous_duration=LEASE):
    record = Freeze(by='me@host', previous='b', previous_duration=previous_duration)
    return lease(rv, holder='frozen:me@host', duration=duration, renewed=microtime(renewed),
                 annotations={FREEZE_ANNOTATION: record.to_json(), PRIORITY_ANNOTATION: '100'})


LAPSED = frozen(renewed=WALL - datetime.timedelta(seconds=30))  # by the wall clock, its 30 s are over
LAPSED_LONG = frozen(renewed=WALL - datetime.timedelta(seconds=60), duration=60, previous_duration=60)


def seen(*history):
    """The observations after seeing these (lease, monotonic time) in order."""
    observations = Observations(default_duration=LEASE)
    for seen_lease, at in history:
        observations = observations.observe(seen_lease, at)
    return observations


def decide(current, observations=None, *, closing=False, priority=0, now=NOW, wall=WALL):
    observations = observations if observations is not None else seen(*([(current, now)] if current else []))
    return election.decide(current, observations=observations, settings=settings('ha', 'a', priority=priority),
                           instance=ME, closing=closing, now=now, wall=wall)


@pytest.mark.parametrize('current, observations, kwargs, expected', [
    # Nobody has created the Lease yet.
    (None, None, {}, Create()),
    (None, None, {'closing': True}, StandBy(None)),
    # Ours, written by this very process.
    (ours(), None, {}, Renew(ours())),
    (ours(), None, {'closing': True}, Renew(ours())),  # renewed while the running cycles finish
    # Under our identity, written by another process.
    (namesake('2'), seen((namesake('1'), NOW - 5), (namesake('2'), NOW)), {}, Refuse(namesake('2'))),
    (namesake(), seen((namesake(), NOW - LEASE + 1)), {}, StandBy(namesake(), waiting=True)),
    (namesake(), seen((namesake(), NOW - LEASE)), {}, Acquire(namesake(), Takeover.PREDECESSOR)),
    (namesake(), seen((namesake(), NOW - LEASE)), {'closing': True}, StandBy(namesake())),
    # Held by another replica: alive, expired, released.
    (lease(), seen((lease(), NOW - LEASE + 1)), {}, StandBy(lease())),
    (lease(), seen((lease(), NOW - LEASE)), {}, Acquire(lease(), Takeover.EXPIRED)),
    (lease('2'), seen((lease('1'), NOW - 100), (lease('2'), NOW - 1)), {}, StandBy(lease('2'))),  # renewed
    (lease(holder=None), None, {}, Acquire(lease(holder=None), Takeover.RELEASED)),
    (lease(holder=None), None, {'closing': True}, StandBy(lease(holder=None))),
    (lease(), seen((lease(), NOW - LEASE)), {'closing': True}, StandBy(lease())),
    # Priorities: only a higher one takes a live Lease over.
    (prioritized(5), None, {'priority': 6}, Acquire(prioritized(5), Takeover.PREEMPTED)),
    (prioritized(5), None, {'priority': 5}, StandBy(prioritized(5))),
    (prioritized(5), None, {'priority': 1}, StandBy(prioritized(5))),
    (prioritized(5), None, {'priority': 6, 'closing': True}, StandBy(prioritized(5))),
    (lease(annotations={PRIORITY_ANNOTATION: 'junk'}), None, {'priority': 1},
     Acquire(lease(annotations={PRIORITY_ANNOTATION: 'junk'}), Takeover.PREEMPTED)),  # junk counts as 0
    # Freezes: over by the wall clock, but only a whole Lease duration after they were seen beginning.
    (frozen(), None, {}, StandBy(frozen())),
    (LAPSED, seen((LAPSED, NOW - LEASE + 1)), {}, StandBy(LAPSED)),
    (LAPSED, seen((LAPSED, NOW - LEASE)), {}, Acquire(LAPSED, Takeover.THAWED)),
    (LAPSED_LONG, seen((LAPSED_LONG, NOW - 59)), {}, StandBy(LAPSED_LONG)),  # the leader before it may still run
    (LAPSED_LONG, seen((LAPSED_LONG, NOW - 60)), {}, Acquire(LAPSED_LONG, Takeover.THAWED)),
    (frozen(), seen((frozen(), NOW - 30)), {}, Acquire(frozen(), Takeover.THAWED)),  # unchanged: expired anyway
    (frozen(), None, {'priority': 101}, Acquire(frozen(), Takeover.PREEMPTED)),
    (frozen(), None, {'priority': 100}, StandBy(frozen())),
])
def test_decisions(current, observations, kwargs, expected):
    assert decide(current, observations, **kwargs) == expected


def test_a_freeze_is_over_by_the_wall_clock_only_after_a_lease_duration_since_it_was_seen():
    record = Freeze(by='me', previous='a', previous_duration=LEASE)
    spec = LeaseSpec(holder='frozen:me', duration=2 * LEASE, renewed='2000-01-01T00:00:00.000000Z')
    old = lease('7', holder='frozen:me', annotations={FREEZE_ANNOTATION: record.to_json()})
    old = dataclasses.replace(old, spec=spec)
    observations = seen((old, 100.0))
    free = dict(settings=settings('ha', 'a'), wall=WALL)
    assert not election.free(old, observations=observations, now=100.0 + LEASE - 0.1, **free)  # just seen
    assert election.free(old, observations=observations, now=100.0 + LEASE, **free)
    current = dataclasses.replace(old, resource_version='8', spec=dataclasses.replace(spec, renewed=microtime(WALL)))
    observations = observations.observe(current, 200.0)
    assert not election.free(current, observations=observations, now=200.0 + LEASE, **free)  # not over by its clock


# What follows a decision.

def test_a_preempting_replica_handles_once_the_previous_holder_has_surely_stopped():
    taken = Acquire(lease(duration=40), Takeover.PREEMPTED)
    assert election.handling_from(taken, taken_at=NOW, observations=seen(), settings=settings('ha', 'a')) == NOW + 40
    taken = Acquire(lease(duration=5), Takeover.PREEMPTED)
    assert election.handling_from(taken, taken_at=NOW, observations=seen(),
                                  settings=settings('ha', 'a')) == NOW + LEASE  # ours is longer


def test_a_replica_preempting_a_freeze_waits_for_the_leader_from_before_it_since_it_was_seen():
    taken = Acquire(frozen(previous_duration=60), Takeover.PREEMPTED)
    observations = seen((frozen(previous_duration=60), NOW - 50))
    assert election.handling_from(taken, taken_at=NOW, observations=observations,
                                  settings=settings('ha', 'a')) == NOW + 10


@pytest.mark.parametrize('reason', [Takeover.RELEASED, Takeover.EXPIRED, Takeover.THAWED, Takeover.PREDECESSOR])
def test_other_takeovers_handle_at_once(reason):
    assert election.handling_from(Acquire(lease(), reason), taken_at=NOW, observations=seen(),
                                  settings=settings('ha', 'a')) is None


def test_the_written_spec_counts_the_transitions_and_keeps_the_acquisition_of_a_renewal():
    before = dataclasses.replace(lease(), spec=LeaseSpec(holder='a', duration=5, acquired='then', transitions=3))
    renewed = election.spec(settings('ha', 'a'), before, acquire=False, stamp='now')
    taken = election.spec(settings('ha', 'a'), before, acquire=True, stamp='now')
    created = election.spec(settings('ha', 'a'), None, acquire=True, stamp='now')
    assert renewed == LeaseSpec(holder='a', duration=LEASE, acquired='then', renewed='now', transitions=3)
    assert taken == LeaseSpec(holder='a', duration=LEASE, acquired='now', renewed='now', transitions=4)
    assert created == LeaseSpec(holder='a', duration=LEASE, acquired='now', renewed='now', transitions=0)
    released = election.released_spec(before, stamp='now')
    assert released == LeaseSpec(holder=None, duration=1, acquired='then', renewed='now', transitions=3)


def test_the_written_annotations_carry_our_priority_and_instance_and_drop_a_freezes_record():
    written = election.lease_annotations(settings('ha', 'a', priority=7), frozen(), instance=ME)
    assert written == {PRIORITY_ANNOTATION: '7', INSTANCE_ANNOTATION: ME}
    kept = election.lease_annotations(settings('ha', 'a'), lease(annotations={'x': 'y'}), instance=ME)
    assert kept == {'x': 'y', PRIORITY_ANNOTATION: '0', INSTANCE_ANNOTATION: ME}
