"""The admission decorators: @kopf.on.validate and @kopf.on.mutate."""
import pytest

import kopf
from kopf._handlers.registries import OperatorRegistry
from kopf._structs.resources import Selector
from kopf._structs.reviews import WebhookType
from kopf.config import OperatorConfig
from kopf.errors import DuplicateHandlerError


@pytest.fixture()
def registry():
    return OperatorRegistry()


def fn(**_):
    pass


@pytest.mark.parametrize('decorator, type', [
    (kopf.on.validate, WebhookType.VALIDATING),
    (kopf.on.mutate, WebhookType.MUTATING),
])
def test_admission_handlers_keep_their_options(registry, decorator, type):
    def when(**_):
        return True

    result = decorator('kopfexamples', id='my-id', param='p', operations=['UPDATE', 'CREATE'], subresource='status',
                       persistent=True, side_effects=True, ignore_failures=True, labels={'a': 'b'},
                       annotations={'c': kopf.PRESENT}, when=when, registry=registry)(fn)
    assert result is fn
    assert registry.admission_selectors == (Selector(name='kopfexamples'),)
    handler, = registry.get_admission_handlers(Selector(name='kopfexamples'))
    assert handler.fn is fn
    assert handler.id == 'my-id'
    assert handler.type == type
    assert handler.param == 'p'
    assert handler.operations == frozenset({'CREATE', 'UPDATE'})
    assert handler.subresource == 'status'
    assert (handler.persistent, handler.side_effects, handler.ignore_failures) == (True, True, True)
    assert (handler.labels, handler.annotations, handler.when) == ({'a': 'b'}, {'c': kopf.PRESENT}, when)


def test_defaults_are_all_operations_of_the_main_resource_strictly(registry):
    kopf.on.validate('pods', registry=registry)(fn)
    handler, = registry.get_admission_handlers(Selector(name='pods'))
    assert handler.id == 'fn'
    assert handler.operations is None
    assert handler.subresource is None
    assert (handler.persistent, handler.side_effects, handler.ignore_failures) == (False, False, False)


def test_one_operation_and_the_star(registry):
    kopf.on.validate('pods', id='a', operation='DELETE', registry=registry)(fn)
    kopf.on.validate('pods', id='b', operation='*', registry=registry)(fn)  # type: ignore[arg-type]
    a, b = registry.get_admission_handlers(Selector(name='pods'))
    assert a.operations == frozenset({'DELETE'})
    assert b.operations is None


@pytest.mark.parametrize('kwargs, message', [
    ({'operation': 'PATCH'}, "Unknown admission operation"),
    ({'operations': ['CREATE', 'create']}, "Unknown admission operation"),
    ({'operations': 'CREATE'}, "a collection"),
    ({'operation': 'CREATE', 'operations': ['UPDATE']}, "either operation= or operations="),
    ({'subresource': ''}, "subresource="),
    ({'subresource': 'status/x'}, "subresource="),
])
def test_bad_options_are_refused_at_declaration(registry, kwargs, message):
    with pytest.raises(ValueError, match=message):
        kopf.on.validate('pods', registry=registry, **kwargs)(fn)


def test_admission_handlers_are_neither_watched_nor_changing(registry):
    kopf.on.mutate('pods', registry=registry)(fn)
    assert registry.selectors == ()
    assert not registry.has_changing_handlers(Selector(name='pods'))
    assert registry.has_admission_handlers()


def test_the_handlers_of_one_type_can_be_asked_for(registry):
    kopf.on.validate('pods', id='v', registry=registry)(fn)
    kopf.on.mutate('pods', id='m', registry=registry)(fn)
    assert [h.id for h in registry.get_admission_handlers(Selector(name='pods'), WebhookType.MUTATING)] == ['m']
    assert [h.id for h in registry.get_admission_handlers(Selector(name='pods'))] == ['v', 'm']


def test_one_function_may_serve_several_resources_under_one_id(registry):
    kopf.on.validate('pods', registry=registry)(kopf.on.validate('configmaps', registry=registry)(fn))
    assert [h.id for _, h in registry.iter_admission_handlers()] == ['fn', 'fn']


def test_different_functions_under_one_id_are_refused(registry):
    def other(**_):
        pass

    kopf.on.validate('pods', id='check', registry=registry)(fn)
    with pytest.raises(DuplicateHandlerError, match="'check'"):
        kopf.on.validate('configmaps', id='check', registry=registry)(other)


def test_one_function_as_validating_and_mutating_needs_distinct_ids(registry):
    kopf.on.validate('pods', registry=registry)(fn)
    with pytest.raises(DuplicateHandlerError, match="unique id="):
        kopf.on.mutate('pods', registry=registry)(fn)
    kopf.on.mutate('pods', id='fn-mutation', registry=registry)(fn)


def test_admission_settings_default_to_nothing():
    config = OperatorConfig()
    assert config.admission.server is None
    assert config.admission.managed is None
    config.admission.server = kopf.WebhookServer(port=1234)
    config.admission.managed = 'auto.kopf.dev'
    assert config.admission.server.port == 1234


def test_admission_errors_carry_a_message_and_a_code():
    error = kopf.AdmissionError("Nope.", code=403)
    assert (str(error), error.code) == ("Nope.", 403)
    assert kopf.AdmissionError("x").code == 500
    assert isinstance(error, kopf.PermanentError)
