import pytest

from kopf._structs import dicts


@pytest.mark.parametrize('field, expected', [
    ('status.kopf.progress', ('status', 'kopf', 'progress')),
    (['status', 'a.b'], ('status', 'a.b')),
    ('spec', ('spec',)),
    ('', ()),
    (None, ()),
])
def test_parse_field(field, expected):
    assert dicts.parse_field(field) == expected


def test_format_field_joins_with_dots():
    assert dicts.format_field(('status', 'kopf')) == 'status.kopf'


def test_resolve_finds_nested_values():
    assert dicts.resolve({'a': {'b': {'c': 1}}}, 'a.b.c') == 1


def test_resolve_returns_default_for_missing_or_non_dict_parents():
    assert dicts.resolve({'a': {'b': 1}}, 'a.x', 'dflt') == 'dflt'
    assert dicts.resolve({'a': 'text'}, 'a.b', None) is None
    assert dicts.resolve(None, 'a', 0) == 0


def test_resolve_without_default_raises_naming_the_path():
    with pytest.raises(KeyError, match=r'a\.x'):
        dicts.resolve({'a': {}}, 'a.x')


def test_ensure_creates_parents_and_replaces_non_dicts():
    d = {'a': 'text'}
    dicts.ensure(d, 'a.b.c', 1)
    dicts.ensure(d, ('x',), 2)
    assert d == {'a': {'b': {'c': 1}}, 'x': 2}


def test_ensure_refuses_an_empty_path():
    with pytest.raises(ValueError):
        dicts.ensure({}, '', 1)


def test_remove_deletes_and_prunes_emptied_parents():
    d = {'a': {'b': {'c': 1}}, 'z': 0}
    dicts.remove(d, 'a.b.c')
    assert d == {'z': 0}


def test_remove_keeps_non_empty_parents():
    d = {'a': {'b': {'c': 1, 'd': 2}}}
    dicts.remove(d, 'a.b.c')
    assert d == {'a': {'b': {'d': 2}}}


def test_remove_of_missing_keys_is_a_noop():
    d = {'a': {'b': 1}}
    dicts.remove(d, 'a.x.y')
    dicts.remove(d, 'q')
    assert d == {'a': {'b': 1}}


def test_cherrypick_copies_present_fields_deeply():
    src = {'status': {'x': {'y': [1]}, 'other': 2}, 'spec': {}}
    dst = {'spec': {'a': 1}}
    dicts.cherrypick(src, dst, ['status.x', 'status.missing'])
    assert dst == {'spec': {'a': 1}, 'status': {'x': {'y': [1]}}}
    dst['status']['x']['y'].append(2)
    assert src['status']['x']['y'] == [1]


def test_a_copy_of_a_dict_of_strings_is_independent_of_the_original():
    labels = {'app': 'x', 'tier': 'web'}
    copied = dicts.copy_json(labels)
    copied['app'] = 'y'
    assert copied is not labels and labels == {'app': 'x', 'tier': 'web'}


def test_a_dict_with_anything_but_strings_is_copied_deeply():
    value = {'a': {'nested': ['x']}, 'b': 'y'}
    copied = dicts.copy_json(value)
    copied['a']['nested'].append('z')
    assert value == {'a': {'nested': ['x']}, 'b': 'y'}


def test_json_data_is_copied_deeply_and_its_atoms_are_shared():
    original = {'spec': {'items': [{'a': 1, 'b': [1.5, True, None]}], 'name': 'x'}}
    copied = dicts.copy_json(original)
    assert copied == original
    copied['spec']['items'][0]['b'].append('more')
    copied['spec']['name'] = 'y'
    assert original == {'spec': {'items': [{'a': 1, 'b': [1.5, True, None]}], 'name': 'x'}}
    assert copied['spec'] is not original['spec'] and copied['spec']['items'] is not original['spec']['items']


def test_what_is_not_json_within_is_copied_as_copy_deepcopy_would():
    class Box:
        def __init__(self, items):
            self.items = items
    original = {'box': Box([1, 2]), 'pair': (1, [2])}
    copied = dicts.copy_json(original)
    copied['box'].items.append(3)
    copied['pair'][1].append(3)
    assert original['box'].items == [1, 2] and original['pair'] == (1, [2])
