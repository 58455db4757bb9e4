"""
One Markdown table from the ``--json`` files of several side-by-side runs.

Per file (one configuration): for each framework the median of every figure
with its spread (min..max), and the ratio of the medians (ours / Kopf)::

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
    lines = ['| config | figure | ours | Kopf | ours/Kopf |', '|---|---|---|---|---|']
    for path in paths:
        data = json.loads(path.read_text())
        options = data['options']
        config = f"{options['objects']}x{options['handlers']} {options['lifecycle'] or 'default'}"
        loads = [load for r in data['runs'] for load in r['loadavg']]
        config += f" (load {min(loads):.1f}..{max(loads):.1f})"
        runs = {fw: [r for r in data['runs'] if r['framework'] == fw] for fw in ('ours', 'kopf')}
        for name, fmt, fn in FIGURES:
            values = {fw: [fn(r) for r in rs] for fw, rs in runs.items() if rs}
            ours = cell(values['ours'], fmt) if 'ours' in values else '-'
            kopf = cell(values['kopf'], fmt) if 'kopf' in values else '-'
            ratio = '-'
            if 'ours' in values and 'kopf' in values and statistics.median(values['kopf']) >= 0.005:
                ratio = f"{statistics.median(values['ours']) / statistics.median(values['kopf']):.2f}"
            lines.append(f"| {config} | {name} | {ours} | {kopf} | {ratio} |")
            config = ''
    return '\n'.join(lines)


if __name__ == '__main__':
    print(table([Path(arg) for arg in sys.argv[1:]]))
