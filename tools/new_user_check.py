"""
The new user's check of the test kit: from the built wheel to a passing test of a new operator.

    python tools/new_user_check.py [--keep]

It builds kopf's wheel, installs it (with the ``testing`` extra) into a fresh
virtualenv in a temporary directory, writes a tiny operator and its tests
there using only the documented fixtures and functions (docs/testing.rst),
and runs pytest on them: one test in memory, one against the local control
plane (its binaries from the cache, as any user's second session gets them).
It prints how long each step took, and exits with pytest's exit code.
Nothing outside of the temporary directory is touched (``--keep`` keeps it).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

OPERATOR = '''
import kopf


@kopf.on.create('configmaps', labels={'greet': 'yes'})
def greet(name, patch, **_):
    patch.metadata.annotations['greeting'] = f"hello, {name}"
'''

TESTS = '''
from kopf.testing import Simulation, load_operator

CONFIGMAP = {'apiVersion': 'v1', 'kind': 'ConfigMap',
             'metadata': {'name': 'cm', 'labels': {'greet': 'yes'}}, 'data': {'k': 'v'}}


def test_in_memory():
    cycle = Simulation(CONFIGMAP, registry=load_operator('my_operator.py')).cycle()
    assert cycle.called == ['greet']
    assert cycle.patch['metadata']['annotations']['greeting'] == 'hello, cm'


def test_on_a_server(kopf_cluster, kopf_namespace, kopf_operator):
    operator = kopf_operator('my_operator.py')
    created = kopf_cluster.create(CONFIGMAP, namespace=kopf_namespace)
    handled = operator.wait_until_handled(created)
    assert handled['metadata']['annotations']['greeting'] == 'hello, cm'
'''


def step(title: str, argv: list[str], **kwargs: object) -> float:
    print(f"--- {title}: {' '.join(argv)}", flush=True)
    started = time.monotonic()
    subprocess.run(argv, check=True, **kwargs)  # type: ignore[call-overload]
    took = time.monotonic() - started
    print(f"--- {title}: {took:.1f}s", flush=True)
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--keep', action='store_true', help="keep the temporary directory")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix='kopf-new-user-'))
    try:
        dist, venv, project = root / 'dist', root / 'venv', root / 'project'
        step("building the wheel", [sys.executable, '-m', 'pip', 'wheel', '--quiet', '--no-deps', '-w', str(dist),
                                    str(REPO)])
        [wheel] = dist.glob('kopf-*.whl')
        step("a fresh virtualenv", [sys.executable, '-m', 'venv', str(venv)])
        step("installing kopf[testing]", [str(venv / 'bin' / 'pip'), 'install', '--quiet', f'{wheel}[testing]'])
        project.mkdir()
        (project / 'my_operator.py').write_text(textwrap.dedent(OPERATOR))
        (project / 'test_my_operator.py').write_text(textwrap.dedent(TESTS))
        # The user's environment, minus whatever would point at this repository or another cluster.
        env = {key: value for key, value in os.environ.items()
               if key not in ('PYTHONPATH', 'KUBECONFIG', 'KOPF_TEST_KUBECONFIG', 'VIRTUAL_ENV')}
        try:
            step("pytest", [str(venv / 'bin' / 'python'), '-m', 'pytest', '-v', '-p', 'no:cacheprovider'],
                 cwd=project, env=env)
        except subprocess.CalledProcessError as e:
            return e.returncode
        print(f"The new user's check has passed (in {root}).")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == '__main__':
    sys.exit(main())
