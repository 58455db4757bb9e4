"""
Rule derivation: each feature of an operator -> exactly its RBAC rules (and nothing when it is not used).
"""
from __future__ import annotations

import dataclasses

import pytest

from kopf._manifests import rules
from kopf._manifests.facts import Admission, Facts, Scope, Served
from kopf._structs.resources import Resource

APPS = Resource(group='example.com', version='v1', plural='apps', subresources=frozenset({'status'}))
NODES = Resource(group='example.com', version='v1', plural='nodes', namespaced=False)


def served(resource=APPS, *, watched=True, writes=False, writes_status=False, rereads=False, posts=False,
           applied=False):
    return Served(resource=resource, watched=watched, writes=writes, writes_status=writes_status, rereads=rereads,
                  posts=posts, applied=applied)


def facts(**overrides):
    base = Facts(served=(), scope=Scope(namespaces=('ns1',)), mode='standalone', lease_namespace='ns1',
                 configmaps=(), crd_reads=(), scanning=False)
    return dataclasses.replace(base, **overrides)


def table(found):
    return [(r.group, r.resource, r.verbs, r.where, r.names) for r in found]


FEATURES = [
    ("a watched resource: list and watch",
     facts(served=(served(),)),
     [('example.com', 'apps', ('list', 'watch'), 'served', ())]),
    ("a cluster-scoped resource: in the ClusterRole",
     facts(served=(served(NODES),)),
     [('example.com', 'nodes', ('list', 'watch'), 'cluster', ())]),
    ("writes into the objects: patch",
     facts(served=(served(writes=True),)),
     [('example.com', 'apps', ('list', 'watch'), 'served', ()), ('example.com', 'apps', ('patch',), 'served', ())]),
    ("a finalizer: patch and get (to re-read on a conflict)",
     facts(served=(served(writes=True, rereads=True),)),
     [('example.com', 'apps', ('list', 'watch'), 'served', ()),
      ('example.com', 'apps', ('get', 'patch'), 'served', ())]),
    ("results or status storages: patch of the status subresource",
     facts(served=(served(writes_status=True),)),
     [('example.com', 'apps', ('list', 'watch'), 'served', ()),
      ('example.com', 'apps/status', ('patch',), 'served', ())]),
    ("owned children applied by a reconcile handler: create and patch (an apply that creates is a create)",
     facts(served=(served(applied=True),)),
     [('example.com', 'apps', ('list', 'watch'), 'served', ()),
      ('example.com', 'apps', ('create', 'patch'), 'served', ())]),
    ("posting: create events where the objects are",
     facts(served=(served(posts=True),)),
     [('example.com', 'apps', ('list', 'watch'), 'served', ()), ('', 'events', ('create',), 'served', ())]),
    ("posting about cluster-scoped objects: create events in 'default'",
     facts(served=(served(NODES, posts=True),)),
     [('example.com', 'nodes', ('list', 'watch'), 'cluster', ()), ('', 'events', ('create',), 'default', ())]),
    ("--ha: get, create, update Leases in the Leases' namespace",
     facts(mode='ha', lease_namespace='ops'),
     [('coordination.k8s.io', 'leases', ('get', 'create', 'update'), 'ops', ())]),
    ("--shards: list, create, update, delete Leases",
     facts(mode='shards', lease_namespace='ops'),
     [('coordination.k8s.io', 'leases', ('list', 'create', 'update', 'delete'), 'ops', ())]),
    ("the ConfigMap storage in the objects' namespaces",
     facts(configmaps=(None,)),
     [('', 'configmaps', ('get', 'create', 'patch', 'delete'), 'served', ())]),
    ("the ConfigMap storage in its own namespace",
     facts(configmaps=('state',)),
     [('', 'configmaps', ('get', 'create', 'patch', 'delete'), 'state', ())]),
    ("namespace patterns: list and watch namespaces",
     facts(scope=Scope(namespaces=('a',), patterns=True), scanning=True),
     [('apiextensions.k8s.io', 'customresourcedefinitions', ('list', 'watch'), 'cluster', ()),
      ('', 'namespaces', ('list', 'watch'), 'cluster', ())][::-1]),
    ("scanning: list and watch CRDs",
     facts(scanning=True),
     [('apiextensions.k8s.io', 'customresourcedefinitions', ('list', 'watch'), 'cluster', ())]),
    ("status storages: get the CRDs by name",
     facts(crd_reads=('apps.example.com',)),
     [('apiextensions.k8s.io', 'customresourcedefinitions', ('get',), 'cluster', ('apps.example.com',))]),
    ("managed validating webhooks: create; patch and delete ours; delete a mutating one left over",
     facts(admission=Admission(managed='auto.kopf.dev', types=frozenset({'validating'}), replicas=False)),
     [('admissionregistration.k8s.io', 'validatingwebhookconfigurations', ('create',), 'cluster', ()),
      ('admissionregistration.k8s.io', 'validatingwebhookconfigurations', ('patch', 'delete'), 'cluster',
       ('auto.kopf.dev',)),
      ('admissionregistration.k8s.io', 'mutatingwebhookconfigurations', ('delete',), 'cluster', ('auto.kopf.dev',))]),
    ("managed webhooks with replicas: get them too",
     facts(admission=Admission(managed='auto.kopf.dev', types=frozenset({'mutating'}), replicas=True)),
     [('admissionregistration.k8s.io', 'validatingwebhookconfigurations', ('get', 'delete'), 'cluster',
       ('auto.kopf.dev',)),
      ('admissionregistration.k8s.io', 'mutatingwebhookconfigurations', ('create',), 'cluster', ()),
      ('admissionregistration.k8s.io', 'mutatingwebhookconfigurations', ('get', 'patch', 'delete'), 'cluster',
       ('auto.kopf.dev',))]),
    ("nothing used: no rules", facts(), []),
]


@pytest.mark.parametrize('given, expected', [row[1:] for row in FEATURES], ids=[row[0] for row in FEATURES])
def test_each_feature_gives_exactly_its_rules(given, expected):
    assert sorted(table(rules.derive(given))) == sorted(expected)


def test_every_rule_says_what_it_is_for():
    everything = facts(served=(served(writes=True, writes_status=True, rereads=True, posts=True),), mode='shards',
                       configmaps=(None,), crd_reads=('apps.example.com',), scanning=True,
                       admission=Admission(managed='a.b', types=frozenset({'validating'}), replicas=True))
    found = rules.derive(everything)
    assert len(found) >= 10 and all(rule.why for rule in found)


def test_served_namespaces_get_a_role_each_and_cluster_rules_the_cluster_role():
    given = facts(served=(served(writes=True), served(NODES)), scope=Scope(namespaces=('a', 'b')), scanning=True,
                  mode='ha', lease_namespace='ops')
    objects = rules.roles(rules.derive(given), facts=given, subject=rules.Subject(name='op', namespace='ops'))
    kinds = [(obj['kind'], obj['metadata'].get('namespace')) for obj in objects]
    assert kinds == [('ClusterRole', None), ('ClusterRoleBinding', None), ('Role', 'a'), ('RoleBinding', 'a'),
                     ('Role', 'b'), ('RoleBinding', 'b'), ('Role', 'ops'), ('RoleBinding', 'ops')]
    cluster = objects[0]['rules']
    assert [r['resources'] for r in cluster] == [['nodes'], ['customresourcedefinitions']]
    binding = objects[1]
    assert binding['subjects'] == [{'kind': 'ServiceAccount', 'name': 'op', 'namespace': 'ops'}]


def test_an_operator_of_the_whole_cluster_has_its_served_rules_in_the_cluster_role():
    given = facts(served=(served(writes=True),), scope=Scope())
    objects = rules.roles(rules.derive(given), facts=given, subject=rules.Subject(name='op', namespace='ops'))
    assert [obj['kind'] for obj in objects] == ['ClusterRole', 'ClusterRoleBinding']


def test_a_rule_without_a_verb():
    rule = rules.Rule('', 'events', ('create',), 'served', 'why')
    assert rule.without('create') is None
    assert rules.Rule('', 'x', ('get', 'patch'), 'served', 'why').without('get').verbs == ('patch',)
