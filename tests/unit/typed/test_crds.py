"""The CRDs of typed classes: names, scope, versions, the status subresource, printer columns; bad declarations."""
from __future__ import annotations

import pydantic
import pytest

import kopf
from kopf._typed import crds
from kopf._typed.models import pluralize
from kopf.typed import Condition, CustomResource, PrinterColumn, SchemaError


class Spec(pydantic.BaseModel):
    image: str
    replicas: int = pydantic.Field(1, ge=1, le=10, description="How many pods.")
    since: str = pydantic.Field('', json_schema_extra={'format': 'date-time'})


class Status(pydantic.BaseModel):
    conditions: list[Condition] = []


def test_a_class_makes_a_crd_with_its_names_scope_and_schema():
    class MyApp(CustomResource, group='example.com', version='v1', short_names=['ma'], categories=['all'],
                scope='Cluster'):
        spec: Spec

    crd, = crds.crds([MyApp])
    assert crd['metadata']['name'] == 'myapps.example.com'
    assert crd['spec']['group'] == 'example.com'
    assert crd['spec']['scope'] == 'Cluster'
    assert crd['spec']['names'] == {'kind': 'MyApp', 'plural': 'myapps', 'singular': 'myapp', 'listKind': 'MyAppList',
                                    'shortNames': ['ma'], 'categories': ['all']}
    version, = crd['spec']['versions']
    assert version['name'] == 'v1' and version['served'] is True and version['storage'] is True
    assert 'subresources' not in version  # no status field, no status subresource
    schema = version['schema']['openAPIV3Schema']
    assert schema['required'] == ['spec']
    assert schema['properties']['spec']['required'] == ['image']


def test_a_status_field_makes_the_status_subresource():
    class WithStatus(CustomResource, group='example.com', version='v1'):
        spec: Spec
        status: Status = Status()

    version, = crds.crds([WithStatus])[0]['spec']['versions']
    assert version['subresources'] == {'status': {}}
    assert 'conditions' in version['schema']['openAPIV3Schema']['properties']['status']['properties']
    assert WithStatus.kopf_has_conditions()


def test_printer_columns_take_their_types_and_descriptions_from_the_schema():
    class Shown(CustomResource, group='example.com', version='v1', printer_columns=[
            PrinterColumn('Replicas', '.spec.replicas'), PrinterColumn('Since', '.spec.since'),
            PrinterColumn('Image', '.spec.image', priority=1), PrinterColumn('Age', '.metadata.creationTimestamp',
                                                                             type='date')]):
        spec: Spec

    version, = crds.crds([Shown])[0]['spec']['versions']
    assert version['additionalPrinterColumns'] == [
        {'name': 'Replicas', 'type': 'integer', 'jsonPath': '.spec.replicas', 'description': 'How many pods.'},
        {'name': 'Since', 'type': 'date', 'jsonPath': '.spec.since'},
        {'name': 'Image', 'type': 'string', 'jsonPath': '.spec.image', 'priority': 1},
        {'name': 'Age', 'type': 'date', 'jsonPath': '.metadata.creationTimestamp'},
    ]


def test_a_printer_column_of_an_unknown_field_is_refused_naming_it():
    class Wrong(CustomResource, group='example.com', version='v1',
                printer_columns=[PrinterColumn('Size', '.spec.size')]):
        spec: Spec

    with pytest.raises(SchemaError, match=r"Wrong: the printer column 'Size' shows \.spec\.size, which is not"):
        crds.crds([Wrong])


def test_several_versions_of_a_kind_make_one_crd_with_one_storage_version():
    class AppV1(CustomResource, group='example.com', version='v1', kind='App', storage=True):
        spec: Spec

    class AppV2(CustomResource, group='example.com', version='v2', kind='App'):
        spec: Spec

    crd, = crds.crds([AppV1, AppV2])
    assert [(v['name'], v['storage']) for v in crd['spec']['versions']] == [('v1', True), ('v2', False)]


def test_several_versions_without_a_storage_version_are_refused_naming_them():
    class BV1(CustomResource, group='example.com', version='v1', kind='B'):
        spec: Spec

    class BV2(CustomResource, group='example.com', version='v2', kind='B'):
        spec: Spec

    with pytest.raises(SchemaError, match=r"B\.example\.com has 2 versions \(.*BV1, .*BV2\), and none of them is "
                                          r"the storage version: mark exactly one with storage=True"):
        crds.crds([BV1, BV2])


def test_two_classes_claiming_one_group_kind_and_version_are_refused_with_both_names():
    class First(CustomResource, group='example.com', version='v1', kind='Same'):
        spec: Spec

    class Second(CustomResource, group='example.com', version='v1', kind='Same'):
        spec: Spec

    with pytest.raises(SchemaError) as e:
        crds.crds([First, Second])
    assert 'First and ' in str(e.value) and 'Second both claim Same.example.com in the version v1' in str(e.value)


def test_versions_that_disagree_on_their_names_are_refused():
    class CV1(CustomResource, group='example.com', version='v1', kind='C', storage=True):
        spec: Spec

    class CV2(CustomResource, group='example.com', version='v2', kind='C', scope='Cluster'):
        spec: Spec

    with pytest.raises(SchemaError, match="differ in scope"):
        crds.crds([CV1, CV2])


@pytest.mark.parametrize('keywords, words', [
    ({'group': 'nodot', 'version': 'v1'}, "group='nodot' must be a DNS name with a dot"),
    ({'group': 'example.com', 'version': '1'}, "version='1' must be a Kubernetes version"),
    ({'group': 'example.com', 'version': 'v1', 'kind': 'lower'}, "kind='lower' must be a CamelCase name"),
    ({'group': 'example.com', 'version': 'v1', 'plural': 'Apps'}, "plural: 'Apps' must be a lowercase name"),
    ({'group': 'example.com', 'version': 'v1', 'scope': 'Global'}, "scope='Global' must be one of"),
    ({'group': 'example.com', 'version': 'v1', 'short_names': 'ma'}, "lists of names"),
])
def test_wrong_class_keywords_fail_at_the_class(keywords, words):
    with pytest.raises(TypeError) as e:
        class Bad(CustomResource, **keywords):
            spec: Spec
    assert 'The typed resource ' in str(e.value) and words in str(e.value)


@pytest.mark.parametrize('kind, plural', [('myapp', 'myapps'), ('policy', 'policies'), ('box', 'boxes'),
                                          ('gateway', 'gateways'), ('match', 'matches')])
def test_plurals(kind, plural):
    assert pluralize(kind) == plural


def test_a_typed_class_names_its_resource_in_the_decorators():
    class Deco(CustomResource, group='example.com', version='v1beta1', plural='decos'):
        spec: Spec

    registry = kopf.OperatorRegistry()
    kopf.on.create(Deco, registry=registry)(lambda **_: None)
    selector, = registry.selectors
    assert (selector.group, selector.version, selector.plural, selector.model) == ('example.com', 'v1beta1',
                                                                                   'decos', Deco)


def test_a_base_class_without_group_is_not_a_resource():
    class Base(CustomResource):
        pass

    with pytest.raises(TypeError, match="Base is not a resource: give it group= and version="):
        Base.kopf_declaration()


def test_validation_tells_which_field_and_what_was_expected():
    class Val(CustomResource, group='example.com', version='v1'):
        spec: Spec

    invalid = Val.kopf_validate({'spec': {'replicas': 20}, 'status': {'anything': 'is not validated'}})
    assert not invalid.valid
    assert invalid.problems == ("spec.image: Field required; "
                                "spec.replicas: Input should be less than or equal to 10 (got 20)")
    valid = Val.kopf_validate({'spec': {'image': 'nginx'}, 'status': {'anything': 1}})
    assert valid.valid and valid.spec == Spec(image='nginx')
