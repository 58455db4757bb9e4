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


async def test_the_plain_patch_loop_patches_as_a_field_manager_of_its_own(control_plane: ControlPlane) -> None:
    # An operator patches objects that someone else created; so does the yardstick it is measured against.
    options = sidebyside.Options(raw_objects=3, raw_concurrency=2, raw_seconds=0.3)
    sidebyside._apply_crd(control_plane)
    api = sidebyside.Api(control_plane.server, control_plane.ssl_context())
    try:
        await api.ensure_namespace('raw-managers')
        names = ['raw-0', 'raw-1', 'raw-2']
        await api.create_objects('raw-managers', names, concurrency=3)
        loop = await sidebyside._patch_loop(api, 'raw-managers', names, options)
        path = f'/apis/{sidebyside.GROUP}/{sidebyside.VERSION}/namespaces/raw-managers/{sidebyside.PLURAL}/raw-0'
        body = await api.request('GET', path)
    finally:
        await api.close()
    assert loop.rate > 0
    managers = {entry['manager'] for entry in body['metadata']['managedFields']}
    assert sidebyside.RAW_FIELD_MANAGER in managers and len(managers) == 2
    assert body['metadata']['annotations']['bench.kopf.dev/raw']
