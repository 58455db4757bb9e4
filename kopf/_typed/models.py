"""
What users write: a custom resource as a pydantic model, its identity in the class keywords.

.. code-block:: python

    class MyApp(kopf.typed.CustomResource, group='example.com', version='v1', kind='MyApp',
                short_names=['ma'], printer_columns=[kopf.typed.PrinterColumn('Replicas', '.spec.replicas')]):
        spec: MyAppSpec
        status: MyAppStatus = MyAppStatus()

The class is usable wherever a resource is named (``@kopf.on.create(MyApp)``);
the handlers of the resource get the validated spec model as ``spec``
(``body['spec']`` stays the raw mapping). A class without ``group`` and
``version`` is a base for others, not a resource.
"""
from __future__ import annotations

import dataclasses
import datetime
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar, Literal

import pydantic

from kopf._structs.resources import SELECTOR_ATTRIBUTE, Selector
from kopf._typed import gate

_GROUP_RE = re.compile(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$')
_VERSION_RE = re.compile(r'^v\d+((alpha|beta)\d+)?$')
_KIND_RE = re.compile(r'^[A-Z][A-Za-z0-9]*$')
_PLURAL_RE = re.compile(r'^[a-z]([-a-z0-9]*[a-z0-9])?$')
SCOPES = ('Namespaced', 'Cluster')
COLUMN_TYPES = ('integer', 'number', 'string', 'boolean', 'date')


@dataclasses.dataclass(frozen=True)
class PrinterColumn:
    """
    A column of ``kubectl get``: its name, the JSON path of its value (``.spec.replicas``), its type.

    The type is that of the field in the schema, unless given (``date`` for
    a field with the ``date-time`` format); ``priority`` > 0 shows the column
    only with ``-o wide``.
    """

    name: str
    json_path: str
    type: str | None = None
    description: str | None = None
    format: str | None = None
    priority: int = 0


@dataclasses.dataclass(frozen=True)
class Declaration:
    """A typed resource's identity and presentation, as its class keywords give them."""

    group: str
    version: str
    kind: str
    plural: str
    singular: str
    scope: str
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    printer_columns: tuple[PrinterColumn, ...] = ()
    storage: bool | None = None  # None: the storage version if it is the kind's only version
    served: bool = True

    @property
    def namespaced(self) -> bool:
        return self.scope == 'Namespaced'

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{self.group}"


class Condition(pydantic.BaseModel):
    """A condition of the object: its type, whether it holds (True, False, Unknown), why, and since when."""

    type: str
    status: Literal['True', 'False', 'Unknown']
    reason: str | None = None
    message: str | None = None
    lastTransitionTime: datetime.datetime | None = None
    observedGeneration: int | None = None


class CustomResource(pydantic.BaseModel):
    """
    The base of typed resources; see the module's docs for the class keywords.

    ``group`` and ``version`` are required; ``kind`` is the class name by
    default, ``plural`` and ``singular`` derive from it; ``scope`` is
    ``'Namespaced'`` or ``'Cluster'``; ``storage=True`` marks the stored
    version among several classes of one kind.
    """

    model_config = pydantic.ConfigDict(extra='ignore', populate_by_name=True)

    api_version: str | None = pydantic.Field(None, alias='apiVersion')
    kind: str | None = None
    metadata: dict[str, Any] = pydantic.Field(default_factory=dict)

    __kopf_declaration__: ClassVar[Declaration | None] = None
    __kopf_content_model__: ClassVar[type[pydantic.BaseModel] | None] = None  # made once per class, when needed

    def __init_subclass__(
            cls,
            *,
            group: str | None = None,
            version: str | None = None,
            kind: str | None = None,
            plural: str | None = None,
            singular: str | None = None,
            scope: str = 'Namespaced',
            short_names: Sequence[str] = (),
            categories: Sequence[str] = (),
            printer_columns: Sequence[PrinterColumn] = (),
            storage: bool | None = None,
            served: bool = True,
            **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        if group is None and version is None:
            cls.__kopf_declaration__ = None  # a base for other classes, not a resource
            setattr(cls, SELECTOR_ATTRIBUTE, None)
            return
        declaration = declare(cls.__qualname__, group=group, version=version, kind=kind or cls.__name__,
                              plural=plural, singular=singular, scope=scope, short_names=short_names,
                              categories=categories, printer_columns=printer_columns, storage=storage, served=served)
        cls.__kopf_declaration__ = declaration
        setattr(cls, SELECTOR_ATTRIBUTE, Selector(group=declaration.group, version=declaration.version,
                                                  plural=declaration.plural, model=cls))

    @classmethod
    def kopf_declaration(cls) -> Declaration:
        """The resource's identity; a base class without one is refused, naming it."""
        declaration = cls.__dict__.get('__kopf_declaration__')
        if declaration is None:
            raise TypeError(f"{cls.__qualname__} is not a resource: give it group= and version= as class keywords, "
                            f"e.g. class {cls.__name__}(kopf.typed.CustomResource, group='example.com', version='v1').")
        return declaration  # type: ignore[no-any-return]

    @classmethod
    def kopf_content_fields(cls) -> dict[str, str]:
        """The fields that make the object's content (spec and the like): by JSON key, the attribute names."""
        return {field.alias or name: name for name, field in cls.model_fields.items()
                if (field.alias or name) not in gate.NOT_CONTENT}

    @classmethod
    def kopf_validate(cls, raw: Mapping[str, Any]) -> gate.Validation:
        """Validate the object's content (not its metadata, not its status); the spec model if valid."""
        content = _content_model(cls)
        try:
            validated = content.model_validate({key: value for key, value in raw.items()
                                                if key not in gate.NOT_CONTENT})
        except pydantic.ValidationError as e:
            return gate.Validation(valid=False, problems=gate.describe_errors(list(e.errors())))
        return gate.Validation(valid=True, spec=getattr(validated, 'spec', None))

    @classmethod
    def kopf_checks_more(cls) -> bool:
        """
        Whether the content's models check more than their schema can say: validators of their own.

        The server refuses what the CRD's schema refuses; only what a
        validator (``@field_validator``, ``@model_validator``, ``AfterValidator``
        and the like) refuses on top of it reaches the operator as invalid.
        """
        return any(_validates(field.annotation, field.metadata, seen=set())
                   for name, field in cls.model_fields.items() if (field.alias or name) in cls.kopf_content_fields())

    @classmethod
    def kopf_has_conditions(cls) -> bool:
        """Whether the status model has ``conditions`` (then the gate writes its condition there)."""
        field = cls.model_fields.get('status')
        annotation = field.annotation if field is not None else None
        models = [arg for arg in _flatten(annotation) if isinstance(arg, type) and issubclass(arg, pydantic.BaseModel)]
        return any('conditions' in model.model_fields for model in models)


def declare(
        owner: str,
        *,
        group: str | None,
        version: str | None,
        kind: str,
        plural: str | None,
        singular: str | None,
        scope: str,
        short_names: Sequence[str],
        categories: Sequence[str],
        printer_columns: Sequence[PrinterColumn],
        storage: bool | None,
        served: bool,
) -> Declaration:
    """Check the class keywords at once, so that a wrong one fails at the class, naming it."""
    def refuse(what: str) -> TypeError:
        return TypeError(f"The typed resource {owner}: {what}")

    if not isinstance(group, str) or not _GROUP_RE.match(group):
        raise refuse(f"group={group!r} must be a DNS name with a dot, e.g. 'example.com'.")
    if not isinstance(version, str) or not _VERSION_RE.match(version):
        raise refuse(f"version={version!r} must be a Kubernetes version, e.g. 'v1', 'v1beta1'.")
    if not _KIND_RE.match(kind):
        raise refuse(f"kind={kind!r} must be a CamelCase name, e.g. 'MyApp'.")
    plural = plural if plural is not None else pluralize(kind.lower())
    singular = singular if singular is not None else kind.lower()
    for name, value in [('plural', plural), ('singular', singular), *(('short_names', s) for s in short_names)]:
        if not isinstance(value, str) or not _PLURAL_RE.match(value):
            raise refuse(f"{name}: {value!r} must be a lowercase name, e.g. 'myapps'.")
    if scope not in SCOPES:
        raise refuse(f"scope={scope!r} must be one of {', '.join(SCOPES)}.")
    if isinstance(short_names, str) or isinstance(categories, str):
        raise refuse("short_names= and categories= are lists of names, e.g. ['ma'].")
    for column in printer_columns:
        if not isinstance(column, PrinterColumn):
            raise refuse(f"printer_columns= holds kopf.typed.PrinterColumn(...), got {column!r}.")
        if column.type is not None and column.type not in COLUMN_TYPES:
            raise refuse(f"the printer column {column.name!r} has the type {column.type!r}; "
                         f"use one of {', '.join(COLUMN_TYPES)}.")
    return Declaration(group=group, version=version, kind=kind, plural=plural, singular=singular, scope=scope,
                       short_names=tuple(short_names), categories=tuple(categories),
                       printer_columns=tuple(printer_columns), storage=storage, served=bool(served))


def pluralize(word: str) -> str:
    """The plural of a lowercase kind, by the English rules that names of kinds need."""
    if re.search(r'(s|x|z|ch|sh)$', word):
        return f"{word}es"
    if re.search(r'[^aeiou]y$', word):
        return f"{word[:-1]}ies"
    return f"{word}s"


def resources() -> list[type[CustomResource]]:
    """Every typed resource class defined so far (the operator's code is imported: these are its resources)."""
    found: list[type[CustomResource]] = []
    pending: list[type[CustomResource]] = list(CustomResource.__subclasses__())
    while pending:
        cls = pending.pop(0)
        if cls.__dict__.get('__kopf_declaration__') is not None and cls not in found:
            found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


def _content_model(cls: type[CustomResource]) -> type[pydantic.BaseModel]:
    """A model of the content fields only (made once per class), so that the status never blocks the handlers."""
    made = cls.__dict__.get('__kopf_content_model__')
    if made is None:
        fields: dict[str, Any] = {name: (field.annotation, field) for name, field in cls.model_fields.items()
                                  if (field.alias or name) in cls.kopf_content_fields()}
        made = pydantic.create_model(f'{cls.__name__}Content', __config__=pydantic.ConfigDict(
            extra='ignore', populate_by_name=True), **fields)
        cls.__kopf_content_model__ = made
    return made  # type: ignore[no-any-return]


def _validates(annotation: Any, metadata: Sequence[Any], *, seen: set[type]) -> bool:
    """Whether a field's type (or the models in it, deeply) has validators of its own."""
    validators = (pydantic.functional_validators.AfterValidator, pydantic.functional_validators.BeforeValidator,
                  pydantic.functional_validators.PlainValidator, pydantic.functional_validators.WrapValidator)
    if any(isinstance(item, validators) for item in metadata):
        return True
    for arg in _flatten(annotation):
        if any(isinstance(item, validators) for item in getattr(arg, '__metadata__', ())):
            return True
        if isinstance(arg, type) and issubclass(arg, pydantic.BaseModel) and arg not in seen:
            seen.add(arg)
            decorators = arg.__pydantic_decorators__
            if decorators.field_validators or decorators.model_validators or decorators.validators:
                return True
            if any(_validates(field.annotation, field.metadata, seen=seen) for field in arg.model_fields.values()):
                return True
    return False


def _flatten(annotation: Any) -> Iterator[Any]:
    """The annotation and its arguments (``X | None`` gives ``X`` and ``None``)."""
    yield annotation
    for arg in getattr(annotation, '__args__', ()) or ():
        yield from _flatten(arg)
