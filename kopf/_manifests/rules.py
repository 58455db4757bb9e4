"""
The RBAC rules an operator needs: one row per feature, each row the rules that its facts call for.

:data:`FEATURES` is the table: a feature of the framework, what it is for
(the docs and the generated YAML's comments say it), and the rules it needs
given the operator's :class:`~.facts.Facts`. A rule names where it applies:
in the served namespaces (a Role in each, or the ClusterRole when the
operator serves the whole cluster), in one namespace (a Role there: the
Leases', the ConfigMap storage's, ``default`` for the Events of
cluster-scoped objects), or cluster-wide (the ClusterRole: CRDs, namespaces,
webhook configurations, cluster-scoped resources).

Only what the operator really does is in a row: every verb of every rule is
one that a run of the operator uses and fails without (a 403 in its log or
an exit naming the verb). Rules that discovery, ``SelfSubjectAccessReview``
and the like need are not listed: every authenticated user has them.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from kopf._manifests.facts import Facts, Served

# Where a rule applies.
SERVED = 'served'  # in every served namespace (or cluster-wide when the operator serves the whole cluster)
CLUSTER = 'cluster'  # cluster-wide: a ClusterRole

RBAC_API = 'rbac.authorization.k8s.io/v1'


@dataclasses.dataclass(frozen=True)
class Rule:
    """Verbs on a resource (``plural`` or ``plural/subresource``) of a group, where they apply, and why."""

    group: str
    resource: str
    verbs: tuple[str, ...]
    where: str  # SERVED, CLUSTER, or a namespace's name
    why: str
    names: tuple[str, ...] = ()  # resourceNames: only these objects

    def without(self, verb: str) -> Rule | None:
        """The rule with one verb less (``None`` if none is left): what the tests of minimality take away."""
        verbs = tuple(v for v in self.verbs if v != verb)
        return dataclasses.replace(self, verbs=verbs) if verbs else None

    def as_yaml(self) -> dict[str, Any]:
        rule: dict[str, Any] = {'apiGroups': [self.group], 'resources': [self.resource], 'verbs': list(self.verbs)}
        if self.names:
            rule['resourceNames'] = list(self.names)
        return rule


@dataclasses.dataclass(frozen=True)
class Feature:
    """A row of the table: a feature, what its rules are for, and the rules that the facts call for."""

    name: str
    purpose: str
    rules: Callable[[Facts], Iterable[Rule]]


def _where(served: Served) -> str:
    return SERVED if served.resource.namespaced else CLUSTER


def _watching(facts: Facts) -> Iterable[Rule]:
    for served in facts.served:
        if served.watched:
            resource = served.resource
            yield Rule(resource.group, resource.plural, ('list', 'watch'), _where(served),
                       f"see the objects of {resource.plural}: list them, then watch for changes")


def _writing(facts: Facts) -> Iterable[Rule]:
    for served in facts.served:
        resource = served.resource
        verbs = (('get',) if served.rereads else ()) + (('patch',) if served.writes else ())
        if verbs:
            yield Rule(resource.group, resource.plural, verbs, _where(served),
                       "store the handlers' progress, the last handled state and the finalizer in the objects"
                       + ("; re-read an object when a change of its finalizers conflicts" if served.rereads else ""))
        if served.writes_status:
            yield Rule(resource.group, f"{resource.plural}/status", ('patch',), _where(served),
                       "store the handlers' results, the status storage's records, or the conditions in the status")


def _children(facts: Facts) -> Iterable[Rule]:
    for served in facts.served:
        if served.applied:
            resource = served.resource
            yield Rule(resource.group, resource.plural, ('create', 'patch'), _where(served),
                       "create and change the owned children by server-side apply (kopf.apply): an apply that "
                       "creates an object is authorized as a create too")


def _posting(facts: Facts) -> Iterable[Rule]:
    posting = [served for served in facts.served if served.posts]
    if any(served.resource.namespaced for served in posting):
        yield Rule('', 'events', ('create',), SERVED, "post Kubernetes Events about the objects (kubectl describe)")
    if any(not served.resource.namespaced for served in posting):
        yield Rule('', 'events', ('create',), 'default', "post Kubernetes Events about cluster-scoped objects "
                                                         "(they go to the namespace 'default')")


def _leases(facts: Facts) -> Iterable[Rule]:
    if facts.mode == 'ha':
        yield Rule('coordination.k8s.io', 'leases', ('get', 'create', 'update'), facts.lease_namespace,
                   "--ha: read, take and renew the leader's Lease")
    elif facts.mode == 'shards':
        yield Rule('coordination.k8s.io', 'leases', ('list', 'create', 'update', 'delete'), facts.lease_namespace,
                   "--shards: list the members' Leases, create and renew its own, remove the expired ones")


def _configmaps(facts: Facts) -> Iterable[Rule]:
    for namespace in facts.configmaps:
        yield Rule('', 'configmaps', ('get', 'create', 'patch', 'delete'), namespace or SERVED,
                   "keep the objects' state in ConfigMaps (kopf.ConfigMapProgressStorage/DiffBaseStorage)")


def _namespaces(facts: Facts) -> Iterable[Rule]:
    if facts.scope.patterns and facts.scanning:
        yield Rule('', 'namespaces', ('list', 'watch'), CLUSTER,
                   "serve the namespaces that match the patterns as they come and go")


def _crds(facts: Facts) -> Iterable[Rule]:
    if facts.scanning:
        yield Rule('apiextensions.k8s.io', 'customresourcedefinitions', ('list', 'watch'), CLUSTER,
                   "follow the CRDs: serve resources that appear later, stop serving those deleted")
    if facts.crd_reads:
        yield Rule('apiextensions.k8s.io', 'customresourcedefinitions', ('get',), CLUSTER,
                   "check at the start that the CRDs' schemas keep what the storages write into the status",
                   names=facts.crd_reads)


def _admission(facts: Facts) -> Iterable[Rule]:
    admission = facts.admission
    if admission is None:
        return
    for kind in ('validating', 'mutating'):
        plural = f"{kind}webhookconfigurations"
        used = kind in admission.types
        named = (('get',) if admission.replicas else ()) + (('patch',) if used else ()) + ('delete',)
        if used:
            yield Rule('admissionregistration.k8s.io', plural, ('create',), CLUSTER,
                       f"create the {kind} webhook configuration of the admission handlers")
        yield Rule('admissionregistration.k8s.io', plural, named, CLUSTER,
                   f"keep the {kind} webhook configuration {admission.managed!r} and remove it on exit"
                   if used else f"remove a {kind} webhook configuration {admission.managed!r} left from before",
                   names=(admission.managed,))


# The table: feature -> rules. Every permission of a generated role comes from one row.
FEATURES: tuple[Feature, ...] = (
    Feature('watching', "Handlers of a resource: list and watch its objects.", _watching),
    Feature('writing', "Progress, last handled state, finalizers (the main endpoint); results, status storages "
                       "and conditions (the status subresource, if the resource has one).", _writing),
    Feature('children', "Owned children that reconcile handlers apply (kopf.apply): create and change them.",
            _children),
    Feature('posting', "Kubernetes Events about the objects: the handlers' own (kopf.event, info, warn, exception), "
                       "the invalid specs of typed resources, all object logs with config.posting.loggers.",
            _posting),
    Feature('leases', "--ha and --shards: the replicas' Leases, in the Leases' namespace.", _leases),
    Feature('configmaps', "The ConfigMap storages: one ConfigMap per object.", _configmaps),
    Feature('namespaces', "Namespace patterns (-n 'app-*'): the namespaces, listed and watched.", _namespaces),
    Feature('crds', "Resources that come and go: the CRDs, watched; status storages: the CRDs' schemas, read.",
            _crds),
    Feature('admission', "Managed webhook configurations (config.admission.managed).", _admission),
)


def derive(facts: Facts, features: Sequence[Feature] = FEATURES) -> list[Rule]:
    """Every rule the operator needs, feature by feature, in the table's order."""
    return [rule for feature in features for rule in feature.rules(facts)]


@dataclasses.dataclass(frozen=True)
class Subject:
    """Who gets the rules: the operator's ServiceAccount."""

    name: str
    namespace: str


def roles(rules: Sequence[Rule], *, facts: Facts, subject: Subject) -> list[dict[str, Any]]:
    """
    The Roles and the ClusterRole of the rules, each with its binding to the subject.

    Rules of the served namespaces go to a Role in each served namespace,
    or to the ClusterRole if the operator serves the whole cluster.
    """
    cluster: list[Rule] = []
    namespaced: dict[str, list[Rule]] = {}
    for rule in rules:
        if rule.where == CLUSTER or (rule.where == SERVED and facts.scope.clusterwide):
            cluster.append(rule)
        elif rule.where == SERVED:
            for namespace in facts.scope.namespaces:
                namespaced.setdefault(namespace, []).append(rule)
        else:
            namespaced.setdefault(rule.where, []).append(rule)
    objects: list[dict[str, Any]] = []
    if cluster:
        objects.extend(_role('ClusterRole', subject.name, None, cluster, subject))
    for namespace, listed in namespaced.items():
        objects.extend(_role('Role', subject.name, namespace, listed, subject))
    return objects


def _role(kind: str, name: str, namespace: str | None, rules: Sequence[Rule], subject: Subject) -> list[dict[str, Any]]:
    metadata: dict[str, Any] = {'name': name, **({'namespace': namespace} if namespace else {})}
    rules_ = [{'#': rule.why, **rule.as_yaml()} for rule in rules]  # '#': the rule's comment in the YAML
    role = {'apiVersion': RBAC_API, 'kind': kind, 'metadata': metadata, 'rules': rules_}
    binding = {
        'apiVersion': RBAC_API, 'kind': f"{kind}Binding", 'metadata': dict(metadata),
        'roleRef': {'apiGroup': 'rbac.authorization.k8s.io', 'kind': kind, 'name': name},
        'subjects': [{'kind': 'ServiceAccount', 'name': subject.name, 'namespace': subject.namespace}],
    }
    return [role, binding]
