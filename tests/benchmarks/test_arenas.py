"""
The walk over pymalloc's pools finds every live object by its type, and what
refers to the objects that keep sparsely used arenas.
"""
import sys

import pytest

from benchmarks import arenas

pytestmark = pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="pymalloc's layout of CPython 3.11")


class Kept:
    pass


class Scattered:
    __slots__ = ('value',)


def test_every_live_object_is_found_by_its_type():
    kept = [Kept() for _ in range(3000)]
    found = arenas.walk()
    total = sum(arena.kinds['tests.benchmarks.test_arenas.Kept'] for arena in found.values())
    assert total == len(kept)
    assert sum(arena.used_pools for arena in found.values()) <= sum(arena.pools for arena in found.values())


def test_objects_that_keep_sparse_arenas_are_named_with_their_holder():
    burst = []
    for i in range(60_000):  # a burst: a few long-lived objects among many short-lived ones
        item = Scattered()
        item.value = i
        burst.append(item if i % 200 else [item])
    survivors = tuple(item for item in burst if isinstance(item, list))
    del burst
    summary = arenas.summary(arenas.walk())
    assert summary['sparse_arenas'] >= 1
    held = dict(summary['held_by'])
    assert held.get('tests.benchmarks.test_arenas.Scattered <- builtins.list', 0) >= len(survivors) // 2
