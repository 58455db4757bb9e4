"""
The decisions of a sharded member, one listing at a time.

A listing is judged by what this member has seen of the Leases (when each
version was first seen, by its monotonic clock); the permit follows from the
ring it has published and the rings the others have published.
"""
import dataclasses

import pytest

from kopf._replicas import sharding
from kopf._replicas.fencing import nothing
from kopf._replicas.leases import LeaseSpec
from kopf._replicas.observations import INSTANCE_ANNOTATION, Namesake, Observations
from kopf._replicas.ownership import ShardPermit, owner
from tests.unit.replicas.conftest import KEYS, LEASE, lease, settings

ME = 'mine'  # our instance token
NOW = 1000.0
SETTINGS = settings('shards', 'a')


def member(identity, rv='1', *, ring=None, instance=None, holder=None):
    annotations = {}
    if ring is not None:
        annotations[sharding.RING_ANNOTATION] = ','.join(ring)
    if instance is not None:
        annotations[INSTANCE_ANNOTATION] = instance
    return lease(rv, name=f'op-{identity}', holder=holder if holder is not None else identity,
                 annotations=annotations)


def assess(listed, *, known=None, seen_at=NOW, history=()):
    observations = Observations(default_duration=LEASE)
    for earlier in history:
        observations = observations.observe(earlier, seen_at)
    observations = observations.observe_all(listed, seen_at)
    return sharding.assess(listed, known=known, observations=observations, settings=SETTINGS, instance=ME, now=NOW)


def test_our_own_lease_is_ours_to_renew_and_the_others_are_live_members_with_their_rings():
    own = member('a', ring=('a', 'b'), instance=ME)
    listing = assess([own, member('b', ring=('a', 'b')), member('c', ring=('a', 'b', 'c'))], known=own)
    assert listing.own == own and listing.named == own and listing.namesake is Namesake.OURS
    assert listing.others == {'b': ('a', 'b'), 'c': ('a', 'b', 'c')}
    assert listing.live_others == {'b', 'c'}
    assert listing.expired == () and not listing.vanished and not listing.waiting
    assert sharding.view(listing, SETTINGS) == ('a', 'b', 'c')


def test_a_member_lease_unchanged_for_its_duration_has_expired_and_is_no_member():
    old, fresh = member('b'), member('c')
    listing = assess([old, fresh], seen_at=NOW - LEASE)
    assert listing.expired == (old, fresh)
    listing = assess([old, fresh], seen_at=NOW - LEASE + 1)
    assert listing.expired == () and listing.live_others == {'b', 'c'}


def test_a_released_member_lease_has_expired_at_once():
    released = member('b', holder='')
    listing = assess([released])
    assert listing.expired == (released,) and listing.others == {}


def test_our_lease_missing_from_the_listing_has_vanished():
    known = member('a', instance=ME)
    listing = assess([member('b')], known=known)
    assert listing.vanished and listing.own is None
    assert not assess([member('b')], known=None).vanished  # never had one: nothing to lose


@pytest.mark.parametrize('history, seen_at, namesake, own', [
    ((), NOW, Namesake.UNKNOWN, None),  # just seen, not ours: wait
    ((), NOW - LEASE, Namesake.GONE, 'listed'),  # unchanged for its duration: a predecessor has ended
    ((member('a', rv='0', instance='theirs'),), NOW, Namesake.ALIVE, 'listed'),  # written while we watched
])
def test_our_member_lease_written_by_another_process(history, seen_at, namesake, own):
    theirs = member('a', instance='theirs')
    listing = assess([theirs], history=history, seen_at=seen_at)
    assert listing.named == theirs and listing.namesake is namesake
    assert listing.own == (theirs if own == 'listed' else None)
    assert listing.waiting == (namesake is Namesake.UNKNOWN)


def test_a_lease_of_our_name_held_by_somebody_else_keeps_what_we_knew():
    known = member('a', instance=ME)
    listing = assess([member('a', rv='2', holder='z')], known=known)
    assert listing.own == known and listing.named is None and listing.namesake is None


# The permit.

def test_nothing_is_permitted_before_a_ring_is_published():
    permission = sharding.permission('a', published=None, others={}, view=('a',), previous=None)
    assert permission.permit is nothing and permission.resync
    permission = sharding.permission('a', published=(), others={}, view=('a',), previous=None)
    assert permission.permit is nothing


def test_the_permit_is_by_our_published_ring_minus_what_the_others_rings_claim():
    others = {'b': ('a', 'b', 'c')}  # b has adopted c already, we not yet
    permission = sharding.permission('a', published=('a', 'b'), others=others, view=('a', 'b'), previous=None)
    assert isinstance(permission.permit, ShardPermit)
    for key in KEYS:
        expected = owner(key, ('a', 'b')) == 'a' and owner(key, ('a', 'b', 'c')) != 'b'
        assert permission.permit(key) == expected, key


def test_while_moving_to_a_new_ring_only_what_both_rings_give_us_is_permitted():
    permission = sharding.permission('a', published=('a',), others={}, view=('a', 'b'), previous=None)
    for key in KEYS:
        assert permission.permit(key) == (owner(key, ('a', 'b')) == 'a'), key


def test_the_streams_list_anew_only_when_the_permit_may_have_grown():
    first = sharding.permission('a', published=('a', 'b'), others={'b': ('a', 'b')}, view=('a', 'b'), previous=None)
    same = sharding.permission('a', published=('a', 'b'), others={'b': ('a', 'b')}, view=('a', 'b'),
                               previous=first.basis)
    other = sharding.permission('a', published=('a', 'b'), others={'b': ('a', 'b', 'c')}, view=('a', 'b'),
                                previous=first.basis)
    assert first.resync and not same.resync and other.resync


def test_a_hand_over_keeps_the_objects_that_stay_ours_by_the_new_ring():
    keep = sharding.keeps('a', ('a', 'b'))
    assert [key for key in KEYS if keep(key)] == [key for key in KEYS if owner(key, ('a', 'b')) == 'a']


# What is published.

@pytest.mark.parametrize('closing, published, adopted, expected', [
    (False, None, ('a',), ('a',)),
    (False, ('a',), ('a', 'b'), ('a', 'b')),
    (True, ('a',), ('a', 'b'), ('a',)),  # stopping: adopts nothing new, the others take over when it has left
    (True, None, ('a',), ()),
])
def test_the_published_ring(closing, published, adopted, expected):
    assert sharding.publishing(closing=closing, published=published, adopted=adopted) == expected


def test_the_member_lease_is_labelled_and_annotated_with_the_ring_and_our_instance():
    assert sharding.labels(SETTINGS) == {sharding.MEMBER_LABEL: 'op'}
    assert sharding.member_annotations(('a', 'b'), instance=ME) == {sharding.RING_ANNOTATION: 'a,b',
                                                                   INSTANCE_ANNOTATION: ME}
    assert sharding.member_spec(SETTINGS, known=None, stamp='now') == LeaseSpec(
        holder='a', duration=LEASE, acquired='now', renewed='now')
    known = dataclasses.replace(lease(holder='a', name='op-a'), spec=LeaseSpec(holder='a', acquired='then'))
    assert sharding.member_spec(SETTINGS, known=known, stamp='now').acquired == 'then'
