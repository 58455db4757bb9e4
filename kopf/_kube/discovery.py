"""
Resolving the user's resource references with the cluster's discovery API.

Users write ``'kopfexamples'``, ``'kopfexamples.kopf.dev'`` or ``'KopfExample'``;
the framework needs the exact group, version, plural, scope and subresources.
The server tells them at ``/api/v1``, ``/apis``, and ``/apis/{group}/{version}``.

How one resource is chosen when a name is not unique:

1. Exact plurals beat singulars, which beat kinds, which beat short names:
   ``'pods'`` is the pods even if a custom resource uses it as a short name.
2. The core group (``v1``) beats all others. This is what ``kubectl`` does and
   what users mean: ``'events'`` is the core events, not ``events.k8s.io``.
3. The legacy ``extensions`` group loses to any other group: everything in it
   is deprecated and served elsewhere (``apps``, ``networking.k8s.io``, ...).
4. If several groups are still left, this is an error that lists them:
   guessing between two operators' custom resources would make the operator
   silently handle the wrong objects. Users then write ``plural.group``.

Without an explicit version, only each group's preferred version is searched
(as ``kubectl`` does); other versions are searched only if the preferred one
does not serve the resource at all.

Results are cached per API context. A miss refreshes the cache once, so that a
CRD installed after the operator's start is still found; :func:`refresh`
forgets everything, for when the cluster says that its resources have changed
(a CRD created or deleted).
"""
from __future__ import annotations

import dataclasses
import logging
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from kopf._kube.errors import APIConnectionError, APIError, APINotFoundError
from kopf._kube.session import APIContext
from kopf._structs.resources import Resource, Selector

logger = logging.getLogger(__name__)

LEGACY_GROUPS = frozenset({'extensions'})


class ResourceNotFoundError(LookupError):
    """No served resource matches the selector."""


class AmbiguousResourceError(LookupError):
    """A bare name matches resources in several groups; the user must name the group."""

    def __init__(self, message: str, *, candidates: Sequence[Resource]) -> None:
        super().__init__(message)
        self.candidates = tuple(candidates)


@dataclasses.dataclass(frozen=True)
class _GroupInfo:
    name: str  # '' for core
    versions: tuple[str, ...]  # the preferred one first


@dataclasses.dataclass(frozen=True)
class _Candidate:
    resource: Resource
    rank: int


class _Cache:
    """The discovery documents of one API context."""

    def __init__(self) -> None:
        self.groups: tuple[_GroupInfo, ...] | None = None
        self.lists: dict[tuple[str, str], list[Mapping[str, Any]] | None] = {}
        self.resolved: dict[Selector, Resource] = {}

    def clear(self) -> None:
        self.groups = None
        self.lists.clear()
        self.resolved.clear()


_caches: weakref.WeakKeyDictionary[APIContext, _Cache] = weakref.WeakKeyDictionary()


def refresh(*, context: APIContext) -> None:
    """Forget what the cluster served: the next resolution asks it again (after a CRD has changed)."""
    cache = _caches.get(context)
    if cache is not None:
        cache.clear()


async def serves(*, context: APIContext, group: str, plural: str) -> bool:
    """
    Whether the cluster's discovery lists this resource in any version of its group now.

    Discovery catches up with a CRD's creation or deletion a moment after the
    CRD itself says so; this tells whether it has.
    """
    cache = _caches.setdefault(context, _Cache())
    groups = [_GroupInfo(name='', versions=('v1',))] if not group else [
        info for info in await _groups(context=context, cache=cache) if info.name == group]
    for info in groups:
        for version in info.versions:
            entries = await _resource_list(context=context, group=info.name, version=version, cache=cache,
                                           tolerant=True)
            if any(str(entry.get('name', '')) == plural for entry in entries or []):
                return True
    return False


async def resolve(*, context: APIContext, selector: Selector) -> Resource:
    """
    The served resource for the user's selector, or a clear error naming the selector.

    Raises :class:`ResourceNotFoundError` or :class:`AmbiguousResourceError`.
    """
    cache = _caches.setdefault(context, _Cache())
    if selector in cache.resolved:
        return cache.resolved[selector]
    was_cached = cache.groups is not None or bool(cache.lists)
    try:
        resource = await _resolve(context=context, selector=selector, cache=cache)
    except ResourceNotFoundError:
        if not was_cached:
            raise
        logger.debug("Resource %s is not in the cached discovery; refreshing it.", selector)
        cache.clear()
        resource = await _resolve(context=context, selector=selector, cache=cache)
    cache.resolved[selector] = resource
    return resource


async def _resolve(*, context: APIContext, selector: Selector, cache: _Cache) -> Resource:
    searched: list[str] = []
    candidates: list[_Candidate] = []
    for group in await _candidate_groups(context=context, selector=selector, cache=cache):
        versions = (selector.version,) if selector.version is not None else group.versions
        for version in versions:
            searched.append(f'{group.name}/{version}' if group.name else version)
            entries = await _resource_list(context=context, group=group.name, version=version, cache=cache,
                                           tolerant=selector.group is None)
            found = _match(selector, group.name, version, entries, preferred=version == group.versions[0])
            if found:
                candidates.extend(found)
                break  # the preferred (or the first serving) version of a group wins
    if not candidates:
        where = ', '.join(searched) if searched else f'the API group {selector.group!r} is not served'
        raise ResourceNotFoundError(
            f"The resource {selector} is not served by the cluster (searched: {where}). "
            "Is its CustomResourceDefinition installed, and is the name spelled right?")
    return _choose(selector, candidates)


def _choose(selector: Selector, candidates: Sequence[_Candidate]) -> Resource:
    best_rank = min(candidate.rank for candidate in candidates)
    resources = [candidate.resource for candidate in candidates if candidate.rank == best_rank]
    if len(resources) == 1:
        return resources[0]
    core = [resource for resource in resources if resource.group == '']
    if core:
        resources = core
    modern = [resource for resource in resources if resource.group not in LEGACY_GROUPS]
    if modern:
        resources = modern
    if len(resources) == 1:
        return resources[0]
    names = ', '.join(sorted(f'{r.plural}.{r.group}' if r.group else r.plural for r in resources))
    raise AmbiguousResourceError(
        f"The resource {selector} is ambiguous: it matches {names}. "
        "Specify the group, e.g. 'plural.group'.", candidates=resources)


def _match(
        selector: Selector | None,
        group: str,
        version: str,
        entries: list[Mapping[str, Any]] | None,
        *,
        preferred: bool = True,
) -> list[_Candidate]:
    if not entries:
        return []
    subresources: dict[str, set[str]] = {}
    for entry in entries:
        main, _, sub = str(entry.get('name', '')).partition('/')
        if sub:
            subresources.setdefault(main, set()).add(sub)
    result: list[_Candidate] = []
    for entry in entries:
        plural = str(entry.get('name', ''))
        if not plural or '/' in plural:
            continue
        resource = Resource(
            group=group,
            version=version,
            plural=plural,
            kind=entry.get('kind') or None,
            singular=entry.get('singularName') or None,
            shortcuts=frozenset(entry.get('shortNames') or ()),
            categories=frozenset(entry.get('categories') or ()),
            subresources=frozenset(subresources.get(plural, ())),
            namespaced=bool(entry.get('namespaced', True)),
            preferred=preferred,
            verbs=frozenset(entry.get('verbs') or ()),
        )
        rank = selector.match_rank(resource) if selector is not None else 0  # None: every resource
        if rank is not None:
            result.append(_Candidate(resource=resource, rank=rank))
    return result


async def _candidate_groups(*, context: APIContext, selector: Selector, cache: _Cache) -> list[_GroupInfo]:
    """The groups to search: the core group first (if it may match), then the named groups."""
    core = _GroupInfo(name='', versions=('v1',))
    if selector.group == '':
        return [core]
    if selector.group is not None and selector.version is not None:
        return [_GroupInfo(name=selector.group, versions=(selector.version,))]
    groups = await _groups(context=context, cache=cache)
    if selector.group is None:
        return [core, *groups]
    return [group for group in groups if group.name == selector.group]


async def _groups(*, context: APIContext, cache: _Cache) -> tuple[_GroupInfo, ...]:
    if cache.groups is None:
        document = await context.request('GET', '/apis')
        groups: list[_GroupInfo] = []
        for item in (document or {}).get('groups') or []:
            preferred = (item.get('preferredVersion') or {}).get('version')
            versions = [str(v['version']) for v in item.get('versions') or [] if v.get('version')]
            ordered = ([preferred] if preferred else []) + [v for v in versions if v != preferred]
            groups.append(_GroupInfo(name=str(item.get('name', '')), versions=tuple(ordered)))
        cache.groups = tuple(groups)
    return cache.groups


async def _resource_list(*, context: APIContext, group: str, version: str, cache: _Cache,
                         tolerant: bool) -> list[Mapping[str, Any]] | None:
    """
    The resource entries of one group-version, or ``None`` if it cannot be read.

    When searching all groups for a bare name, an unavailable group-version
    (typically an aggregated API whose backend is down) must not break the
    resolution of unrelated resources: it is logged and treated as serving
    nothing until the cache is refreshed. When the user named the group, the
    failure is raised instead: "not found" would be a misleading answer.
    """
    key = (group, version)
    if key not in cache.lists:
        path = f'/apis/{group}/{version}' if group else f'/api/{version}'
        try:
            document = await context.request('GET', path)
        except APINotFoundError:
            document = None
        except (APIError, APIConnectionError) as e:
            if not tolerant:
                raise
            logger.warning("Discovery of %s failed, skipping it: %s", path, e)
            cache.lists[key] = None
            return None
        cache.lists[key] = list((document or {}).get('resources') or [])
    return cache.lists[key]


async def scan(*, context: APIContext, all_versions: bool = False) -> list[Resource]:
    """
    Every resource that the cluster serves and that can be listed and watched (for ``kopf.EVERYTHING``).

    Only the preferred version of each group is taken (one resource, one
    watch), unless ``all_versions`` is asked (for callable selectors, which
    choose the versions themselves); subresources and resources without the
    ``list`` and ``watch`` verbs (reviews, bindings, ...) are skipped. Groups
    that fail to answer are skipped with a warning, as in the resolution of
    bare names.
    """
    cache = _caches.setdefault(context, _Cache())
    resources: list[Resource] = []
    core = _GroupInfo(name='', versions=('v1',))
    for group in [core, *await _groups(context=context, cache=cache)]:
        for version in group.versions if all_versions else group.versions[:1]:
            entries = await _resource_list(context=context, group=group.name, version=version, cache=cache,
                                           tolerant=True)
            watchable = [entry for entry in entries or []
                         if {'list', 'watch'} <= set(entry.get('verbs') or ())]
            resources.extend(candidate.resource for candidate in _match(
                None, group.name, version, [*watchable, *_subresources(entries)],
                preferred=version == group.versions[0]))
    return resources


def select(selector: Selector, resources: Sequence[Resource]) -> list[Resource]:
    """
    The scanned resources that a selector of many resources serves.

    Only the preferred versions, as for names -- except for callables, which
    see every version and choose for themselves (as in Kopf).
    """
    return [resource for resource in resources
            if selector.check(resource) and (resource.preferred or selector.predicate is not None)]


def _subresources(entries: list[Mapping[str, Any]] | None) -> list[Mapping[str, Any]]:
    """The subresource entries (``plural/status``), so that the resources know their subresources."""
    return [entry for entry in entries or [] if '/' in str(entry.get('name', ''))]
