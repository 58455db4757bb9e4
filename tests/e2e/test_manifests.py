"""
The generated manifests on a real API server: the CRDs, RBAC that is sufficient and minimal, and dry-runs.

The operators are the features of ``operators/rbac.py``, each run as a
ServiceAccount bound only to the role that ``kopf manifests`` generated for
it, with a token from the TokenRequest API:

* with the whole role, it does all its work, and its log has no refusal;
* with any one verb of any one rule taken away, it fails observably (see
  :mod:`tests.e2e.rbac`), each such run in a namespace of its own.
"""
from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from kopf.testing import ControlPlane, KubeAPI, KubeAPIError
from tests.e2e import rbac
from tests.e2e.harness import read_calls
from tests.e2e.rbac import Context, Removal

CONFIGS = '/apis/admissionregistration.k8s.io/v1'
# How many operators of the minimality checks run at once (the machine is shared: not all of them).
PARALLEL = 4


@pytest.fixture(scope='module')
def widgets(kube: KubeAPI, kubeconfig: Path) -> dict[str, object]:
    """The Widget's CRD, as ``kopf manifests`` generates it from the typed class, applied to the server."""
    crd, = yaml.safe_load_all(rbac.generate('typed', kubeconfig=kubeconfig, only='crds'))
    kube.apply_crd(crd)
    return crd


# The CRDs.

def test_the_generated_crd_is_accepted_and_has_the_model_in_it(widgets: dict, kube: KubeAPI) -> None:
    served = kube.get('/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.rbac.e2e.kopf.dev')
    version, = served['spec']['versions']
    assert version['subresources'] == {'status': {}}
    assert version['additionalPrinterColumns'][0]['jsonPath'] == '.spec.size'
    assert served['spec']['names']['shortNames'] == ['wdg']


def test_unknown_fields_are_pruned_where_the_model_forbids_them_and_kept_where_it_allows(
        widgets: dict, kube: KubeAPI, namespace: str) -> None:
    created = kube.create(f'{rbac.WIDGETS}/namespaces/{namespace}/widgets', {
        'apiVersion': 'rbac.e2e.kopf.dev/v1', 'kind': 'Widget', 'metadata': {'name': 'w1'},
        'spec': {'size': 3, 'colour': 'red'}, 'extras': {'note': 'n', 'anything': {'deep': [1, 2]}}})
    assert created['spec'] == {'size': 3, 'shape': 'round', 'labels': {}}  # pruned, and the defaults filled in
    assert created['extras'] == {'note': 'n', 'anything': {'deep': [1, 2]}}  # extra='allow': kept


@pytest.mark.parametrize('spec, words', [
    ({'size': 'big'}, 'spec.size: Invalid value: "string": spec.size in body must be of type integer'),
    ({'size': 101}, 'spec.size: Invalid value: 101: spec.size in body should be less than or equal to 100'),
    ({'shape': 'oval'}, 'spec.shape in body should match \'^(round|square)$\''),
    ({'labels': {'a': 1}}, 'spec.labels.a: Invalid value: "integer": spec.labels.a in body must be of type string'),
])
def test_wrong_values_are_refused_by_the_server_with_the_models_constraint(
        widgets: dict, kube: KubeAPI, namespace: str, spec: dict, words: str) -> None:
    with pytest.raises(KubeAPIError) as e:
        kube.create(f'{rbac.WIDGETS}/namespaces/{namespace}/widgets', {
            'apiVersion': 'rbac.e2e.kopf.dev/v1', 'kind': 'Widget', 'metadata': {'name': 'w1'}, 'spec': spec})
    assert e.value.status == 422
    assert words in json.loads(e.value.body)['message']


# The typed resource's handlers, in a real operator.

def test_handlers_of_a_typed_resource_get_the_validated_model(
        widgets: dict, kube: KubeAPI, control_plane: ControlPlane, kubeconfig: Path, tmp_path: Path) -> None:
    namespace = rbac.fresh_namespace('typed')
    docs = rbac.documents(rbac.generate('typed', kubeconfig=kubeconfig), namespace)

    def scenario(ctx: Context) -> bool:
        ctx.widget('valid', size=3)
        return ctx.until(lambda: ((ctx.find('valid') or {}).get('status') or {}).get('typed_create'))

    outcome = rbac.run(control_plane=control_plane, kube=kube, feature='typed', docs=docs, scenario=scenario,
                       workdir=tmp_path)
    assert outcome.completed and not outcome.refused, outcome.log
    call, = read_calls(tmp_path / 'calls.jsonl')
    assert (call['type'], call['size'], call['raw']) == ('WidgetSpec', 3, {'size': 3, 'shape': 'round', 'labels': {}})


def test_an_invalid_spec_is_reported_once_with_an_event_and_a_condition(
        widgets: dict, kube: KubeAPI, control_plane: ControlPlane, kubeconfig: Path, tmp_path: Path) -> None:
    namespace = rbac.fresh_namespace('invalid')
    docs = rbac.documents(rbac.generate('typed', kubeconfig=kubeconfig), namespace)
    message = "spec: Value error, a square widget has an even size"

    def scenario(ctx: Context) -> bool:
        ctx.widget('bad', size=3, shape='square')  # the server's schema lets it through; the model's validator not
        assert ctx.until(lambda: len(_invalid_events(ctx)) == 1
                         and _condition(ctx.find('bad')).get('status') == 'False')
        assert _condition(ctx.find('bad'))['message'].startswith(message)
        event, = _invalid_events(ctx)
        assert event['type'] == 'Warning' and event['involvedObject']['name'] == 'bad'
        assert event['message'].startswith(f"The spec is invalid for Widget: {message}")
        assert event['message'].endswith("No handler is called until it is fixed.")
        kube.patch(ctx.path('bad'), {'metadata': {'labels': {'touched': 'yes'}}})  # not a change of the spec
        kube.patch(ctx.path('bad'), {'spec': {'size': 4}})
        assert ctx.until(lambda: ctx.called('create', 'bad') and _condition(ctx.find('bad')).get('status') == 'True')
        assert len(_invalid_events(ctx)) == 1
        assert ctx.process is not None and ctx.process.output.count("The spec is invalid for Widget") == 1
        return True

    outcome = rbac.run(control_plane=control_plane, kube=kube, feature='typed', docs=docs, scenario=scenario,
                       workdir=tmp_path)
    assert outcome.completed and not outcome.refused, outcome.log


def _invalid_events(ctx: Context) -> list[dict]:
    events = ctx.kube.get(f'/api/v1/namespaces/{ctx.namespace}/events')['items']
    return [event for event in events if event['reason'] == 'InvalidSpec']


def _condition(obj: dict | None) -> dict:
    conditions = ((obj or {}).get('status') or {}).get('conditions') or []
    return next((c for c in conditions if c['type'] == 'Valid'), {})


# The scenarios of the features: all their work, step by step; False as soon as a step cannot be done.

def plain(ctx: Context) -> bool:
    ctx.widget('w1', size=3, labels={'e2e/hold': 'yes'})
    if not ctx.held('w1'):
        return False
    if not ctx.until(lambda: ctx.called('create', 'w1') and (ctx.find('w1') or {}).get('status', {}).get('created')):
        return False
    ctx.kube.patch(ctx.path('w1'), {'spec': {'size': 4}})
    if not ctx.until(lambda: ctx.called('update', 'w1')):
        return False
    ctx.kube.delete(ctx.path('w1'))
    return ctx.until(lambda: ctx.called('delete', 'w1') and ctx.find('w1') is None)


def status(ctx: Context) -> bool:
    ctx.widget('w1')
    if not ctx.until(lambda: ctx.called('create', 'w1') and _handled(ctx.find('w1'))):
        return False
    return later(ctx) and invalid(ctx)


def later(ctx: Context) -> bool:
    """An object created once the first is handled: the operator sees it only by watching."""
    ctx.widget('w2')
    return ctx.until(lambda: ctx.called('create', 'w2'))


def invalid(ctx: Context) -> bool:
    """An object that the typed model refuses: reported with an Event and a condition."""
    ctx.widget('odd', size=3, shape='square')
    return ctx.until(lambda: _invalid_events(ctx) and _condition(ctx.find('odd')).get('status') == 'False')


def _handled(obj: dict | None) -> bool:
    """Handled to the end: the last handled state is stored, and no progress is left."""
    annotations = ((obj or {}).get('metadata') or {}).get('annotations') or {}
    progress = (((obj or {}).get('status') or {}).get('kopf') or {}).get('progress')
    return 'kopf.zalando.org/last-handled-configuration' in annotations and not progress


def daemons(ctx: Context) -> bool:
    ctx.widget('w1', labels={'e2e/hold': 'yes'})
    if not ctx.held('w1'):
        return False
    if not ctx.until(lambda: ctx.called('daemon', 'w1') and ctx.called('timer', 'w1')):
        return False
    ctx.kube.delete(ctx.path('w1'))
    if not ctx.until(lambda: ctx.called('daemon-stopped', 'w1') and ctx.find('w1') is None):
        return False
    ctx.widget('w2')
    return ctx.until(lambda: ctx.called('timer', 'w2')) and invalid(ctx)


def shards(ctx: Context) -> bool:
    ctx.widget('w1')
    return ctx.until(lambda: ctx.called('create', 'w1')) and later(ctx) and invalid(ctx)


def configmaps(ctx: Context) -> bool:
    maps = f'/api/v1/namespaces/{ctx.namespace}/configmaps'
    ctx.widget('w1')
    if not ctx.until(lambda: ctx.called('create', 'w1') and ctx.kube.get(maps)['items']):
        return False
    ctx.kube.delete(ctx.path('w1'))
    if not ctx.until(lambda: ctx.find('w1') is None and not ctx.kube.get(maps)['items']):
        return False
    return later(ctx) and invalid(ctx)


def admission(ctx: Context) -> bool:
    validating = f'{CONFIGS}/validatingwebhookconfigurations/{ctx.managed}'
    if not ctx.until(lambda: ctx.kube.find(validating)):
        return False

    def refused() -> bool:
        try:
            ctx.widget('big', size=99)
        except KubeAPIError as e:
            return "Widgets bigger than 50 are not allowed here." in e.body
        ctx.kube.delete(ctx.path('big'))
        return False  # the webhook is not enforced yet

    if not ctx.until(refused):
        return False
    ctx.widget('small', size=1)
    assert ctx.process is not None
    rbac.stop(ctx.process)
    return ctx.kube.find(validating) is None


def reconcile(ctx: Context) -> bool:
    """A widget's child is created (after one failure and its stored back-off), and restored when deleted."""
    child = f'/api/v1/namespaces/{ctx.namespace}/configmaps/w1-child'
    ctx.widget('w1', size=13)
    if not ctx.until(lambda: ctx.kube.find(child)):
        return False
    ctx.kube.delete(child)
    if not ctx.until(lambda: ctx.kube.find(child)):
        return False
    return invalid(ctx)


FEATURES: dict[str, tuple[Callable[[Context], bool], tuple[str, ...]]] = {
    'plain': (plain, ()),
    'status': (status, ()),
    'daemons': (daemons, ()),
    'shards': (shards, ('--shards',)),
    'configmaps': (configmaps, ()),
    'admission': (admission, ()),
    'reconcile': (reconcile, ()),
}

# What the minimality checks found, for the record (written if $KOPF_E2E_RBAC_REPORT names a file).
REPORT: list[dict[str, object]] = []


@pytest.fixture(scope='module', autouse=True)
def report() -> object:
    yield
    target = os.environ.get('KOPF_E2E_RBAC_REPORT')
    if target and REPORT:
        Path(target).write_text(json.dumps(REPORT, indent=1))


@pytest.mark.parametrize('feature', list(FEATURES))
def test_the_generated_role_is_sufficient_and_every_verb_of_it_is_needed(
        feature: str, widgets: dict, kube: KubeAPI, control_plane: ControlPlane, kubeconfig: Path,
        tmp_path: Path) -> None:
    scenario, args = FEATURES[feature]
    text = rbac.generate(feature, *args, kubeconfig=kubeconfig)
    removals: list[Removal | None] = [None, *rbac.variants(text)]

    def attempt(index: int, removal: Removal | None) -> tuple[Removal | None, rbac.Outcome]:
        namespace = rbac.fresh_namespace(f"{feature}-{index}")
        docs = rbac.without(rbac.documents(text, namespace), removal)
        outcome = rbac.run(control_plane=control_plane, kube=kube, feature=feature, docs=docs, scenario=scenario,
                           workdir=tmp_path / str(index), args=args)
        return removal, outcome

    with concurrent.futures.ThreadPoolExecutor(PARALLEL) as pool:
        outcomes = list(pool.map(lambda pair: attempt(*pair), enumerate(removals)))

    (_, whole), *partial = outcomes
    REPORT.append({'feature': feature, 'role': text,
                   'removals': {str(removal): _first_refusal(outcome) for removal, outcome in partial}})
    assert whole.completed, f"With the whole role, {feature} did not do all its work:\n{whole.log}"
    assert not whole.refused, f"With the whole role, {feature} was refused something:\n{whole.log}"
    unnoticed = [str(removal) for removal, outcome in partial if not outcome.refused]
    assert not unnoticed, f"{feature}: these removals went unnoticed (the verbs are not needed): {unnoticed}"


def _first_refusal(outcome: rbac.Outcome) -> str:
    for line in outcome.log.splitlines():
        if rbac.REFUSAL.search(line):
            return line[:300]
    return f"exit code {outcome.exit_code}"


# Every manifest, accepted by the server.

@pytest.mark.parametrize('feature', list(FEATURES))
def test_kubectl_accepts_every_generated_manifest_in_a_server_dry_run(
        feature: str, widgets: dict, kube: KubeAPI, kubeconfig: Path, tmp_path: Path) -> None:
    namespace = rbac.fresh_namespace(f'dry-{feature}')
    kube.ensure_namespace(namespace)
    args = (*FEATURES[feature][1], '--liveness', 'http://0.0.0.0:8080/healthz', '-o', str(tmp_path / 'out'))
    rbac.generate(feature, *args, kubeconfig=kubeconfig, only='crds')  # the CRDs
    for part in ('rbac', 'deployment'):
        rbac.generate(feature, *args, kubeconfig=kubeconfig, only=part)
    for name in ('crds.yaml', 'rbac.yaml', 'deployment.yaml'):
        path = tmp_path / 'out' / name
        path.write_text(path.read_text().replace(rbac.PLACEHOLDER, namespace))
        env = {'KUBECONFIG': str(kubeconfig), 'PATH': '/usr/bin:/bin', 'HOME': str(tmp_path)}
        result = subprocess.run(['kubectl', 'apply', '--dry-run=server', '-f', str(path)], capture_output=True,
                                text=True, timeout=60, env=env)
        assert result.returncode == 0, f"{name}:\n{result.stderr}"
        assert 'created (server dry run)' in result.stdout or 'configured (server dry run)' in result.stdout \
            or 'unchanged (server dry run)' in result.stdout, result.stdout


def test_several_versions_of_a_kind_are_one_crd_that_the_server_serves_in_each(
        kube: KubeAPI, kubeconfig: Path, tmp_path: Path) -> None:
    source = tmp_path / 'versions.py'
    source.write_text(
        "import kopf.typed, pydantic\n"
        "class Spec(pydantic.BaseModel):\n    size: int = 1\n"
        "class SpecV2(pydantic.BaseModel):\n    size: int = 1\n    colour: str = 'red'\n"
        "class GadgetV1(kopf.typed.CustomResource, group='versions.e2e.kopf.dev', version='v1', kind='Gadget'):\n"
        "    spec: Spec\n"
        "class GadgetV2(kopf.typed.CustomResource, group='versions.e2e.kopf.dev', version='v2', kind='Gadget',\n"
        "               storage=True):\n"
        "    spec: SpecV2\n")
    result = subprocess.run([sys.executable, '-m', 'kopf', 'manifests', str(source), '--only', 'crds'],
                            capture_output=True, text=True, timeout=60, cwd=tmp_path,
                            env={'PATH': '/usr/bin:/bin', 'PYTHONPATH': str(rbac.REPO)})
    assert result.returncode == 0, result.stderr
    crd, = yaml.safe_load_all(result.stdout)
    kube.apply_crd(crd)
    for version in ('v1', 'v2'):
        kube.get(f'/apis/versions.e2e.kopf.dev/{version}/gadgets')
    served = kube.get('/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.versions.e2e.kopf.dev')
    assert served['status']['storedVersions'] == ['v2']
