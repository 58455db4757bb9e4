"""
Containers that are packed while unused: their contents and behaviour stay
the same, only their memory changes form.
"""
import asyncio

import pytest

from kopf._structs import dormancy
from kopf._structs.dormancy import Dormant, DormantSet

QUIET = 0.05


@pytest.fixture(autouse=True)
def small_containers_are_packed_too(monkeypatch):
    monkeypatch.setattr(dormancy, 'MIN_PACKED', 2)


async def test_a_set_unused_for_a_quiet_while_is_packed_and_keeps_its_items():
    items = DormantSet([f'uid-{i}' for i in range(5)], quiet=QUIET)
    items.add('uid-5')
    assert not items.packed
    await asyncio.sleep(QUIET * 3)
    assert items.packed
    assert 'uid-3' in items
    assert not items.packed  # unpacked by the use
    assert sorted(items) == [f'uid-{i}' for i in range(6)]


async def test_a_set_in_use_is_not_packed():
    items = DormantSet(['a', 'b', 'c'], quiet=QUIET * 4)
    for _ in range(8):
        await asyncio.sleep(QUIET)
        assert 'a' in items
        assert not items.packed


async def test_a_packed_set_is_packed_again_after_the_next_quiet_while():
    items = DormantSet(['a', 'b', 'c'], quiet=QUIET)
    await asyncio.sleep(QUIET * 3)
    items.discard('b')
    await asyncio.sleep(QUIET * 3)
    assert items.packed
    assert set(items) == {'a', 'c'} and len(items) == 2


async def test_small_containers_are_not_packed(monkeypatch):
    monkeypatch.setattr(dormancy, 'MIN_PACKED', 10)
    items = DormantSet(['a', 'b'], quiet=QUIET)
    await asyncio.sleep(QUIET * 3)
    assert not items.packed


async def test_contents_that_cannot_be_packed_stay_as_they_are():
    marker = object()
    box = Dormant({'a': marker, 'b': marker}, pack=lambda d: d, unpack=lambda d: d, quiet=QUIET)
    assert box.value['a'] is marker
    await asyncio.sleep(QUIET * 3)
    assert not box.packed
    assert box.value['b'] is marker


async def test_a_container_is_packed_and_unpacked_by_its_own_functions():
    box = Dormant({'x': [1, 2]}, pack=lambda d: sorted(d.items()), unpack=lambda items: dict(items), quiet=QUIET)
    box.value['y'] = [3]
    await asyncio.sleep(QUIET * 3)
    assert box.packed
    assert box.value == {'x': [1, 2], 'y': [3]}


async def test_a_replaced_container_is_the_one_packed():
    box = Dormant({'a': 1, 'b': 2}, pack=dict, unpack=dict, quiet=QUIET)
    box.value = {'c': 3, 'd': 4}
    await asyncio.sleep(QUIET * 3)
    assert box.packed
    assert box.value == {'c': 3, 'd': 4}


def test_without_an_event_loop_nothing_is_ever_packed():
    items = DormantSet(['a', 'b', 'c'], quiet=0)
    items.add('d')
    assert not items.packed
    assert 'd' in items and len(items) == 4


async def test_the_repr_says_whether_it_is_packed_without_unpacking():
    items = DormantSet(['a', 'b'], quiet=QUIET)
    assert repr(items) == 'DormantSet(2 items)'
    await asyncio.sleep(QUIET * 3)
    assert repr(items) == 'DormantSet(packed)'
    assert items.packed
