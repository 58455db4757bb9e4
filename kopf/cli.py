"""
The ``kopf`` command line: ``kopf run FILE... [-m MODULE]`` and its options; ``kopf inspect`` and ``kopf migrate``.

Operator code is imported first (which registers its handlers), then the
operator runs until interrupted. An operator that cannot be imported ends the
command at once with its traceback and a non-zero exit code.

Kopf's peering options (``--peering``, ``--priority``) and its ``kopf freeze``
/ ``kopf resume`` commands are recognised, and refused with the Lease-based
way to do the same: replicas coordinate through Kubernetes Leases here.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import importlib
import importlib.util
import os
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import click

from kopf.clients.auth import LoginError
from kopf.clients.errors import APIConnectionError, APIError, describe_api_failure
from kopf.config import OperatorConfig
from kopf.engines import logsetup
from kopf.errors import ActivityError
from kopf.reactor import exiting, peering, running
from kopf.reactor.registries import OperatorRegistry, get_default_registry
from kopf.storage.errors import StorageError
from kopf.tools import commands
from kopf.tools.session import ToolError
from kopf.tools.specs import SpecError

T = TypeVar('T')


@dataclasses.dataclass(frozen=True)
class CLIControls:
    """What an embedding test runner passes in: flags to stop the operator, its registry and settings."""

    stop_flag: threading.Event | None = None
    ready_flag: threading.Event | None = None
    registry: OperatorRegistry | None = None
    settings: OperatorConfig | None = None


class OperatorImportError(click.ClickException):
    exit_code = 2


class PeeringNotSupported(click.ClickException):
    """Kopf's peering options: recognised, refused, and answered with the Lease-based way."""

    exit_code = 2


LEASES_INSTEAD = ("kopf does not use Kopf's peering (KopfPeering objects): replicas coordinate through "
                  "Kubernetes Leases, with kopf run --ha (one replica handles, the others stand by) or "
                  "--shards (the replicas share the objects); without either, an operator is standalone.")


def load_operator_code(paths: Sequence[str], modules: Sequence[str]) -> None:
    """Import operator files and modules, so that their decorators register the handlers."""
    sys.path.insert(0, os.getcwd())
    for path in paths:
        name = Path(path).stem
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise OperatorImportError(f"Cannot load the operator file {path!r}: not a Python file.")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        _import(functools.partial(spec.loader.exec_module, module), path)
    for name in modules:
        _import(functools.partial(importlib.import_module, name), name)


def _import(action: Callable[[], object], what: str) -> None:
    try:
        action()
    except FileNotFoundError as e:
        raise OperatorImportError(f"The operator file {what!r} does not exist: {e}") from e
    except Exception as e:
        details = ''.join(traceback.format_exception(e))
        raise OperatorImportError(f"The operator code {what!r} failed to import:\n{details}") from e


@click.group(name='kopf', context_settings={'help_option_names': ['-h', '--help']})
@click.version_option(package_name='kopf', prog_name='kopf')
def main() -> None:
    """Kubernetes Operator Pythonic Framework."""


@main.command()
@click.argument('paths', nargs=-1, type=click.Path(dir_okay=False))
@click.option('-m', '--module', 'modules', multiple=True, help="An operator module to import (repeatable).")
@click.option('-n', '--namespace', 'namespaces', multiple=True, help="A namespace to serve (repeatable).")
@click.option('-A', '--all-namespaces', 'clusterwide', is_flag=True, help="Serve all namespaces.")
@click.option('--standalone', is_flag=True, help="Do not coordinate with other operator instances (the default).")
@click.option('--dev', is_flag=True, help="Development mode: the same as --standalone.")
@click.option('--ha', is_flag=True, help="High availability: one replica handles, the others stand by (a Lease).")
@click.option('--shards', is_flag=True, help="Sharding: every replica handles its share of the objects (Leases).")
@click.option('--lease-name', help="The name of the Lease(s) of --ha/--shards (default: from the operator's files).")
@click.option('--lease-namespace', help="The namespace of the Lease(s) (default: the one served namespace, "
                                        "else the credentials' namespace).")
@click.option('--identity', help="This replica's unique name among its peers (default: host name and a random suffix).")
@click.option('-L', '--liveness', 'liveness_endpoint', metavar='URL',
              help="Serve a liveness endpoint for Kubernetes probes, e.g. http://0.0.0.0:8080/healthz.")
@click.option('-P', '--peering', 'peering_name', hidden=True, help="Kopf's peering: not used, see --ha/--shards.")
@click.option('-p', '--priority', type=int, hidden=True, help="Kopf's peering: not used, see --ha/--shards.")
@click.option('-v', '--verbose', is_flag=True, help="Log at the DEBUG level of kopf's own loggers.")
@click.option('-d', '--debug', is_flag=True, help="Log everything at the DEBUG level.")
@click.option('-q', '--quiet', is_flag=True, help="Log only warnings and errors.")
@click.option('--log-format', type=click.Choice(['plain', 'full', 'json']), default='full', show_default=True)
@click.option('--log-prefix/--no-log-prefix', default=None,
              help="Prefix per-object messages with [namespace/name] (plain and full formats; default: yes).")
@click.option('--log-refkey', metavar='KEY', help="The JSON key of the object's reference (default: object).")
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
        peering_name: str | None,
        priority: int | None,
        verbose: bool,
        debug: bool,
        quiet: bool,
        log_format: str,
        log_prefix: bool | None,
        log_refkey: str | None,
) -> None:
    """Run the operator(s) defined in the given files and modules."""
    if peering_name is not None or priority is not None:
        option = '--peering' if peering_name is not None else '--priority'
        raise PeeringNotSupported(f"{option} is Kopf's peering option; {LEASES_INSTEAD}")
    if not paths and not modules:
        raise click.UsageError("Give at least one operator file or a module with -m.")
    if namespaces and clusterwide:
        raise click.UsageError("Use either -n/--namespace or -A/--all-namespaces, not both.")
    coordination = [flag for flag, given in [('--standalone', standalone or dev), ('--ha', ha), ('--shards', shards)]
                    if given]
    if len(coordination) > 1:
        raise click.UsageError(f"Use only one of --standalone, --ha, --shards (got {' and '.join(coordination)}): "
                               "a standalone operator does not coordinate with other replicas; --ha makes one "
                               "replica handle everything, --shards shares the objects among all replicas.")
    logsetup.configure(debug=debug, verbose=verbose, quiet=quiet, log_format=log_format,
                       log_prefix=log_prefix, log_refkey=log_refkey)
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
                standalone=standalone or dev,
                ha=ha,
                shards=shards,
                peering_name=lease_name if lease_name is not None else peering.default_name([*paths, *modules]),
                peering_namespace=lease_namespace,
                identity=identity,
                liveness_endpoint=liveness_endpoint,
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


# Kopf's commands to pause and resume operators through its peering objects; their options are accepted as given.
_ANY_OPTIONS = {'ignore_unknown_options': True, 'allow_extra_args': True}


@main.command(context_settings=_ANY_OPTIONS)
@click.argument('args', nargs=-1, type=click.UNPROCESSED)
def freeze(args: tuple[str, ...]) -> None:
    """Kopf's pausing of operators via peering: not used here (see the message)."""
    raise PeeringNotSupported(f"kopf freeze pauses operators through Kopf's peering; {LEASES_INSTEAD} "
                              f"To pause an operator, scale its Deployment to zero replicas.")


@main.command(context_settings=_ANY_OPTIONS)
@click.argument('args', nargs=-1, type=click.UNPROCESSED)
def resume(args: tuple[str, ...]) -> None:
    """Kopf's resuming of operators via peering: not used here (see the message)."""
    raise PeeringNotSupported(f"kopf resume resumes operators paused through Kopf's peering; {LEASES_INSTEAD} "
                              f"To resume an operator, scale its Deployment back up.")


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
