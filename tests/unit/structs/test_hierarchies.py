import contextvars

import pytest

import kopf
from kopf._structs import hierarchies

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


@pytest.mark.parametrize('helper', [
    hierarchies.adopt, hierarchies.append_owner_reference, hierarchies.remove_owner_reference,
    hierarchies.harmonize_naming, hierarchies.adjust_namespace, hierarchies.label,
])
def test_without_an_owner_outside_handlers_it_explains(helper):
    with pytest.raises(LookupError, match='owner='):
        contextvars.Context().run(helper, {})


def test_label_respects_existing_values_unless_forced():
    obj = {'metadata': {'labels': {'a': '1'}}}
    hierarchies.label(obj, {'a': '2', 'b': '2'})
    assert obj['metadata']['labels'] == {'a': '1', 'b': '2'}
    hierarchies.label(obj, {'a': '3'}, forced=True)
    assert obj['metadata']['labels']['a'] == '3'


def test_label_defaults_to_the_labels_of_the_object_being_handled():
    def inside_a_handler():
        hierarchies.owner_var.set(OWNER)
        obj = {}
        hierarchies.label(obj)
        return obj

    assert contextvars.copy_context().run(inside_a_handler)['metadata']['labels'] == {'app': 'demo'}


def test_label_older_spelling_force_still_forces():
    obj = {'metadata': {'labels': {'a': '1'}}}
    hierarchies.label(obj, {'a': '2'}, force=True)
    assert obj['metadata']['labels'] == {'a': '2'}


def test_label_nested_objects_only_where_they_exist():
    job = {'spec': {'template': {}}}
    bare = {}
    hierarchies.label([job, bare], {'x': '1'}, nested='spec.template')
    assert job['spec']['template']['metadata']['labels'] == {'x': '1'}
    assert bare == {'metadata': {'labels': {'x': '1'}}}


def test_build_object_reference():
    assert hierarchies.build_object_reference(OWNER) == {
        'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample', 'name': 'parent', 'uid': 'u-1', 'namespace': 'ns'}
    cluster_scoped = {'apiVersion': 'v1', 'kind': 'Namespace', 'metadata': {'name': 'n', 'uid': 'u'}}
    assert 'namespace' not in hierarchies.build_object_reference(cluster_scoped)


def test_build_owner_reference_leaves_unset_flags_out():
    assert hierarchies.build_owner_reference(OWNER) == {
        'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample', 'name': 'parent', 'uid': 'u-1',
        'controller': True, 'blockOwnerDeletion': True}
    ref = hierarchies.build_owner_reference(OWNER, controller=False, block_owner_deletion=None)
    assert ref['controller'] is False
    assert 'blockOwnerDeletion' not in ref


def test_remove_owner_reference_keeps_other_owners():
    other = {'apiVersion': 'v1', 'kind': 'X', 'name': 'x', 'uid': 'u-2'}
    child = {'metadata': {'ownerReferences': [hierarchies.build_owner_reference(OWNER), other]}}
    hierarchies.remove_owner_reference(child, OWNER)
    assert child['metadata']['ownerReferences'] == [other]
    unowned = {'metadata': {}}
    hierarchies.remove_owner_reference(unowned, OWNER)
    assert unowned == {'metadata': {}}


@pytest.mark.parametrize('meta, kwargs, expected', [
    ({}, {}, {'generateName': 'parent-'}),
    ({}, {'strict': True}, {'name': 'parent'}),
    ({'name': 'mine'}, {}, {'name': 'mine'}),
    ({'generateName': 'mine-'}, {'strict': True}, {'generateName': 'mine-'}),
    ({'name': 'mine'}, {'forced': True}, {'generateName': 'parent-'}),
    ({'generateName': 'mine-'}, {'forced': True, 'strict': True}, {'name': 'parent'}),
])
def test_harmonize_naming(meta, kwargs, expected):
    obj = {'metadata': dict(meta)}
    hierarchies.harmonize_naming(obj, 'parent', **kwargs)
    assert obj['metadata'] == expected


def test_harmonize_naming_needs_a_name():
    with pytest.raises(LookupError, match='name'):
        hierarchies.harmonize_naming({}, None)


@pytest.mark.parametrize('meta, namespace, forced, expected', [
    ({}, 'ns', False, {'namespace': 'ns'}),
    ({'namespace': 'mine'}, 'ns', False, {'namespace': 'mine'}),
    ({'namespace': 'mine'}, 'ns', True, {'namespace': 'ns'}),
    ({}, None, False, {}),
    ({'namespace': 'mine'}, None, False, {'namespace': 'mine'}),
    ({'namespace': 'mine'}, None, True, {}),
])
def test_adjust_namespace(meta, namespace, forced, expected):
    obj = {'metadata': dict(meta)}
    hierarchies.adjust_namespace(obj, namespace, forced=forced)
    assert obj['metadata'] == expected


def test_adopt_forced_replaces_what_the_child_has():
    child = {'metadata': {'name': 'c', 'namespace': 'other', 'labels': {'app': 'mine'}}}
    hierarchies.adopt(child, OWNER, forced=True)
    assert child['metadata']['generateName'] == 'parent-'
    assert 'name' not in child['metadata']
    assert child['metadata']['namespace'] == 'ns'
    assert child['metadata']['labels'] == {'app': 'demo'}


def test_adopt_strict_names_the_child_exactly_like_its_owner():
    child = {}
    hierarchies.adopt(child, OWNER, strict=True)
    assert child['metadata']['name'] == 'parent'


def test_adopt_of_a_cluster_scoped_owner_adds_no_namespace():
    child = {}
    hierarchies.adopt(child, {'apiVersion': 'v1', 'kind': 'Namespace', 'metadata': {'name': 'n', 'uid': 'u'}})
    assert 'namespace' not in child['metadata']
    assert child['metadata']['ownerReferences'][0]['kind'] == 'Namespace'


def test_pykube_like_objects_are_modified_in_their_raw_dict():
    class PykubeLike:
        def __init__(self):
            self.obj = {'kind': 'Pod'}

    child = PykubeLike()
    hierarchies.adopt([child], OWNER)
    assert child.obj['metadata']['generateName'] == 'parent-'


@pytest.mark.parametrize('objs', [42, 'a string', kopf.Body({'metadata': {}}), [{}, 42]])
def test_unsupported_objects_are_refused_with_the_type(objs):
    with pytest.raises(TypeError, match='Cannot modify'):
        hierarchies.adopt(objs, OWNER)


def test_helpers_are_public_under_kopf():
    assert kopf.adopt is hierarchies.adopt
    assert kopf.build_owner_reference is hierarchies.build_owner_reference
    assert kopf.remove_owner_reference is hierarchies.remove_owner_reference
    assert kopf.harmonize_naming is hierarchies.harmonize_naming
    assert kopf.adjust_namespace is hierarchies.adjust_namespace


# The models of the official clients, as Kopf's users create children with them.

@pytest.fixture(params=['kubernetes', 'kubernetes_asyncio'])
def client(request):
    """The models of one of the official clients (``kubernetes`` builds them on pydantic, the other not)."""
    return pytest.importorskip(request.param).client


async def test_adopt_prepares_a_model_of_the_official_clients(client):
    pod = client.V1Pod()
    hierarchies.adopt(pod, OWNER)
    assert isinstance(pod.metadata, client.V1ObjectMeta)
    assert (pod.metadata.namespace, pod.metadata.generate_name, pod.metadata.name) == ('ns', 'parent-', None)
    assert pod.metadata.labels == {'app': 'demo'}
    ref, = pod.metadata.owner_references
    assert isinstance(ref, client.V1OwnerReference)
    assert (ref.api_version, ref.kind, ref.name, ref.uid, ref.controller, ref.block_owner_deletion) == (
        'kopf.dev/v1', 'KopfExample', 'parent', 'u-1', True, True)
    api = client.ApiClient()  # as the client sends it
    assert api.sanitize_for_serialization(pod)['metadata']['ownerReferences'][0]['blockOwnerDeletion'] is True
    closing = api.close()
    if closing is not None:
        await closing


def test_a_model_keeps_what_it_has_and_gets_one_reference_per_owner(client):
    pod = client.V1Pod(metadata=client.V1ObjectMeta(name='x', namespace='other', labels={'app': 'mine'}))
    hierarchies.adopt(pod, OWNER)
    hierarchies.adopt(pod, OWNER)
    assert (pod.metadata.name, pod.metadata.generate_name, pod.metadata.namespace) == ('x', None, 'other')
    assert pod.metadata.labels == {'app': 'mine'}
    assert len(pod.metadata.owner_references) == 1
    hierarchies.remove_owner_reference(pod, OWNER)
    assert pod.metadata.owner_references == []


def test_the_other_helpers_change_models_as_dicts(client):
    pod = client.V1Pod(metadata=client.V1ObjectMeta(name='x', namespace='other'))
    hierarchies.harmonize_naming(pod, 'n1', strict=True, forced=True)
    hierarchies.adjust_namespace(pod, 'ns2', forced=True)
    hierarchies.label([pod], {'a': 'b'})
    assert (pod.metadata.name, pod.metadata.generate_name, pod.metadata.namespace) == ('n1', None, 'ns2')
    assert pod.metadata.labels == {'a': 'b'}


def test_nested_templates_of_models_are_labelled(client):
    job = client.V1Job(spec=client.V1JobSpec(template=client.V1PodTemplateSpec()))
    hierarchies.label(job, {'a': 'b'}, nested='spec.template')
    assert job.metadata.labels == {'a': 'b'}
    assert job.spec.template.metadata.labels == {'a': 'b'}


def test_a_model_can_be_the_owner(client):
    owner = client.V1Pod(api_version='v1', kind='Pod', metadata=client.V1ObjectMeta(
        name='p', namespace='n', uid='u-2', labels={'x': 'y'}))
    child = {}
    hierarchies.adopt(child, owner)
    assert child['metadata'] == {
        'ownerReferences': [{'apiVersion': 'v1', 'kind': 'Pod', 'name': 'p', 'uid': 'u-2', 'controller': True,
                             'blockOwnerDeletion': True}],
        'generateName': 'p-', 'namespace': 'n', 'labels': {'x': 'y'}}


def test_pykube_objects_are_changed_in_their_dicts():
    pykube = pytest.importorskip('pykube')
    pod = pykube.Pod(None, {'metadata': {}})
    hierarchies.adopt(pod, OWNER)
    assert pod.obj['metadata']['generateName'] == 'parent-'
    assert pod.obj['metadata']['ownerReferences'][0]['uid'] == 'u-1'


@pytest.mark.parametrize('obj', [object(), 'a string', 42, kopf.Body({})])
def test_other_objects_are_refused_with_what_is_accepted(obj):
    with pytest.raises(TypeError, match='kubernetes'):
        hierarchies.adopt(obj, OWNER)
