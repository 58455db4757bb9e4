import dataclasses

import pytest

from kopf._handlers import lifecycles
from kopf._handlers.progression import HandlerState, State
from kopf._structs.ids import HandlerId


@dataclasses.dataclass(frozen=True)
class H:
    id: HandlerId


A, B, C = H(HandlerId('a')), H(HandlerId('b')), H(HandlerId('c'))


def make_state(**retries):
    return State({HandlerId(k): dataclasses.replace(HandlerState.from_scratch(), retries=v)
                  for k, v in retries.items()})


@pytest.fixture(autouse=True)
def restore_default_lifecycle():
    yield
    lifecycles.set_default_lifecycle(None)


def test_all_at_once_keeps_the_order():
    assert lifecycles.all_at_once([A, B, C], state=make_state()) == [A, B, C]


def test_one_by_one_takes_the_first():
    assert lifecycles.one_by_one([A, B, C], state=make_state(a=5)) == [A]


def test_asap_takes_the_first_registered_among_equals():
    assert lifecycles.asap([A, B, C], state=make_state(a=0, b=0, c=0)) == [A]


def test_asap_takes_the_least_retried():
    assert lifecycles.asap([A, B, C], state=make_state(a=2, b=1, c=1)) == [B]


def test_randomized_takes_one_of_them():
    chosen = lifecycles.randomized([A, B, C], state=make_state())
    assert len(chosen) == 1 and chosen[0] in (A, B, C)


def test_shuffled_takes_all_of_them():
    chosen = lifecycles.shuffled([A, B, C], state=make_state())
    assert sorted(h.id for h in chosen) == ['a', 'b', 'c']


@pytest.mark.parametrize('lifecycle', [
    lifecycles.all_at_once, lifecycles.one_by_one, lifecycles.asap, lifecycles.randomized, lifecycles.shuffled,
])
def test_nothing_to_choose_from(lifecycle):
    assert list(lifecycle([], state=make_state())) == []


def test_lifecycles_accept_extra_kwargs():
    assert lifecycles.asap([A], state=make_state(), body={}, reason='create') == [A]


def test_default_is_asap_and_can_be_changed():
    assert lifecycles.get_default_lifecycle() is lifecycles.asap

    lifecycles.set_default_lifecycle(lifecycles.one_by_one)
    assert lifecycles.get_default_lifecycle() is lifecycles.one_by_one

    lifecycles.set_default_lifecycle(None)
    assert lifecycles.get_default_lifecycle() is lifecycles.asap
