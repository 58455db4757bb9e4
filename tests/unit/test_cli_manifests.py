"""
``kopf manifests`` of operators with typed resources (no cluster needed), and its answers to bad input.

Each run is a fresh interpreter, as the command is: it imports the operator's code for good.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

REPO = Path(__file__).parents[2]

TYPED = '''
import kopf, kopf.typed, pydantic

class Spec(pydantic.BaseModel):
    image: str
    replicas: int = pydantic.Field(1, ge=1, le=10)

class Status(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra='allow')
    conditions: list[kopf.typed.Condition] = []

class MyApp(kopf.typed.CustomResource, group='example.com', version='v1', short_names=['ma']):
    spec: Spec
    status: Status = Status()

@kopf.on.create(MyApp)
def created(spec: Spec, **_):
    return {'replicas': spec.replicas}
'''


def manifests(tmp_path: Path, source: str, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / 'my_operator.py'
    path.write_text(textwrap.dedent(source))
    env = {'PYTHONPATH': str(REPO), 'PATH': '/usr/bin:/bin', 'KUBECONFIG': str(tmp_path / 'none')}
    return subprocess.run([sys.executable, '-m', 'kopf', 'manifests', str(path), *args], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path, env=env)


def test_all_parts_are_printed_as_yaml(tmp_path):
    result = manifests(tmp_path, TYPED, '-n', 'apps')
    assert result.returncode == 0, result.stderr
    kinds = [(doc['kind'], doc['metadata'].get('namespace')) for doc in yaml.safe_load_all(result.stdout)]
    assert kinds == [('CustomResourceDefinition', None), ('ServiceAccount', 'apps'), ('ClusterRole', None),
                     ('ClusterRoleBinding', None), ('Role', 'apps'), ('RoleBinding', 'apps'), ('Deployment', 'apps')]
    assert '# see the objects of myapps: list them, then watch for changes' in result.stdout


def test_the_parts_are_written_into_a_folder(tmp_path):
    result = manifests(tmp_path, TYPED, '-A', '--shards', '-o', str(tmp_path / 'out'))
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / 'out').iterdir()) == ['Dockerfile', 'crds.yaml', 'deployment.yaml',
                                                                     'rbac.yaml']
    dockerfile = (tmp_path / 'out' / 'Dockerfile').read_text()
    assert 'RUN pip install --no-cache-dir "$(ls /tmp/kopf-*.whl)[typed]"' in dockerfile
    assert 'COPY my_operator.py /app/my_operator.py' in dockerfile
    assert 'CMD ["kopf", "run", "/app/my_operator.py", "-A", "--shards"]' in dockerfile
    kinds = [doc['kind'] for doc in yaml.safe_load_all((tmp_path / 'out' / 'deployment.yaml').read_text())]
    assert kinds == ['Deployment', 'PodDisruptionBudget']


def test_a_failing_import_ends_the_command_as_kopf_run_does(tmp_path):
    result = manifests(tmp_path, 'import kopf\nraise RuntimeError("boom")\n')
    assert result.returncode == 2
    assert result.stderr.startswith("Error: The operator code ")
    assert "failed to import" in result.stderr and 'RuntimeError: boom' in result.stderr


def test_a_recursive_model_fails_with_one_line_naming_the_class_and_field(tmp_path):
    result = manifests(tmp_path, '''
        from __future__ import annotations
        import kopf, kopf.typed, pydantic

        class Node(pydantic.BaseModel):
            children: list[Node] = []

        class Tree(kopf.typed.CustomResource, group='example.com', version='v1'):
            spec: Node
    ''')
    assert result.returncode == 1
    assert result.stderr.count('\n') == 1
    assert result.stderr.startswith("Error: Tree.spec.children[]: the model Node contains itself (a recursive model)")


def test_an_untyped_spec_fails_with_one_line(tmp_path):
    result = manifests(tmp_path, '''
        import kopf, kopf.typed

        class Loose(kopf.typed.CustomResource, group='example.com', version='v1'):
            spec: dict
    ''')
    assert result.returncode == 1 and result.stderr.count('\n') == 1
    assert result.stderr.startswith("Error: Loose.spec is an untyped dict")


def test_two_classes_of_one_kind_and_version_fail_with_both_names(tmp_path):
    result = manifests(tmp_path, '''
        import kopf, kopf.typed, pydantic

        class Spec(pydantic.BaseModel):
            x: int = 0

        class Mine(kopf.typed.CustomResource, group='example.com', version='v1', kind='App'):
            spec: Spec

        class Theirs(kopf.typed.CustomResource, group='example.com', version='v1', kind='App'):
            spec: Spec
    ''')
    assert result.returncode == 1 and result.stderr.count('\n') == 1
    assert "Mine and Theirs both claim App.example.com in the version v1" in result.stderr


def test_resources_named_by_strings_need_a_cluster_and_say_so(tmp_path):
    result = manifests(tmp_path, '''
        import kopf

        @kopf.on.create('kopfexamples')
        def created(**_):
            pass
    ''')
    assert result.returncode == 1 and result.stderr.count('\n') == 1
    assert result.stderr.startswith("Error: The resources kopfexamples are named by strings: only the cluster knows")


def test_a_result_that_the_status_model_would_prune_is_warned_about(tmp_path):
    result = manifests(tmp_path, TYPED.replace("extra='allow'", "extra='ignore'"), '--only', 'crds')
    assert result.returncode == 0, result.stderr
    assert ("Warning: The handler 'created' returns a result into status.created of MyApp, but its status model "
            "declares no such field: the server will prune it.") in result.stderr


def test_the_dockerfile_installs_the_framework_as_told(tmp_path):
    result = manifests(tmp_path, TYPED, '--only', 'dockerfile', '--framework', 'kopf[typed] @ file:///w/kopf.whl')
    assert result.returncode == 0, result.stderr
    assert "# The framework (it needs the extras [typed]).\nRUN pip install --no-cache-dir 'kopf[typed] @ " \
           "file:///w/kopf.whl'\n" in result.stdout
    assert result.stdout.startswith("# The operator's image")
