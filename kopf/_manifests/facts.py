"""
What an operator does that needs permissions, as its code, its settings and its command line tell.

Everything here is read from the operator itself, not guessed from names:
which resources its handlers watch; whether it writes into the objects (its
storages' places, its finalizer, its handlers' results, its conditions), and
where; whether it posts Events; its Leases, ConfigMaps, namespaces, CRDs and
webhook configurations. The rules (:mod:`.rules`) follow from these facts.

Two things are read from the handlers' functions: whether a handler returns
a value (its result goes into ``status.<id>``) -- from the function's
bytecode, any ``return`` of something but ``None`` -- and whether it takes
``patch`` by name (it may write into it).
"""
from __future__ import annotations

import dataclasses
import dis
import inspect
import itertools
from collections.abc import Callable, Collection, Mapping
from typing import Any

from kopf._handlers.reasons import Reason
from kopf._handlers.registries import ChangingHandler, OperatorRegistry, SpawningHandler
from kopf._storage.configmaps import ConfigMapDiffBaseStorage, ConfigMapProgressStorage
from kopf._storage.diffbase import AnnotationsDiffBaseStorage, MultiDiffBaseStorage, StatusDiffBaseStorage
from kopf._storage.progress import (
    AnnotationsProgressStorage,
    MultiProgressStorage,
    SmartProgressStorage,
    StatusProgressStorage,
)
from kopf._storage.sqlite import SQLiteDiffBaseStorage, SQLiteProgressStorage
from kopf._structs.resources import Resource, Selector
from kopf.config import OperatorConfig

# The names of the calls that register sub-handlers (kopf.register, kopf.execute, @kopf.subhandler).
SUBHANDLING = frozenset({'register', 'execute', 'subhandler', 'this'})

# The functions that post Kubernetes Events explicitly (kopf.event, kopf.info, ...).
POSTING = frozenset({'event', 'info', 'warn', 'exception'})

# The functions that create or change objects by server-side apply (kopf.apply, kopf.apply_async).
APPLYING = frozenset({'apply', 'apply_async'})

# Where a storage keeps its records.
ANNOTATIONS, STATUS, CONFIGMAPS, OUTSIDE = 'annotations', 'status', 'configmaps', 'outside'


@dataclasses.dataclass(frozen=True)
class Scope:
    """Where the operator serves: exact namespaces, or the whole cluster (also for namespace patterns)."""

    namespaces: tuple[str, ...] = ()
    patterns: bool = False  # some namespaces are patterns: they are listed and watched, and served cluster-wide

    @property
    def clusterwide(self) -> bool:
        return not self.namespaces or self.patterns


@dataclasses.dataclass(frozen=True)
class Served:
    """One resource that the handlers serve, and what the operator does with its objects."""

    resource: Resource
    watched: bool  # listed and watched (all but admission handlers)
    writes: bool  # patched at the main endpoint
    writes_status: bool  # patched at the /status subresource
    rereads: bool  # read by name when a patch of the finalizer conflicts
    posts: bool  # Events are posted about its objects
    applied: bool = False  # owned children: created and changed by server-side apply (kopf.apply)


@dataclasses.dataclass(frozen=True)
class Facts:
    """Everything about an operator that its permissions and its deployment follow from."""

    served: tuple[Served, ...]
    scope: Scope
    mode: str  # standalone, ha, shards
    lease_namespace: str
    configmaps: tuple[str | None, ...]  # the namespaces of the ConfigMap storages (None: the objects' namespaces)
    crd_reads: tuple[str, ...]  # the CRDs read at the start (storages that write into the status)
    scanning: bool  # CRDs (and namespaces, with patterns) are watched while running
    admission: Admission | None = None


@dataclasses.dataclass(frozen=True)
class Admission:
    """The webhook configurations the operator manages, by the types that have handlers."""

    managed: str
    types: frozenset[str]  # 'validating', 'mutating'
    replicas: bool


def storage_places(storage: object) -> frozenset[str]:
    """Where a progress or diff-base storage keeps its records; a storage of the user's may write anything."""
    if isinstance(storage, SmartProgressStorage):
        return storage_places(storage.annotations)  # its status part only reads and cleans up old records
    if isinstance(storage, (MultiProgressStorage, MultiDiffBaseStorage)):
        return frozenset().union(*(storage_places(child) for child in storage.storages))
    if isinstance(storage, (AnnotationsProgressStorage, AnnotationsDiffBaseStorage)):
        return frozenset({ANNOTATIONS})
    if isinstance(storage, (StatusProgressStorage, StatusDiffBaseStorage)):
        return frozenset({STATUS})
    if isinstance(storage, (ConfigMapProgressStorage, ConfigMapDiffBaseStorage)):
        return frozenset({CONFIGMAPS})
    if isinstance(storage, (SQLiteProgressStorage, SQLiteDiffBaseStorage)):
        return frozenset({OUTSIDE})
    return frozenset({ANNOTATIONS, STATUS})  # a storage of its own writes into the patch: anywhere


def configmap_namespaces(*storages: object) -> tuple[str | None, ...]:
    """The namespaces of the ConfigMap storages among these (``None``: each object's own)."""
    found: list[str | None] = []
    pending = list(storages)
    while pending:
        storage = pending.pop(0)
        if isinstance(storage, (MultiProgressStorage, MultiDiffBaseStorage)):
            pending.extend(storage.storages)
        elif isinstance(storage, (ConfigMapProgressStorage, ConfigMapDiffBaseStorage)):
            found.append(storage.namespace)
    return tuple(dict.fromkeys(found))


def returns_value(fn: Callable[..., Any]) -> bool:
    """
    Whether a handler may return a result (stored in ``status.<id>``): any ``return`` of something but ``None``.

    Read from the function's bytecode (which every function has, also
    lambdas and functions without a source): a return of anything but the
    constant ``None`` counts. A callable without bytecode (a builtin, a C
    function), or one that registers sub-handlers (their results are stored
    too), may return one.
    """
    hints = getattr(fn, '__annotations__', {}) or {}
    if 'return' in hints and hints['return'] in (None, 'None'):
        return False
    code = getattr(inspect.unwrap(fn), '__code__', None)
    if code is None:
        return True
    if SUBHANDLING & set(code.co_names):
        return True
    instructions = list(dis.get_instructions(code))
    for index, instruction in enumerate(instructions):
        if instruction.opname == 'RETURN_CONST' and instruction.argval is not None:
            return True
        if instruction.opname == 'RETURN_VALUE':
            before = instructions[index - 1] if index else None
            if before is None or before.opname != 'LOAD_CONST' or before.argval is not None:
                return True
    return False


def posts_events(fn: Callable[..., Any]) -> bool:
    """Whether a handler posts Events itself: calls ``kopf.event/info/warn/exception`` (read from its bytecode)."""
    return calls_kopf(fn, POSTING, 'kopf._runtime.posting')


def applies_objects(fn: Callable[..., Any]) -> bool:
    """Whether a handler creates or changes objects by server-side apply: calls ``kopf.apply`` (from its bytecode)."""
    return calls_kopf(fn, APPLYING, 'kopf._kube.applying')


def calls_kopf(fn: Callable[..., Any], names: frozenset[str], module: str) -> bool:
    """Whether a function calls one of kopf's functions: as ``kopf.<name>``, or imported from ``module``."""
    code = getattr(inspect.unwrap(fn), '__code__', None)
    if code is None:
        return False
    namespace = getattr(inspect.unwrap(fn), '__globals__', {})
    instructions = list(dis.get_instructions(code))
    for before, instruction in itertools.pairwise(instructions):
        if (before.opname == 'LOAD_GLOBAL' and str(before.argval) == 'kopf'
                and instruction.opname in ('LOAD_ATTR', 'LOAD_METHOD') and instruction.argval in names):
            return True
    for instruction in instructions:
        if instruction.opname == 'LOAD_GLOBAL' and str(instruction.argval) in names:
            target = namespace.get(str(instruction.argval))
            if getattr(target, '__module__', '') == module:
                return True
    return False


def takes_patch(fn: Callable[..., Any]) -> bool:
    """Whether a handler takes ``patch`` by name (it may write into the object)."""
    try:
        return 'patch' in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def serve(
        registry: OperatorRegistry,
        resources: Mapping[Selector, Resource],
        config: OperatorConfig,
) -> tuple[Served, ...]:
    """What the operator does with each served resource (those of all but the admission handlers)."""
    places = storage_places(config.persistence.progress_storage) | storage_places(config.persistence.diffbase_storage)
    backoff_places = storage_places(config.persistence.progress_storage)  # where reconcile handlers' back-off is
    applied = _applied(registry, resources)
    served: dict[Resource, Served] = {}
    for resource in dict.fromkeys(resources.values()):
        changing = registry.get_all_changing_handlers(resource)
        spawning = registry.get_spawning_handlers(resource)
        watching = registry.get_watching_handlers(resource)
        reconciling = registry.get_reconciling_handlers(resource)
        models = [selector.model for selector in resources if selector.model is not None and selector.check(resource)]
        # The gate of a typed resource reports invalid specs (an Event, a condition): only its own validators'
        # verdicts reach it, as the server refuses what the generated CRD's schema refuses.
        typed = any(getattr(model, 'kopf_checks_more', lambda: True)() for model in models)
        conditions = typed and any(getattr(model, 'kopf_has_conditions', lambda: False)() for model in models)
        finalizer = _needs_finalizer(changing, spawning)
        results = any(returns_value(handler.fn) for handler in [*changing, *reconciling])
        handlers = [*changing, *spawning, *watching, *reconciling]
        patched = any(takes_patch(handler.fn) for handler in handlers)  # may write
        status = 'status' in resource.subresources
        object_places = (places if changing else frozenset()) | (backoff_places if reconciling else frozenset())
        status_writes = (STATUS in object_places) or results or conditions
        writes = bool(finalizer or patched or ANNOTATIONS in object_places or (status_writes and not status))
        logged = config.posting.loggers and bool(handlers)  # every handler's success and failure is logged
        posts = config.posting.enabled and (logged or typed or any(posts_events(h.fn) for h in handlers))
        served[resource] = Served(
            resource=resource, watched=True, writes=writes, writes_status=status and (status_writes or patched),
            rereads=finalizer, posts=posts, applied=resource in applied)
    return tuple(served.values())


def _applied(registry: OperatorRegistry, resources: Mapping[Selector, Resource]) -> frozenset[Resource]:
    """The resources owned by reconcile handlers that apply objects (kopf.apply): they create and change them."""
    return frozenset(resources[relation.selector]
                     for _, handler in registry.iter_reconciling_handlers() if applies_objects(handler.fn)
                     for relation in handler.owns if relation.selector in resources)


def _needs_finalizer(changing: Collection[ChangingHandler], spawning: Collection[SpawningHandler]) -> bool:
    deleting = any(handler.reason == Reason.DELETE and not handler.optional for handler in changing)
    return deleting or any(not handler.optional for handler in spawning)
