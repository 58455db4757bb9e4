import contextvars

import pytest

from kopf.structs import hierarchies

OWNER = {'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
         'metadata': {'name': 'parent', 'namespace': 'ns', 'uid': 'u-1', 'labels': {'app': 'demo'}}}


def test_adopt_prepares_a_child_for_its_owner():
    child = {'kind': 'Pod'}
    hierarchies.adopt(child, OWNER)
    assert child['metadata'] == {
        'ownerReferences': [{'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample', 'name': 'parent',
                             'uid': 'u-1', 'controller': True, 'blockOwnerDeletion': True}],
        'namespace': 'ns',
        'generateName': 'parent-',
        'labels': {'app': 'demo'},
    }


def test_adopt_keeps_what_the_child_has_and_does_not_duplicate_references():
    child = {'metadata': {'name': 'c', 'namespace': 'other', 'labels': {'app': 'mine'}}}
    hierarchies.adopt([child], OWNER)
    hierarchies.adopt([child], OWNER)
    assert child['metadata']['name'] == 'c'
    assert 'generateName' not in child['metadata']
    assert child['metadata']['namespace'] == 'other'
    assert child['metadata']['labels'] == {'app': 'mine'}
    assert len(child['metadata']['ownerReferences']) == 1


def test_adopt_labels_nested_templates():
    job = {'spec': {'template': {'metadata': {}}}}
    hierarchies.adopt(job, OWNER, nested=['spec.template'])
    assert job['spec']['template']['metadata']['labels'] == {'app': 'demo'}


def test_owner_defaults_to_the_object_being_handled():
    def inside_a_handler():
        hierarchies.owner_var.set(OWNER)
        child = {}
        hierarchies.append_owner_reference(child)
        return child

    child = contextvars.copy_context().run(inside_a_handler)
    assert child['metadata']['ownerReferences'][0]['uid'] == 'u-1'


def test_without_an_owner_outside_handlers_it_explains():
    with pytest.raises(LookupError, match='owner='):
        contextvars.Context().run(hierarchies.adopt, {})


def test_label_respects_existing_values_unless_forced():
    obj = {'metadata': {'labels': {'a': '1'}}}
    hierarchies.label(obj, {'a': '2', 'b': '2'})
    assert obj['metadata']['labels'] == {'a': '1', 'b': '2'}
    hierarchies.label(obj, {'a': '3'}, forced=True)
    assert obj['metadata']['labels']['a'] == '3'
