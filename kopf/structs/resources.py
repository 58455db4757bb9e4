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
from collections.abc import Iterable, Mapping

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


@dataclasses.dataclass(frozen=True)
class Selector:
    """
    A user's reference to a resource, before the cluster is asked about it.

    Either an exact ``plural`` (with an optional group and version), or a bare
    ``name`` that may be a plural, a singular, a kind or a short name — the
    forms ``kubectl`` accepts. ``group=None`` means any group; ``group=''`` is
    the core group only. ``everything=True`` (``kopf.EVERYTHING``) selects
    every served resource instead. Build it from decorator arguments with
    :meth:`from_args`.
    """

    group: str | None = None
    version: str | None = None
    plural: str | None = None
    name: str | None = None
    everything: bool = False

    def __post_init__(self) -> None:
        given = [value for value in (self.plural, self.name) if value is not None] + ([True] if self.everything else [])
        if len(given) != 1:
            raise TypeError("A resource selector needs exactly one of: plural=, name=, everything=True.")
        if self.version is not None and not self.version:
            raise ValueError("A resource selector's version cannot be empty.")

    @classmethod
    def from_args(cls, *args: str | Marker) -> Selector:
        """
        Interpret the positional resource arguments of decorators.

        * ``('kopf.dev', 'v1', 'kopfexamples')`` — group, version, plural
          (``''`` as the group for the core API: ``('', 'v1', 'pods')``);
        * ``('kopf.dev/v1', 'kopfexamples')`` or ``('v1', 'pods')`` —
          an apiVersion and a plural;
        * ``('kopfexamples',)``, ``('KopfExample',)``, ``('pods',)`` —
          a bare name: plural, singular, kind or short name, in any group;
        * ``('kopfexamples.kopf.dev',)`` — a name in a group;
        * ``('deployments.v1.apps',)`` — a name, a version and a group;
        * ``(kopf.EVERYTHING,)`` — every resource served by the cluster.
        """
        if args == (EVERYTHING,):
            return cls(everything=True)
        if any(isinstance(arg, Marker) for arg in args):
            raise TypeError(f"kopf.EVERYTHING is a resource of its own, not a part of one: {args!r}.")
        strings = [str(arg) for arg in args]
        if len(strings) == 3:
            group, version, plural = strings
            return cls(group=group, version=version, plural=plural)
        if len(strings) == 2:
            api_version, plural = strings
            group, _, version = api_version.rpartition('/')
            if not _VERSION_RE.match(version):
                raise ValueError(f"Not an apiVersion: {api_version!r} (expected 'group/version' or 'v1').")
            return cls(group=group, version=version, plural=plural)
        if len(strings) == 1:
            return cls.parse(strings[0])
        raise TypeError(f"A resource is given as 1 to 3 strings, got {len(args)}: {args!r}.")

    @classmethod
    def parse(cls, text: str) -> Selector:
        """Parse ``'name'``, ``'name.group'`` or ``'name.version.group'``."""
        if not text or text != text.strip() or '/' in text:
            raise ValueError(f"Not a resource name: {text!r}.")
        name, _, rest = text.partition('.')
        if not rest:
            return cls(name=name)
        first, _, remainder = rest.partition('.')
        if remainder and _VERSION_RE.match(first):
            return cls(name=name, version=first, group=remainder)
        return cls(name=name, group=rest)

    def match_rank(
            self,
            resource: Resource,
            *,
            singular: str = '',
            short_names: Iterable[str] = (),
    ) -> int | None:
        """
        How well a served resource matches: lower is better, ``None`` is no match.

        The plural is the strongest match, then the singular, the kind and the
        short names — so that ``'pods'`` means pods even if some custom
        resource claims ``pods`` as a short name.
        """
        if self.group is not None and self.group != resource.group:
            return None
        if self.version is not None and self.version != resource.version:
            return None
        if self.everything:
            return 0
        if self.plural is not None:
            return 0 if self.plural == resource.plural else None
        wanted = (self.name or '').lower()
        candidates = [resource.plural, singular, resource.kind or '']
        for rank, candidate in enumerate(candidates):
            if candidate and candidate.lower() == wanted:
                return rank
        if wanted in {short.lower() for short in short_names}:
            return len(candidates)
        return None

    def __str__(self) -> str:
        if self.everything:
            return 'everything'
        text = self.plural if self.plural is not None else self.name
        if self.version is not None:
            text = f'{text}.{self.version}'
        if self.group:
            text = f'{text}.{self.group}'
        elif self.group == '' and self.version is None:
            text = f'{text} (core)'
        return str(text)
