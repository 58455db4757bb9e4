"""Readiness: after every initial listing; replicas once they know their place; never while stopping."""
from kopf._observability.readiness import Readiness


def test_ready_only_once_every_initial_listing_is_done():
    readiness = Readiness()
    assert readiness.problem() == "The operator is starting: it has not started watching yet."
    readiness.expect({('a', 'ns1'): "pods in 'ns1'", ('a', 'ns2'): "pods in 'ns2'"})
    assert readiness.problem() == "Waiting for the initial listing of pods in 'ns1', pods in 'ns2'."
    readiness.listed(('a', 'ns1'))
    assert readiness.problem() == "Waiting for the initial listing of pods in 'ns2'."
    readiness.listed(('a', 'ns2'))
    assert readiness.problem() is None
    readiness.listed(('b', None))  # a later stream, or a relisting: nothing changes
    assert readiness.problem() is None


def test_many_awaited_listings_are_named_briefly():
    readiness = Readiness()
    readiness.expect({index: f"r{index}" for index in range(5)})
    assert readiness.problem() == "Waiting for the initial listing of r0, r1, r2 (and 2 more)."


def test_a_standby_is_ready_without_listing_and_a_joining_replica_is_not():
    readiness = Readiness()
    readiness.expect({'a': "pods"})
    where = ['joining']
    readiness.coordinated(lambda: where[0])
    assert readiness.problem() == "The replica has not seen its Lease yet."
    where[0] = 'standing-by'
    assert readiness.problem() is None
    where[0] = 'handling'  # a new leader lists first
    assert readiness.problem() == "Waiting for the initial listing of pods."
    readiness.listed('a')
    assert readiness.problem() is None


def test_not_ready_while_stopping():
    readiness = Readiness()
    readiness.expect({})
    assert readiness.problem() is None
    readiness.stopping()
    assert readiness.problem() == "The operator is stopping."
