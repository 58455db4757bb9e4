"""
Kopf's resource selectors (its "Resource specification" page): which served resources a decorator selects.

The positional name forms (plural, singular, kind, short name, any case) are
proven end to end elsewhere; here are the keyword, category, callable and
catch-all forms, and the deduplication of overlapping selectors. Each is
checked against served resources as discovery describes them.
"""
import pytest

import kopf
from kopf._handlers.reasons import Reason
from kopf._handlers.registries import OperatorRegistry
from tests.unit.conftest import make_handler

KEX = kopf.Resource(group='kopf.dev', version='v1', plural='kopfexamples', kind='KopfExample',
                    singular='kopfexample', shortcuts=frozenset({'kex'}), categories=frozenset({'all'}))
KEX_V2 = kopf.Resource(group='kopf.dev', version='v2', plural='kopfexamples', kind='KopfExample',
                       singular='kopfexample', shortcuts=frozenset({'kex'}), preferred=False)
OTHER = kopf.Resource(group='kopf.dev', version='v1', plural='kopfpeerings', kind='KopfPeering',
                      singular='kopfpeering')
PODS = kopf.Resource(group='', version='v1', plural='pods', kind='Pod', singular='pod',
                     shortcuts=frozenset({'po'}), categories=frozenset({'all'}))
SECRETS = kopf.Resource(group='', version='v1', plural='secrets', kind='Secret', singular='secret')
EVENTS = kopf.Resource(group='', version='v1', plural='events', kind='Event', singular='event',
                       shortcuts=frozenset({'ev'}))


def fn(**_):
    pass


def selected(registry, *resources):
    """Which of these served resources the registered creation handlers serve."""
    return [resource for resource in resources if registry.get_changing_handlers(resource, Reason.CREATE)]


@pytest.mark.parametrize('options', [
    {'kind': 'KopfExample'},
    {'plural': 'kopfexamples'},
    {'singular': 'kopfexample'},
    {'shortcut': 'kex'},
    {'group': 'kopf.dev', 'plural': 'kopfexamples'},
    {'group': 'kopf.dev', 'version': 'v1', 'plural': 'kopfexamples'},
])
def test_keyword_resource_selectors_as_in_kopf(options):
    registry = OperatorRegistry()

    kopf.on.create(**options, registry=registry)(fn)

    assert selected(registry, KEX, OTHER, PODS) == [KEX]


def test_a_category_selects_the_resources_in_it_as_in_kopf():
    registry = OperatorRegistry()

    kopf.on.create(category='all', registry=registry)(fn)

    assert selected(registry, KEX, OTHER, PODS, SECRETS) == [KEX, PODS]


def test_a_callable_selects_the_resources_for_which_it_is_true_as_in_kopf():
    registry = OperatorRegistry()

    kopf.on.create(lambda resource: resource.plural == 'kopfexamples', registry=registry)(fn)

    # Not only the preferred versions: a callable decides about every served one.
    assert selected(registry, KEX, KEX_V2, OTHER, PODS) == [KEX, KEX_V2]


def test_a_callable_combines_with_keyword_selectors_as_in_kopf():
    registry = OperatorRegistry()

    kopf.on.create(lambda resource: resource.plural.startswith('kopf'), group='kopf.dev', version='v1',
                   registry=registry)(fn)

    assert selected(registry, KEX, KEX_V2, OTHER, PODS) == [KEX, OTHER]


def test_core_events_are_never_selected_by_a_callable_as_in_kopf():
    registry = OperatorRegistry()

    kopf.on.create(lambda resource: resource.group == '', registry=registry)(fn)

    assert selected(registry, PODS, SECRETS, EVENTS) == [PODS, SECRETS]


@pytest.mark.parametrize('args', [
    ('kopf.dev', 'v1', kopf.EVERYTHING),
    ('kopf.dev/v1', kopf.EVERYTHING),
    ('kopf.dev', kopf.EVERYTHING),
])
def test_everything_in_one_group_as_in_kopf(args):
    registry = OperatorRegistry()

    kopf.on.create(*args, registry=registry)(fn)

    assert selected(registry, KEX, OTHER, PODS, SECRETS) == [KEX, OTHER]


def test_everything_selects_every_resource_but_core_events_as_in_kopf():
    registry = OperatorRegistry()

    kopf.on.create(kopf.EVERYTHING, registry=registry)(fn)

    assert selected(registry, KEX, PODS, SECRETS, EVENTS) == [KEX, PODS, SECRETS]


async def test_one_function_under_overlapping_selectors_is_called_once_as_in_kopf(server, registry):
    calls = []
    handler = make_handler(calls, 'handler')
    for decorator in [kopf.on.create, kopf.on.event]:
        decorator('kopf.dev', 'v1', 'kopfexamples', registry=registry)(handler)
        decorator('kopfexamples.kopf.dev', registry=registry)(handler)  # an accidental overlap

    await server.run()

    reasons = [kwargs.get('reason') for _, kwargs in calls]  # the event handler first, then the cause
    assert len(reasons) == 2 and set(reasons) == {'create', None}


@pytest.mark.parametrize('args', [('v1', 'pods'), ('', 'v1', 'pods')])
def test_v1_is_the_core_api_as_in_kopf(args):
    registry = OperatorRegistry()

    kopf.on.create(*args, registry=registry)(fn)

    assert selected(registry, KEX, PODS, SECRETS) == [PODS]
