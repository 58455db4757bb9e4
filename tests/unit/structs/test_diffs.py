from kopf._structs.diffs import Diff, DiffItem, DiffOperation, diff, reduce


def test_no_changes_give_an_empty_diff():
    assert diff({'spec': {'a': 1}}, {'spec': {'a': 1}}) == []
    assert not diff(None, None)


def test_added_changed_removed_fields_at_their_own_paths():
    old = {'spec': {'a': 1, 'b': 2, 'deep': {'x': 1}}}
    new = {'spec': {'a': 1, 'b': 3, 'c': 4, 'deep': {}}}
    assert diff(old, new) == [
        ('change', ('spec', 'b'), 2, 3),
        ('add', ('spec', 'c'), None, 4),
        ('remove', ('spec', 'deep', 'x'), 1, None),
    ]


def test_whole_object_creation_is_one_addition():
    assert diff(None, {'spec': 1}) == [('add', (), None, {'spec': 1})]


def test_lists_and_scalars_are_compared_whole():
    assert diff({'l': [1, 2]}, {'l': [1, 3]}) == [('change', ('l',), [1, 2], [1, 3])]
    assert diff({'x': 1}, {'x': {'y': 1}}) == [('change', ('x',), 1, {'y': 1})]


def test_items_are_named_tuples_with_enum_operations():
    item = diff({'a': 1}, {'a': 2})[0]
    assert isinstance(item, DiffItem)
    assert item.operation is DiffOperation.CHANGE
    assert item.operation == 'change'
    assert str(item.operation) == 'change'
    assert item.field == ('a',)
    assert (item.old, item.new) == (1, 2)


def test_reduce_narrows_to_a_field_with_relative_paths():
    d = diff({'spec': {'f': {'x': 1}, 'g': 1}}, {'spec': {'f': {'x': 2}, 'g': 2}})
    assert reduce(d, 'spec.f') == [('change', ('x',), 1, 2)]
    assert reduce(d, 'spec.f.x') == [('change', (), 1, 2)]
    assert reduce(d, 'spec.absent') == []


def test_reduce_cuts_a_higher_level_change_down_to_the_field():
    d = diff(None, {'spec': {'f': 5, 'g': 1}})
    assert reduce(d, 'spec.f') == [('add', (), None, 5)]
    assert reduce(d, 'spec.h') == []


def test_diffs_are_immutable_sequences_and_comparable():
    d = diff({'a': 1}, {'a': 2})
    assert isinstance(d, Diff)
    assert d == Diff(list(d))
    assert len(d) == 1
    assert hash(d) == hash(Diff(list(d)))
