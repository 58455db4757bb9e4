import pytest

import kopf
from kopf._structs.bodies import Body

RAW = {
    'apiVersion': 'kopf.dev/v1',
    'kind': 'KopfExample',
    'metadata': {
        'name': 'ex1', 'namespace': 'ns1', 'uid': 'u-1', 'resourceVersion': '42',
        'labels': {'l': 'v'}, 'annotations': {'a': 'b'}, 'finalizers': ['x', 'y'],
        'deletionTimestamp': '2020-01-01T00:00:00Z',
    },
    'spec': {'field': 'value'},
    'status': {'s': 1},
}


def test_body_is_exported_and_wraps_a_raw_dict():
    body = kopf.Body(RAW)
    assert body['spec'] == {'field': 'value'}
    assert dict(body) == RAW


def test_meta_shortcuts():
    meta = Body(RAW).metadata
    assert Body(RAW).meta == meta
    assert meta.name == 'ex1'
    assert meta.namespace == 'ns1'
    assert meta.uid == 'u-1'
    assert meta.labels == {'l': 'v'}
    assert meta.annotations == {'a': 'b'}
    assert meta.finalizers == ('x', 'y')
    assert meta.deletion_timestamp == '2020-01-01T00:00:00Z'
    assert meta.resource_version == '42'


def test_spec_and_status_views():
    body = Body(RAW)
    assert body.spec == {'field': 'value'}
    assert body.status == {'s': 1}


def test_spec_status_and_meta_are_the_public_types_handlers_are_annotated_with():
    body = Body(RAW)
    assert isinstance(body.spec, kopf.Spec)
    assert isinstance(body.status, kopf.Status)
    assert isinstance(body.metadata, kopf.Meta)
    assert not isinstance(body.spec, kopf.Status)


def test_missing_sections_are_empty():
    body = Body({})
    assert body.spec == {}
    assert body.status == {}
    assert body.metadata.annotations == {}
    assert body.metadata.finalizers == ()
    assert body.metadata.name is None


def test_views_are_read_only():
    body = Body(RAW)
    with pytest.raises(TypeError):
        body['spec'] = {}  # type: ignore[index]
    with pytest.raises(TypeError):
        body.metadata.annotations['x'] = 'y'  # type: ignore[index]


def test_views_are_live_over_the_raw_dict():
    raw = {'metadata': {'annotations': {}}}
    body = Body(raw)
    raw['metadata']['annotations']['k'] = 'v'
    assert body.metadata.annotations == {'k': 'v'}


def test_describe_names_the_object():
    assert Body(RAW).describe() == 'KopfExample ns1/ex1'
    assert Body({'metadata': {'name': 'n'}}).describe() == 'n'


def test_views_carry_no_per_instance_dict():
    # Several views exist per handled object at any time; a __dict__ each would double their size.
    body = Body({'metadata': {'name': 'n', 'labels': {}}, 'spec': {}})
    for view in (body, body.metadata, body.metadata.labels, body.spec):
        assert not hasattr(view, '__dict__')


def test_views_can_be_referenced_weakly():
    import weakref
    body = Body({'metadata': {'name': 'n'}})
    assert weakref.ref(body)() is body
