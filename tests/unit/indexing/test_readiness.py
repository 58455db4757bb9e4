"""
Readiness: which listings are awaited, and what a stream's new listing no longer has.
"""
from kopf._indexing.readiness import Membership, Readiness


def test_ready_when_nothing_was_ever_expected():
    assert Readiness().ready


def test_ready_once_every_expected_listing_is_done_in_any_order():
    readiness = Readiness()
    readiness.expect('a')
    readiness.expect('b')
    readiness.done('b')
    assert not readiness.ready
    readiness.done('a')
    assert readiness.ready
    readiness.done('a')  # again (a relisting), or a listing never expected: nothing changes
    readiness.done('z')
    assert readiness.ready


def test_a_relisting_returns_what_the_stream_had_and_no_longer_lists():
    membership = Membership()
    for obj in ['a', 'b', 'c']:
        membership.see(obj, None)
    assert membership.relisted() == set()  # the first listing: nothing was there before it

    membership.see('d', 'ADDED')
    membership.see('c', 'DELETED')
    for obj in ['b', 'e']:
        membership.see(obj, None)
    assert membership.relisted() == {'a', 'd'}  # c was seen deleted; d came between the listings
    assert membership.everything() == {'b', 'e'}


def test_watch_events_between_listed_objects_start_a_new_listing():
    membership = Membership()
    membership.see('a', None)
    membership.see('b', 'MODIFIED')
    membership.see('c', None)  # a new listing begins: a is not in it
    assert membership.relisted() == {'a', 'b'}


def test_everything_includes_the_listing_in_progress():
    membership = Membership()
    membership.see('a', 'ADDED')
    membership.see('b', None)
    assert membership.everything() == {'a', 'b'}
