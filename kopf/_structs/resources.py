"""
Kubernetes resources: what the user asked for, and what the cluster serves.

A :class:`Selector` is the user's unresolved reference (``'kopfexamples'``,
``'kopfexamples.kopf.dev'``, ``'KopfExample'``, or a group-version-plural
triple). Discovery turns it into a :class:`Resource`, which knows everything
needed to build URLs: the group, the version, the plural, whether objects are
namespaced, and which subresources (e.g. ``status``) the server offers.
"""
from __future__ import annotations

import dataclasses
import enum
import re
import urllib.parse
from collections.abc import Callable, Mapping
from typing import TypedDict

from typing_extensions import Unpack

# A query parameter's value: booleans become 'true'/'false', None drops the parameter.
ParamValue = str | int | float | bool | None

# Kubernetes API versions: v1, v2beta1, v1alpha3, ...
_VERSION_RE = re.compile(r'^v\d+((alpha|beta)\d+)?$')


@dataclasses.dataclass(frozen=True, eq=False)
class Resource:
    """
    A resource as served by the cluster, with everything needed to address it.

    The fields are Kopf's, in Kopf's order. As in Kopf, a resource is
    identified by its group, version and plural alone: two of them with
    these equal are equal, whatever else discovery has told about them.
    """

    group: str  # '' for the core API group ('v1' pods, configmaps, events, ...)
    version: str
    plural: str
    kind: str | None = None
    singular: str | None = None
    shortcuts: frozenset[str] = frozenset()  # the short names, e.g. 'po' for pods
    categories: frozenset[str] = frozenset()  # e.g. 'all'
    subresources: frozenset[str] = frozenset()
    namespaced: bool = True
    preferred: bool = True  # whether this version is the group's preferred one
    verbs: frozenset[str] = frozenset()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Resource):
            return NotImplemented
        return (self.group, self.version, self.plural) == (other.group, other.version, other.plural)

    def __hash__(self) -> int:
        return hash((self.group, self.version, self.plural))

    @property
    def api_version(self) -> str:
        """The ``apiVersion`` of the objects: ``'v1'`` for core, else ``'group/version'``."""
        return f'{self.group}/{self.version}' if self.group else self.version

    def get_url(
            self,
            *,
            server: str | None = None,
            namespace: str | None = None,
            name: str | None = None,
            subresource: str | None = None,
            params: Mapping[str, ParamValue] | None = None,
    ) -> str:
        """
        The URL of the resource's collection or of one of its objects (a path without a ``server``).

        With no namespace, a namespaced resource is addressed cluster-wide (all
        namespaces), which is how the operator lists and watches it. For
        cluster-scoped resources the namespace is ignored: their objects have
        none, and callers usually pass ``body.namespace`` as is.
        """
        if subresource is not None and name is None:
            raise ValueError(f"A subresource ({subresource!r}) needs an object name.")
        base = '/api' if not self.group else f'/apis/{self.group}'
        parts = [(server or '').rstrip('/') + base, self.version]
        if self.namespaced and namespace is not None:
            parts += ['namespaces', _quote(namespace)]
        parts.append(self.plural)
        if name is not None:
            parts.append(_quote(name))
        if subresource is not None:
            parts.append(subresource)
        url = '/'.join(parts)
        query = build_query(params or {})
        return f'{url}?{query}' if query else url

    def __str__(self) -> str:
        return f'{self.plural}.{self.version}.{self.group}'.rstrip('.')


def build_query(params: Mapping[str, ParamValue]) -> str:
    """URL-encode query parameters the way the API server expects them (``true``/``false``)."""
    pairs: list[tuple[str, str]] = []
    for key, value in params.items():
        if value is None:
            continue
        if isinstance(value, bool):
            pairs.append((key, 'true' if value else 'false'))
        else:
            pairs.append((key, str(value)))
    return urllib.parse.urlencode(pairs)


def _quote(segment: str) -> str:
    return urllib.parse.quote(segment, safe='')


class Marker(enum.Enum):
    """Special resource selectors: ``kopf.EVERYTHING`` instead of a resource's name."""

    EVERYTHING = 'everything'

    def __repr__(self) -> str:
        return f"kopf.{self.name}"


# Every resource that the cluster serves and that can be listed and watched (usually with filters).
EVERYTHING = Marker.EVERYTHING


# Kopf's keyword selectors: ``@kopf.on.create(kind='KopfExample')``, ``(group='kopf.dev', plural='kopfexamples')``.
class ResourceNames(TypedDict, total=False):
    """The keyword forms of a resource: each narrows down which resources match (all must)."""

    group: str | None
    version: str | None
    kind: str | None
    plural: str | None
    singular: str | None
    shortcut: str | None
    category: str | None


# A callable selector: decides per served resource (any version) whether to serve it.
ResourcePredicate = Callable[[Resource], bool]

# What decorators accept positionally.
ResourceArg = str | Marker | ResourcePredicate | type  # a type: a typed resource's class

_NAME_FIELDS = ('name', 'plural', 'kind', 'singular', 'shortcut')

# The attribute by which a class (a typed resource) gives its own selector to the decorators.
SELECTOR_ATTRIBUTE = '__kopf_selector__'


@dataclasses.dataclass(frozen=True)
class Selector:
    """
    A user's reference to a resource, before the cluster is asked about it.

    A *specific* selector names one resource: a bare ``name`` that may be a
    plural, a singular, a kind or a short name in any case (the forms
    ``kubectl`` accepts), or the exact ``plural``/``kind``/``singular``/
    ``shortcut`` of the keyword forms. The other selectors serve many
    resources: a ``category`` (e.g. ``'all'``), a ``predicate`` called with
    each served :class:`Resource`, or ``everything`` (``kopf.EVERYTHING``).
    ``group``/``version`` narrow either kind down; ``group=None`` means any
    group, ``group=''`` the core group only. Build it from decorator
    arguments with :meth:`from_args`.
    """

    group: str | None = None
    version: str | None = None
    plural: str | None = None
    name: str | None = None
    kind: str | None = None
    singular: str | None = None
    shortcut: str | None = None
    category: str | None = None
    everything: bool = False
    predicate: ResourcePredicate | None = None
    # A typed resource's class (``kopf.typed.CustomResource``): its handlers get the validated spec.
    model: type | None = None

    def __post_init__(self) -> None:
        named = [field for field in _NAME_FIELDS if getattr(self, field) is not None]
        if not named and self.category is None and self.predicate is None and not self.everything:
            raise TypeError("A resource selector needs a name (plural, kind, singular or short name), "
                            "a category=, a callable, or kopf.EVERYTHING.")
        if self.everything and (named or self.category is not None or self.predicate is not None):
            raise TypeError("kopf.EVERYTHING is a resource of its own: it cannot be combined with "
                            "names, categories or callables (only with a group and a version).")
        if self.predicate is not None and named:
            raise TypeError("A callable resource selector cannot be combined with names "
                            "(only with group=, version= and category=).")
        for field in (*_NAME_FIELDS, 'category', 'version'):
            value = getattr(self, field)
            if value is not None and (not isinstance(value, str) or not value or value != value.strip()):
                raise ValueError(f"A resource selector's {field} must be a non-empty string, got {value!r}.")
        if self.group is not None and (not isinstance(self.group, str) or self.group != self.group.strip()):
            raise ValueError(f"A resource selector's group must be a string ('' for the core API), "
                             f"got {self.group!r}.")

    @classmethod
    def from_args(cls, *args: ResourceArg | None, **names: Unpack[ResourceNames]) -> Selector:
        """
        Interpret the resource arguments of decorators, as Kopf does.

        The resource's name is the rightmost positional argument; what is left
        of it is the API group and version:

        * ``('kopf.dev', 'v1', 'kopfexamples')``, ``('', 'v1', 'pods')`` —
          group, version, name;
        * ``('kopf.dev/v1', 'kopfexamples')``, ``('v1', 'pods')`` — an
          apiVersion and a name (``v1`` is the core API);
        * ``('kopf.dev', 'kopfexamples')`` — a group (its preferred version)
          and a name;
        * ``('kopfexamples',)``, ``('KopfExample',)``, ``('kex',)`` — a bare
          name in any group;
        * ``('kopfexamples.kopf.dev',)``, ``('deployments.v1.apps',)``,
          ``('pods.v1',)`` — ``kubectl``'s dotted forms;
        * ``kopf.EVERYTHING`` in place of the name — every served resource
          (of the group and version, if given);
        * one callable — every served resource for which it returns true.

        The name is matched against the plural, the singular, the kind and the
        short names, in any case. The keyword forms (``kind=``, ``plural=``,
        ``singular=``, ``shortcut=``, ``category=``, ``group=``,
        ``version=``) match exactly, and may be combined with a callable.
        """
        while args and args[-1] is None:  # Kopf's positional parameters default to None
            args = args[:-1]
        if any(arg is None for arg in args):
            raise TypeError(f"A resource is given as 1 to 3 positional arguments without gaps, got {args!r}.")
        if len(args) > 3:
            raise TypeError(f"A resource is given as 1 to 3 positional arguments, got {len(args)}: {args!r}.")
        keywords = {key: value for key, value in names.items() if value is not None}
        unknown = set(keywords) - set(ResourceNames.__annotations__)
        if unknown:
            raise TypeError(f"Unknown resource keywords: {', '.join(sorted(unknown))}.")
        if not args:
            return cls(group=names.get('group'), version=names.get('version'), kind=names.get('kind'),
                       plural=names.get('plural'), singular=names.get('singular'), shortcut=names.get('shortcut'),
                       category=names.get('category'))
        positional = cls._positional(*args)
        for key in ('group', 'version'):
            given, implied = keywords.get(key), getattr(positional, key)
            if given is not None and implied is not None and given != implied:
                raise TypeError(f"The resource's {key} is given twice: {implied!r} positionally "
                                f"and {given!r} as {key}=.")
        if any(key not in ('group', 'version', 'category') for key in keywords) or (
                'category' in keywords and positional.predicate is None):
            raise TypeError(f"A resource named positionally ({', '.join(map(repr, args))}) cannot be narrowed "
                            f"by names too ({', '.join(f'{k}={v!r}' for k, v in keywords.items())}); "
                            f"give either of them.")
        group, version = names.get('group'), names.get('version')
        return dataclasses.replace(positional, group=group if group is not None else positional.group,
                                   version=version if version is not None else positional.version,
                                   category=names.get('category'))

    @classmethod
    def _positional(cls, *args: ResourceArg | None) -> Selector:
        *api, last = args
        declared = getattr(last, SELECTOR_ATTRIBUTE, None)  # a typed resource's class names itself
        if isinstance(declared, Selector):
            if api:
                raise TypeError(f"A typed resource ({getattr(last, '__qualname__', last)}) is given alone: "
                                f"its class has its group and version.")
            return declared
        if callable(last) and not isinstance(last, (str, Marker)):
            if api:
                raise TypeError("A callable resource selector is given alone (with group= or version=).")
            return cls(predicate=last)
        strings = [arg for arg in api if isinstance(arg, str)]
        if len(strings) != len(api):
            raise TypeError(f"The API group and version of a resource are strings, got {args!r}.")
        group, version = cls._api(*strings)
        if last == EVERYTHING:
            return cls(group=group, version=version, everything=True)
        if not isinstance(last, str):
            raise TypeError(f"A resource's name is a string, kopf.EVERYTHING or a callable, got {last!r}.")
        if api:
            if not last or last != last.strip() or '/' in last:
                raise ValueError(f"Not a resource name: {last!r}.")
            return cls(group=group, version=version, name=last)
        return cls.parse(last)

    @staticmethod
    def _api(*api: str) -> tuple[str | None, str | None]:
        """The group and version from the positional arguments left of the name."""
        if not api:
            return None, None
        if len(api) == 2:
            return api[0], api[1]
        text, = api
        if '/' in text:
            group, _, version = text.partition('/')
            if not group or not version or '/' in version:
                raise ValueError(f"Not an apiVersion: {text!r} (expected 'group/version' or 'v1').")
            return group, version
        if text == 'v1':  # the core API, as in kubectl's 'apiVersion: v1'
            return '', 'v1'
        if not text:
            raise ValueError("An empty API group needs a version too: ('', 'v1', name) or ('v1', name).")
        return text, None

    @classmethod
    def parse(cls, text: str) -> Selector:
        """Parse ``kubectl``'s forms: ``'name'``, ``'name.group'``, ``'name.version.group'``, ``'name.v1'``."""
        if not text or text != text.strip() or '/' in text:
            raise ValueError(f"Not a resource name: {text!r}.")
        name, _, rest = text.partition('.')
        if not rest:
            return cls(name=name)
        if _VERSION_RE.match(rest):  # 'pods.v1': a core resource in that version
            return cls(name=name, version=rest, group='')
        first, _, remainder = rest.partition('.')
        if remainder and _VERSION_RE.match(first):
            return cls(name=name, version=first, group=remainder)
        return cls(name=name, group=rest)

    @property
    def is_specific(self) -> bool:
        """Whether it names one resource (else it serves all that match: a category, a callable, everything)."""
        return not self.everything and self.predicate is None and self.category is None

    def check(self, resource: Resource) -> bool:
        """Whether a served resource is selected (for the multi-resource selectors: whether to serve it)."""
        return self.match_rank(resource) is not None

    def match_rank(self, resource: Resource) -> int | None:
        """
        How well a served resource matches: lower is better, ``None`` is no match.

        A bare name matches the plural best, then the singular, the kind and
        the short names — so that ``'pods'`` means pods even if some custom
        resource claims ``pods`` as a short name. Core ``v1`` events are left
        out of the multi-resource selectors unless a category names them: the
        framework's own events about objects would cause handling of their own.
        """
        if self.group is not None and self.group != resource.group:
            return None
        if self.version is not None and self.version != resource.version:
            return None
        if not self.is_specific and (resource.group, resource.plural) == ('', 'events') and self.category is None:
            return None
        if self.category is not None and self.category not in resource.categories:
            return None
        if self.predicate is not None and not self.predicate(resource):
            return None
        exact = [(self.plural, resource.plural), (self.kind, resource.kind),
                 (self.singular, resource.singular)]
        if any(wanted is not None and wanted != actual for wanted, actual in exact):
            return None
        if self.shortcut is not None and self.shortcut not in resource.shortcuts:
            return None
        if self.name is None:
            return 0
        wanted = self.name.lower()
        for rank, candidate in enumerate([resource.plural, resource.singular, resource.kind]):
            if candidate and candidate.lower() == wanted:
                return rank
        if wanted in {short.lower() for short in resource.shortcuts}:
            return 3
        return None

    def __str__(self) -> str:
        if self.everything:
            text = 'everything'
        elif self.predicate is not None:
            text = f'resources selected by {getattr(self.predicate, "__qualname__", None) or self.predicate!r}'
        else:
            named = [f'{field}={getattr(self, field)}' for field in _NAME_FIELDS[1:] if getattr(self, field)]
            text = self.name or ', '.join(named) or ''
            if self.category is not None:
                text = f'{text} in the category {self.category!r}' if text else f'the category {self.category!r}'
        if self.version is not None:
            text = f'{text}.{self.version}'
        if self.group:
            text = f'{text}.{self.group}'
        elif self.group == '' and self.version is None:
            text = f'{text} (core)'
        return text
