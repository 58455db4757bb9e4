"""
One Markdown table from the ``--json`` files of several side-by-side runs.

Per file (one configuration): for each framework (ours, the baseline of ours
if any, Kopf) the median of every figure with its spread (min..max), and the
ratios of the medians to Kopf's::

    .venv/bin/python -m benchmarks.tabulate results/*.json
"""
from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

MB = 1024 * 1024

FIGURES: list[tuple[str, str, Callable[[dict[str, Any]], float]]] = [
    ('obj/s', '{:.0f}', lambda r: r['rate']),
    ('handler calls/obj', '{:.2f}', lambda r: r.get('calls_per_object', float('nan'))),
    ('PATCH/obj', '{:.2f}', lambda r: r['patches_per_object']),
    ('other req/obj', '{:.2f}', lambda r: r['other_per_object']),
    ('CPU ms/obj', '{:.2f}', lambda r: r['cpu_ms_per_object']),
    ('ready MB', '{:.0f}', lambda r: r['rss_ready'] / MB),
    ('peak MB', '{:.0f}', lambda r: r['rss_peak'] / MB),
    ('idle MB', '{:.0f}', lambda r: r['rss_idle'] / MB),
    ('raw PATCH share', '{:.0%}', lambda r: r['patch_share']),
]


def cell(values: Sequence[float], fmt: str) -> str:
    median = statistics.median(values)
    if len(values) == 1:
        return fmt.format(median)
    return f"{fmt.format(median)} ({fmt.format(min(values))}..{fmt.format(max(values))})"


def table(paths: Sequence[Path]) -> str:
    lines = ['| config | figure | ours | base | Kopf | ours/Kopf | base/Kopf |', '|---|---|---|---|---|---|---|']
    for path in paths:
        data = json.loads(path.read_text())
        options = data['options']
        config = f"{options['objects']}x{options['handlers']} {options['lifecycle'] or 'default'}"
        loads = [load for r in data['runs'] for load in r['loadavg']]
        config += f" (load {min(loads):.1f}..{max(loads):.1f})"
        runs = {fw: [r for r in data['runs'] if r['framework'] == fw] for fw in ('ours', 'base', 'kopf')}
        for name, fmt, fn in FIGURES:
            values = {fw: [fn(r) for r in rs] for fw, rs in runs.items() if rs}
            cells = [cell(values[fw], fmt) if fw in values else '-' for fw in ('ours', 'base', 'kopf')]
            for fw in ('ours', 'base'):
                ratio = '-'
                if fw in values and 'kopf' in values and statistics.median(values['kopf']) >= 0.005:
                    ratio = f"{statistics.median(values[fw]) / statistics.median(values['kopf']):.2f}"
                cells.append(ratio)
            lines.append(f"| {config} | {name} | {' | '.join(cells)} |")
            config = ''
    return '\n'.join(lines)


if __name__ == '__main__':
    print(table([Path(arg) for arg in sys.argv[1:]]))
