"""Whether an operator has handled an object: as the framework's own storages tell it."""
import pytest

import kopf
from kopf.testing import Simulation, is_handled

BODY = {'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
        'metadata': {'name': 'ex1', 'namespace': 'ns1'}, 'spec': {'field': 'x'}}


@pytest.fixture()
def simulation():
    registry = kopf.OperatorRegistry()

    @kopf.on.create('kopfexamples', registry=registry, id='create_fn')
    def create_fn(retry, **_):
        if not retry:
            raise kopf.TemporaryError("again", delay=1)

    return Simulation(BODY, registry=registry)


def test_an_object_never_handled_is_not(simulation):
    assert not is_handled(simulation.raw)
    assert not is_handled(None)


def test_an_object_with_progress_left_is_not_handled_yet(simulation):
    simulation.cycle()
    assert not is_handled(simulation.raw)


def test_an_object_whose_cause_is_concluded_is_handled(simulation):
    simulation.run()
    assert is_handled(simulation.raw)


def test_a_change_after_the_handling_is_not_handled_yet(simulation):
    simulation.run()
    simulation.change({'spec': {'field': 'y'}})
    assert not is_handled(simulation.raw)
    simulation.change({'spec': {'field': 'x'}})  # back as handled: nothing to do
    assert is_handled(simulation.raw)


def test_storages_of_the_operator_are_asked(simulation):
    settings = kopf.OperatorSettings()
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix='my.example.com')
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix='my.example.com')
    handled = Simulation(BODY, registry=simulation.registry, settings=settings)
    handled.run()
    assert is_handled(handled.raw, settings=settings)
    assert not is_handled(handled.raw)  # the default storages see no diff-base of theirs


async def test_async_tests_can_ask_too(simulation):
    await simulation.arun()
    assert is_handled(simulation.raw)
