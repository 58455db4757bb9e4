"""Declaring reconcile handlers: their relations and timing, checked where they are declared; the registry."""
import pytest

import kopf
from kopf._handlers.registries import OperatorRegistry, Relation
from kopf._structs.resources import Resource, Selector
from kopf.errors import DuplicateHandlerError

KEX = Resource('kopf.dev', 'v1', 'kopfexamples', 'KopfExample')
CONFIGMAPS = Resource('', 'v1', 'configmaps', 'ConfigMap')
DEPLOYMENTS = Resource('apps', 'v1', 'deployments', 'Deployment')


def mapper(**_):
    return None


def test_a_reconcile_handler_keeps_its_relations_as_named_and_its_timing():
    registry = OperatorRegistry()

    @kopf.on.reconcile('kopfexamples', registry=registry, owns=['configmaps', ('apps', 'v1', 'deployments')],
                       watches={'secrets.v1': mapper}, resync=60, coalesce=0.5, backoff=2, max_backoff=30,
                       errors=kopf.ErrorsMode.PERMANENT, param='p')
    def fn(**_):
        pass

    handler, = registry.get_reconciling_handlers(KEX)
    assert handler.id == 'test_a_reconcile_handler_keeps_its_relations_as_named_and_its_timing.<locals>.fn'
    assert handler.relations == (
        Relation('configmaps', Selector(name='configmaps')),
        Relation(('apps', 'v1', 'deployments'), Selector(group='apps', version='v1', name='deployments')),
        Relation('secrets.v1', Selector(name='secrets', version='v1', group=''), mapper=mapper),
    )
    assert [r.name for r in handler.owns] == ['configmaps', ('apps', 'v1', 'deployments')]
    assert [r.mapper for r in handler.watches] == [mapper]
    assert (handler.resync, handler.coalesce, handler.backoff, handler.max_backoff) == (60, 0.5, 2, 30)
    assert handler.errors == kopf.ErrorsMode.PERMANENT and handler.param == 'p'
    assert str(handler) == f"Reconciler {handler.id!r}"


def test_the_related_resources_are_watched_but_handled_by_nobody():
    registry = OperatorRegistry()
    kopf.on.reconcile('kopfexamples', registry=registry, owns=['configmaps'])(lambda **_: None)
    kopf.on.event('pods', registry=registry)(lambda **_: None)
    assert registry.selectors == (Selector(name='pods'), Selector(name='kopfexamples'), Selector(name='configmaps'))
    assert registry.related_selectors == (Selector(name='configmaps'),)
    assert registry.is_related_only(CONFIGMAPS)
    assert not registry.is_related_only(KEX)
    assert registry.has_reconciling_handlers(KEX) and not registry.has_reconciling_handlers(CONFIGMAPS)


def test_a_related_resource_with_handlers_of_its_own_is_handled():
    registry = OperatorRegistry()
    kopf.on.reconcile('kopfexamples', registry=registry, owns=['configmaps'])(lambda **_: None)
    kopf.on.create('configmaps', registry=registry)(lambda **_: None)
    assert not registry.is_related_only(CONFIGMAPS)


def test_two_reconcile_handlers_of_one_resource_need_distinct_ids():
    registry = OperatorRegistry()
    kopf.on.reconcile('kopfexamples', id='same', registry=registry)(lambda **_: None)
    kopf.on.reconcile('configmaps', id='same', registry=registry)(lambda **_: None)  # another resource: fine
    with pytest.raises(DuplicateHandlerError, match="Two reconcile handlers for kopfexamples share the id 'same'"):
        kopf.on.reconcile('kopfexamples', id='same', registry=registry)(lambda **_: None)


def test_a_reconcile_handler_and_a_handler_of_changes_may_share_a_function():
    registry = OperatorRegistry()

    @kopf.on.create('kopfexamples', registry=registry)
    @kopf.on.reconcile('kopfexamples', registry=registry)
    def fn(**_):
        pass

    assert registry.get_reconciling_handlers(KEX)[0].id == registry.get_all_changing_handlers(KEX)[0].id


@pytest.mark.parametrize('options, message', [
    (dict(owns='configmaps'), r"owns= is a list of resources such as \['configmaps'\], got a string"),
    (dict(owns=[kopf.EVERYTHING]), r"owns= names one resource per entry; .* selects many"),
    (dict(owns=[42]), r"owns= names resources as the decorators do .* 42 is none"),
    (dict(owns=[['apps', 'v1', 'deployments']]), r"owns= names resources as the decorators do"),
    (dict(watches=['secrets']), r"watches= maps resources to mappers"),
    (dict(watches={'secrets': 'mapper'}), r"watches= maps resources to mappers .* got 'mapper' for 'secrets'"),
    (dict(watches={'secrets': mapper, ('a', 'b', 'c', 'd'): mapper}), r"watches= names resources"),
    (dict(owns=['configmaps'], watches={'configmaps': mapper}), r"named more than once in owns= and watches="),
    (dict(backoff=10, max_backoff=5), r"max_backoff= \(5\) is the cap of the back-off and may not be less"),
    (dict(resync=0), r"resync= must be a positive number of seconds, got 0"),
    (dict(resync='1m'), r"resync= must be a positive number of seconds, got '1m'"),
    (dict(coalesce=-1), r"coalesce= must be a number of seconds >= 0, got -1"),
    (dict(max_backoff=0), r"max_backoff= must be a positive number of seconds"),
    (dict(backoff=-1), r"backoff= must not be negative"),
])
def test_wrong_options_fail_where_they_are_declared(options, message):
    with pytest.raises((ValueError, TypeError), match=message):
        kopf.on.reconcile('kopfexamples', registry=OperatorRegistry(), **options)


def test_a_reconcile_handler_needs_kwargs():
    with pytest.raises(kopf._handlers.registries.HandlerSignatureError, match=r"add \*\*kwargs"):
        kopf.on.reconcile('kopfexamples', registry=OperatorRegistry())(lambda body: None)
