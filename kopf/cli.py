"""
The ``kopf`` command line: ``kopf run FILE... [-m MODULE]`` and its options.

Operator code is imported first (which registers its handlers), then the
operator runs until interrupted. An operator that cannot be imported ends the
command at once with its traceback and a non-zero exit code.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import logging
import os
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

import click

from kopf.clients.auth import LoginError
from kopf.engines import loggers
from kopf.errors import ActivityError
from kopf.reactor import peering, running


@dataclasses.dataclass(frozen=True)
class CLIControls:
    """What an embedding test runner passes in to stop the CLI-started operator."""

    stop_flag: threading.Event | None = None
    ready_flag: threading.Event | None = None


class OperatorImportError(click.ClickException):
    exit_code = 2


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
@click.option('--ha', is_flag=True, help="High availability: one replica handles, the others stand by (a Lease).")
@click.option('--shards', is_flag=True, help="Sharding: every replica handles its share of the objects (Leases).")
@click.option('--lease-name', help="The name of the Lease(s) of --ha/--shards (default: from the operator's files).")
@click.option('--lease-namespace', help="The namespace of the Lease(s) (default: the one served namespace, "
                                        "else the credentials' namespace).")
@click.option('--identity', help="This replica's unique name among its peers (default: host name and a random suffix).")
@click.option('-v', '--verbose', is_flag=True, help="Log at the DEBUG level of kopf's own loggers.")
@click.option('-d', '--debug', is_flag=True, help="Log everything at the DEBUG level.")
@click.option('-q', '--quiet', is_flag=True, help="Log only warnings and errors.")
@click.option('--log-format', type=click.Choice(['plain', 'full', 'json']), default='full', show_default=True)
@click.pass_obj
def run(
        controls: CLIControls | None,
        paths: tuple[str, ...],
        modules: tuple[str, ...],
        namespaces: tuple[str, ...],
        clusterwide: bool,
        standalone: bool,
        ha: bool,
        shards: bool,
        lease_name: str | None,
        lease_namespace: str | None,
        identity: str | None,
        verbose: bool,
        debug: bool,
        quiet: bool,
        log_format: str,
) -> None:
    """Run the operator(s) defined in the given files and modules."""
    if not paths and not modules:
        raise click.UsageError("Give at least one operator file or a module with -m.")
    if namespaces and clusterwide:
        raise click.UsageError("Use either -n/--namespace or -A/--all-namespaces, not both.")
    coordination = [flag for flag, given in [('--standalone', standalone), ('--ha', ha), ('--shards', shards)] if given]
    if len(coordination) > 1:
        raise click.UsageError(f"Use only one of --standalone, --ha, --shards (got {' and '.join(coordination)}): "
                               "a standalone operator does not coordinate with other replicas; --ha makes one "
                               "replica handle everything, --shards shares the objects among all replicas.")
    level = logging.DEBUG if debug or verbose else logging.WARNING if quiet else logging.INFO
    loggers.configure(level=level, log_format=log_format)
    if verbose and not debug:
        logging.getLogger('aiohttp').setLevel(logging.INFO)
    load_operator_code(paths, modules)
    controls = controls or CLIControls()
    try:
        running.run(
            namespaces=namespaces,
            clusterwide=clusterwide or not namespaces,
            standalone=standalone,
            ha=ha,
            shards=shards,
            peering_name=lease_name if lease_name is not None else peering.default_name([*paths, *modules]),
            peering_namespace=lease_namespace,
            identity=identity,
            stop_flag=controls.stop_flag,
            ready_flag=controls.ready_flag,
        )
    except (running.OperatorError, LoginError, ActivityError) as e:
        raise click.ClickException(str(e)) from e
