from kopf._replicas.observations import INSTANCE_ANNOTATION, Namesake, Observations, namesake
from tests.unit.replicas.conftest import lease


def held(rv, *, instance, holder='me', duration=10, name='op'):
    annotations = {INSTANCE_ANNOTATION: instance} if instance is not None else {}
    return lease(rv, holder=holder, duration=duration, name=name, annotations=annotations)


# Renew-time semantics.

def test_a_lease_expires_only_after_its_duration_since_it_was_seen_changing():
    observations = Observations(default_duration=15).observe(lease('1', duration=10), now=100.0)
    assert not observations.expired(lease('1', duration=10), now=109.0)
    observations = observations.observe(lease('2', duration=10), now=109.0)  # renewed: the clock starts again
    assert not observations.expired(lease('2', duration=10), now=115.0)
    observations = observations.observe(lease('2', duration=10), now=119.0)
    assert observations.expired(lease('2', duration=10), now=119.0)


def test_the_other_machines_timestamps_are_never_compared_with_ours():
    stale = lease('1', duration=10, renewed='2000-01-01T00:00:00.000000Z')
    observations = Observations(default_duration=15).observe(stale, now=100.0)
    assert not observations.expired(stale, now=100.0)  # ancient by its clock, but we have just seen it


def test_a_released_lease_is_free_at_once():
    released = lease('1', holder=None)
    observations = Observations(default_duration=15).observe(released, now=100.0)
    assert observations.expired(released, now=100.0)


def test_a_lease_without_a_duration_expires_after_the_default_one():
    observations = Observations(default_duration=15).observe(lease('1', duration=None), now=100.0)
    assert not observations.expired(lease('1', duration=None), now=114.0)
    assert observations.expired(lease('1', duration=None), now=115.0)


def test_an_unseen_version_is_never_expired_and_has_no_sighting():
    observations = Observations(default_duration=15).observe(lease('1'), now=100.0)
    assert not observations.expired(lease('2'), now=1000.0)
    assert observations.seen_at(lease('2')) is None
    assert observations.seen_at(lease('1')) == 100.0


def test_observing_leaves_the_earlier_records_as_they_were():
    before = Observations(default_duration=15)
    after = before.observe(lease('1'), now=100.0)
    assert before.seen_at(lease('1')) is None and after.seen_at(lease('1')) == 100.0
    assert after.observe(lease('1'), now=200.0) is after  # the same version: nothing new


def test_forgotten_leases_start_anew_when_seen_again():
    observations = Observations(default_duration=15).observe_all([lease('1', name='a'), lease('1', name='b')], 100.0)
    observations = observations.observe(lease('2', name='a'), now=101.0)
    assert observations.changing(lease('2', name='a'))
    observations = observations.forget_others(['b'])
    assert observations.seen_at(lease('2', name='a')) is None and not observations.changing(lease('2', name='a'))
    assert observations.seen_at(lease('1', name='b')) == 100.0


# Duplicate identities.

def test_a_lease_under_our_identity_is_ours_only_with_our_instance_token():
    observations = Observations(default_duration=15).observe(held('1', instance='mine'), now=100.0)
    observations = observations.observe(held('2', instance='mine'), now=101.0)  # our own renewal
    assert namesake(held('2', instance='mine'), instance='mine', observations=observations,
                    now=101.0) is Namesake.OURS


def test_a_lease_under_our_identity_renewed_by_another_process_is_a_duplicate():
    observations = Observations(default_duration=15).observe(held('1', instance='theirs'), now=100.0)
    assert namesake(held('1', instance='theirs'), instance='mine', observations=observations,
                    now=100.0) is Namesake.UNKNOWN
    observations = observations.observe(held('2', instance='theirs'), now=100.5)  # written while we watch: alive
    for now in [100.5, 500.0]:
        assert namesake(held('2', instance='theirs'), instance='mine', observations=observations,
                        now=now) is Namesake.ALIVE


def test_a_lease_under_our_identity_left_by_an_ended_process_is_taken_over_once_expired():
    stale = held('1', instance=None)  # e.g. written before instance tokens, or by a killed process
    observations = Observations(default_duration=15).observe(stale, now=100.0)
    assert namesake(stale, instance='mine', observations=observations, now=109.9) is Namesake.UNKNOWN  # 10s
    observations = observations.observe(stale, now=110.0)
    assert namesake(stale, instance='mine', observations=observations, now=110.0) is Namesake.GONE
