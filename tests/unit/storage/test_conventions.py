import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kopf._storage import conventions

VALID_NAME = re.compile(r'^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$')


@pytest.mark.parametrize('handler_id', ['fn', 'create_fn', 'my-handler.v2', 'A1'])
def test_valid_ids_stay_readable_and_unchanged(handler_id):
    assert conventions.make_name(handler_id) == handler_id


@pytest.mark.parametrize('handler_id', ['parent/child', 'fn/spec.field', 'ünïcödé', '_private', 'x' * 200])
def test_other_ids_get_a_valid_name_with_a_hash_suffix(handler_id):
    name = conventions.make_name(handler_id)
    assert VALID_NAME.match(name)
    assert len(name) <= 63
    assert re.search(r'-?[0-9a-f]{8}$', name)


def test_sub_handler_ids_remain_recognisable():
    assert conventions.make_name('parent/child').startswith('parent.child-')
    assert conventions.make_name('fn/spec.field').startswith('fn.spec.field-')


def test_names_are_deterministic():
    assert conventions.make_name('a/b' * 50) == conventions.make_name('a/b' * 50)


def test_long_ids_with_a_common_beginning_do_not_collide():
    common = 'x' * 100
    assert conventions.make_name(common + 'a') != conventions.make_name(common + 'b')


def test_ids_differing_only_in_replaced_characters_do_not_collide():
    names = {conventions.make_name(i) for i in ['a/b', 'a.b', 'a b', 'a:b', 'a_b']}
    assert len(names) == 5


def test_make_key_joins_the_prefix():
    assert conventions.make_key('my-op.example.com', 'fn') == 'my-op.example.com/fn'


@given(st.text(min_size=1, max_size=250))
def test_every_produced_name_is_valid(handler_id):
    name = conventions.make_name(handler_id)
    assert 1 <= len(name) <= 63
    assert VALID_NAME.match(name)


@given(st.text(min_size=1, max_size=250), st.text(min_size=1, max_size=250))
def test_different_ids_give_different_names(a, b):
    if a != b:
        assert conventions.make_name(a) != conventions.make_name(b)


@pytest.mark.parametrize('prefix', ['kopf.zalando.org', 'my-op.example.com', 'a', 'x1'])
def test_valid_prefixes_are_accepted(prefix):
    assert conventions.validate_prefix(prefix) == prefix


@pytest.mark.parametrize('prefix, problem', [
    ('', 'must not be empty'),
    ('Upper.example.com', 'not a DNS subdomain'),
    ('under_score.com', 'not a DNS subdomain'),
    ('-dash.com', 'not a DNS subdomain'),
    ('double..dot', 'not a DNS subdomain'),
    ('with/slash', 'not a DNS subdomain'),
    ('a' * 64 + '.com', 'not a DNS subdomain'),
    ('.'.join(['abc'] * 70), 'at most 253'),
])
def test_invalid_prefixes_are_explained(prefix, problem):
    with pytest.raises(ValueError, match=problem):
        conventions.validate_prefix(prefix)


def test_invalid_names_are_explained():
    with pytest.raises(ValueError, match='not a valid annotation name'):
        conventions.validate_name('-bad-')


def test_split_key():
    assert conventions.split_key('a.b/c') == ('a.b', 'c')
    assert conventions.split_key('c') == (None, 'c')


# Kopf's key forms. Each vector was observed by running the released Kopf (``kopf run``) against a
# real API server and reading the annotations it wrote: Kopf 0.27.1 writes the "v1" form only;
# 0.28.3, 1.29.2, 1.36.2 and 1.45.2 write the "v2" form and the "v1" form side by side.
LONG = 'a-very-long-handler-id-that-goes-well-beyond-sixty-three-characters-in-total'
LONG_CHILD = 'parent/child-with-a-rather-long-name-to-push-the-full-id-over-the-limit'
KOPF_VECTORS = [
    # (prefix, handler id, v2 key (0.28+), v1 key (0.27+))
    ('kopf.zalando.org', 'plain', 'kopf.zalando.org/plain', 'kopf.zalando.org/plain'),
    ('kopf.zalando.org', 'parent/child1', 'kopf.zalando.org/parent.child1', 'kopf.zalando.org/parent.child1'),
    ('kopf.zalando.org', 'fieldfn/spec.field',
     'kopf.zalando.org/fieldfn.spec.field', 'kopf.zalando.org/fieldfn.spec.field'),
    ('kopf.zalando.org', LONG,
     'kopf.zalando.org/a-very-long-handler-id-that-goes-well-beyond-sixty-three-whspPA',
     'kopf.zalando.org/a-very-long-handler-id-that-goes-well-b-whspPA'),
    ('kopf.zalando.org', 'mid-length-handler-id-between-47-and-63-chars-x',
     'kopf.zalando.org/mid-length-handler-id-between-47-and-63-chars-x',
     'kopf.zalando.org/mid-length-handler-id-between-47-and-63-jHXAkg'),
    # The hash's "+" and "/" become "-" and ".":
    ('kopf.zalando.org', 'long-handler-id-number-011-which-is-longer-than-sixty-three-characters',
     'kopf.zalando.org/long-handler-id-number-011-which-is-longer-than-sixty-th--LboRw',
     'kopf.zalando.org/long-handler-id-number-011-which-is-lon--LboRw'),
    ('kopf.zalando.org', 'long-handler-id-number-014-which-is-longer-than-sixty-three-characters',
     'kopf.zalando.org/long-handler-id-number-014-which-is-longer-than-sixty-th-En.bEA',
     'kopf.zalando.org/long-handler-id-number-014-which-is-lon-En.bEA'),
    ('kopf.zalando.org', 'a' * 55 + '.' + 'b' * 20,
     'kopf.zalando.org/' + 'a' * 55 + '.-GT8A7A', 'kopf.zalando.org/' + 'a' * 39 + '-GT8A7A'),
    # v2 hashes the id as it is, v1 the dotted id:
    ('kopf.zalando.org', LONG_CHILD,
     'kopf.zalando.org/parent.child-with-a-rather-long-name-to-push-the-full-id-boDF-w',
     'kopf.zalando.org/parent.child-with-a-rather-long-name-to-3cWIFA'),
    # v1 depends on the prefix's length, v2 does not:
    ('my-operator.example.com', LONG,
     'my-operator.example.com/a-very-long-handler-id-that-goes-well-beyond-sixty-three-whspPA',
     'my-operator.example.com/a-very-long-handler-id-that-goes-whspPA'),
    ('my-operator.example.com', 'mid-length-handler-id-between-47-and-63-chars-x',
     'my-operator.example.com/mid-length-handler-id-between-47-and-63-chars-x',
     'my-operator.example.com/mid-length-handler-id-between-47-jHXAkg'),
    ('my-operator.example.com', LONG_CHILD,
     'my-operator.example.com/parent.child-with-a-rather-long-name-to-push-the-full-id-boDF-w',
     'my-operator.example.com/parent.child-with-a-rather-long--3cWIFA'),
    # No prefix (accepted by 0.27 and 0.28 only; observed through AnnotationsProgressStorage.store of 0.28.3):
    (None, 'parent/a-very-long-handler-id-that-goes-well-beyond-sixty-three-characters',
     'parent.a-very-long-handler-id-that-goes-well-beyond-sixt-A66qCw',
     'parent.a-very-long-handler-id-that-goes-well-beyond-sixt-LMxEJw'),
]


@pytest.mark.parametrize('prefix, handler_id, v2, v1', KOPF_VECTORS)
def test_kopf_key_forms_are_those_kopf_writes(prefix, handler_id, v2, v1):
    assert conventions.join_key(prefix, conventions.kopf_v2_name(handler_id)) == v2
    assert conventions.join_key(prefix, conventions.kopf_v1_name(prefix, handler_id)) == v1
    assert set(conventions.kopf_keys(prefix, handler_id)) == {v2, v1}


def test_kopf_keys_list_each_key_once():
    assert conventions.kopf_keys('kopf.zalando.org', 'plain') == ('kopf.zalando.org/plain',)


def test_kopf_keys_skip_forms_the_server_would_have_rejected():
    # Kopf does not map invalid characters: the server rejected such keys, so no such record exists.
    assert conventions.kopf_keys('kopf.zalando.org', 'ünïcödé') == ()
    assert conventions.kopf_keys('kopf.zalando.org', 'with space') == ()


def test_unprefixed_keys():
    assert conventions.make_key(None, 'fn') == 'fn'
    assert conventions.join_key(None, 'touch-dummy') == 'touch-dummy'
