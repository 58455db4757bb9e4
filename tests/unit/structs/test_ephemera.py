"""
The objects' memos: shallow copies of the operator's memo, made and kept only as they are used.
"""
import copy
import dataclasses
import gc
import pickle
import threading

import pytest

import kopf
from kopf._structs.ephemera import ObjectMemos


def test_an_objects_memo_is_a_shallow_copy_of_the_operators_memo():
    shared = []
    memos = ObjectMemos(kopf.Memo(shared=shared, flag=1))
    memos.seen('a')

    memo = memos.get('a')
    memo.own = True
    memo.shared.append('x')

    assert isinstance(memo, kopf.Memo)
    assert memo == {'shared': ['x'], 'flag': 1, 'own': True}
    assert shared == ['x']  # a mutable value is shared by all objects
    assert 'own' not in memos.get('b')  # another object's memo has its own keys


def test_an_unchanged_memo_is_not_kept_but_stays_while_held():
    memos = ObjectMemos(kopf.Memo(flag=1))
    memos.seen('a')

    held = memos.get('a')
    assert memos.get('a') is held  # e.g. a daemon holds it: the handlers get the same one
    assert held.get('flag') == 1 and held.flag == 1  # reading changes nothing
    assert len(memos) == 0

    del held
    gc.collect()
    assert len(memos) == 0  # nothing was kept of it


@pytest.mark.parametrize('change', [
    lambda memo: setattr(memo, 'x', 1),
    lambda memo: memo.__setitem__('x', 1),
    lambda memo: memo.__delitem__('flag'),
    lambda memo: delattr(memo, 'flag'),
    lambda memo: memo.update(x=1),
    lambda memo: memo.setdefault('x', []).append(1),
    lambda memo: memo.pop('flag'),
    lambda memo: memo.popitem(),
    lambda memo: memo.clear(),
    lambda memo: memo.__ior__({'x': 1}),
], ids=['attribute', 'item', 'del-item', 'del-attribute', 'update', 'setdefault', 'pop', 'popitem', 'clear', 'ior'])
def test_a_changed_memo_is_kept_for_the_objects_lifetime(change):
    memos = ObjectMemos(kopf.Memo(flag=1))
    memos.seen('a')
    memo = memos.get('a')

    change(memo)
    expected = dict(memo)
    del memo
    gc.collect()

    assert len(memos) == 1
    assert memos.get('a') == expected
    memos.forget('a')  # the object is gone
    assert len(memos) == 0
    assert memos.get('a') == {'flag': 1}


def test_a_memo_changed_in_a_handlers_thread_is_kept():
    memos = ObjectMemos(kopf.Memo())
    memos.seen('a')
    memo = memos.get('a')

    thread = threading.Thread(target=setattr, args=(memo, 'counter', 1))
    thread.start()
    thread.join()
    del memo
    gc.collect()

    assert memos.get('a').counter == 1


def test_a_change_of_the_operators_memo_after_the_first_sight_is_not_seen_by_the_object():
    operator = kopf.Memo(early=1)
    memos = ObjectMemos(operator)
    memos.seen('old')
    operator.late = 2  # e.g. by a probe, or by the application that embeds the operator
    memos.seen('new')

    assert memos.get('old') == {'early': 1}  # as it was at its first sight, though made only now
    assert memos.get('new') == {'early': 1, 'late': 2}
    assert len(memos) == 1  # only the object seen after the change costs an entry, until its memo is kept


def test_a_memo_held_after_its_object_is_gone_is_not_kept():
    memos = ObjectMemos(kopf.Memo())
    memos.seen('a')
    memo = memos.get('a')
    memos.forget('a')

    memo.late = 'a daemon still stopping'

    assert len(memos) == 0


def test_copies_of_an_objects_memo_are_plain_memos_of_no_object():
    memos = ObjectMemos(kopf.Memo(flag=1))
    memos.seen('a')
    memo = memos.get('a')

    for duplicate in [copy.copy(memo), copy.deepcopy(memo), pickle.loads(pickle.dumps(memo))]:
        duplicate.x = 1
        assert type(duplicate) is kopf.Memo and duplicate == {'flag': 1, 'x': 1}
    assert len(memos) == 0
    assert 'x' not in memos.get('a')


def test_custom_memos_are_copied_at_the_first_sight_and_kept():
    @dataclasses.dataclass()
    class Context:
        items: list

    operator = Context(items=[])
    memos = ObjectMemos(operator)
    memos.seen('a')

    memo = memos.get('a')
    assert memo is not operator and memo.items is operator.items
    assert memos.get('a') is memo


def test_custom_memos_that_copy_to_themselves_are_shared():
    class Shared:
        def __copy__(self):
            return self

    operator = Shared()
    memos = ObjectMemos(operator)
    memos.seen('a')

    assert memos.get('a') is operator and memos.get('b') is operator
    assert len(memos) == 0


def test_no_memo_at_all_stays_none():
    memos = ObjectMemos(None)
    memos.seen('a')
    assert memos.get('a') is None
