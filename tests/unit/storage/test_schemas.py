"""
Which status fields the storages write, and where a structural schema would prune them.
"""
import pytest

import kopf
from kopf._storage import schemas


def crd_schema(status):
    return {'type': 'object', 'properties': {'spec': {'type': 'object'}, 'status': status}}


@pytest.mark.parametrize('status, pruned', [
    ({'type': 'object'}, ('status', 'kopf')),
    ({'type': 'object', 'properties': {'phase': {'type': 'string'}}}, ('status', 'kopf')),
    ({'type': 'object', 'x-kubernetes-preserve-unknown-fields': True}, None),
    ({'type': 'object', 'properties': {'kopf': {'type': 'object', 'x-kubernetes-preserve-unknown-fields': True}}},
     None),
    ({'type': 'object', 'properties': {'kopf': {'type': 'object', 'properties': {'progress': {'type': 'object'}}}}},
     ('status', 'kopf', 'progress', '*')),
    ({'type': 'object', 'properties': {'kopf': {'type': 'object', 'properties': {'progress': {
        'type': 'object', 'additionalProperties': {'type': 'object', 'x-kubernetes-preserve-unknown-fields': True}}}}}},
     None),
])
def test_where_a_schema_prunes_the_progress(status, pruned):
    assert schemas.pruned_at(crd_schema(status), ('status', 'kopf', 'progress', None, 'started')) == pruned


def test_a_known_property_is_descended_into_even_under_preserved_fields():
    schema = {'type': 'object', 'x-kubernetes-preserve-unknown-fields': True,
              'properties': {'status': {'type': 'object'}}}
    assert schemas.pruned_at(schema, ('status', 'kopf')) == ('status', 'kopf')
    assert schemas.pruned_at(schema, ('other', 'kopf')) is None
    assert schemas.pruned_at(None, ('status', 'kopf')) is None  # no schema: nothing is pruned


def test_only_storages_that_write_into_the_status_are_checked():
    assert schemas.status_writes(kopf.SmartProgressStorage(), kopf.AnnotationsDiffBaseStorage()) == []
    writes = schemas.status_writes(
        kopf.MultiProgressStorage([kopf.AnnotationsProgressStorage(), kopf.StatusProgressStorage(name='op')]),
        kopf.StatusDiffBaseStorage(field='status.op.base'))
    assert [(w.what, w.fields) for w in writes] == [
        ('progress', (('status', 'op', 'progress'), ('status', 'op', 'dummy'))),
        ('last-handled configuration', (('status', 'op', 'base'),)),
    ]


def test_the_schema_of_the_served_version_is_used():
    crd = {'spec': {'versions': [{'name': 'v1', 'schema': {'openAPIV3Schema': {'type': 'object'}}},
                                 {'name': 'v2'}]}}
    assert schemas.version_schema(crd, 'v1') == {'type': 'object'}
    assert schemas.version_schema(crd, 'v2') is None
