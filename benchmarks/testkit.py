"""
Benchmark: what the test kit's two layers cost a test.

* The warm start of the control-plane fixture: a pytest session of one test
  that asks for ``kopf_cluster``, with the binaries in the cache; the
  fixture's setup time as pytest reports it (``--durations``), and the
  control plane's own startup time, for several sessions.
* A handler-level test: the examples' handlers in memory
  (:class:`kopf.testing.Simulation`), one cycle and a whole cause (``run()``,
  retries included), many times each.

Prints figures; asserts nothing. Run: ``python benchmarks/testkit.py [--sessions 3]``.
The machine's load average is printed with them: on a busy machine, both
grow.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import yaml

from kopf.testing import Simulation, load_operator

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / 'examples'
SESSION_TEST = '''
def test_cluster(kopf_cluster):
    print('STARTUP', kopf_cluster.control_plane.startup_seconds)
'''


def warm_starts(sessions: int) -> list[tuple[float, float]]:
    """(the fixture's setup, the control plane's own startup) in seconds, per session."""
    results = []
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        (root / 'pytest.ini').write_text('[pytest]\n')
        (root / 'test_cluster.py').write_text(textwrap.dedent(SESSION_TEST))
        env = {**os.environ, 'PYTEST_DISABLE_PLUGIN_AUTOLOAD': '1'}
        for _ in range(sessions):
            done = subprocess.run([sys.executable, '-m', 'pytest', '-p', 'kopf.testing', '-p', 'no:cacheprovider',
                                   '-s', '-q', '--durations=1', '--durations-min=0'],
                                  cwd=root, env=env, capture_output=True, text=True, check=True)
            setup = re.search(r'([\d.]+)s setup', done.stdout)
            startup = re.search(r'STARTUP ([\d.]+)', done.stdout)
            assert setup and startup, done.stdout
            results.append((float(setup.group(1)), float(startup.group(1))))
    return results


def handler_tests(repeat: int) -> None:
    obj = yaml.safe_load((EXAMPLES / 'obj.yaml').read_text())
    for name in ('01-minimal', '03-exceptions', '04-updates-deletes', '05-subhandlers'):
        registry = load_operator(EXAMPLES / name / 'example.py')
        Simulation(obj, registry=registry).run()  # warm-up: imports, the executor's threads
        cycles, runs = [], []
        for _ in range(repeat):
            started = time.perf_counter()
            Simulation(obj, registry=registry).cycle()
            cycles.append(time.perf_counter() - started)
            started = time.perf_counter()
            simulation = Simulation(obj, registry=registry)
            simulation.run()
            runs.append(time.perf_counter() - started)
        print(f"  {name:20} one cycle: median {statistics.median(cycles) * 1000:5.1f} ms, "
              f"max {max(cycles) * 1000:5.1f} ms;  the whole cause ({len(simulation.cycles)} cycles): "
              f"median {statistics.median(runs) * 1000:5.1f} ms, max {max(runs) * 1000:5.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--sessions', type=int, default=3)
    parser.add_argument('--repeat', type=int, default=50)
    args = parser.parse_args()
    print(f"Load average: {' '.join(f'{value:.1f}' for value in os.getloadavg())} on {os.cpu_count()} CPUs.")
    print("Handler-level tests, in memory:")
    handler_tests(args.repeat)
    print("The control-plane fixture, warm (binaries cached):")
    for setup, startup in warm_starts(args.sessions):
        print(f"  the fixture's setup {setup:5.2f} s, of which the control plane's start {startup:5.2f} s")
    print(f"Load average: {' '.join(f'{value:.1f}' for value in os.getloadavg())}.")


if __name__ == '__main__':
    main()
