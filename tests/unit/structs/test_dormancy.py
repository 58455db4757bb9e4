"""
Containers that are packed while unused: their contents and behaviour stay
the same, only their memory changes form.
"""
import pytest

from kopf._structs import dormancy
from kopf._structs.dormancy import Dormant, DormantSet
from tests.unit.conftest import idle

QUIET = 0.05


async def pass_time(clock, seconds):
    """Seconds of the clock go by; what was due meanwhile has run."""
    clock.advance(seconds)
    await idle()


@pytest.fixture(autouse=True)
def small_containers_are_packed_too(monkeypatch):
    monkeypatch.setattr(dormancy, 'MIN_PACKED', 2)


async def test_a_set_unused_for_a_quiet_while_is_packed_and_keeps_its_items(clock):
    items = DormantSet([f'uid-{i}' for i in range(5)], quiet=QUIET, clock=clock)
    items.add('uid-5')
    assert not items.packed
    await pass_time(clock, QUIET * 3)
    assert items.packed
    assert 'uid-3' in items
    assert not items.packed  # unpacked by the use
    assert sorted(items) == [f'uid-{i}' for i in range(6)]


async def test_a_set_in_use_is_not_packed(clock):
    items = DormantSet(['a', 'b', 'c'], quiet=QUIET * 4, clock=clock)
    for _ in range(8):
        await pass_time(clock, QUIET)
        assert 'a' in items
        assert not items.packed


async def test_a_packed_set_is_packed_again_after_the_next_quiet_while(clock):
    items = DormantSet(['a', 'b', 'c'], quiet=QUIET, clock=clock)
    await pass_time(clock, QUIET * 3)
    items.discard('b')
    await pass_time(clock, QUIET * 3)
    assert items.packed
    assert set(items) == {'a', 'c'} and len(items) == 2


async def test_small_containers_are_not_packed(monkeypatch, clock):
    monkeypatch.setattr(dormancy, 'MIN_PACKED', 10)
    items = DormantSet(['a', 'b'], quiet=QUIET, clock=clock)
    await pass_time(clock, QUIET * 3)
    assert not items.packed


async def test_contents_that_cannot_be_packed_stay_as_they_are(clock):
    marker = object()
    box = Dormant({'a': marker, 'b': marker}, pack=lambda d: d, unpack=lambda d: d, quiet=QUIET, clock=clock)
    assert box.value['a'] is marker
    await pass_time(clock, QUIET * 3)
    assert not box.packed
    assert box.value['b'] is marker


async def test_a_container_is_packed_and_unpacked_by_its_own_functions(clock):
    box = Dormant({'x': [1, 2]}, pack=lambda d: sorted(d.items()), unpack=lambda items: dict(items),
                  quiet=QUIET, clock=clock)
    box.value['y'] = [3]
    await pass_time(clock, QUIET * 3)
    assert box.packed
    assert box.value == {'x': [1, 2], 'y': [3]}


async def test_a_replaced_container_is_the_one_packed(clock):
    box = Dormant({'a': 1, 'b': 2}, pack=dict, unpack=dict, quiet=QUIET, clock=clock)
    box.value = {'c': 3, 'd': 4}
    await pass_time(clock, QUIET * 3)
    assert box.packed
    assert box.value == {'c': 3, 'd': 4}


def test_without_an_event_loop_nothing_is_ever_packed():
    items = DormantSet(['a', 'b', 'c'], quiet=0)
    items.add('d')
    assert not items.packed
    assert 'd' in items and len(items) == 4


async def test_the_repr_says_whether_it_is_packed_without_unpacking(clock):
    items = DormantSet(['a', 'b'], quiet=QUIET, clock=clock)
    assert repr(items) == 'DormantSet(2 items)'
    await pass_time(clock, QUIET * 3)
    assert repr(items) == 'DormantSet(packed)'
    assert items.packed
