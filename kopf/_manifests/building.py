"""
The run of ``kopf manifests``: from an imported operator to its YAML (and Dockerfile).

The operator's code is imported first (its handlers register, its typed
classes are defined); its startup handlers configure the settings, as they
would at ``kopf run``. Resources named by typed classes need nothing more;
resources named by strings are resolved by the cluster's discovery (with the
operator's credentials, as ``kopf run`` logs in), since only the cluster
knows their group, scope and subresources.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from kopf._handlers.registries import OperatorRegistry
from kopf._kube.auth import LoginError
from kopf._kube.errors import APIConnectionError, APIError, describe_api_failure
from kopf._manifests import deployment, facts, rules
from kopf._runtime import observation
from kopf._storage import schemas as storage_schemas
from kopf._structs.namespaces import NamespaceScope
from kopf._structs.resources import Resource, Selector
from kopf._tools import session
from kopf.config import OperatorConfig

PARTS = ('crds', 'rbac', 'deployment', 'dockerfile')
FILES = {'crds': 'crds.yaml', 'rbac': 'rbac.yaml', 'deployment': 'deployment.yaml', 'dockerfile': 'Dockerfile'}


class ManifestError(Exception):
    """The manifests cannot be made; the message says why in one line, and what to do."""


@dataclasses.dataclass(frozen=True)
class Request:
    """What ``kopf manifests`` is asked for: the operator's command line, and how to deploy it."""

    paths: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()
    mode: str | None = None  # None: as the startup handlers configure it
    replicas: int | None = None
    liveness: str | None = None
    metrics: str | None = None
    lease_namespace: str | None = None
    operator_namespace: str | None = None
    name: str | None = None
    image: str | None = None
    framework: str | None = None


@dataclasses.dataclass(frozen=True)
class Manifests:
    """The generated parts: the YAML objects of each, the Dockerfile, the role's rules, and warnings."""

    crds: list[dict[str, Any]]
    rbac: list[dict[str, Any]]
    deployment: list[dict[str, Any]]
    dockerfile: str
    rules: list[rules.Rule]
    facts: facts.Facts
    warnings: list[str]

    def text(self, part: str) -> str:
        """One part as a file's text: YAML documents, or the Dockerfile."""
        if part == 'dockerfile':
            return self.dockerfile
        return render(getattr(self, part))


async def build(request: Request, registry: OperatorRegistry) -> Manifests:
    """All parts of an imported operator's manifests."""
    config = await session.configured(registry)
    mode = request.mode or config.peering.mode
    classes = typed_classes()
    crd_objects = typed_crds(classes)
    resources = await resolve(registry, config)
    scope = _scope(request.namespaces)
    name = request.name or default_name(request.paths, request.modules)
    operator_namespace = request.operator_namespace or _single(scope) or 'default'
    lease_namespace = request.lease_namespace or config.peering.namespace or _single(scope) or operator_namespace
    operator_facts = facts.Facts(
        served=facts.serve(registry, resources, config),
        scope=scope,
        mode=mode,
        lease_namespace=lease_namespace,
        configmaps=facts.configmap_namespaces(config.persistence.progress_storage, config.persistence.diffbase_storage),
        crd_reads=_crd_reads(resources.values(), config),
        scanning=not config.scanning.disabled,
        admission=_admission(registry, config, mode),
    )
    derived = rules.derive(operator_facts)
    subject = rules.Subject(name=name, namespace=operator_namespace)
    options = deployment.Options(
        name=name, namespace=operator_namespace, image=request.image or f"{name}:latest",
        paths=tuple(Path(path).name for path in request.paths), modules=request.modules,
        namespaces=request.namespaces, mode=mode, replicas=request.replicas, liveness=request.liveness,
        metrics=request.metrics or config.metrics.endpoint,
        webhook_port=_webhook_port(registry, config),
        extras=_extras(classes, registry, config, metrics=bool(request.metrics or config.metrics.endpoint)),
        framework=request.framework)
    deployed = [deployment.service_account(options)]
    rbac = rules.roles(derived, facts=operator_facts, subject=subject)
    running = [obj for obj in (deployment.deployment(options), deployment.disruption_budget(options),
                               deployment.service(options)) if obj is not None]
    return Manifests(crds=crd_objects, rbac=deployed + rbac, deployment=running, rules=derived, facts=operator_facts,
                     dockerfile=deployment.dockerfile(options, sources=[Path(path).name for path in request.paths]),
                     warnings=warnings(registry, classes, resources))


def typed_classes() -> list[Any]:
    """The typed resources the operator defines (none if pydantic, the extra, is not installed)."""
    try:
        from kopf._typed import models
    except ImportError:
        return []
    return models.resources()


def typed_crds(classes: Sequence[Any]) -> list[dict[str, Any]]:
    if not classes:
        return []
    from kopf._typed import crds, schemas
    try:
        return crds.crds(classes)
    except (schemas.SchemaError, TypeError) as e:
        raise ManifestError(str(e)) from None


def typed_resource(model: Any) -> Resource:
    """The resource of a typed class, as the cluster will serve it once its CRD is applied."""
    declaration = model.kopf_declaration()
    status = 'status' in model.model_fields
    return Resource(group=declaration.group, version=declaration.version, plural=declaration.plural,
                    kind=declaration.kind, singular=declaration.singular,
                    shortcuts=frozenset(declaration.short_names), categories=frozenset(declaration.categories),
                    subresources=frozenset({'status'}) if status else frozenset(), namespaced=declaration.namespaced)


async def resolve(registry: OperatorRegistry, config: OperatorConfig) -> dict[Selector, Resource]:
    """The served resources by the handlers' selectors: typed ones as declared, others by the cluster's discovery."""
    resources = {selector: typed_resource(selector.model) for selector in registry.selectors
                 if selector.model is not None}
    others = [selector for selector in registry.selectors if selector.model is None]
    if not others:
        return resources
    names = ', '.join(str(selector) for selector in others)
    try:
        async with session.connected(registry=registry, config=config) as context:
            resolution = await observation.resolve(context, others)
    except (LoginError, session.ToolError) as e:
        raise ManifestError(f"The resources {names} are named by strings: only the cluster knows their groups and "
                            f"scopes, and it cannot be reached ({e}). Run with a kubeconfig of a cluster that serves "
                            f"them, or name them by typed classes.") from None
    except (APIError, APIConnectionError) as e:
        raise ManifestError(f"Cannot ask the cluster about {names}: {describe_api_failure(e)}") from None
    for selector in resolution.unresolved:
        raise ManifestError(f"The cluster does not serve the resource {selector}: install its CRD first (or name it "
                            f"by a typed class, whose CRD is generated), or fix its name.")
    for selector, message in resolution.ambiguous.items():
        raise ManifestError(f"Cannot tell which resource {selector} is: {message}")
    return {**resources, **resolution.resources}


def warnings(registry: OperatorRegistry, classes: Sequence[Any], resources: Mapping[Selector, Resource]) -> list[str]:
    """What the manifests cannot cover, or what the server would do to the operator's writes."""
    found: list[str] = []
    for selector in registry.selectors:
        if not selector.is_specific:
            found.append(f"{selector} selects the resources the cluster serves now; a resource that appears later "
                         f"needs rules of its own (run kopf manifests again).")
    for model in classes:
        status = model.model_fields.get('status')
        extras = getattr(getattr(status, 'annotation', None), 'model_config', {}).get('extra') == 'allow'
        declared = set(getattr(getattr(status, 'annotation', None), 'model_fields', {}) or {})
        resource = typed_resource(model)
        for handler in registry.get_all_changing_handlers(resource):
            if status is not None and not extras and handler.id not in declared and facts.returns_value(handler.fn):
                found.append(f"The handler {handler.id!r} returns a result into status.{handler.id} of "
                             f"{model.__qualname__}, but its status model declares no such field: the server will "
                             f"prune it. Declare the field, or allow extra fields in the status model.")
    return found


def _scope(namespaces: Sequence[str]) -> facts.Scope:
    if not namespaces:
        return facts.Scope()
    parsed = NamespaceScope.parse(namespaces)
    return facts.Scope(namespaces=tuple(sorted(parsed.exact_names)), patterns=bool(parsed.inexact))


def _single(scope: facts.Scope) -> str | None:
    return scope.namespaces[0] if len(scope.namespaces) == 1 and not scope.patterns else None


def _crd_reads(resources: Sequence[Resource] | Any, config: OperatorConfig) -> tuple[str, ...]:
    """The CRDs the start-up check reads: of the custom resources, when a storage writes into the status."""
    persistence = config.persistence
    if not storage_schemas.status_writes(persistence.progress_storage, persistence.diffbase_storage):
        return ()
    return tuple(dict.fromkeys(f"{resource.plural}.{resource.group}" for resource in resources if resource.group))


def _admission(registry: OperatorRegistry, config: OperatorConfig, mode: str) -> facts.Admission | None:
    managed = config.admission.managed
    if not registry.has_admission_handlers() or not managed:
        return None
    types = frozenset(str(handler.type.value).lower() for _, handler in registry.iter_admission_handlers())
    return facts.Admission(managed=managed, types=types, replicas=mode != 'standalone')


def _webhook_port(registry: OperatorRegistry, config: OperatorConfig) -> int | None:
    port = getattr(config.admission.server, 'port', None)
    return port if registry.has_admission_handlers() and isinstance(port, int) else None


def _extras(classes: Sequence[Any], registry: OperatorRegistry, config: OperatorConfig, *,
            metrics: bool = False) -> tuple[str, ...]:
    """The framework's extras that the operator uses: typed resources, webhook certificates, metrics."""
    extras = ['typed'] if classes else []
    if metrics:
        extras.append('metrics')
    server = config.admission.server
    if registry.has_admission_handlers() and server is not None and getattr(server, 'certfile', True) is None:
        extras.append('webhooks')
    return tuple(extras)


def default_name(paths: Sequence[str], modules: Sequence[str]) -> str:
    """A name for the operator's objects: from its first file or module, as a DNS label."""
    source = Path(paths[0]).stem if paths else (modules[0].rsplit('.', 1)[-1] if modules else 'operator')
    name = re.sub(r'[^a-z0-9-]+', '-', source.lower()).strip('-')[:63].strip('-')
    return name or 'operator'


class _Dumper(yaml.SafeDumper):
    """Plain YAML: no anchors and aliases where one value appears twice (the labels of a Deployment)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _dump(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False)


def render(objects: Sequence[Mapping[str, Any]]) -> str:
    """YAML documents; the rules of a role are each preceded by a comment that says what they are for."""
    return '---\n'.join(_document(obj) for obj in objects)


def _document(obj: Mapping[str, Any]) -> str:
    rules_ = obj.get('rules')
    if not isinstance(rules_, list):
        return _dump(dict(obj))
    text = _dump({key: value for key, value in obj.items() if key != 'rules'})
    lines = [text.rstrip('\n'), 'rules:']
    for rule in rules_:
        why = rule.get('#')
        if why:
            lines.append(f"# {why}")
        body = _dump([{key: value for key, value in rule.items() if key != '#'}])
        lines.append(body.rstrip('\n'))
    return '\n'.join(lines) + '\n'
