"""
A smoke run of ``benchmarks/reconciliation.py``: ``examples/10-reconciliation`` both ways, one repair each.

It checks the machinery -- both frameworks start, repair the child after a
deletion and an edit, and are measured from the server -- and the one figure
that holds on any machine: a reconciliation repairs with one request (the
apply), the Kopf way with several.
"""
from __future__ import annotations

from pathlib import Path

from benchmarks import reconciliation
from kopf.testing import ControlPlane


def log_tails(directory: Path) -> str:
    return '\n'.join(log.read_text()[-3000:] for log in directory.glob('*.log'))


async def test_both_ways_repair_the_child_and_are_measured(control_plane: ControlPlane, tmp_path: Path) -> None:
    options = reconciliation.Options(repairs=1, idle=1.0, settle=1.0, logs=tmp_path)
    lines: list[str] = []
    results = await reconciliation.benchmark(control_plane, options, report=lines.append)
    kopf, ours = results
    assert kopf.framework == 'kopf 1.45.2' and ours.framework == 'ours'
    for result in results:
        assert set(result.repairs) == {'deletion', 'edit'}
        assert all(0 < seconds < 2 for times in result.repairs.values() for seconds in times)
        assert result.errors == 0, log_tails(tmp_path)
    assert [dict(counts) for counts in ours.requests['deletion']] == [{'APPLY configmaps': 1}]
    assert [dict(counts) for counts in ours.requests['edit']] == [{'APPLY configmaps': 1}]
    assert all(sum(counts.values()) > 1 for counts in kopf.requests['deletion'])
    assert ours.lines < kopf.lines
    assert 'lines of code' in reconciliation.summarize(results)
