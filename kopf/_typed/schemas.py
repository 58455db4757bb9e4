"""
Structural OpenAPI v3 schemas (what a CustomResourceDefinition holds) from the JSON schemas of pydantic models.

The API server accepts only *structural* schemas: every node has a type
(except where unknown fields are kept, or for int-or-string), no ``$ref``,
no unions of types, no tuples, no ``uniqueItems``. Whatever the server does
not know is pruned from the objects, silently. So the translation keeps
every constraint the server can check (required fields, defaults, enums,
formats it knows, ranges, lengths, patterns), marks
``x-kubernetes-preserve-unknown-fields`` only where the model itself takes
unknown fields (``extra='allow'``, ``dict[str, Any]``, ``Any``), and refuses
what cannot be expressed with one line that names the class and the field,
and what to do instead.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# The JSON schema keywords that mean the same in the API server's schemas, copied as they are.
_KEPT = ('description', 'enum', 'minimum', 'maximum', 'multipleOf', 'minLength', 'maxLength', 'pattern',
         'minItems', 'maxItems', 'minProperties', 'maxProperties')

# The formats that the API server knows (others are dropped: the server would ignore or refuse them).
# 'duration' is not among them: the server means Go's durations (1h30m), pydantic writes ISO 8601 (PT1H30M).
FORMATS = frozenset({'date', 'date-time', 'uuid', 'uuid3', 'uuid4', 'uuid5', 'email', 'hostname', 'ipv4', 'ipv6',
                     'uri', 'cidr', 'mac', 'byte', 'password', 'int32', 'int64', 'float', 'double'})

_SCALARS = frozenset({'string', 'integer', 'number', 'boolean'})


class SchemaError(Exception):
    """A model cannot be a structural schema; the message names the class and the field, and what to do."""


def structural(schema: Mapping[str, Any], *, path: str) -> dict[str, Any]:
    """The structural schema of a JSON schema (with its ``$defs``); ``path`` names it in errors (``MyApp.spec``)."""
    return _Converter(schema.get('$defs') or {}).convert(schema, path=path, stack=())


def is_untyped(schema: Mapping[str, Any]) -> bool:
    """Whether a (field's) JSON schema is a free-form value: no model, no type, or a dict of anything."""
    if '$ref' in schema or 'allOf' in schema or 'anyOf' in schema or 'oneOf' in schema:
        return False
    kind = schema.get('type')
    if kind is None:
        return True
    return kind == 'object' and not schema.get('properties') and schema.get('additionalProperties', True) is True


class _Converter:
    def __init__(self, defs: Mapping[str, Any]) -> None:
        self.defs = defs

    def convert(self, node: Mapping[str, Any], *, path: str, stack: tuple[str, ...]) -> dict[str, Any]:
        if '$ref' in node:
            return self._ref(node, path=path, stack=stack)
        if 'allOf' in node and len(node['allOf']) == 1:  # pydantic's way to add a default or a description to a ref
            return {**self.convert(node['allOf'][0], path=path, stack=stack), **_annotations(node)}
        if 'allOf' in node:
            raise SchemaError(f"{path}: an intersection of schemas (allOf) cannot be a structural schema; "
                              f"declare one model for the field.")
        if 'anyOf' in node or 'oneOf' in node or isinstance(node.get('type'), list):
            return self._union(node, path=path, stack=stack)
        if 'prefixItems' in node:
            raise SchemaError(f"{path}: a tuple cannot be a structural schema (its items differ by position); "
                              f"use a list of one type, or a model with named fields.")
        kind = node.get('type')
        if kind is None and 'const' in node:
            return {'type': _type_of(node['const'], path), 'enum': [node['const']], **_annotations(node)}
        if kind is None and 'enum' in node:
            return {'type': _type_of(node['enum'][0], path), **_constraints(node, path)}
        if kind is None:
            return {'x-kubernetes-preserve-unknown-fields': True, **_annotations(node)}
        if kind == 'object':
            return self._object(node, path=path, stack=stack)
        if kind == 'array':
            return self._array(node, path=path, stack=stack)
        if kind in _SCALARS:
            result: dict[str, Any] = {'type': kind, **_constraints(node, path)}
            if 'const' in node:
                result['enum'] = [node['const']]
            return result
        raise SchemaError(f"{path}: the type {kind!r} cannot be a field of a structural schema (e.g. a field that is "
                          f"always None); give the field a type.")

    def _ref(self, node: Mapping[str, Any], *, path: str, stack: tuple[str, ...]) -> dict[str, Any]:
        name = str(node['$ref']).rsplit('/', 1)[-1]
        if name in stack:
            raise SchemaError(f"{path}: the model {name} contains itself (a recursive model), which a structural "
                              f"schema cannot describe; cut the recursion at a fixed depth, or make the field a "
                              f"dict[str, Any] (kept as it is, unvalidated by the server).")
        target = self.defs.get(name)
        if target is None:
            raise SchemaError(f"{path}: the schema refers to {name}, which it does not define.")
        return {**self.convert(target, path=path, stack=(*stack, name)), **_annotations(node)}

    def _union(self, node: Mapping[str, Any], *, path: str, stack: tuple[str, ...]) -> dict[str, Any]:
        if isinstance(node.get('type'), list):
            options: Sequence[Mapping[str, Any]] = [{**node, 'type': kind} for kind in node['type']]
        else:
            options = node.get('anyOf') or node.get('oneOf') or []
        nulls = [option for option in options if option.get('type') == 'null']
        rest = [option for option in options if option.get('type') != 'null']
        if len(rest) == 1:
            converted = self.convert(rest[0], path=path, stack=stack)
            return {**converted, **({'nullable': True} if nulls else {}), **_annotations(node)}
        kinds = sorted(str(option.get('type')) for option in rest)
        if kinds == ['integer', 'string'] and all(set(option) <= {'type'} for option in rest):
            return {'x-kubernetes-int-or-string': True, **({'nullable': True} if nulls else {}), **_annotations(node)}
        shown = ', '.join(_describe(option) for option in rest)
        raise SchemaError(f"{path}: a union of {shown} cannot be a structural schema (a field has one type); use "
                          f"one model with optional fields, or int | str (an int-or-string).")

    def _object(self, node: Mapping[str, Any], *, path: str, stack: tuple[str, ...]) -> dict[str, Any]:
        result: dict[str, Any] = {'type': 'object', **_constraints(node, path)}
        properties = node.get('properties') or {}
        if properties:
            result['properties'] = {key: self.convert(value, path=f"{path}.{key}", stack=stack)
                                    for key, value in properties.items()}
            required = [key for key in node.get('required') or [] if key in properties]
            if required:
                result['required'] = required
        additional = node.get('additionalProperties')
        if isinstance(additional, Mapping) and not properties and additional:
            result['additionalProperties'] = self.convert(additional, path=f"{path}.*", stack=stack)
        elif isinstance(additional, Mapping) and additional:
            raise SchemaError(f"{path}: a model with typed extra fields cannot be a structural schema (a node has "
                              f"either properties or additionalProperties); nest the extras in a dict field.")
        elif additional is True or (not properties and additional is None) or additional == {}:
            result['x-kubernetes-preserve-unknown-fields'] = True  # the model takes unknown fields: keep them
        return result

    def _array(self, node: Mapping[str, Any], *, path: str, stack: tuple[str, ...]) -> dict[str, Any]:
        items = node.get('items')
        if not isinstance(items, Mapping):
            raise SchemaError(f"{path}: a list without a type of its items cannot be a structural schema; "
                              f"give it one, e.g. list[str] (or list[dict[str, Any]] for free-form items).")
        result: dict[str, Any] = {'type': 'array', **_constraints(node, path),
                                  'items': self.convert(items, path=f"{path}[]", stack=stack)}
        if node.get('uniqueItems') and result['items'].get('type') in _SCALARS:
            result['x-kubernetes-list-type'] = 'set'  # the server's own uniqueness (uniqueItems is not allowed)
        return result


def _annotations(node: Mapping[str, Any]) -> dict[str, Any]:
    """What a node says about a field besides its type: its description and default, and our extensions."""
    result: dict[str, Any] = {}
    if node.get('description'):
        result['description'] = node['description']
    if 'default' in node and node['default'] is not None:
        result['default'] = node['default']
    result.update({key: value for key, value in node.items() if key.startswith('x-kubernetes-')})
    return result


def _constraints(node: Mapping[str, Any], path: str) -> dict[str, Any]:
    result: dict[str, Any] = {key: node[key] for key in _KEPT if key in node}
    if node.get('format') in FORMATS:
        result['format'] = node['format']
    for exclusive, bound in (('exclusiveMinimum', 'minimum'), ('exclusiveMaximum', 'maximum')):
        value = node.get(exclusive)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            result[bound] = value  # JSON schema's number is OpenAPI v3.0's boolean beside the bound
            result[exclusive] = True
    result.update(_annotations(node))
    return result


def _type_of(value: Any, path: str) -> str:
    if isinstance(value, bool):
        return 'boolean'
    if isinstance(value, int):
        return 'integer'
    if isinstance(value, float):
        return 'number'
    if isinstance(value, str):
        return 'string'
    raise SchemaError(f"{path}: the value {value!r} cannot be an enum's value in a structural schema; "
                      f"use strings or numbers.")


def _describe(option: Mapping[str, Any]) -> str:
    if '$ref' in option:
        return str(option['$ref']).rsplit('/', 1)[-1]
    return str(option.get('type', 'any value'))


def schema_at(schema: Mapping[str, Any], json_path: str) -> Mapping[str, Any] | None:
    """The node of a structural schema at a printer column's path (``.spec.size``), or ``None``."""
    node: Mapping[str, Any] | None = schema
    for part in [part for part in json_path.lstrip('.').split('.') if part]:
        if node is None:
            return None
        node = (node.get('properties') or {}).get(part)
    return node
