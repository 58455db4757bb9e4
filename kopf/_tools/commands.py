"""
The runs of ``kopf inspect`` and ``kopf migrate``: log in, find the resource and its objects, and go object by object.

The storages are those named on the command line, else those that the
operator's startup handlers configure (for an operator given with ``-f``),
else the framework's defaults. The handler ids of the operator's handlers
for the resource (with ``-f``) help storages that cannot list their records
or that keep them under names derived from the ids.
"""
from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable
from typing import Any

from kopf._cycle import selection
from kopf._handlers.registries import OperatorRegistry
from kopf._kube.errors import APIError
from kopf._kube.session import APIContext
from kopf._runtime import preflight
from kopf._storage.diffbase import AnnotationsDiffBaseStorage, DiffBaseStorage
from kopf._storage.errors import StorageError
from kopf._storage.progress import AnnotationsProgressStorage, ProgressStorage
from kopf._structs.bodies import Body
from kopf._structs.patches import Patch
from kopf._structs.resources import Resource
from kopf._tools import inspecting, migrating, session, specs
from kopf.config import OperatorConfig, PersistenceConfig


@dataclasses.dataclass(frozen=True)
class Objects:
    """Which objects: of a resource (as users name it), in a namespace (``None``: all), one by name or all."""

    resource: str
    namespace: str | None = None
    name: str | None = None


async def inspect(
        objects: Objects,
        *,
        registry: OperatorRegistry,
        progress_spec: str | None,
        diffbase_spec: str | None,
        finalizer: str | None,
        output: str,
) -> str:
    """The state of the objects, rendered as a table or JSON."""
    config = await session.configured(registry)
    progress = specs.progress_storage(progress_spec) if progress_spec else config.persistence.progress_storage
    diffbase_named = diffbase_spec or progress_spec
    diffbase = specs.diffbase_storage(diffbase_named) if diffbase_named else config.persistence.diffbase_storage
    now = datetime.datetime.now(datetime.timezone.utc)
    async with session.connected(registry=registry, config=config) as context:
        resource = await session.resolve(context, objects.resource)
        found = await _objects(context, resource, objects)
        ids = selection.all_ids(registry, resource)
        async with session.entered(context, [progress, diffbase]):
            views = [await inspecting.inspect_object(
                Body(obj), resource=str(resource), progress=progress, diffbase=diffbase, ids=ids,
                finalizer=finalizer or config.persistence.finalizer, now=now) for obj in found]
    return inspecting.as_json(views) if output == 'json' else inspecting.as_table(views, now=now)


@dataclasses.dataclass(frozen=True)
class Specs:
    """The storages of a migration as named on the command line: both kinds at once, or each kind."""

    both: str | None = None
    progress: str | None = None
    diffbase: str | None = None

    @property
    def progress_spec(self) -> str | None:
        return self.progress or self.both

    @property
    def diffbase_spec(self) -> str | None:
        return self.diffbase or self.both


async def migrate(
        objects: Objects,
        *,
        registry: OperatorRegistry,
        source: Specs,
        target: Specs,
        dry_run: bool,
        keep_source: bool,
        echo: Callable[[str], None],
) -> bool:
    """Move the state of the objects; reports each object through ``echo``; ``False`` if any is left undone."""
    pairs = _pairs(source, target)
    config = OperatorConfig()
    async with session.connected(registry=registry, config=config) as context:
        resource = await session.resolve(context, objects.resource)
        await _check_target(context, resource, pairs[1])
        found = await _objects(context, resource, objects)
        ids = selection.all_ids(registry, resource)
        storages = [s for pair in pairs for s in (pair.progress, pair.diffbase) if s is not None]

        async def send(body: Body, patch: Patch) -> Body | None:
            patched = await session.patch(context, resource, dict(body.raw), patch)
            return Body(patched) if patched is not None else None

        complete = True
        counts = {'moved': 0, 'nothing': 0, 'skipped': 0, 'failed': 0}
        async with session.entered(context, storages):
            for obj in found:
                body = Body(obj)
                try:
                    moved = await migrating.migrate_object(body, source=pairs[0], target=pairs[1], ids=ids,
                                                           send=send, dry_run=dry_run, keep_source=keep_source)
                except APIError as e:
                    where = f"{body.metadata.namespace}/{body.metadata.name}" if body.metadata.namespace else \
                        body.metadata.name
                    echo(f"{where}: failed: {e}")
                    counts['failed'] += 1
                    complete = False
                    continue
                echo(moved.describe(dry_run=dry_run))
                key = 'skipped' if moved.skipped else 'nothing' if moved.nothing else 'moved'
                counts[key] += 1
                complete = complete and moved.skipped is None
    verb = 'would be moved' if dry_run else 'moved'
    echo(f"{len(found)} object(s) of {resource}: {counts['moved']} {verb}, {counts['nothing']} with nothing to move, "
         f"{counts['skipped']} skipped, {counts['failed']} failed.")
    return complete


async def _check_target(context: APIContext, resource: Resource, target: migrating.Pair) -> None:
    """Refuse to move anything into status fields that the resource's schema would prune."""
    persistence = PersistenceConfig(progress_storage=target.progress or AnnotationsProgressStorage(),
                                    diffbase_storage=target.diffbase or AnnotationsDiffBaseStorage(),
                                    fail_on_pruning=True)
    try:
        await preflight.check_persistence(context=context, resources=[resource], persistence=persistence)
    except StorageError as e:
        raise session.ToolError(f"Not migrating into a storage that the resource cannot keep: {e}") from None


def _pairs(source: Specs, target: Specs) -> tuple[migrating.Pair, migrating.Pair]:
    progress = (source.progress_spec, target.progress_spec)
    diffbase = (source.diffbase_spec, target.diffbase_spec)
    moving_progress = all(progress)
    moving_diffbase = all(diffbase)
    if not moving_progress and not moving_diffbase:
        raise session.ToolError("Nothing to migrate: name the source and the target storages "
                                "(--from and --to, or --from-progress/--to-progress, --from-diffbase/--to-diffbase).")
    for what, (old, new) in (('progress', progress), ('diff-base', diffbase)):
        if old and new and old == new:
            raise session.ToolError(f"The source and the target {what} storages are the same: {old!r}.")
    src_progress: ProgressStorage | None = specs.progress_storage(progress[0]) if moving_progress and progress[0] \
        else None
    dst_progress: ProgressStorage | None = specs.progress_storage(progress[1]) if moving_progress and progress[1] \
        else None
    src_diffbase: DiffBaseStorage | None = specs.diffbase_storage(diffbase[0]) if moving_diffbase and diffbase[0] \
        else None
    dst_diffbase: DiffBaseStorage | None = specs.diffbase_storage(diffbase[1]) if moving_diffbase and diffbase[1] \
        else None
    return (migrating.Pair(progress=src_progress, diffbase=src_diffbase),
            migrating.Pair(progress=dst_progress, diffbase=dst_diffbase))


async def _objects(context: APIContext, resource: Resource, objects: Objects) -> list[dict[str, Any]]:
    namespace = objects.namespace if resource.namespaced else None
    found = await session.objects(context, resource, namespace=namespace,
                                  name=objects.name if namespace is not None or not resource.namespaced else None)
    if objects.name is not None and namespace is None and resource.namespaced:
        found = [obj for obj in found if (obj.get('metadata') or {}).get('name') == objects.name]
        if not found:
            raise session.ToolError(f"There is no {resource} named {objects.name!r} in any namespace.")
    return found
