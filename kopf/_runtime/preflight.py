"""
Startup checks of the storages against the served resources, before the first object is handled.

Once per served resource, when the operator starts: a storage that writes
into the status of a resource whose schema prunes that field -- a custom
resource without ``x-kubernetes-preserve-unknown-fields`` there, or a
built-in resource -- would lose everything it writes, silently. This is said
in one WARNING per resource and storage, naming the resource (and its CRD),
the field, and the two ways out; ``config.persistence.fail_on_pruning``
makes it a startup error instead. Storages that keep the state of objects in
ConfigMaps need a namespace for cluster-scoped resources: without one, the
operator cannot start.

The schemas are read from the CustomResourceDefinitions, which needs the
``get`` permission on them; without it, the check is skipped with a note.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable

from kopf._kube import fetching
from kopf._kube.errors import APIForbiddenError
from kopf._kube.session import APIContext
from kopf._storage import schemas
from kopf._storage.configmaps import ConfigMapDiffBaseStorage, ConfigMapProgressStorage
from kopf._storage.diffbase import MultiDiffBaseStorage
from kopf._storage.errors import StorageError
from kopf._storage.progress import MultiProgressStorage
from kopf._structs.dicts import format_field
from kopf._structs.resources import Resource
from kopf.config import PersistenceConfig

logger = logging.getLogger('kopf._runtime.preflight')

CRDS = Resource(group='apiextensions.k8s.io', version='v1', plural='customresourcedefinitions',
                kind='CustomResourceDefinition', namespaced=False)


async def check_persistence(
        *,
        context: APIContext,
        resources: Iterable[Resource],
        persistence: PersistenceConfig,
) -> None:
    """Warn about (or fail on) storages that the served resources cannot keep; raises :class:`StorageError`."""
    served = list(dict.fromkeys(resources))
    _check_configmap_namespaces(served, persistence)
    writes = schemas.status_writes(persistence.progress_storage, persistence.diffbase_storage)
    if not writes:
        return
    problems: list[str] = []
    for resource in served:
        problems.extend(await _check_resource(context, resource, writes))
    for problem in problems:
        if not persistence.fail_on_pruning:
            logger.warning("%s", problem)
    if problems and persistence.fail_on_pruning:
        raise StorageError(' '.join(problems) + " (config.persistence.fail_on_pruning is set: not starting.)")


async def _check_resource(context: APIContext, resource: Resource, writes: list[schemas.StatusWrite]) -> list[str]:
    crd_name = f"{resource.plural}.{resource.group}"
    crd = None
    if resource.group:
        try:
            crd = await fetching.read_obj(context=context, resource=CRDS, namespace=None, name=crd_name)
        except APIForbiddenError:
            logger.info("Cannot check whether %s keeps the status fields of the storages: reading the CRD %s is "
                        "forbidden (RBAC: get customresourcedefinitions).", resource, crd_name)
            return []
    problems: list[str] = []
    for write in writes:
        fields = ', '.join(format_field(field) for field in write.fields)
        if crd is None:
            problems.append(
                f"The {write.what} of {_name(write.storage)} goes to {fields} of {resource}, a resource with a fixed "
                f"schema (no CustomResourceDefinition), which drops these fields: the {write.what} would be "
                f"silently lost. Keep it in the annotations ({write.alternative}), or outside of the objects "
                f"({write.outside}).")
            continue
        schema = schemas.version_schema(crd, resource.version)
        pruned = sorted({format_field(at) for probe in write.probes
                         if (at := schemas.pruned_at(schema, probe)) is not None})
        if pruned:
            problems.append(
                f"The {write.what} of {_name(write.storage)} goes to {fields} of {resource}, but the structural "
                f"schema of the CRD {crd_name} (version {resource.version}) prunes {', '.join(pruned)}: the "
                f"{write.what} would be silently lost. Either add `x-kubernetes-preserve-unknown-fields: true` "
                f"at {', '.join(pruned)} in the CRD's schema, or keep it in the annotations ({write.alternative}).")
    return problems


def _check_configmap_namespaces(resources: Iterable[Resource], persistence: PersistenceConfig) -> None:
    storages: list[object] = [persistence.progress_storage, persistence.diffbase_storage]
    homeless: list[object] = []
    while storages:
        storage = storages.pop(0)
        if isinstance(storage, (MultiProgressStorage, MultiDiffBaseStorage)):
            storages.extend(storage.storages)
        elif isinstance(storage, (ConfigMapProgressStorage, ConfigMapDiffBaseStorage)) and storage.namespace is None:
            homeless.append(storage)
    clusterwide = [resource for resource in resources if not resource.namespaced]
    if homeless and clusterwide:
        raise StorageError(
            f"{_name(homeless[0])} keeps each object's state in a ConfigMap in the object's namespace, but "
            f"{clusterwide[0]} is cluster-scoped: give the storage a namespace for them, e.g. "
            f"namespace='my-operator-namespace'.")


def _name(storage: object) -> str:
    cls = type(storage)
    return f"kopf.{cls.__name__}" if cls.__module__.startswith('kopf.') else f"{cls.__module__}.{cls.__qualname__}"
