"""The probe handlers behind the liveness endpoint: once per run, by id, failures named."""
import asyncio

import pytest

import kopf
from kopf._handlers.registries import OperatorRegistry
from kopf._runtime import probes, probing
from kopf.config import OperatorConfig


async def test_probes_report_their_results_by_id():
    registry = OperatorRegistry()

    @kopf.on.probe(id='answer', registry=registry)
    def answer(**_):
        return 42

    @kopf.on.probe(id='checked', registry=registry)
    async def checked(memo, settings, **_):
        return memo.value

    results = await probes.run_probes(registry=registry, config=OperatorConfig(), memo=kopf.Memo(value='m'))
    assert results == {'answer': 42, 'checked': 'm'}


async def test_failing_probes_are_called_once_and_named_in_the_error():
    registry = OperatorRegistry()
    calls = []

    @kopf.on.probe(id='flaky', registry=registry)
    def flaky(**_):
        calls.append(1)
        raise kopf.TemporaryError("not yet", delay=60)

    @kopf.on.probe(id='broken', registry=registry)
    def broken(**_):
        raise ValueError("boom")

    with pytest.raises(probing.ProbeError) as e:
        await asyncio.wait_for(probes.run_probes(registry=registry, config=OperatorConfig(), memo=None), 5)
    assert calls == [1]
    assert 'flaky: HandlerRetriesError' in str(e.value)
    assert 'broken: ValueError: boom' in str(e.value)


async def test_probes_with_ignored_errors_do_not_fail_the_run():
    registry = OperatorRegistry()

    @kopf.on.probe(id='optional', errors=kopf.ErrorsMode.IGNORED, registry=registry)
    def optional(**_):
        raise ValueError("ignored")

    results = await probes.run_probes(registry=registry, config=OperatorConfig(), memo=None)
    assert results == {'optional': None}


async def test_without_an_endpoint_nothing_is_served():
    server = await probes.serve_liveness(None, health=probing.Health(), registry=OperatorRegistry(),
                                         config=OperatorConfig(), memo=None)
    assert server is None
