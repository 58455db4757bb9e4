"""
CustomResourceDefinitions of typed resources: one per kind, with a version per class.

Several classes of one group and kind are the versions of one CRD: they must
agree on the names and the scope, and exactly one of them is the storage
version (``storage=True``; a kind's only version is it anyway). Two classes
claiming the same group, kind and version are refused, naming both.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pydantic

from kopf._typed import gate, schemas
from kopf._typed.models import CustomResource, Declaration
from kopf._typed.schemas import SchemaError

API_VERSION = 'apiextensions.k8s.io/v1'


def crds(classes: Sequence[type[CustomResource]]) -> list[dict[str, Any]]:
    """The CRDs of these classes, one per group and kind, in the order of the classes."""
    kinds: dict[tuple[str, str], list[type[CustomResource]]] = {}
    for cls in classes:
        declaration = cls.kopf_declaration()
        kinds.setdefault((declaration.group, declaration.kind), []).append(cls)
    return [crd(versions) for versions in kinds.values()]


def crd(versions: Sequence[type[CustomResource]]) -> dict[str, Any]:
    """The CRD of the classes of one kind: each is a version; their names and scope must agree."""
    _check_versions(versions)
    first = versions[0].kopf_declaration()
    names: dict[str, Any] = {'kind': first.kind, 'plural': first.plural, 'singular': first.singular,
                             'listKind': f"{first.kind}List"}
    if first.short_names:
        names['shortNames'] = list(first.short_names)
    if first.categories:
        names['categories'] = list(first.categories)
    storage = _storage_version(versions)
    return {
        'apiVersion': API_VERSION,
        'kind': 'CustomResourceDefinition',
        'metadata': {'name': first.crd_name},
        'spec': {
            'group': first.group,
            'names': names,
            'scope': first.scope,
            'versions': [version_entry(cls, storage=cls is storage) for cls in versions],
        },
    }


def version_entry(cls: type[CustomResource], *, storage: bool) -> dict[str, Any]:
    """One version of the CRD: the class's schema, its status subresource, its printer columns."""
    declaration = cls.kopf_declaration()
    schema = root_schema(cls)
    entry: dict[str, Any] = {'name': declaration.version, 'served': declaration.served, 'storage': storage,
                             'schema': {'openAPIV3Schema': schema}}
    if 'status' in schema['properties']:
        entry['subresources'] = {'status': {}}
    if declaration.printer_columns:
        entry['additionalPrinterColumns'] = [printer_column(cls, column, schema)
                                             for column in declaration.printer_columns]
    return entry


def root_schema(cls: type[CustomResource]) -> dict[str, Any]:
    """The structural schema of the whole object: the standard fields, and the class's content and status."""
    try:
        document = cls.model_json_schema(by_alias=True, mode='validation')
    except pydantic.PydanticUserError as e:
        raise SchemaError(f"{cls.__qualname__}: pydantic cannot describe the model as a schema: {e}") from e
    defs = document.get('$defs') or {}
    properties: dict[str, Any] = {'apiVersion': {'type': 'string'}, 'kind': {'type': 'string'},
                                  'metadata': {'type': 'object'}}
    fields = (document.get('properties') or {})
    for key, node in fields.items():
        if key in gate.NOT_CONTENT - {'status'}:
            continue
        path = f"{cls.__qualname__}.{key}"
        if schemas.is_untyped(node):
            raise SchemaError(f"{path} is an untyped dict, which a structural schema cannot describe (and the server "
                              f"would prune all of it); declare a model for it -- with "
                              f"model_config = pydantic.ConfigDict(extra='allow') to keep unknown fields.")
        properties[key] = schemas.structural({**node, '$defs': defs}, path=path)
    result: dict[str, Any] = {'type': 'object', 'properties': properties}
    required = [key for key in document.get('required') or [] if key in properties and key not in gate.NOT_CONTENT]
    if required:
        result['required'] = required
    if document.get('description'):
        result['description'] = document['description']
    return result


def printer_column(cls: type[CustomResource], column: Any, schema: dict[str, Any]) -> dict[str, Any]:
    """A printer column, typed by its field in the schema unless its type is given."""
    kind = column.type
    node = schemas.schema_at(schema, column.json_path)
    if kind is None:
        if node is None or node.get('type') not in ('integer', 'number', 'string', 'boolean'):
            raise SchemaError(f"{cls.__qualname__}: the printer column {column.name!r} shows {column.json_path}, "
                              f"which is not a field of a simple type in the schema; fix the path, or give type=.")
        kind = 'date' if node.get('format') == 'date-time' else node['type']
    result: dict[str, Any] = {'name': column.name, 'type': kind, 'jsonPath': column.json_path}
    description = column.description or (node or {}).get('description')
    if description:
        result['description'] = description
    if column.format:
        result['format'] = column.format
    if column.priority:
        result['priority'] = column.priority
    return result


def _check_versions(versions: Sequence[type[CustomResource]]) -> None:
    seen: dict[str, type[CustomResource]] = {}
    first = versions[0]
    for cls in versions:
        declaration = cls.kopf_declaration()
        other = seen.get(declaration.version)
        if other is not None:
            raise SchemaError(f"{other.__qualname__} and {cls.__qualname__} both claim {declaration.kind}."
                              f"{declaration.group} in the version {declaration.version}: rename one, or give it "
                              f"another version.")
        seen[declaration.version] = cls
        different = _differences(first.kopf_declaration(), declaration)
        if different:
            raise SchemaError(f"{first.__qualname__} and {cls.__qualname__} are versions of {declaration.kind}."
                              f"{declaration.group}, but differ in {', '.join(different)}; one CRD has one of each.")


def _differences(a: Declaration, b: Declaration) -> list[str]:
    fields = ('plural', 'singular', 'scope', 'short_names', 'categories')
    return [field for field in fields if getattr(a, field) != getattr(b, field)]


def _storage_version(versions: Sequence[type[CustomResource]]) -> type[CustomResource]:
    if len(versions) == 1 and versions[0].kopf_declaration().storage is not False:
        return versions[0]
    marked = [cls for cls in versions if cls.kopf_declaration().storage]
    declaration = versions[0].kopf_declaration()
    names = ', '.join(cls.__qualname__ for cls in (marked or versions))
    if len(marked) != 1:
        raise SchemaError(f"{declaration.kind}.{declaration.group} has {len(versions)} versions ({names}), and "
                          f"{'none' if not marked else len(marked)} of them is the storage version: mark exactly "
                          f"one with storage=True.")
    return marked[0]
