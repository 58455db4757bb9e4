"""
The replicas as the operator runs them: the Lease loop in a thread of its own, its start, its graceful end.

The Lease thread sleeps on the fake clock too: the tests move the clock and
wait (in the operator's thread) for the renewals the thread writes.
"""
import asyncio

import pytest

from kopf._kube import access
from kopf._replicas import peering
from kopf._replicas.elector import Elector
from kopf._replicas.fencing import Gate
from kopf._replicas.peering import PeeringError
from kopf._structs.credentials import ConnectionInfo
from kopf.config import PeeringConfig
from tests.unit.replicas.conftest import LEASE, RENEW, RETRY, Context, holder, settings, settle


class PeeringContext(Context):
    info = ConnectionInfo(server='https://example.invalid', default_namespace='ns')


async def changed(gate, condition):
    """Wait until the condition holds, looking again whenever the gate changes (from whichever thread)."""
    async def wait():
        while True:
            revision = gate.revision
            if condition():
                return
            await gate.revised(revision)
    await asyncio.wait_for(wait(), timeout=5)


def renew(clock, store, peers, times):
    """Move the clock by retry periods, each time until the Lease thread has renewed (this thread blocks)."""
    for _ in range(times):
        asyncio.run_coroutine_threadsafe(settle(), peers._loop).result(timeout=5)  # it sleeps on the clock now
        writes = store.writes
        clock.advance(RETRY)
        store.wait_for_writes(writes + 1)


def start(clock, stop=None):
    gate = Gate(clock=clock)
    replica = Elector(context=Context('a'), gate=gate, settings=settings('ha', 'a'), clock=clock)
    return gate, peering.Peering(gate=gate, replica=replica, stop=stop or asyncio.Event())


async def test_stepping_down_finishes_the_cycles_first_and_then_releases_the_lease(store, clock):
    stop = asyncio.Event()
    gate, peers = start(clock, stop)
    await changed(gate, lambda: gate.active)

    async def running_cycle():
        async with gate.handling('k') as admitted:
            assert admitted
            await clock.sleep(3 * RETRY)
            assert holder(store) == 'a'  # still ours while the cycle runs

    cycle = asyncio.create_task(running_cycle())
    await settle()
    stepping_down = asyncio.create_task(peers.step_down(timeout=LEASE))
    await settle()
    assert not gate.admits('other') and not stepping_down.done()
    renew(clock, store, peers, 3)  # the cycle ends meanwhile, at the last of these moments
    await asyncio.wait_for(stepping_down, timeout=5)
    await cycle
    assert holder(store) is None
    assert not gate.admits('k')
    assert stop.is_set()  # the coordination is over: the operator stops too (it is stopping anyway)


async def test_stepping_down_gives_up_waiting_for_the_cycles_after_the_timeout(store, clock, caplog):
    gate, peers = start(clock)
    await changed(gate, lambda: gate.active)

    async def endless_cycle():
        async with gate.handling('k'):
            await asyncio.Event().wait()

    cycle = asyncio.create_task(endless_cycle())
    await settle()
    stepping_down = asyncio.create_task(peers.step_down(timeout=2 * RETRY))
    await settle()
    renew(clock, store, peers, 2)
    await asyncio.wait_for(stepping_down, timeout=5)
    assert "1 handling cycle(s) did not finish within 4.0s of stopping; they are cancelled." in caplog.text
    assert holder(store) is None
    await asyncio.gather(cycle, return_exceptions=True)
    assert cycle.cancelled()  # by the hard fence of the release


async def test_renewals_continue_while_the_handling_keeps_the_event_loop_busy(store, clock):
    gate, peers = start(clock)
    try:
        await changed(gate, lambda: gate.active)
        version = store.leases['ns', 'op'].resource_version
        # The operator's loop is stuck meanwhile, as behind CPU-bound handlers: the thread renews regardless.
        renew(clock, store, peers, 2 * RENEW // RETRY)
        assert store.leases['ns', 'op'].resource_version != version  # renewed meanwhile, in its own thread
        assert gate.active and gate.admits('k')
        gate.check_write()  # no fence has struck
    finally:
        await peers.release()


async def test_rbac_is_checked_at_start_naming_every_missing_verb(monkeypatch):
    async def denied_verbs(**kwargs):
        assert kwargs['verbs'] == ('list', 'create', 'update', 'delete')
        return ['update', 'delete']

    monkeypatch.setattr(access, 'denied_verbs', denied_verbs)
    config = PeeringConfig(mode='shards', name='op', identity='me')
    with pytest.raises(PeeringError, match=r"forbids to update, delete leases\.coordination\.k8s\.io .* 'ns'"):
        async with peering.peering(context=PeeringContext('x'), config=config, namespaces=['ns'],  # type: ignore
                                   clusterwide=False, stop=asyncio.Event()):
            pass


async def test_standalone_operators_do_not_coordinate():
    async with peering.peering(context=PeeringContext('x'), config=PeeringConfig(), namespaces=[],  # type: ignore
                               clusterwide=True, stop=asyncio.Event()) as peers:
        assert peers is None


async def test_a_failed_coordination_stops_the_operator_and_is_raised(monkeypatch, store, clock):
    async def denied_verbs(**kwargs):
        return []

    monkeypatch.setattr(access, 'denied_verbs', denied_verbs)
    store.forbidden.add('get')
    stop = asyncio.Event()
    config = PeeringConfig(mode='ha', name='op', identity='me', lease_duration=LEASE, renew_deadline=RENEW,
                           retry_period=RETRY)
    with pytest.raises(PeeringError, match='forbids to get'):
        async with peering.peering(context=PeeringContext('x'), config=config, namespaces=['ns'],  # type: ignore
                                   clusterwide=False, stop=stop, clock=clock) as peers:
            assert peers is not None
            await asyncio.wait_for(stop.wait(), timeout=5)  # at its first look at the lease


async def test_the_running_coordination_is_attached_to_the_view(monkeypatch, store, clock):
    async def denied_verbs(**kwargs):
        return []

    monkeypatch.setattr(access, 'denied_verbs', denied_verbs)
    view = peering.ReplicaView()
    config = PeeringConfig(mode='ha', name='op', identity='me', lease_duration=LEASE, renew_deadline=RENEW,
                           retry_period=RETRY)
    async with peering.peering(context=PeeringContext('x'), config=config, namespaces=['ns'],  # type: ignore
                               clusterwide=False, stop=asyncio.Event(), view=view, clock=clock) as peers:
        assert peers is not None and view.identity == 'me'
        await changed(peers.gate, lambda: view.steward('admission:x'))
    assert not view.steward('admission:x')


async def test_replicas_need_credentials_not_a_session_of_the_login_handlers():
    context = PeeringContext('x')
    context.custom_session = True  # type: ignore[attr-defined]
    config = PeeringConfig(mode='ha', name='op', identity='me')
    with pytest.raises(PeeringError, match=r"kopf\.AiohttpSession.* Return kopf\.ConnectionInfo"):
        async with peering.peering(context=context, config=config, namespaces=['ns'],  # type: ignore
                                   clusterwide=False, stop=asyncio.Event()):
            pass
