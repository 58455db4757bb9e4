"""
Stopping, as a specification: daemons that do not exit when asked are cancelled, reported, abandoned -- by the clock.
"""
import asyncio
import logging
import threading

import pytest

import kopf
from kopf._daemons.escalation import ABANDON_MARGIN
from tests.unit.conftest import FINALIZER, RESOURCE
from tests.unit.daemons.conftest import eventually


async def test_an_async_daemon_that_ignores_its_stop_flag_is_cancelled_then_abandoned_with_one_warning(
        cluster, registry, clock, caplog):
    log = []

    @kopf.daemon(*RESOURCE, registry=registry, id='stubborn', cancellation_timeout=0.3)
    async def stubborn(stopped, **_):
        try:
            log.append('started')
            await asyncio.Event().wait()  # never on its own
        except asyncio.CancelledError:
            log.append('cancelled')
            log.append(stopped.reason)
            await asyncio.Event().wait()  # ignores the cancellation too

    await cluster.event('ADDED')
    await eventually(lambda: log == ['started'])
    with caplog.at_level(logging.DEBUG, logger='kopf.objects'):
        began = clock.monotonic()
        await cluster.delete()
        await cluster.settle_deletion()

    assert log == ['started', 'cancelled',
                   kopf.DaemonStoppingReason.RESOURCE_DELETED | kopf.DaemonStoppingReason.DAEMON_CANCELLED]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    message = warnings[0].getMessage()
    assert "Daemon 'stubborn'" in message and 'cancellation_timeout of 0.3s' in message
    assert "deletion proceeds" in message
    assert warnings[0].k8s_ref['name'] == 'ex1'
    assert clock.monotonic() - began == pytest.approx(0.3 + ABANDON_MARGIN)  # the cycle came back just after it


async def test_a_plain_daemon_that_ignores_its_stop_flag_is_abandoned_and_its_thread_runs_on(
        cluster, registry, clock, caplog):
    finish = threading.Event()
    threads = []

    @kopf.daemon(*RESOURCE, registry=registry, id='stubborn', cancellation_timeout=0.2)
    def stubborn(**_):
        threads.append(threading.current_thread())
        finish.wait(30)

    await cluster.event('ADDED')
    await eventually(lambda: threads)
    with caplog.at_level(logging.WARNING, logger='kopf.objects'):
        began = clock.monotonic()
        await cluster.delete()
        await cluster.settle_deletion()
        assert clock.monotonic() - began == pytest.approx(0.2 + ABANDON_MARGIN)  # not cancelled: just the timeout

    assert cluster.gone
    assert threads[0].is_alive()  # nothing can stop it; it is left to itself
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "Daemon 'stubborn'" in warnings[0]
    assert 'keeps running in the background until the function returns' in warnings[0]
    finish.set()
    threads[0].join(5)


async def test_without_a_cancellation_timeout_the_deletion_waits_and_the_daemon_is_reported(
        cluster, registry, config, clock, caplog):
    config.background.cancellation_polling = 0.2
    leave = threading.Event()
    started = threading.Event()

    @kopf.daemon(*RESOURCE, registry=registry, id='slow')
    def slow(**_):
        started.set()
        leave.wait(30)

    await cluster.event('ADDED')
    await eventually(started.is_set)
    with caplog.at_level(logging.WARNING, logger='kopf.objects'):
        result = await cluster.delete()
        assert not result.done
        assert result.delay == pytest.approx(0.2)  # the polling period at most
        await clock.run(0.5)
        result = await cluster.event()
        assert not result.done and FINALIZER in cluster.raw['metadata']['finalizers']

    reports = [r.getMessage() for r in caplog.records if 'is still running' in r.getMessage()]
    assert len(reports) == 2  # at 0.2 and 0.4 after the stop was asked
    assert reports and all("Daemon 'slow'" in report for report in reports)
    assert '(resource_deleted)' in reports[0]
    leave.set()
    await eventually(lambda: cluster.keeper.running == 0, what="the thread's exit")
    await cluster.settle_deletion()


async def test_the_cancellation_backoff_gives_the_daemon_time_before_it_is_cancelled(cluster, registry, clock):
    log = []

    @kopf.daemon(*RESOURCE, registry=registry, cancellation_backoff=0.3, cancellation_timeout=2)
    async def polite(stopped, **_):
        log.append('polite started')
        await stopped.wait()
        try:
            await clock.sleep(0.1)  # finishes its work within the back-off
            log.append('finished')
        except asyncio.CancelledError:
            log.append('cancelled')
            raise

    @kopf.daemon(*RESOURCE, registry=registry, cancellation_backoff=0.1, cancellation_timeout=2)
    async def lazy(stopped, **_):
        try:
            log.append('lazy started')
            await asyncio.Event().wait()  # never on its own
        except asyncio.CancelledError:
            log.append('lazy cancelled')
            raise

    await cluster.event('ADDED')
    await eventually(lambda: len(log) == 2)
    log.clear()
    began = clock.monotonic()
    await cluster.delete()
    await cluster.settle_deletion()
    assert sorted(log) == ['finished', 'lazy cancelled']
    assert clock.monotonic() - began == pytest.approx(1.0)  # one look again of the cycle: both were gone by then
