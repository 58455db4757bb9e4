"""
The index containers: keys to stores of values, one value per object under each key, never empty stores.
"""
import collections.abc
import threading

import pytest

import kopf
from kopf._indexing.indexes import Index, Indexer, Store, items_of


def contents(index):
    return {key: sorted(store, key=repr) for key, store in index.items()}


def test_kopf_names_are_the_containers():
    assert kopf.Index is Index
    assert kopf.Store is Store
    assert issubclass(Index, collections.abc.Mapping)
    assert issubclass(Store, collections.abc.Collection)
    assert kopf.Index[str, int] is not None  # usable in annotations with parameters
    assert kopf.Store[int] is not None


def test_an_index_starts_empty():
    indexer = Indexer()
    assert len(indexer.index) == 0
    assert dict(indexer.index) == {}
    assert indexer.index.get('key') is None


def test_values_of_several_objects_gather_under_their_keys():
    indexer = Indexer()
    indexer.replace('uid1', {'key1': 'valueA'})
    indexer.replace('uid2', {'key1': 'valueB'})
    indexer.replace('uid3', {'key2': 'valueC'})
    assert contents(indexer.index) == {'key1': ['valueA', 'valueB'], 'key2': ['valueC']}
    assert 'key1' in indexer.index and 'key3' not in indexer.index
    assert len(indexer.index['key1']) == 2
    assert 'valueA' in indexer.index['key1'] and 'valueC' not in indexer.index['key1']


def test_equal_values_of_different_objects_are_all_kept():
    indexer = Indexer()
    indexer.replace('uid1', {'ns': 'same'})
    indexer.replace('uid2', {'ns': 'same'})
    assert list(indexer.index['ns']) == ['same', 'same']


def test_a_new_result_replaces_the_objects_previous_values_only():
    indexer = Indexer()
    indexer.replace('uid1', {'a': 1, 'b': 1})
    indexer.replace('uid2', {'a': 2})
    indexer.replace('uid1', {'b': 10, 'c': 10})
    assert contents(indexer.index) == {'a': [2], 'b': [10], 'c': [10]}


def test_emptied_stores_leave_the_index():
    indexer = Indexer()
    indexer.replace('uid1', {'a': 1})
    store = indexer.index['a']
    indexer.replace('uid1', {'b': 1})
    assert 'a' not in indexer.index
    assert len(store) == 0  # a store held by a handler shows the truth too
    indexer.discard('uid1')
    assert dict(indexer.index) == {}


def test_discarding_removes_all_values_of_the_object_and_nothing_else():
    indexer = Indexer()
    indexer.replace('uid1', {'a': 1, 'b': 1})
    indexer.replace('uid2', {'b': 2})
    indexer.discard('uid1')
    indexer.discard('uid-unknown')
    assert contents(indexer.index) == {'b': [2]}
    assert 'uid1' not in indexer and 'uid2' in indexer


def test_an_empty_result_removes_the_objects_values():
    indexer = Indexer()
    indexer.replace('uid1', {'a': 1})
    indexer.replace('uid1', {})
    assert dict(indexer.index) == {}
    assert 'uid1' not in indexer


def test_nested_mappings_are_values_not_deeper_indexes():
    indexer = Indexer()
    indexer.replace('uid1', {'key2': {'key3': 'valueC'}})
    assert list(indexer.index['key2']) == [{'key3': 'valueC'}]


def test_the_containers_are_read_only():
    indexer = Indexer()
    indexer.replace('uid1', {'a': 1})
    with pytest.raises(TypeError):
        indexer.index['a'] = indexer.index['a']  # type: ignore[index]
    assert not hasattr(indexer.index, 'pop')
    assert not hasattr(indexer.index['a'], 'add')


def test_iterating_while_the_index_changes_in_another_thread_is_safe():
    indexer = Indexer()
    for i in range(1000):
        indexer.replace(f'uid{i}', {i: i, 'all': i})
    errors = []
    done = threading.Event()

    def read():  # as a handler in a thread would: Python loops, switched away from at any time
        try:
            while not done.is_set():
                for key in indexer.index:
                    for _ in indexer.index.get(key, ()):
                        pass
                for _ in indexer.index.get('all', ()):
                    pass
        except RuntimeError as e:  # "dictionary changed size during iteration"
            errors.append(e)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(1000, 30000):
            indexer.replace(f'uid{i}', {i: i, 'all': i})
            indexer.discard(f'uid{i - 1000}')
    finally:
        done.set()
        reader.join()
    assert not errors


@pytest.mark.parametrize('result, expected', [
    (None, None),
    ({'k': 'v'}, {'k': 'v'}),
    ({}, {}),
    ({('ns', 'name'): None}, {('ns', 'name'): None}),
    ('name', {None: 'name'}),
    (('ns', 'name'), {None: ('ns', 'name')}),
    ({'a', 'b'}, {None: {'a', 'b'}}),
    (0, {None: 0}),
    (kopf.Memo(k='v'), {None: kopf.Memo(k='v')}),  # only a plain dict gives keys
    (collections.OrderedDict(k='v'), {None: collections.OrderedDict(k='v')}),
])
def test_what_a_result_puts_into_the_index(result, expected):
    assert items_of(result) == expected
    if expected is not None and None in expected:
        assert type(items_of(result)[None]) is type(result)
