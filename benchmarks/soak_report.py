"""
The figures and the plot of a soak run (``benchmarks/soak.py``), from what it recorded so far.

Reads ``OUT/driver.jsonl`` and ``OUT/samples.jsonl`` (and ``OUT/summary.json``
if the run has ended), prints the figures as Markdown, and draws
``--png``: resident memory, asyncio tasks, open file descriptors, workers
and queue depth, and the latencies, per minute, with the operator's restarts
marked.

Trends are judged by a least-squares line through the samples taken after
the warm-up of each operator process (``--warmup`` minutes after each start:
every SIGKILL starts a fresh process), with the restarts' offsets removed (each
process is fitted around its own mean): the slope per hour and its standard
error tell a growth from noise.

    .venv/bin/python -m benchmarks.soak_report /tmp/soak --png docs/soak.png
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def load(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip().endswith('}')]


def trend(points: Sequence[tuple[float, float, int]]) -> tuple[float, float, float]:
    """
    The slope per hour of values over minutes, each process around its own mean; its standard error; the noise.

    ``points`` are (minute, value, pid).
    """
    by_pid: dict[int, list[tuple[float, float]]] = {}
    for minute, value, pid in points:
        by_pid.setdefault(pid, []).append((minute, value))
    xs: list[float] = []
    ys: list[float] = []
    for series in by_pid.values():
        mx = statistics.fmean(x for x, _ in series)
        my = statistics.fmean(y for _, y in series)
        xs.extend(x - mx for x, _ in series)
        ys.extend(y - my for _, y in series)
    sxx = sum(x * x for x in xs)
    if len(xs) < 3 or sxx == 0:
        return math.nan, math.nan, math.nan
    slope = sum(x * y for x, y in zip(xs, ys)) / sxx
    residuals = [y - slope * x for x, y in zip(xs, ys)]
    dof = max(1, len(xs) - 1 - len(by_pid))
    noise = math.sqrt(sum(r * r for r in residuals) / dof)
    return slope * 60, noise / math.sqrt(sxx) * 60, noise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('out', type=Path)
    parser.add_argument('--png', type=Path)
    parser.add_argument('--warmup', type=float, default=5.0, help='minutes after each operator start')
    parser.add_argument('--title', default='')
    args = parser.parse_args()

    driver = load(args.out / 'driver.jsonl')
    samples = load(args.out / 'samples.jsonl')
    summary_path = args.out / 'summary.json'
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else None
    if not driver or not samples:
        raise SystemExit(f"Nothing recorded in {args.out} yet.")
    started = driver[0]['t'] - driver[0]['minute'] * 60
    for sample in samples:
        sample['minute'] = (sample['t'] - started) / 60
    # The measures are of the load: the drain after the changes stopped (in the summary) is left out.
    ran = summary['minutes'] if summary else driver[-1]['minute']
    warm = [s for s in samples if s['uptime'] >= args.warmup * 60 and s['minute'] <= ran]
    pids = list(dict.fromkeys(s['pid'] for s in samples))

    print(f"## Soak: {ran:.0f} minutes" + (f" ({args.title})" if args.title else ''))
    print()
    made = [sum(d['made'].values()) for d in driver]
    print(f"* Changes: {sum(made)} in {ran:.0f} min ({sum(made) / (ran * 60):.1f}/s): "
          f"{sum(d['made'].get('create', 0) for d in driver)} creations, "
          f"{sum(d['made'].get('update', 0) for d in driver)} updates, "
          f"{sum(d['made'].get('delete', 0) for d in driver)} deletions; about {driver[-1]['live']} objects live.")
    print(f"* Handler calls: {json.dumps(driver[-1]['calls'])}; operator processes: {len(pids)} "
          f"({driver[-1]['kills']} SIGKILLs); faults injected: {json.dumps(driver[-1]['faults'])}.")
    reruns = summary['reruns'] if summary else None
    print(f"* Re-runs after a visible success: {len(reruns) if reruns is not None else driver[-1]['reruns']}.")
    if summary:
        print(f"* Objects left unhandled at the end: {len(summary['unhandled'])} "
              f"(never handled: {len(summary['never_handled'])}).")
    else:
        print(f"* Objects not (yet) handled at the last record: {driver[-1]['pending']} (a running run: "
              f"changes are in flight).")
    print()
    print("| per minute, after warm-up | mean | min..max | trend per hour (± std. error) | noise (std. dev.) |")
    print("|---|---|---|---|---|")
    for key, label, scale, unit in [('rss', 'RSS', 2**20, 'MiB'), ('tasks', 'asyncio tasks', 1, ''),
                                    ('fds', 'open fds', 1, ''), ('workers', 'workers', 1, ''),
                                    ('queue', 'queue depth', 1, '')]:
        values = [s[key] / scale for s in warm]
        slope, error, noise = trend([(s['minute'], s[key] / scale, s['pid']) for s in warm])
        print(f"| {label} {unit} | {statistics.fmean(values):.1f} | {min(values):.1f}..{max(values):.1f} | "
              f"{slope:+.2f} ± {error:.2f} | {noise:.2f} |")
    at = args.warmup * 2
    steady = []
    for pid in pids:
        own = [s for s in samples if s['pid'] == pid and s['uptime'] >= at * 60]
        if own:
            steady.append(f"{own[0]['rss'] / 2**20:.1f}")
    print(f"| RSS MiB of each process at {at:g} min of uptime, in order | {', '.join(steady)} | | | |")
    for _source, rows, what in [('operator', [s for s in samples if s.get('p99') is not None and s['minute'] <= ran],
                                'change → handler start'),
                               ('driver', [d for d in driver if d.get('p99') is not None and d['minute'] <= ran],
                                'change → visibly handled')]:
        p50 = [r['p50'] for r in rows]
        p99 = [r['p99'] for r in rows]
        slope, error, _ = trend([(r['minute'], r['p99'], 0) for r in rows])
        print(f"| latency p50 s ({what}) | {statistics.fmean(p50):.2f} | {min(p50):.2f}..{max(p50):.2f} | | |")
        print(f"| latency p99 s ({what}) | {statistics.fmean(p99):.2f} | {min(p99):.2f}..{max(p99):.2f} | "
              f"{slope:+.2f} ± {error:.2f} | |")
    print()

    if args.png:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(5, 1, figsize=(10, 13), sharex=True)
        restarts = [s['minute'] - s['uptime'] / 60 for s in (next(x for x in samples if x['pid'] == p)
                                                               for p in pids)]
        series = [('rss', 'RSS, MiB', 2**20), ('tasks', 'asyncio tasks', 1), ('fds', 'open fds', 1)]
        for ax, (key, label, scale) in zip(axes, series):
            for pid in pids:
                own = [s for s in samples if s['pid'] == pid]
                ax.plot([s['minute'] for s in own], [s[key] / scale for s in own], '.-', color='tab:blue')
            ax.set_ylabel(label)
            ax.set_ylim(bottom=0)
        ax = axes[3]
        for pid in pids:
            own = [s for s in samples if s['pid'] == pid]
            ax.plot([s['minute'] for s in own], [s['workers'] for s in own], '.-', color='tab:green')
            ax.plot([s['minute'] for s in own], [s['queue'] for s in own], '.-', color='tab:orange')
        ax.legend(['workers', 'queue depth'], loc='upper left')
        ax.set_ylabel('per-object workers')
        ax = axes[4]
        ax.plot([s['minute'] for s in samples if s['p99'] is not None],
                [s['p99'] for s in samples if s['p99'] is not None], '.', color='tab:red',
                label='p99 change → handler start')
        ax.plot([d['minute'] for d in driver if d['p99'] is not None],
                [d['p99'] for d in driver if d['p99'] is not None], '.', color='tab:purple',
                label='p99 change → visibly handled')
        ax.plot([d['minute'] for d in driver if d['p50'] is not None],
                [d['p50'] for d in driver if d['p50'] is not None], '.', color='tab:gray',
                label='p50 change → visibly handled')
        ax.set_yscale('log')
        ax.set_ylabel('latency, s')
        ax.set_xlabel('minutes')
        ax.legend(loc='upper left', fontsize='small')
        for ax in axes:
            for minute in restarts[1:]:
                ax.axvline(minute, color='black', alpha=0.3, linestyle='--')
            ax.grid(alpha=0.3)
        kills = f"{len(pids) - 1} SIGKILL + restart (dashed)" if len(pids) > 1 else "no restarts"
        axes[0].set_title(f"Soak: {ran:.0f} min, {sum(made) / (ran * 60):.1f} changes/s, "
                          f"{kills}, watches cut every 2-5 min")
        fig.tight_layout()
        fig.savefig(args.png, dpi=80)
        print(f"(plot: {args.png})")


if __name__ == '__main__':
    main()
