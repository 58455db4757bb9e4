"""
What an operator serves while namespaces and CRDs come and go -- here and, side by side, under Kopf 1.45.2.

Kopf's documented behaviours (docs/scopes.rst, ``settings.scanning``), run
with unchanged operators written as Kopf's users write them
(``operators/compat/scopes_*.py``): namespace patterns with negations, a
namespace that matches and appears later, one that is deleted; a CRD that
appears after the start, is deleted and re-created; ``settings.scanning.disabled``;
and an operator without the permission to list namespaces and CRDs.

The control plane has no controller-manager: a deleted namespace stays
Terminating until its ``kubernetes`` finalizer is removed, which the tests
do (:func:`drop_namespace`) -- leaving its objects behind, which is also what
shows that the namespace's watches and daemons stop when the namespace goes,
not when its objects go.

Where Kopf differs, the test says so, as observed:

* a deleted namespace's watch stops in both, but Kopf leaves its daemons
  running until the operator exits; ours stops them (``RESOURCE_DELETED``);
* Kopf stops serving a CRD as soon as its deletion begins, so the finalizers
  of its objects are never released and the deletion never completes; ours
  serves it until it is gone (the objects here have no finalizers, so that
  both can go through the same steps);
* with ``settings.scanning.disabled``, Kopf exits with a traceback when a
  served CRD is deleted; ours stops that watch with one warning and goes on;
* without the permission to list namespaces (or CRDs), Kopf retries for about
  a minute with an error per attempt before its warning; ours warns at once,
  in one line naming the patterns and the permission (so that case runs
  without Kopf: its minute would dominate the suite).
"""
from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kopf.testing import KubeAPI, wait_for
from tests.e2e.harness import TIMEOUT
from tests.e2e.test_compat import COMPAT, KOPF, Side, start_side

GROUP = 'scopes.e2e.kopf.dev'


def crd(plural: str) -> dict[str, Any]:
    return {
        'apiVersion': 'apiextensions.k8s.io/v1',
        'kind': 'CustomResourceDefinition',
        'metadata': {'name': f'{plural}.{GROUP}'},
        'spec': {
            'group': GROUP,
            'scope': 'Namespaced',
            'names': {'kind': plural.capitalize(), 'plural': plural, 'singular': f'one{plural}'},
            'versions': [{'name': 'v1', 'served': True, 'storage': True, 'schema': {'openAPIV3Schema': {
                'type': 'object', 'x-kubernetes-preserve-unknown-fields': True}}}],
        },
    }


def create_object(kube: KubeAPI, plural: str, namespace: str, name: str) -> None:
    kube.create(f'/apis/{GROUP}/v1/namespaces/{namespace}/{plural}',
                {'apiVersion': f'{GROUP}/v1', 'kind': plural.capitalize(), 'metadata': {'name': name}})


def delete_crd(kube: KubeAPI, plural: str) -> None:
    path = f'/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{plural}.{GROUP}'
    kube.delete(path)
    wait_for(lambda: kube.find(path) is None, timeout=TIMEOUT, what=f"the CRD {plural}.{GROUP} to be gone")


def configmap(kube: KubeAPI, namespace: str, name: str) -> None:
    kube.create(f'/api/v1/namespaces/{namespace}/configmaps',
                {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': name, 'labels': {'e2e-scopes': 'y'}}})


def drop_namespace(kube: KubeAPI, name: str) -> None:
    """Delete a namespace for good, as the namespace controller would finish it (but leave its objects)."""
    kube.delete(f'/api/v1/namespaces/{name}')
    namespace = kube.get(f'/api/v1/namespaces/{name}')
    namespace['spec']['finalizers'] = []
    kube.request('PUT', f'/api/v1/namespaces/{name}/finalize', namespace)
    wait_for(lambda: kube.find(f'/api/v1/namespaces/{name}') is None, timeout=TIMEOUT,
             what=f"the namespace {name} to be gone")


def problems(side: Side) -> list[str]:
    """The log lines of errors (and tracebacks) of one side's operator."""
    return [line for line in side.process.output.splitlines()
            if '[ERROR' in line or 'Traceback' in line or 'CRITICAL' in line]


def warnings(side: Side) -> list[str]:
    return [line for line in side.process.output.splitlines() if '[WARNING' in line]


@pytest.fixture()
def run(kube: KubeAPI, kubeconfig: Path, tmp_path: Path) -> Iterator[Callable[..., Side]]:
    """``run(framework, script, namespace, *args, **env)``: one side, killed at the end if still running."""
    started: list[Side] = []

    def start(framework: str, script: str, namespace: str, *args: str, kubeconfig: Path = kubeconfig,
              **env: str) -> Side:
        side = start_side(framework, COMPAT / script, namespace=namespace, kubeconfig=kubeconfig,
                          workdir=tmp_path / f'{framework}-{len(started)}', args=args, env=env)
        started.append(side)
        return side

    try:
        yield start
    finally:
        for side in started:
            side.process.kill()


def created(side: Side, handler: str = 'created') -> set[tuple[str, str]]:
    return {(call['namespace'], call['name']) for call in side.records(handler)}


# --- namespace patterns ------------------------------------------------------------------------------

@pytest.mark.parametrize('framework', ['ours', KOPF])
def test_a_pattern_serves_the_matching_namespaces_also_those_that_appear_and_stops_with_those_that_go(
        kube: KubeAPI, namespace: str, run: Callable[..., Side], framework: str) -> None:
    prefix = f'e2e-sc{uuid.uuid4().hex[:6]}'
    live, excluded, late = f'{prefix}-live', f'{prefix}-pr-1', f'{prefix}-late'
    for name in (live, excluded):
        kube.ensure_namespace(name)
    side = run(framework, 'scopes_namespaces.py', f'{prefix}-*,!*-pr-*')
    for name in (live, excluded, namespace):  # the test's own namespace matches nothing
        configmap(kube, name, 'cm')
    side.wait(lambda: (live, 'cm') in created(side), what="the matching namespace's object handled")

    kube.ensure_namespace(late)
    configmap(kube, late, 'cm')
    side.wait(lambda: (late, 'cm') in created(side) and (late, 'cm') in created(side, 'daemon_started'),
              what="the object of a namespace created after the start handled, its daemon running")
    assert created(side) == {(live, 'cm'), (late, 'cm')}  # not the excluded namespace, nor the unmatched one

    drop_namespace(kube, late)
    if framework == 'ours':
        side.wait(lambda: f"The watch of configmaps.v1 in '{late}' has stopped." in side.process.output,
                  what="the gone namespace's watch stopped")
        stopped = [c for c in side.records('daemon_stopped') if c['namespace'] == late]
        assert [c['reason'] for c in stopped] == ['RESOURCE_DELETED']
        assert f"The namespace '{late}' is gone: its watches stop." in side.process.output
    else:  # Kopf stops the watch, but its daemon goes on until the operator exits
        side.wait(lambda: f"Stopping the watch-stream for configmaps.v1 in '{late}'." in side.process.output,
                  what="the gone namespace's watch stopped")
        assert not [c for c in side.records('daemon_stopped') if c['namespace'] == late]

    configmap(kube, live, 'cm2')  # the others are served as before
    side.wait(lambda: (live, 'cm2') in created(side), what="the remaining namespace still served")
    assert problems(side) == []
    assert side.process.stop() == 0, side.process.output


# --- resources that appear later -----------------------------------------------------------------

def test_a_crd_created_after_the_start_is_served_its_deletion_stops_its_watches_and_its_return_serves_it_again(
        kube: KubeAPI, namespace: str, run: Callable[..., Side]) -> None:
    plural = f'kopfscopes{uuid.uuid4().hex[:6]}'
    resource = f'{plural}.v1.{GROUP}'
    theirs = f'{namespace[:50]}-kopf'
    kube.ensure_namespace(theirs)
    sides = [run('ours', 'scopes_crds.py', namespace, E2E_PLURAL=plural),
             run(KOPF, 'scopes_crds.py', theirs, E2E_PLURAL=plural)]
    for side in sides:  # one warning at the start, and the operator goes on
        side.wait(lambda side=side: any('Unresolved resources cannot be served' in line and plural in line
                                        for line in warnings(side)), what="the warning about the missing CRD")
        configmap(kube, side.namespace, 'cm')
    for side in sides:
        side.wait(lambda side=side: side.records('configmap_created'), what="the other resources served meanwhile")

    kube.apply_crd(crd(plural))
    for side in sides:
        create_object(kube, plural, side.namespace, 'first')
    ours, kopf = sides
    ours.wait(lambda: (namespace, 'first') in created(ours), what="the new resource served")
    # Kopf races with the discovery of a fresh CRD and now and then never serves it (seen in CI under load,
    # for the first CRD as for the re-created one); that is its behaviour, not a contract to test: its side
    # is compared only where it has served the resource.
    kopf_served = served_in_time(kopf, lambda: (theirs, 'first') in created(kopf))

    delete_crd(kube, plural)
    ours.wait(lambda: f"The watch of {resource} in '{namespace}' has stopped." in ours.process.output,
              what="the deleted resource's watch stopped")
    assert f"{resource} is not served by the cluster any more" in ours.process.output
    if kopf_served:
        kopf.wait(lambda: f"Stopping the watch-stream for {resource} in '{theirs}'." in kopf.process.output,
                  what="the deleted resource's watch stopped")

    # Re-created: served again. Only ours is waited for (Kopf's race, above).
    kube.apply_crd(crd(plural))
    for side in sides:
        create_object(kube, plural, side.namespace, 'second')
    ours.wait(lambda: (namespace, 'second') in created(ours), what="the re-created resource served")
    assert problems(ours) == []
    assert 'Traceback' not in kopf.process.output  # Kopf may log a retried 429 while the new CRD's storage starts
    ours_warnings = [line for line in warnings(ours) if plural in line]
    assert len(ours_warnings) == 1, ours_warnings  # the one at the start: no loop of failed watches
    for side in sides:
        assert side.process.stop() == 0, side.process.output


def served_in_time(side: Side, condition: Callable[[], bool]) -> bool:
    """Whether the condition comes true within the usual wait; a peer's known race is no failure here."""
    try:
        side.wait(condition, what="the new resource served")
    except AssertionError:
        return False
    return True


def test_with_scanning_disabled_resources_are_resolved_once_at_the_start_and_patterns_not_served(
        kube: KubeAPI, namespace: str, run: Callable[..., Side]) -> None:
    tag = uuid.uuid4().hex[:6]
    present, missing = f'kopfscopes{tag}a', f'kopfscopes{tag}b'
    kube.apply_crd(crd(present))
    sides = []
    for framework in ('ours', KOPF):
        served = f'{namespace[:40]}-{"o" if framework == "ours" else "k"}'
        matching = f'{served}-p'
        for name in (served, matching):
            kube.ensure_namespace(name)
        side = run(framework, 'scopes_crds.py', served, '-n', f'{served}-*', E2E_PLURAL=f'{present},{missing}',
                   E2E_SCANNING_DISABLED='1')
        side.wait(lambda side=side: any('Unresolved resources cannot be served' in line and missing in line
                                        for line in warnings(side)), what="the warning about the missing CRD")
        sides.append((side, matching))

    kube.apply_crd(crd(missing))
    for side, matching in sides:
        create_object(kube, missing, side.namespace, 'late')  # its CRD appeared after the start: not served
        create_object(kube, present, side.namespace, 'early')
        configmap(kube, matching, 'cm')  # in a namespace that only the pattern matches: not served
        configmap(kube, side.namespace, 'cm')
    for side, _ in sides:
        side.wait(lambda side=side: {('early', present), ('cm', None)} <= {
            (c['name'], c.get('plural')) for c in side.records() if c['namespace'] == side.namespace},
            what="the objects of the resources and namespace known at the start handled")
    for side, matching in sides:
        assert {c['name'] for c in side.records('created') if c['plural'] == missing} == set()
        assert (matching, 'cm') not in created(side, 'configmap_created')

    ours, _ = sides[0]
    pattern_warnings = [line for line in warnings(ours) if 'settings.scanning.disabled is set' in line]
    assert len(pattern_warnings) == 1 and f"'{ours.namespace}-*'" in pattern_warnings[0]

    delete_crd(kube, present)  # a resource served since the start goes away
    ours.wait(lambda: any(f"Watching {present}.v1.{GROUP} in '{ours.namespace}' has stopped" in line
                          for line in warnings(ours)), what="one warning about the watch of the deleted resource")
    kopf, _ = sides[1]
    kopf.wait(lambda: kopf.process.process.poll() is not None, what="Kopf exits on the 404")
    assert 'APINotFoundError' in kopf.process.output  # Kopf: a traceback, and the operator is gone

    configmap(kube, ours.namespace, 'cm-after')  # ours goes on with the rest
    ours.wait(lambda: (ours.namespace, 'cm-after') in created(ours, 'configmap_created'),
              what="the rest still served after the resource has gone")
    assert problems(ours) == []
    assert ours.process.stop() == 0, ours.process.output
    delete_crd(kube, missing)


# --- without the permission to list namespaces and CRDs -----------------------------------------

def test_without_permission_to_list_namespaces_and_crds_exact_names_are_served_and_each_loss_warned_once(
        kube: KubeAPI, namespace: str, run: Callable[..., Side], user_kubeconfig: Callable[..., Path]) -> None:
    user = f'e2e-scopes-{uuid.uuid4().hex[:6]}'
    role = {'apiVersion': 'rbac.authorization.k8s.io/v1', 'kind': 'ClusterRole', 'metadata': {'name': user},
            'rules': [{'apiGroups': [''], 'resources': ['configmaps'], 'verbs': ['*']}]}  # no namespaces, no CRDs
    kube.create('/apis/rbac.authorization.k8s.io/v1/clusterroles', role)
    kube.create('/apis/rbac.authorization.k8s.io/v1/clusterrolebindings', {
        'apiVersion': 'rbac.authorization.k8s.io/v1', 'kind': 'ClusterRoleBinding', 'metadata': {'name': user},
        'roleRef': {'apiGroup': 'rbac.authorization.k8s.io', 'kind': 'ClusterRole', 'name': user},
        'subjects': [{'apiGroup': 'rbac.authorization.k8s.io', 'kind': 'User', 'name': user}]})
    try:
        matching = f'{namespace[:40]}-match'
        kube.ensure_namespace(matching)
        side = run('ours', 'scopes_namespaces.py', namespace, '-n', f'{namespace[:40]}-m*,!*-x',
                   kubeconfig=user_kubeconfig(user))
        configmap(kube, namespace, 'cm')
        configmap(kube, matching, 'cm')
        side.wait(lambda: (namespace, 'cm') in created(side), what="the exactly named namespace served")
        lines = warnings(side)
        about_namespaces = [line for line in lines if 'namespaces' in line.lower() and 'Cannot list' in line]
        about_crds = [line for line in side.process.output.splitlines() if 'CustomResourceDefinitions' in line]
        assert len(about_namespaces) == 1, lines
        assert re.search(rf"the namespace pattern\(s\) '{re.escape(namespace[:40])}-m\*,!\*-x' are not served",
                         about_namespaces[0])
        assert f"only the exact namespace names are ('{namespace}')" in about_namespaces[0]
        assert "grant the operator 'list' and 'watch' on namespaces" in about_namespaces[0]
        # Every resource is served already: that CRDs cannot be watched is said once, at INFO.
        assert len(about_crds) == 1 and '[INFO' in about_crds[0], about_crds
        assert len(lines) == 1, lines
        assert (matching, 'cm') not in created(side)
        assert problems(side) == []
        assert side.process.stop() == 0, side.process.output
    finally:
        kube.delete(f'/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{user}')
        kube.delete(f'/apis/rbac.authorization.k8s.io/v1/clusterroles/{user}')
