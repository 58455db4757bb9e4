"""
The ``kopf`` command line: ``kopf run FILE... [-m MODULE]`` and its options; ``inspect``, ``migrate``, ``manifests``.

Operator code is imported first (which registers its handlers), then the
operator runs until interrupted. An operator that cannot be imported ends the
command at once with its traceback and a non-zero exit code.

Kopf's peering options work on the Lease-based replicas (docs/replicas.rst):
``--peering NAME`` runs the replicas in HA mode with the Lease ``NAME`` (one
of them handles, as with Kopf's peering), ``--priority N`` ranks them,
``--dev`` is ``--priority 666``; ``kopf freeze`` and ``kopf resume`` pause and
resume the replicas of a Lease by hand.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import importlib
import importlib.util
import logging
import os
import re
import sys
import threading
import traceback
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from kopf._handlers.registries import OperatorRegistry, get_default_registry
from kopf._kube import auth
from kopf._kube.auth import APIContext, LoginError
from kopf._kube.errors import APIConnectionError, APIError, describe_api_failure
from kopf._replicas import freezing, peering
from kopf._runtime import allocation, exiting, logsetup, running
from kopf._storage.errors import StorageError
from kopf._structs.namespaces import NamespacePatternError, NamespaceScope
from kopf._tools import commands
from kopf._tools.session import ToolError
from kopf._tools.specs import SpecError
from kopf.config import OperatorConfig
from kopf.errors import ActivityError, DuplicateHandlerError, HandlerSignatureError

T = TypeVar('T')


@dataclasses.dataclass(frozen=True)
class CLIControls:
    """What an embedding test runner passes in: flags to stop the operator, its registry and settings."""

    stop_flag: threading.Event | None = None
    ready_flag: threading.Event | None = None
    registry: OperatorRegistry | None = None
    settings: OperatorConfig | None = None


# The option of `kopf run` that starts the process over with CPython's C allocator (only when given).
C_ALLOCATOR = '--c-allocator'


class OperatorImportError(click.ClickException):
    exit_code = 2


def load_operator_code(paths: Sequence[str], modules: Sequence[str]) -> None:
    """
    Import operator files and modules, so that their decorators register the handlers.

    A file is run as ``python FILE`` would run it: its directory comes first
    on ``sys.path``, so that it imports its sibling modules. It is imported
    under a private module name, so that a file named like a module of the
    standard library or of a package (``operator.py``, ``queue.py``) does not
    shadow that module for everything imported after it. Modules (``-m``)
    are imported by their names, from the working directory too, as
    ``python -m`` does.
    """
    _prepend_to_path(os.getcwd())
    for index, path in enumerate(paths):
        _prepend_to_path(os.path.dirname(os.path.abspath(path)))
        name = script_module_name(index, path)
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise OperatorImportError(f"Cannot load the operator file {path!r}: not a Python file.")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        _import(functools.partial(spec.loader.exec_module, module), path)
    for name in modules:
        _import(functools.partial(importlib.import_module, name), name)


def script_module_name(index: int, path: str) -> str:
    """A module name for an operator file that no real module has: ``__kopf_script_0_handlers__``."""
    stem = re.sub(r'\W', '_', Path(path).stem)
    return f'__kopf_script_{index}_{stem}__'


def _prepend_to_path(directory: str) -> None:
    if directory in sys.path:
        sys.path.remove(directory)
    sys.path.insert(0, directory)


def _import(action: Callable[[], object], what: str) -> None:
    try:
        action()
    except FileNotFoundError as e:
        raise OperatorImportError(f"The operator file {what!r} does not exist: {e}") from e
    except (HandlerSignatureError, DuplicateHandlerError) as e:  # declared wrongly: the message says where and why
        raise OperatorImportError(f"The operator code {what!r} declares a handler wrongly: {e}") from e
    except Exception as e:
        raise OperatorImportError(f"The operator code {what!r} failed to import:\n{_own_traceback(e)}") from e


def _own_traceback(error: BaseException) -> str:
    """The traceback from the operator's code on: the loader's and importlib's frames say nothing to its author."""
    tb = error.__traceback__
    while tb is not None and _is_loading_machinery(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return ''.join(traceback.format_exception(type(error), error, tb))


def _is_loading_machinery(filename: str) -> bool:
    return (filename == __file__ or filename.startswith('<frozen importlib')
            or os.path.dirname(filename) == os.path.dirname(importlib.__file__ or ''))


@click.group(name='kopf', context_settings={'help_option_names': ['-h', '--help']})
@click.version_option(package_name='kopf', prog_name='kopf')
def main() -> None:
    """Kubernetes Operator Pythonic Framework."""


def console() -> None:
    """
    The ``kopf`` command as installed, and ``python -m kopf``.

    ``kopf run --c-allocator`` first starts CPython over with its C
    allocator, unless the user chose one with ``PYTHONMALLOC``: see
    :mod:`kopf._runtime.allocation`. Nothing else ever starts the process over.
    """
    if sys.argv[1:2] == ['run'] and C_ALLOCATOR in sys.argv[2:]:
        allocation.use_c_allocator()
    main()



def _namespace_patterns(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    """Refuse a malformed namespace pattern before anything starts, naming it."""
    try:
        NamespaceScope.parse(values)
    except NamespacePatternError as e:
        raise click.BadParameter(str(e), ctx=ctx, param=param) from None
    return values


@main.command()
@click.argument('paths', nargs=-1, type=click.Path(dir_okay=False))
@click.option('-m', '--module', 'modules', multiple=True, help="An operator module to import (repeatable).")
@click.option('-n', '--namespace', 'namespaces', multiple=True, callback=_namespace_patterns,
              help="A namespace to serve, or a pattern of namespaces: comma-separated globs (* and ?), "
                   "each negated with a leading !, e.g. 'myapp-*,!*-pr-*' (repeatable; see docs/scopes.rst).")
@click.option('-A', '--all-namespaces', 'clusterwide', is_flag=True, help="Serve all namespaces.")
@click.option('--standalone', is_flag=True, help="Do not coordinate with other operator instances (the default).")
@click.option('--dev', is_flag=True, help="Development mode: --priority 666 with --peering/--ha; else standalone.")
@click.option('--ha', is_flag=True, help="High availability: one replica handles, the others stand by (a Lease).")
@click.option('--shards', is_flag=True, help="Sharding: every replica handles its share of the objects (Leases).")
@click.option('--lease-name', help="The name of the Lease(s) of --ha/--shards (default: from the operator's files).")
@click.option('--lease-namespace', help="The namespace of the Lease(s) (default: the one served namespace, "
                                        "else the credentials' namespace).")
@click.option('--identity', help="This replica's unique name among its peers (default: host name and a random suffix).")
@click.option('-L', '--liveness', 'liveness_endpoint', metavar='URL',
              help="Serve a liveness endpoint for Kubernetes probes, e.g. http://0.0.0.0:8080/healthz.")
@click.option('--readiness', 'readiness_endpoint', metavar='URL',
              help="Serve the readiness endpoint here, e.g. http://0.0.0.0:8080/readyz (default: /readyz beside "
                   "the liveness endpoint, else beside the metrics).")
@click.option('--metrics', 'metrics_endpoint', metavar='URL',
              help="Serve Prometheus metrics, e.g. http://0.0.0.0:9090/metrics (needs kopf[metrics]; the liveness "
                   "endpoint's port may be shared).")
@click.option('-P', '--peering', 'peering_name', metavar='NAME',
              help="Kopf's peering: HA replicas of the Lease NAME (the same as --ha --lease-name NAME).")
@click.option('-p', '--priority', type=int,
              help="HA replicas: one of a higher priority takes the Lease over from the leader (default 0).")
@click.option('-v', '--verbose', is_flag=True, help="Log at the DEBUG level of kopf's own loggers.")
@click.option('-d', '--debug', is_flag=True, help="Log everything at the DEBUG level.")
@click.option('-q', '--quiet', is_flag=True, help="Log only warnings and errors.")
@click.option('--log-format', type=click.Choice(['plain', 'full', 'json']), default='full', show_default=True)
@click.option('--log-prefix/--no-log-prefix', default=None,
              help="Prefix per-object messages with [namespace/name] (plain and full formats; default: yes).")
@click.option('--log-refkey', metavar='KEY', help="The JSON key of the object's reference (default: object).")
@click.option(C_ALLOCATOR, 'c_allocator', is_flag=True,
              help="Start the process over with CPython's C allocator (PYTHONMALLOC=malloc), which gives the memory "
                   "of bursts back to the system: less idle memory, some more CPU per object (see docs/install.rst).")
@click.pass_obj
def run(
        controls: CLIControls | None,
        paths: tuple[str, ...],
        modules: tuple[str, ...],
        namespaces: tuple[str, ...],
        clusterwide: bool,
        standalone: bool,
        dev: bool,
        ha: bool,
        shards: bool,
        lease_name: str | None,
        lease_namespace: str | None,
        identity: str | None,
        liveness_endpoint: str | None,
        readiness_endpoint: str | None,
        metrics_endpoint: str | None,
        peering_name: str | None,
        priority: int | None,
        verbose: bool,
        debug: bool,
        quiet: bool,
        log_format: str,
        log_prefix: bool | None,
        log_refkey: str | None,
        c_allocator: bool,
) -> None:
    """Run the operator(s) defined in the given files and modules."""
    if not paths and not modules:
        raise click.UsageError("Give at least one operator file or a module with -m.")
    if namespaces and clusterwide:
        raise click.UsageError("Use either -n/--namespace or -A/--all-namespaces, not both.")
    if peering_name is not None:
        if standalone or shards:
            raise click.UsageError(f"--peering {peering_name} runs HA replicas of one Lease; it cannot be combined "
                                   f"with {'--standalone' if standalone else '--shards'} (for sharded replicas, "
                                   f"name their Leases with --lease-name).")
        if lease_name is not None and lease_name != peering_name:
            raise click.UsageError(f"--peering {peering_name} names the Lease already; --lease-name {lease_name} "
                                   f"says otherwise: give one of them.")
        ha, lease_name = True, peering_name
    coordinated = ha or shards
    coordination = [flag for flag, given in [('--standalone', standalone or (dev and not coordinated)),
                                             ('--ha', ha), ('--shards', shards)] if given]
    if len(coordination) > 1:
        raise click.UsageError(f"Use only one of --standalone, --ha, --shards (got {' and '.join(coordination)}): "
                               "a standalone operator does not coordinate with other replicas; --ha makes one "
                               "replica handle everything, --shards shares the objects among all replicas.")
    if priority is None and dev and coordinated:
        priority = freezing.DEV_PRIORITY
    logsetup.configure(debug=debug, verbose=verbose, quiet=quiet, log_format=log_format,
                       log_prefix=log_prefix, log_refkey=log_refkey)
    if c_allocator and allocation.current_allocator() not in (None, 'malloc', 'malloc_debug'):
        logging.getLogger('kopf').warning(
            "%s has no effect here (the process cannot be started over: it is embedded, traced, or frozen); "
            "set PYTHONMALLOC=malloc in the environment that starts it instead.", C_ALLOCATOR)
    # The process is ours unless an application runs the command (e.g. KopfRunner, with its controls).
    owned = controls is None and threading.current_thread() is threading.main_thread()
    controls = controls or CLIControls()
    # Its executor is looked at after the stop, so the process makes the settings its own.
    settings = OperatorConfig() if owned and controls.settings is None else controls.settings
    failure: click.ClickException | None = None
    with exiting.early_signals() if owned else contextlib.nullcontext():
        try:
            load_operator_code(paths, modules)
            running.run(
                registry=controls.registry,
                settings=settings,
                namespaces=namespaces,
                clusterwide=clusterwide or not namespaces,
                standalone=standalone or (dev and not coordinated),
                ha=ha,
                shards=shards,
                peering_name=(lease_name if lease_name is not None else peering.default_name([*paths, *modules]))
                if coordinated else None,
                peering_namespace=lease_namespace,
                identity=identity,
                priority=priority,
                liveness_endpoint=liveness_endpoint,
                readiness_endpoint=readiness_endpoint,
                metrics_endpoint=metrics_endpoint,
                stop_flag=controls.stop_flag,
                ready_flag=controls.ready_flag,
            )
        except exiting.StoppedEarly as e:
            click.echo(f"Stopped by {e.signal.name} before the operator has started.", err=True)
            raise
        except (running.OperatorError, LoginError, ActivityError) as e:
            failure = click.ClickException(str(e))
            failure.__cause__ = e
        except (APIError, APIConnectionError) as e:
            failure = click.ClickException(describe_api_failure(e))
            failure.__cause__ = e
    if owned and settings is not None:  # sync handlers that still run must not keep the process alive
        exiting.abandon_handlers(settings.execution.executor, code=failure.exit_code if failure else 0,
                                 error=failure.format_message() if failure else None)
    if failure is not None:
        raise failure


# Kopf's commands to pause and resume the replicas of a peering, here of a Lease (see docs/replicas.rst).

def _logging_options(fn: Callable[..., None]) -> Callable[..., None]:
    for option in reversed([
        click.option('-v', '--verbose', is_flag=True, help="Log at the DEBUG level of kopf's own loggers."),
        click.option('-d', '--debug', is_flag=True, help="Log everything at the DEBUG level."),
        click.option('-q', '--quiet', is_flag=True, help="Log only warnings and errors."),
        click.option('--log-format', type=click.Choice(['plain', 'full', 'json']), default='full'),
        click.option('--log-prefix/--no-log-prefix', default=None),
        click.option('--log-refkey', metavar='KEY'),
    ]):
        fn = option(fn)
    return fn


def _lease_options(fn: Callable[..., None]) -> Callable[..., None]:
    for option in reversed([
        click.option('-n', '--namespace', 'namespaces', multiple=True,
                     help="The namespace the operator serves (its Lease is there unless --lease-namespace)."),
        click.option('-A', '--all-namespaces', 'clusterwide', is_flag=True, help="The operator serves all namespaces."),
        click.option('--lease-namespace', help="The namespace of the Lease (default: the one served namespace, "
                                               "else the credentials' namespace)."),
        click.option('-i', '--id', 'freeze_id', metavar='ID', help="Who freezes (default: user@host)."),
        click.option('-P', '--peering', 'peering_name', metavar='NAME', required=True,
                     help="The Lease of the HA replicas (their --peering NAME or --lease-name NAME)."),
    ]):
        fn = option(fn)
    return fn


@main.command()
@_logging_options
@_lease_options
@click.option('--dev', is_flag=True, help="The priority 666 (unless --priority is given).")
@click.option('-p', '--priority', type=int, help=f"The freeze pauses replicas of lower priorities "
                                                 f"(default {freezing.FREEZE_PRIORITY}).")
@click.option('-t', '--lifetime', type=int, required=True, help="For how many seconds (unless resumed earlier).")
@click.option('-m', '--message', help="Why: shown in the replicas' logs.")
def freeze(
        peering_name: str,
        namespaces: tuple[str, ...],
        clusterwide: bool,
        lease_namespace: str | None,
        freeze_id: str | None,
        dev: bool,
        priority: int | None,
        lifetime: int,
        message: str | None,
        **logging_options: Any,
) -> None:
    """Pause the HA replicas of a Lease: no replica handles anything until resumed or for --lifetime seconds."""
    logsetup.configure(**logging_options)
    if priority is None:
        priority = freezing.DEV_PRIORITY if dev else freezing.FREEZE_PRIORITY
    _lease_command(freezing.freeze, peering_name=peering_name, namespaces=namespaces, clusterwide=clusterwide,
                   lease_namespace=lease_namespace, id=freeze_id or freezing.default_id(), lifetime=lifetime,
                   priority=priority, message=message)


@main.command()
@_logging_options
@_lease_options
def resume(
        peering_name: str,
        namespaces: tuple[str, ...],
        clusterwide: bool,
        lease_namespace: str | None,
        freeze_id: str | None,
        **logging_options: Any,
) -> None:
    """Resume the HA replicas of a Lease paused by `kopf freeze` (with the same --id)."""
    logsetup.configure(**logging_options)
    _lease_command(freezing.resume, peering_name=peering_name, namespaces=namespaces, clusterwide=clusterwide,
                   lease_namespace=lease_namespace, id=freeze_id or freezing.default_id())


def _lease_command(
        action: Callable[..., Awaitable[str]],
        *,
        peering_name: str,
        namespaces: tuple[str, ...],
        clusterwide: bool,
        lease_namespace: str | None,
        **kwargs: Any,
) -> None:
    if namespaces and clusterwide:
        raise click.UsageError("Use either -n/--namespace or -A/--all-namespaces, not both.")

    async def act() -> str:
        info = await asyncio.get_running_loop().run_in_executor(None, auth.login_default)
        namespace = peering.lease_namespace(lease_namespace, namespaces=namespaces, clusterwide=clusterwide,
                                            default_namespace=info.default_namespace)
        async with APIContext(info) as context:
            return await action(context=context, namespace=namespace, name=peering_name, **kwargs)

    try:
        click.echo(asyncio.run(act()))
    except freezing.FreezeError as e:
        raise click.ClickException(str(e)) from e
    except LoginError as e:
        raise click.ClickException(str(e)) from e
    except (APIError, APIConnectionError) as e:
        raise click.ClickException(describe_api_failure(e)) from e


def _tool_errors(action: Callable[[], T]) -> T:
    """Run a tool; its expected failures end the command with one line and exit code 1."""
    try:
        return action()
    except (ToolError, SpecError, StorageError, LoginError, ActivityError) as e:
        raise click.ClickException(str(e)) from e
    except (APIError, APIConnectionError) as e:
        raise click.ClickException(describe_api_failure(e)) from e


_STORAGE_SPEC = "smart[:PREFIX], annotations[:PREFIX], status[:NAME], sqlite:PATH, configmaps[:PREFIX[:NAMESPACE]]"


@main.command()
@click.argument('resource')
@click.argument('name', required=False)
@click.option('-n', '--namespace', help="Only this namespace (default: all namespaces).")
@click.option('-f', '--operator', 'paths', multiple=True, type=click.Path(dir_okay=False),
              help="An operator file: its storages (set by its startup handlers) and its handler ids.")
@click.option('-m', '--module', 'modules', multiple=True, help="An operator module, as with -f (repeatable).")
@click.option('--progress-storage', metavar='SPEC', help=f"Where the progress is: {_STORAGE_SPEC}.")
@click.option('--diffbase-storage', metavar='SPEC',
              help="Where the last-handled configuration is (default: as --progress-storage).")
@click.option('--finalizer', help="The operator's finalizer (default: the operator's, or kopf's).")
@click.option('-o', '--output', type=click.Choice(['table', 'json']), default='table', show_default=True)
def inspect(
        resource: str,
        name: str | None,
        namespace: str | None,
        paths: tuple[str, ...],
        modules: tuple[str, ...],
        progress_storage: str | None,
        diffbase_storage: str | None,
        finalizer: str | None,
        output: str,
) -> None:
    """Show the handlers' progress, the last-handled configuration and the finalizer of objects."""
    registry = _operator_registry(paths, modules)
    text = _tool_errors(lambda: asyncio.run(commands.inspect(
        commands.Objects(resource=resource, name=name, namespace=namespace), registry=registry,
        progress_spec=progress_storage, diffbase_spec=diffbase_storage, finalizer=finalizer, output=output)))
    click.echo(text)


@main.command()
@click.argument('resource')
@click.argument('name', required=False)
@click.option('-n', '--namespace', help="Only this namespace (default: all namespaces).")
@click.option('--from', 'source', metavar='SPEC', help=f"Move from this storage (both kinds): {_STORAGE_SPEC}.")
@click.option('--to', 'target', metavar='SPEC', help="Move to this storage (both kinds).")
@click.option('--from-progress', metavar='SPEC', help="Move the progress from this storage (overrides --from).")
@click.option('--to-progress', metavar='SPEC', help="Move the progress to this storage (overrides --to).")
@click.option('--from-diffbase', metavar='SPEC', help="Move the last-handled configuration from this storage.")
@click.option('--to-diffbase', metavar='SPEC', help="Move the last-handled configuration to this storage.")
@click.option('-f', '--operator', 'paths', multiple=True, type=click.Path(dir_okay=False),
              help="An operator file: its handler ids (needed for records kept under derived names).")
@click.option('-m', '--module', 'modules', multiple=True, help="An operator module, as with -f (repeatable).")
@click.option('--dry-run', is_flag=True, help="Only say what would be moved.")
@click.option('--keep-source', is_flag=True, help="Copy: leave everything in the source storage too.")
def migrate(
        resource: str,
        name: str | None,
        namespace: str | None,
        source: str | None,
        target: str | None,
        from_progress: str | None,
        to_progress: str | None,
        from_diffbase: str | None,
        to_diffbase: str | None,
        paths: tuple[str, ...],
        modules: tuple[str, ...],
        dry_run: bool,
        keep_source: bool,
) -> None:
    """Move the handlers' progress and the last-handled configurations of objects to another storage."""
    registry = _operator_registry(paths, modules)
    complete = _tool_errors(lambda: asyncio.run(commands.migrate(
        commands.Objects(resource=resource, name=name, namespace=namespace), registry=registry,
        source=commands.Specs(both=source, progress=from_progress, diffbase=from_diffbase),
        target=commands.Specs(both=target, progress=to_progress, diffbase=to_diffbase),
        dry_run=dry_run, keep_source=keep_source, echo=click.echo)))
    if not complete:
        raise click.ClickException("Some objects were not migrated (see above); run it again once fixed.")


def _operator_registry(paths: Sequence[str], modules: Sequence[str]) -> OperatorRegistry:
    """The registry of the given operator code (empty if none is given)."""
    if not paths and not modules:
        return OperatorRegistry()
    load_operator_code(paths, modules)
    return get_default_registry()


@main.command()
@click.argument('paths', nargs=-1, type=click.Path(dir_okay=False))
@click.option('-m', '--module', 'modules', multiple=True, help="An operator module to import (repeatable).")
@click.option('-n', '--namespace', 'namespaces', multiple=True, callback=_namespace_patterns,
              help="A namespace (or pattern) the operator serves, as with kopf run (repeatable).")
@click.option('-A', '--all-namespaces', 'clusterwide', is_flag=True, help="The operator serves all namespaces.")
@click.option('--ha', is_flag=True, help="HA replicas: one handles, the others stand by (Leases, a budget).")
@click.option('--shards', is_flag=True, help="Sharded replicas: each handles its share (Leases, a budget).")
@click.option('--replicas', type=click.IntRange(min=1), help="How many replicas (default: 1; 2 with --ha/--shards).")
@click.option('-L', '--liveness', 'liveness_endpoint', metavar='URL',
              help="The liveness endpoint, e.g. http://0.0.0.0:8080/healthz: a port and a probe.")
@click.option('--metrics', 'metrics_endpoint', metavar='URL',
              help="The metrics endpoint, e.g. http://0.0.0.0:9090/metrics: a port (and the readiness probe "
                   "without --liveness).")
@click.option('--lease-namespace', help="The Leases' namespace (default: the served one, else the operator's).")
@click.option('--operator-namespace', help="Where the operator runs (default: the served namespace, else 'default').")
@click.option('--name', help="The name of the operator's objects (default: from its file or module).")
@click.option('--image', help="The operator's image (default: NAME:latest).")
@click.option('--framework', metavar='REQUIREMENT',
              help="How the Dockerfile installs kopf: a pip requirement (default: a wheel beside the Dockerfile).")
@click.option('-o', '--output', 'output_dir', type=click.Path(file_okay=False),
              help="Write the parts into this folder (crds.yaml, rbac.yaml, deployment.yaml, Dockerfile).")
@click.option('--only', 'parts', multiple=True, type=click.Choice(['crds', 'rbac', 'deployment', 'dockerfile']),
              help="Only these parts (repeatable; default: all; the Dockerfile only into a folder or alone).")
def manifests(
        paths: tuple[str, ...],
        modules: tuple[str, ...],
        namespaces: tuple[str, ...],
        clusterwide: bool,
        ha: bool,
        shards: bool,
        replicas: int | None,
        liveness_endpoint: str | None,
        metrics_endpoint: str | None,
        lease_namespace: str | None,
        operator_namespace: str | None,
        name: str | None,
        image: str | None,
        framework: str | None,
        output_dir: str | None,
        parts: tuple[str, ...],
) -> None:
    """Print the CRDs, RBAC, Deployment and Dockerfile of an operator (as `kopf run` would run it)."""
    from kopf._manifests import building  # the command's own machinery: not loaded for `kopf run`
    if not paths and not modules:
        raise click.UsageError("Give at least one operator file or a module with -m.")
    if namespaces and clusterwide:
        raise click.UsageError("Use either -n/--namespace or -A/--all-namespaces, not both.")
    if ha and shards:
        raise click.UsageError("Use only one of --ha and --shards.")
    load_operator_code(paths, modules)
    request = building.Request(paths=paths, modules=modules, namespaces=namespaces,
                               mode='ha' if ha else 'shards' if shards else None, replicas=replicas,
                               liveness=liveness_endpoint, metrics=metrics_endpoint, lease_namespace=lease_namespace,
                               operator_namespace=operator_namespace, name=name, image=image,
                               framework=framework)
    try:
        built = asyncio.run(building.build(request, get_default_registry()))
    except (building.ManifestError, ActivityError) as e:
        raise click.ClickException(str(e)) from e
    for warning in built.warnings:
        click.echo(f"Warning: {warning}", err=True)
    chosen = parts or building.PARTS
    if output_dir is not None:
        folder = Path(output_dir)
        folder.mkdir(parents=True, exist_ok=True)
        for part in chosen:
            text = built.text(part)
            if text:
                (folder / building.FILES[part]).write_text(text)
                click.echo(f"Written: {folder / building.FILES[part]}", err=True)
    elif list(chosen) == ['dockerfile']:
        click.echo(built.dockerfile, nl=False)
    else:
        texts = [built.text(part) for part in chosen if part != 'dockerfile' and built.text(part)]
        click.echo('---\n'.join(texts), nl=False)
