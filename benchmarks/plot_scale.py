"""
A picture of the scale benchmark: throughput and memory against the number of objects, per framework.

Reads the ``--json`` files of ``benchmarks/scale.py`` runs (any number of
object counts, one or both frameworks in each) and draws, for the burst with
one handler: objects handled per second, the peak resident memory, and the
operator's CPU per object. Needs matplotlib (not a dependency of the
framework: ``pip install matplotlib``)::

    .venv/bin/python -m benchmarks.plot_scale docs/scale.png results/scale-*.json
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


def points(paths: Sequence[Path]) -> dict[str, dict[str, dict[int, float]]]:
    """figure -> framework -> objects -> value, for the 1-handler burst of every file."""
    found: dict[str, dict[str, dict[int, float]]] = collections.defaultdict(lambda: collections.defaultdict(dict))
    for path in paths:
        data = json.loads(path.read_text())
        objects = int(data['options']['objects'])
        for result in data['results']:
            if result['phase'] != 'burst1':
                continue
            for figure, _ in FIGURES:
                if figure in result['values']:
                    found[figure][result['framework']][objects] = result['values'][figure]
    return found


def draw(target: Path, paths: Sequence[Path]) -> None:
    import matplotlib
    matplotlib.use('Agg')
    from matplotlib import pyplot

    found = points(paths)
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
    figure.suptitle('Burst: N objects created at once, one quick create handler (2 shared cores)', fontsize=10)
    figure.tight_layout()
    figure.savefig(target, dpi=100)


if __name__ == '__main__':
    if len(sys.argv) < 3:
        sys.exit("Usage: python -m benchmarks.plot_scale OUTPUT.png RESULTS.json...")
    draw(Path(sys.argv[1]), [Path(arg) for arg in sys.argv[2:]])
