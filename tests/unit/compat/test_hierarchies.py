"""
Kopf's object helpers (its "Hierarchies" page), each with the result the page shows, inside a handler.
"""
import contextvars

import pytest

import kopf
from kopf._structs import hierarchies

OWNER = {'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
         'metadata': {'name': 'kopf-example-1', 'namespace': 'default', 'uid': '6b931859',
                      'labels': {'somelabel': 'somevalue'}}}
REFERENCE = {'controller': True, 'blockOwnerDeletion': True, 'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
             'name': 'kopf-example-1', 'uid': '6b931859'}


@pytest.fixture()
def in_a_handler():
    """Run the code as if inside a handler of OWNER (the helpers' default owner)."""
    def run(fn):
        def inside():
            hierarchies.owner_var.set(OWNER)
            return fn()
        return contextvars.copy_context().run(inside)
    return run


def test_labels_as_in_kopf(in_a_handler):
    def create_fn():
        objs = [{'kind': 'Job'}, {'kind': 'Deployment', 'spec': {'template': {}}}]
        kopf.label(objs, {'label1': 'value1', 'somelabel': 'not-this'}, nested='spec.template')
        kopf.label(objs, forced=True, nested=['spec.template'])
        return objs

    labels = {'label1': 'value1', 'somelabel': 'somevalue'}
    assert in_a_handler(create_fn) == [
        {'kind': 'Job', 'metadata': {'labels': labels}},
        {'kind': 'Deployment', 'metadata': {'labels': labels}, 'spec': {'template': {'metadata': {'labels': labels}}}},
    ]


def test_owner_references_as_in_kopf(in_a_handler):
    def create_fn():
        objs = [{'kind': 'Job'}, {'kind': 'Deployment'}]
        kopf.append_owner_reference(objs)
        loose = {'kind': 'Pod'}
        kopf.append_owner_reference(loose, controller=False, block_owner_deletion=False)
        pod = {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': 'pod1', 'uid': '123'}}
        owned = {'kind': 'ConfigMap'}
        kopf.append_owner_reference(owned, pod)
        kopf.remove_owner_reference(owned, pod)
        return objs, loose, owned

    objs, loose, owned = in_a_handler(create_fn)
    assert objs == [{'kind': 'Job', 'metadata': {'ownerReferences': [REFERENCE]}},
                    {'kind': 'Deployment', 'metadata': {'ownerReferences': [REFERENCE]}}]
    assert loose['metadata']['ownerReferences'] == [{**REFERENCE, 'controller': False, 'blockOwnerDeletion': False}]
    assert not owned['metadata'].get('ownerReferences')


def test_names_and_namespaces_as_in_kopf(in_a_handler):
    def create_fn():
        generated, strict, named = [{'kind': 'Job'}], [{'kind': 'Job'}], [{'metadata': {'name': 'mine'}}]
        kopf.harmonize_naming(generated)
        kopf.harmonize_naming(strict, forced=True, strict=True)
        kopf.harmonize_naming(named, 'some-name')
        namespaced = [{'metadata': {'namespace': 'mine'}}, {}]
        kopf.adjust_namespace(namespaced)
        forced = [{'metadata': {'namespace': 'mine'}}]
        kopf.adjust_namespace(forced, forced=True)
        return generated, strict, named, namespaced, forced

    generated, strict, named, namespaced, forced = in_a_handler(create_fn)
    assert generated == [{'kind': 'Job', 'metadata': {'generateName': 'kopf-example-1-'}}]
    assert strict == [{'kind': 'Job', 'metadata': {'name': 'kopf-example-1'}}]
    assert named == [{'metadata': {'name': 'mine'}}]
    assert namespaced == [{'metadata': {'namespace': 'mine'}}, {'metadata': {'namespace': 'default'}}]
    assert forced == [{'metadata': {'namespace': 'default'}}]


def test_adopting_does_all_of_it_as_in_kopf(in_a_handler):
    def create_fn():
        objs = [{'kind': 'Job'}, {'kind': 'Deployment'}]
        kopf.adopt(objs, strict=True, forced=True, nested='spec.template')
        return objs

    metadata = {'ownerReferences': [REFERENCE], 'name': 'kopf-example-1', 'namespace': 'default',
                'labels': {'somelabel': 'somevalue'}}
    assert in_a_handler(create_fn) == [{'kind': 'Job', 'metadata': metadata},
                                       {'kind': 'Deployment', 'metadata': metadata}]
