import collections

from kopf._replicas.ownership import ShardPermit, format_ring, make_ring, owner, parse_ring, ring_version

KEYS = [f'uid-{i}' for i in range(3000)]


def test_rings_are_sorted_and_deduplicated():
    assert make_ring(['b', 'a', 'b']) == ('a', 'b')


def test_rings_survive_their_lease_annotation():
    ring = make_ring(['x-1', 'y-2'])
    assert format_ring(ring) == 'x-1,y-2'
    assert parse_ring(format_ring(ring)) == ring
    assert parse_ring('') == () and parse_ring(None) == ()


def test_ring_versions_are_short_and_stable():
    assert ring_version(('a', 'b')) == ring_version(make_ring(['b', 'a']))
    assert ring_version(('a', 'b')) != ring_version(('a', 'c'))
    assert len(ring_version(('a',))) == 8


def test_every_object_has_exactly_one_owner_and_nobody_owns_in_an_empty_ring():
    ring = make_ring(['a', 'b', 'c'])
    assert all(owner(key, ring) in ring for key in KEYS)
    assert owner('uid-1', ()) is None


def test_the_owner_does_not_depend_on_the_order_of_the_members():
    assert all(owner(key, ('a', 'b', 'c')) == owner(key, ('c', 'a', 'b')) for key in KEYS[:200])


def test_objects_are_shared_about_evenly():
    counts = collections.Counter(owner(key, make_ring(['a', 'b', 'c'])) for key in KEYS)
    assert all(800 < count < 1200 for count in counts.values()), counts


def test_a_joining_member_takes_about_a_quarter_and_only_for_itself():
    before, after = make_ring(['a', 'b', 'c']), make_ring(['a', 'b', 'c', 'd'])
    moved = [key for key in KEYS if owner(key, before) != owner(key, after)]
    assert all(owner(key, after) == 'd' for key in moved)
    assert 0.2 < len(moved) / len(KEYS) < 0.3


def test_a_leaving_member_gives_away_only_its_own_objects():
    before, after = make_ring(['a', 'b', 'c']), make_ring(['a', 'b'])
    moved = [key for key in KEYS if owner(key, before) != owner(key, after)]
    assert moved and all(owner(key, before) == 'c' for key in moved)


def test_a_member_is_permitted_its_own_objects_when_all_rings_agree():
    ring = make_ring(['a', 'b'])
    permit = ShardPermit('a', ring, {'b': ring})
    assert [permit(key) for key in KEYS] == [owner(key, ring) == 'a' for key in KEYS]


def test_an_object_still_claimed_by_another_members_ring_is_not_permitted():
    # 'a' has adopted the ring with 'c'; 'b' has not yet: it still claims what it owns without 'c'.
    new, old = make_ring(['a', 'b', 'c']), make_ring(['a', 'b'])
    permit = ShardPermit('a', new, {'b': old, 'c': new})
    for key in KEYS:
        claimed_by_b = owner(key, old) == 'b'
        assert permit(key) == (owner(key, new) == 'a' and not claimed_by_b)


def test_claims_of_members_that_do_not_own_by_their_own_ring_are_ignored():
    # 'b' is in its own ring's list but a key owned by 'a' in b's ring is not b's claim.
    ring = make_ring(['a', 'b'])
    permit = ShardPermit('a', ring, {'b': make_ring(['a', 'b', 'z'])})
    z_keys = [key for key in KEYS if owner(key, make_ring(['a', 'b', 'z'])) != 'b' and owner(key, ring) == 'a']
    assert z_keys and all(permit(key) for key in z_keys)


def test_a_member_moving_to_a_new_ring_keeps_only_what_both_rings_give_it():
    old, new = make_ring(['a', 'b']), make_ring(['a', 'b', 'c'])
    permit = ShardPermit('a', old, {'b': old}, keep=new)
    for key in KEYS:
        assert permit(key) == (owner(key, old) == 'a' and owner(key, new) == 'a')


def test_no_two_members_are_ever_permitted_the_same_object_whatever_their_rings():
    # Any mix of published rings: whoever the others' rings give an object to blocks it for the rest.
    rings = {'a': make_ring(['a', 'b']), 'b': make_ring(['a', 'b', 'c']), 'c': make_ring(['b', 'c'])}
    permits = [ShardPermit(m, rings[m], {o: r for o, r in rings.items() if o != m}) for m in rings]
    for key in KEYS:
        assert sum(permit(key) for permit in permits) <= 1
