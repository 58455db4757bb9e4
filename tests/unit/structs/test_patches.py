import kopf
from kopf._structs import patches
from kopf._structs.patches import Patch


def test_patch_is_a_plain_dict():
    patch = kopf.Patch()
    assert isinstance(patch, dict)
    assert patch == {}


def test_annotations_write_through():
    patch = Patch()
    patch.metadata.annotations['a'] = 'b'
    patch.meta.annotations['c'] = None
    assert patch == {'metadata': {'annotations': {'a': 'b', 'c': None}}}


def test_labels_status_spec_write_through():
    patch = Patch()
    patch.meta.labels['l'] = 'v'
    patch.status['s'] = {'x': 1}
    patch.spec['f'] = 2
    assert patch == {'metadata': {'labels': {'l': 'v'}}, 'status': {'s': {'x': 1}}, 'spec': {'f': 2}}


def test_reading_does_not_create_empty_sections():
    patch = Patch()
    assert 'x' not in patch.status
    assert dict(patch.meta.annotations) == {}
    assert len(patch.spec) == 0
    assert patch == {}


def test_existing_sections_are_reused():
    patch = Patch({'metadata': {'annotations': {'a': '1'}}})
    patch.meta.annotations['b'] = '2'
    del patch.meta.annotations['a']
    assert patch == {'metadata': {'annotations': {'b': '2'}}}


def test_apply_merges_dicts_replaces_lists_and_deletes_nulls():
    target = {'a': {'b': 1, 'c': 2}, 'l': [1, 2], 'x': 'y'}
    patch = {'a': {'b': None, 'd': 3}, 'l': [3], 'x': None, 'n': {'m': None}}
    result = patches.apply(target, patch)
    assert result == {'a': {'c': 2, 'd': 3}, 'l': [3], 'n': {}}
    assert target == {'a': {'b': 1, 'c': 2}, 'l': [1, 2], 'x': 'y'}


def test_apply_of_a_non_dict_replaces_the_target():
    assert patches.apply({'a': 1}, 'text') == 'text'


def test_transformation_functions_make_a_patch_true_but_add_nothing_to_merge():
    patch = Patch()
    assert not patch and patch.fns == []
    patch.fns.append(lambda body: None)
    assert patch
    assert dict(patch) == {} and len(patch) == 0
    assert Patch({'spec': {'x': 1}})  # keys alone, as ever


def test_copies_of_a_patch_copy_the_changes_and_share_the_functions():
    import copy
    import functools
    import threading

    fn = functools.partial(lambda body, lock: None, lock=threading.Lock())  # a lock cannot be deep-copied
    patch = Patch({'spec': {'items': [1]}})
    patch.fns.append(fn)

    deep, shallow = copy.deepcopy(patch), copy.copy(patch)

    assert deep == patch and deep.fns == [fn] and deep['spec'] is not patch['spec']
    assert shallow == patch and shallow.fns == [fn] and shallow.fns is not patch.fns
