import dataclasses

import pytest

import kopf.on
from kopf._handlers import registries
from kopf._handlers.filters import PRESENT
from kopf._handlers.reasons import Reason
from kopf._handlers.registries import (
    Activity,
    ChangingHandler,
    OperatorRegistry,
    SubRegistry,
    get_default_registry,
    set_default_registry,
)
from kopf._structs.bodies import Body
from kopf._structs.ids import HandlerId
from kopf._structs.resources import Resource, Selector
from kopf.errors import DuplicateHandlerError, HandlerSignatureError

RESOURCE = ('kopf.dev', 'v1', 'kopfexamples')
SELECTOR = Selector.from_args(*RESOURCE)


@pytest.fixture()
def registry():
    return OperatorRegistry()


def fn1(**_):
    pass


def fn2(**_):
    pass


def body(labels=None):
    return Body({'metadata': {'name': 'n', 'labels': labels or {}}, 'spec': {'x': 1}})


# Ids.

def test_default_id_is_the_qualified_name(registry):
    kopf.on.create(*RESOURCE, registry=registry)(fn1)

    def local(**_):
        pass
    kopf.on.update(*RESOURCE, registry=registry)(local)

    assert [h.id for h in registry.get_changing_handlers(SELECTOR, Reason.CREATE)] == ['fn1']
    assert [h.id for h in registry.get_changing_handlers(SELECTOR, Reason.UPDATE)] == [local.__qualname__]


def test_field_handler_ids_are_suffixed_with_the_field(registry):
    kopf.on.field(*RESOURCE, field='spec.size', registry=registry)(fn1)
    kopf.on.field(*RESOURCE, field=['spec', 'replicas'], id='custom', registry=registry)(fn1)

    ids = [h.id for h in registry.get_field_handlers(SELECTOR)]

    assert ids == ['fn1/spec.size', 'custom/spec.replicas']


# Duplicates.

def test_duplicate_ids_for_the_same_cause_are_rejected_clearly(registry):
    kopf.on.create(*RESOURCE, registry=registry)(fn1)

    with pytest.raises(DuplicateHandlerError, match=r"'fn1'.*id="):
        kopf.on.create(*RESOURCE, id='fn1', registry=registry)(fn2)


def test_the_same_function_for_several_causes_is_fine(registry):
    for decorator in [kopf.on.create, kopf.on.update, kopf.on.delete, kopf.on.resume]:
        decorator(*RESOURCE, registry=registry)(fn1)

    assert len(registry.get_all_changing_handlers(SELECTOR)) == 4


def test_update_and_resume_handlers_may_share_an_id_only_as_one_function(registry):
    kopf.on.update(*RESOURCE, id='h', registry=registry)(fn1)
    kopf.on.resume(*RESOURCE, id='h', registry=registry)(fn1)

    with pytest.raises(DuplicateHandlerError):
        kopf.on.resume(*RESOURCE, id='h', registry=registry)(fn2)


def test_field_handlers_must_not_clash_with_create_or_update_handlers(registry):
    kopf.on.field(*RESOURCE, field='spec.x', id='h', registry=registry)(fn1)

    with pytest.raises(DuplicateHandlerError):
        kopf.on.update(*RESOURCE, id='h/spec.x', registry=registry)(fn2)
    kopf.on.delete(*RESOURCE, id='h/spec.x', registry=registry)(fn2)  # never in the same cycle


def test_the_same_id_for_other_resources_is_fine(registry):
    kopf.on.create(*RESOURCE, registry=registry)(fn1)
    kopf.on.create('pods', registry=registry)(fn1)

    assert registry.selectors == (SELECTOR, Selector(name='pods'))


def test_duplicate_event_and_activity_handlers_are_rejected(registry):
    kopf.on.event(*RESOURCE, registry=registry)(fn1)
    kopf.on.startup(registry=registry)(fn1)
    kopf.on.cleanup(registry=registry)(fn1)  # another activity

    with pytest.raises(DuplicateHandlerError):
        kopf.on.event(*RESOURCE, id='fn1', registry=registry)(fn2)
    with pytest.raises(DuplicateHandlerError):
        kopf.on.startup(id='fn1', registry=registry)(fn2)


def test_subregistry_rejects_duplicates():
    sub = SubRegistry()
    sub.register(ChangingHandler(fn=fn1, id=HandlerId('p/a')))

    with pytest.raises(DuplicateHandlerError, match='p/a'):
        sub.register(ChangingHandler(fn=fn2, id=HandlerId('p/a')))
    assert [h.fn for h in sub] == [fn1]


# Lookups.

def test_handlers_are_found_by_selector_or_by_resolved_resource(registry):
    kopf.on.create(*RESOURCE, registry=registry)(fn1)
    kopf.on.create('KopfExample', registry=registry)(fn2)
    resolved = Resource(group='kopf.dev', version='v1', plural='kopfexamples', kind='KopfExample')
    other = Resource(group='other.dev', version='v1', plural='others', kind='Other')

    assert [h.fn for h in registry.get_changing_handlers(SELECTOR, Reason.CREATE)] == [fn1]
    assert [h.fn for h in registry.get_changing_handlers(resolved, Reason.CREATE)] == [fn1, fn2]
    assert registry.get_changing_handlers(other, Reason.CREATE) == []
    assert not registry.has_changing_handlers(other)


def test_event_handlers_are_separate_from_changing_handlers(registry):
    kopf.on.event(*RESOURCE, registry=registry)(fn1)

    assert [h.fn for h in registry.get_watching_handlers(SELECTOR)] == [fn1]
    assert not registry.has_changing_handlers(SELECTOR)
    assert registry.selectors == (SELECTOR,)


def test_activity_handlers_by_activity(registry):
    kopf.on.startup(registry=registry)(fn1)
    kopf.on.login(registry=registry)(fn2)

    assert [h.fn for h in registry.get_activity_handlers(Activity.STARTUP)] == [fn1]
    assert [h.fn for h in registry.get_activity_handlers(Activity.LOGIN)] == [fn2]
    assert registry.get_activity_handlers(Activity.CLEANUP) == []


def test_extra_fields_are_the_watched_fields_outside_of_the_essence(registry):
    kopf.on.field(*RESOURCE, field='spec.a', registry=registry)(fn1)
    kopf.on.field(*RESOURCE, field='metadata.labels.x', registry=registry)(fn1)
    kopf.on.field(*RESOURCE, field='status.phase', registry=registry)(fn1)
    kopf.on.field(*RESOURCE, field='status.phase', id='again', registry=registry)(fn2)

    assert registry.get_extra_fields(SELECTOR) == [('status', 'phase')]


def test_handlers_are_immutable(registry):
    kopf.on.create(*RESOURCE, registry=registry)(fn1)
    handler, = registry.get_changing_handlers(SELECTOR, Reason.CREATE)

    with pytest.raises(dataclasses.FrozenInstanceError):
        handler.retries = 5


# Filters and the finalizer.

def test_finalizer_is_required_by_matching_non_optional_delete_handlers(registry):
    assert not registry.requires_finalizer(SELECTOR, body())

    kopf.on.delete(*RESOURCE, optional=True, registry=registry)(fn1)
    assert not registry.requires_finalizer(SELECTOR, body())

    kopf.on.delete(*RESOURCE, labels={'app': PRESENT}, registry=registry)(fn2)
    assert not registry.requires_finalizer(SELECTOR, body())
    assert registry.requires_finalizer(SELECTOR, body({'app': 'x'}))


def test_finalizer_requirement_honours_when_filters(registry):
    kopf.on.delete(*RESOURCE, when=lambda spec, **_: spec['x'] > 1, registry=registry)(fn1)

    assert not registry.requires_finalizer(SELECTOR, body())
    assert registry.requires_finalizer(SELECTOR, body(), kwargs={'spec': {'x': 2}})


def test_matches_combines_all_filters():
    handler = ChangingHandler(fn=fn1, id=HandlerId('h'), labels={'app': 'x'}, annotations={'a': PRESENT},
                              when=lambda flag, **_: flag)
    good = Body({'metadata': {'labels': {'app': 'x'}, 'annotations': {'a': ''}}})

    assert registries.matches(handler, body=good, kwargs={'flag': True})
    assert not registries.matches(handler, body=good, kwargs={'flag': False})
    assert not registries.matches(handler, body=Body({'metadata': {'labels': {'app': 'x'}}}),
                                  kwargs={'flag': True})


# The default registry.

def test_decorators_use_the_default_registry(monkeypatch):
    fresh = OperatorRegistry()
    monkeypatch.setattr(registries, '_default_registry', fresh)

    kopf.on.create(*RESOURCE)(fn1)

    assert get_default_registry() is fresh
    assert [h.fn for h in fresh.get_changing_handlers(SELECTOR, Reason.CREATE)] == [fn1]


def test_default_registry_can_be_replaced(monkeypatch):
    monkeypatch.setattr(registries, '_default_registry', registries._default_registry)
    fresh = OperatorRegistry()

    set_default_registry(fresh)

    assert get_default_registry() is fresh


# Handlers are called with many keyword arguments: a function that cannot take them is refused at once.

@pytest.mark.parametrize('decorator', [
    kopf.on.create('pods'), kopf.on.event('pods'), kopf.daemon('pods'), kopf.timer('pods', interval=1),
    kopf.index('pods'), kopf.on.startup(), kopf.on.probe(), kopf.on.validate('pods'),
])
def test_a_handler_without_kwargs_is_refused_with_its_name(decorator):
    def named_only(spec, logger):
        pass

    with pytest.raises(HandlerSignatureError, match=r'named_only\(spec, logger\).*\*\*kwargs'):
        decorator(named_only)


def test_a_handler_with_positional_only_parameters_is_refused():
    def positional(body, /, **kwargs):
        pass

    with pytest.raises(TypeError, match=r'positional-only.*body'):
        kopf.on.create('pods', registry=OperatorRegistry())(positional)


@pytest.mark.parametrize('fn', [
    lambda **_: None,
    lambda spec, logger, **kwargs: None,
    lambda *args, **kwargs: None,
    lambda optional=None, /, **kwargs: None,
])
def test_handlers_that_take_kwargs_are_accepted(fn):
    kopf.on.create('pods', registry=OperatorRegistry())(fn)


def test_subhandlers_are_checked_too():
    from kopf._handlers import subhandling
    with pytest.raises(TypeError, match='kwargs'):
        subhandling.make_subhandler(lambda spec: None, context=subhandling.SubhandlingContext(
            parent_id=HandlerId('p'), run=None))
