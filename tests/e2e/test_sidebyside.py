"""
A smoke run of the side-by-side benchmark (``benchmarks/sidebyside.py``): a
few objects, one round, short waits. It checks the machinery — both
frameworks start, handle every object, and are measured from the server and
from /proc — not the figures, which only a full run on a quiet machine means.
"""
from __future__ import annotations

from pathlib import Path

from benchmarks import sidebyside
from kopf.testing import ControlPlane


def log_tails(directory: Path) -> str:
    return '\n'.join(log.read_text()[-3000:] for log in directory.glob('*.log'))


async def test_both_frameworks_are_measured_on_the_same_operator(control_plane: ControlPlane, tmp_path: Path) -> None:
    options = sidebyside.Options(objects=5, handlers=2, rounds=1, raw_objects=5, raw_concurrency=4,
                                 raw_seconds=0.5, settle=1.0, quiet_window=0.5, stall_timeout=30,
                                 logs=tmp_path)
    lines: list[str] = []
    results = await sidebyside.benchmark(control_plane, options, report=lines.append)

    assert not [line for line in lines if 'FAILED' in line], '\n'.join(lines)
    assert [r.framework for r in results] == ['ours', 'kopf']
    for r in results:
        assert r.objects == 5 and r.seconds > 0
        assert r.handler_calls == 5 * 2  # every handler once per object, counted by the operator itself
        assert r.patches >= 5  # at least one PATCH per object: the conclusion that marks it fully handled
        assert r.cpu > 0
        assert 0 < r.rss_ready <= r.rss_peak
        assert r.raw_patch_rate > 0
        assert r.log_errors == 0, log_tails(tmp_path)
    summary = sidebyside.summarize(results, options)
    assert 'ours/kopf' in summary and 'PATCH/obj' in summary
