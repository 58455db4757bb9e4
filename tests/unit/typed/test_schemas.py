"""
Python types -> structural OpenAPI v3 schemas: a table of what each type becomes in a CRD, and what is refused.

Each row is a field's type (and its pydantic options) and the schema that
the CRD gets for it; the refused types fail with one line that names the
class and the field.
"""
from __future__ import annotations

import datetime
import enum
import uuid
from typing import Any, Literal

import pydantic
import pytest

from kopf._typed import crds, schemas
from kopf.typed import CustomResource, SchemaError


class Colour(enum.Enum):
    RED = 'red'
    BLUE = 'blue'


class Inner(pydantic.BaseModel):
    name: str
    size: int = 0


class Open(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra='allow')
    name: str = ''


def field_schema(annotation: Any, default: Any = ..., **options: Any) -> dict[str, Any]:
    """The structural schema of one field ``x`` of a spec model, as the CRD has it."""
    field = pydantic.Field(default, **options)
    spec = pydantic.create_model('Spec', x=(annotation, field))
    document = spec.model_json_schema(by_alias=True, mode='validation')
    return schemas.structural(document, path='Thing.spec')['properties']['x']


TABLE = [
    # (type, pydantic options, the schema)
    (str, {}, {'type': 'string'}),
    (int, {}, {'type': 'integer'}),
    (float, {}, {'type': 'number'}),
    (bool, {}, {'type': 'boolean'}),
    (int, {'ge': 1, 'le': 10}, {'type': 'integer', 'minimum': 1, 'maximum': 10}),
    (int, {'gt': 0, 'lt': 5}, {'type': 'integer', 'minimum': 0, 'exclusiveMinimum': True, 'maximum': 5,
                               'exclusiveMaximum': True}),
    (int, {'multiple_of': 2}, {'type': 'integer', 'multipleOf': 2}),
    (str, {'min_length': 1, 'max_length': 8, 'pattern': '^a'},
     {'type': 'string', 'minLength': 1, 'maxLength': 8, 'pattern': '^a'}),
    (str, {'description': 'what it is'}, {'type': 'string', 'description': 'what it is'}),
    (Literal['fast', 'safe'], {}, {'type': 'string', 'enum': ['fast', 'safe']}),
    (Literal[1, 2], {}, {'type': 'integer', 'enum': [1, 2]}),
    (Literal['only'], {}, {'type': 'string', 'enum': ['only']}),
    (Colour, {}, {'type': 'string', 'enum': ['red', 'blue']}),
    (datetime.datetime, {}, {'type': 'string', 'format': 'date-time'}),
    (datetime.date, {}, {'type': 'string', 'format': 'date'}),
    (datetime.timedelta, {}, {'type': 'string'}),  # ISO 8601 durations are not the server's (Go) durations
    (uuid.UUID, {}, {'type': 'string', 'format': 'uuid'}),
    (str | None, {}, {'type': 'string', 'nullable': True}),
    (int | str, {}, {'x-kubernetes-int-or-string': True}),
    (list[str], {}, {'type': 'array', 'items': {'type': 'string'}}),
    (list[int], {'min_length': 1, 'max_length': 3}, {'type': 'array', 'items': {'type': 'integer'},
                                                     'minItems': 1, 'maxItems': 3}),
    (set[str], {}, {'type': 'array', 'items': {'type': 'string'}, 'x-kubernetes-list-type': 'set'}),
    (dict[str, int], {}, {'type': 'object', 'additionalProperties': {'type': 'integer'}}),
    (dict[str, Any], {}, {'type': 'object', 'x-kubernetes-preserve-unknown-fields': True}),
    (Any, {}, {'x-kubernetes-preserve-unknown-fields': True}),
    (Inner, {}, {'type': 'object', 'properties': {'name': {'type': 'string'},
                                                  'size': {'type': 'integer', 'default': 0}}, 'required': ['name']}),
    (Inner | None, {}, {'type': 'object', 'nullable': True, 'required': ['name'],
                        'properties': {'name': {'type': 'string'}, 'size': {'type': 'integer', 'default': 0}}}),
    (Open, {}, {'type': 'object', 'properties': {'name': {'type': 'string', 'default': ''}},
                'x-kubernetes-preserve-unknown-fields': True}),
    (list[Inner], {}, {'type': 'array', 'items': {'type': 'object', 'required': ['name'], 'properties': {
        'name': {'type': 'string'}, 'size': {'type': 'integer', 'default': 0}}}}),
]


@pytest.mark.parametrize('annotation, options, expected', TABLE, ids=[str(row[0]) for row in TABLE])
def test_a_python_type_becomes_its_structural_schema(annotation, options, expected):
    assert field_schema(annotation, **options) == expected


@pytest.mark.parametrize('annotation, default, expected', [
    (int, 3, {'type': 'integer', 'default': 3}),
    (str, 'x', {'type': 'string', 'default': 'x'}),
    (Literal['a', 'b'], 'b', {'type': 'string', 'enum': ['a', 'b'], 'default': 'b'}),
    (list[str], [], {'type': 'array', 'items': {'type': 'string'}, 'default': []}),
    (str | None, None, {'type': 'string', 'nullable': True}),  # absent means None: no default needed
    (Colour, Colour.BLUE, {'type': 'string', 'enum': ['red', 'blue'], 'default': 'blue'}),
])
def test_defaults_go_into_the_schema(annotation, default, expected):
    assert field_schema(annotation, default) == expected


def test_required_fields_are_required_and_optional_ones_are_not():
    class Spec(pydantic.BaseModel):
        must: str
        may: str = ''
        maybe: str | None = None

    schema = schemas.structural(Spec.model_json_schema(), path='X.spec')
    assert schema['required'] == ['must']


def test_extensions_given_by_the_model_are_kept():
    schema = field_schema(list[str], json_schema_extra={'x-kubernetes-list-type': 'atomic'})
    assert schema['x-kubernetes-list-type'] == 'atomic'


@pytest.mark.parametrize('annotation, words', [
    (tuple[int, str], "a tuple cannot be a structural schema"),
    (int | Inner, "a union of integer, Inner cannot be a structural schema"),
    (Inner | Open, "a union of Inner, Open cannot be a structural schema"),
])
def test_what_cannot_be_structural_is_refused_naming_the_field(annotation, words):
    with pytest.raises(SchemaError) as e:
        field_schema(annotation)
    assert str(e.value).startswith('Thing.spec.x: ')
    assert words in str(e.value)


class Node(pydantic.BaseModel):
    name: str
    children: list[Node] = []


def test_a_recursive_model_is_refused_naming_the_class_and_the_field():
    class Tree(CustomResource, group='example.com', version='v1'):
        spec: Node

    with pytest.raises(SchemaError) as e:
        crds.crds([Tree])
    message = str(e.value)
    assert message.startswith('test_a_recursive_model_is_refused_naming_the_class_and_the_field.<locals>.Tree.spec'
                              '.children[]: the model Node contains itself')
    assert '\n' not in message


@pytest.mark.parametrize('annotation', [dict, dict[str, Any], Any])
def test_an_untyped_spec_is_refused_naming_the_class(annotation):
    class Loose(CustomResource, group='example.com', version='v1'):
        spec: annotation  # type: ignore[valid-type]

    with pytest.raises(SchemaError) as e:
        crds.crds([Loose])
    assert 'Loose.spec is an untyped dict' in str(e.value)
    assert "extra='allow'" in str(e.value)


def test_a_spec_model_with_extra_fields_allowed_keeps_unknown_fields():
    class Free(CustomResource, group='example.com', version='v1'):
        spec: Open

    schema = crds.root_schema(Free)
    assert schema['properties']['spec']['x-kubernetes-preserve-unknown-fields'] is True


def test_a_strict_model_does_not_keep_unknown_fields():
    class Strict(CustomResource, group='example.com', version='v1'):
        spec: Inner

    schema = crds.root_schema(Strict)
    assert 'x-kubernetes-preserve-unknown-fields' not in schema['properties']['spec']
