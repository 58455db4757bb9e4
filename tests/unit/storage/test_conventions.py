import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kopf.storage import conventions

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
