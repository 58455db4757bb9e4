"""
A picture of the scale benchmark: throughput and memory against the number of objects, per framework.

Reads the ``--json`` files of ``benchmarks/scale.py`` runs (any number of
object counts, one or both frameworks in each) and draws, for the backlog
with one handler (or, with ``--burst``, the burst): objects handled per
second, the peak resident memory, and the operator's CPU per object. Needs
matplotlib (not a dependency of the framework: ``pip install matplotlib``)::

    .venv/bin/python -m benchmarks.plot_scale docs/scale.png results/scale-*.json
    .venv/bin/python -m benchmarks.plot_scale --burst burst.png results/scale-*.json
"""
from __future__ import annotations

import collections
import json
import sys
from collections.abc import Sequence
from pathlib import Path

FIGURES = [('obj/s', 'objects handled per second'), ('peak RSS MB', 'peak resident memory, MB'),
           ('CPU ms/obj', 'operator CPU per object, ms')]
NAMES = {'ours': 'kopf (this framework)', 'kopf': 'Kopf 1.45.2'}


TITLES = {
    'backlog1': 'Backlog: N objects created first, then the operator started; one quick create handler '
                '(2 shared cores)',
    'burst1': 'Burst: N objects created at once, one quick create handler (2 shared cores)',
}


def points(paths: Sequence[Path], phase: str) -> dict[str, dict[str, dict[int, float]]]:
    """figure -> framework -> objects -> value, for the phase in every file (a later file wins)."""
    found: dict[str, dict[str, dict[int, float]]] = collections.defaultdict(lambda: collections.defaultdict(dict))
    for path in paths:
        data = json.loads(path.read_text())
        objects = int(data['options']['objects'])
        for result in data['results']:
            if result['phase'] != phase:
                continue
            for figure, _ in FIGURES:
                if figure in result['values']:
                    found[figure][result['framework']][objects] = result['values'][figure]
    return found


def draw(target: Path, paths: Sequence[Path], phase: str = 'backlog1') -> None:
    import matplotlib
    matplotlib.use('Agg')
    from matplotlib import pyplot

    found = points(paths, phase)
    figure, axes = pyplot.subplots(1, len(FIGURES), figsize=(4.2 * len(FIGURES), 3.6))
    for ax, (name, label) in zip(axes, FIGURES):
        for framework, values in sorted(found[name].items()):
            xs = sorted(values)
            ax.plot(xs, [values[x] for x in xs], marker='o', label=NAMES.get(framework, framework))
        ax.set_xscale('log')
        counts = sorted({x for values in found[name].values() for x in values})
        ax.set_xticks(counts, [f"{x // 1000}k" for x in counts])
        ax.minorticks_off()
        ax.set_ylim(bottom=0)
        ax.set_xlabel('objects')
        ax.set_title(label, fontsize=10)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8)
    figure.suptitle(TITLES[phase], fontsize=10)
    figure.tight_layout()
    figure.savefig(target, dpi=100)


if __name__ == '__main__':
    arguments = sys.argv[1:]
    chosen = 'burst1' if arguments[:1] == ['--burst'] else 'backlog1'
    arguments = arguments[1:] if chosen == 'burst1' else arguments
    if len(arguments) < 2:
        sys.exit("Usage: python -m benchmarks.plot_scale [--burst] OUTPUT.png RESULTS.json...")
    draw(Path(arguments[0]), [Path(arg) for arg in arguments[1:]], chosen)
