import dataclasses

import pytest

from kopf._structs.resources import EVERYTHING, Resource, Selector, build_query

SERVER = 'https://k8s.example.com:6443'

CORE_PODS = Resource(group='', version='v1', plural='pods', kind='Pod', namespaced=True)
KOPF_EXAMPLES = Resource(group='kopf.dev', version='v1', plural='kopfexamples', kind='KopfExample',
                         namespaced=True, subresources=frozenset({'status'}))
NAMESPACES = Resource(group='', version='v1', plural='namespaces', kind='Namespace', namespaced=False)
CRDS = Resource(group='apiextensions.k8s.io', version='v1', plural='customresourcedefinitions', namespaced=False)


# --- Resource ----------------------------------------------------------------------------------

def test_resource_is_frozen_and_hashable():
    with pytest.raises(dataclasses.FrozenInstanceError):
        CORE_PODS.plural = 'services'  # type: ignore[misc]
    assert {CORE_PODS, KOPF_EXAMPLES} == {KOPF_EXAMPLES, CORE_PODS}


def test_resource_defaults():
    resource = Resource('kopf.dev', 'v1', 'kopfexamples')
    assert resource.kind is None
    assert resource.namespaced is True
    assert resource.subresources == frozenset()


@pytest.mark.parametrize('resource, expected', [
    (CORE_PODS, 'v1'),
    (KOPF_EXAMPLES, 'kopf.dev/v1'),
    (CRDS, 'apiextensions.k8s.io/v1'),
])
def test_api_version(resource, expected):
    assert resource.api_version == expected


@pytest.mark.parametrize('resource, kwargs, expected', [
    (CORE_PODS, {}, '/api/v1/pods'),
    (CORE_PODS, {'namespace': 'ns1'}, '/api/v1/namespaces/ns1/pods'),
    (CORE_PODS, {'namespace': 'ns1', 'name': 'pod1'}, '/api/v1/namespaces/ns1/pods/pod1'),
    (CORE_PODS, {'namespace': 'ns1', 'name': 'pod1', 'subresource': 'status'},
     '/api/v1/namespaces/ns1/pods/pod1/status'),
    (KOPF_EXAMPLES, {}, '/apis/kopf.dev/v1/kopfexamples'),
    (KOPF_EXAMPLES, {'namespace': 'ns1', 'name': 'kex1'}, '/apis/kopf.dev/v1/namespaces/ns1/kopfexamples/kex1'),
    (KOPF_EXAMPLES, {'namespace': 'ns1', 'name': 'kex1', 'subresource': 'status'},
     '/apis/kopf.dev/v1/namespaces/ns1/kopfexamples/kex1/status'),
    (NAMESPACES, {'name': 'ns1'}, '/api/v1/namespaces/ns1'),
    (CRDS, {'name': 'kopfexamples.kopf.dev'},
     '/apis/apiextensions.k8s.io/v1/customresourcedefinitions/kopfexamples.kopf.dev'),
])
def test_url_building(resource, kwargs, expected):
    assert resource.get_url(server=SERVER, **kwargs) == SERVER + expected


def test_url_lists_namespaced_resources_cluster_wide_without_a_namespace():
    assert CORE_PODS.get_url(server=SERVER, namespace=None) == f'{SERVER}/api/v1/pods'


def test_url_ignores_the_namespace_of_cluster_scoped_resources():
    assert NAMESPACES.get_url(server=SERVER, namespace='ns1', name='x') == f'{SERVER}/api/v1/namespaces/x'


def test_url_tolerates_a_trailing_slash_of_the_server():
    assert CORE_PODS.get_url(server=SERVER + '/') == f'{SERVER}/api/v1/pods'


def test_url_keeps_a_server_path_prefix():
    assert CORE_PODS.get_url(server='https://proxy/k8s') == 'https://proxy/k8s/api/v1/pods'


def test_url_encodes_query_params():
    url = KOPF_EXAMPLES.get_url(server=SERVER, params={
        'watch': True, 'allowWatchBookmarks': False, 'resourceVersion': '123',
        'timeoutSeconds': 60, 'labelSelector': 'a=b,c in (d)', 'skipped': None,
    })
    assert url == (f'{SERVER}/apis/kopf.dev/v1/kopfexamples'
                   '?watch=true&allowWatchBookmarks=false&resourceVersion=123'
                   '&timeoutSeconds=60&labelSelector=a%3Db%2Cc+in+%28d%29')


def test_url_without_params_has_no_question_mark():
    assert '?' not in KOPF_EXAMPLES.get_url(server=SERVER, params={'x': None})


def test_url_quotes_path_segments():
    assert CORE_PODS.get_url(server=SERVER, namespace='a/b', name='c?d') == \
        f'{SERVER}/api/v1/namespaces/a%2Fb/pods/c%3Fd'


def test_url_subresource_needs_a_name():
    with pytest.raises(ValueError, match='name'):
        KOPF_EXAMPLES.get_url(server=SERVER, namespace='ns1', subresource='status')


def test_build_query_skips_nones_and_lowercases_booleans():
    assert build_query({'a': True, 'b': None, 'c': 1}) == 'a=true&c=1'


def test_resource_str_is_kubectl_style():
    assert str(KOPF_EXAMPLES) == 'kopfexamples.v1.kopf.dev'
    assert str(CORE_PODS) == 'pods.v1'


# --- Selector ----------------------------------------------------------------------------------
# The forms of Kopf's documentation (docs/resources.rst there): the name is the rightmost positional
# argument, and may be a plural, a singular, a kind or a short name; what is left of it is the API.

KEX_NAMES = Resource(group='kopf.dev', version='v1', plural='kopfexamples', kind='KopfExample',
                     singular='kopfexample', shortcuts=frozenset({'kex'}), categories=frozenset({'all', 'kopf'}))
CONFIGMAPS = Resource(group='', version='v1', plural='configmaps', kind='ConfigMap', singular='configmap',
                      shortcuts=frozenset({'cm'}))
CORE_EVENTS = Resource(group='', version='v1', plural='events', kind='Event', singular='event',
                       shortcuts=frozenset({'ev'}))
NEW_EVENTS = Resource(group='events.k8s.io', version='v1', plural='events', kind='Event', singular='event',
                      shortcuts=frozenset({'ev'}))


@pytest.mark.parametrize('args, expected', [
    (('kopf.dev', 'v1', 'kopfexamples'), Selector(group='kopf.dev', version='v1', name='kopfexamples')),
    (('', 'v1', 'pods'), Selector(group='', version='v1', name='pods')),
    (('', 'v1', 'configmap'), Selector(group='', version='v1', name='configmap')),
    (('kopf.dev/v1', 'kopfexamples'), Selector(group='kopf.dev', version='v1', name='kopfexamples')),
    (('apps/v1', 'Deployment'), Selector(group='apps', version='v1', name='Deployment')),
    (('v1', 'pods'), Selector(group='', version='v1', name='pods')),
    (('v1', 'ConfigMap'), Selector(group='', version='v1', name='ConfigMap')),
    (('v1', 'cm'), Selector(group='', version='v1', name='cm')),
    (('kopf.dev', 'kopfexamples'), Selector(group='kopf.dev', name='kopfexamples')),  # a group, its preferred version
    (('apps', 'deployments'), Selector(group='apps', name='deployments')),
    (('kopfexamples',), Selector(name='kopfexamples')),
    (('KopfExample',), Selector(name='KopfExample')),
    (('pods',), Selector(name='pods')),
    (('kopfexamples.kopf.dev',), Selector(name='kopfexamples', group='kopf.dev')),
    (('deployments.apps',), Selector(name='deployments', group='apps')),
    (('deployments.v1.apps',), Selector(name='deployments', version='v1', group='apps')),
    (('pods.v1',), Selector(name='pods', version='v1', group='')),
    (('ingresses.v1.networking.k8s.io',), Selector(name='ingresses', version='v1', group='networking.k8s.io')),
    (('ingresses.networking.k8s.io',), Selector(name='ingresses', group='networking.k8s.io')),
    (('kopfexamples', None, None), Selector(name='kopfexamples')),  # Kopf's unset positional parameters
    ((EVERYTHING,), Selector(everything=True)),
    (('kopf.dev', 'v1', EVERYTHING), Selector(group='kopf.dev', version='v1', everything=True)),
    (('kopf.dev/v1', EVERYTHING), Selector(group='kopf.dev', version='v1', everything=True)),
    (('kopf.dev', EVERYTHING), Selector(group='kopf.dev', everything=True)),
])
def test_selector_from_positional_args(args, expected):
    assert Selector.from_args(*args) == expected


@pytest.mark.parametrize('names, expected', [
    ({'kind': 'KopfExample'}, Selector(kind='KopfExample')),
    ({'plural': 'kopfexamples'}, Selector(plural='kopfexamples')),
    ({'singular': 'kopfexample'}, Selector(singular='kopfexample')),
    ({'shortcut': 'kex'}, Selector(shortcut='kex')),
    ({'category': 'all'}, Selector(category='all')),
    ({'group': 'kopf.dev', 'plural': 'kopfexamples'}, Selector(group='kopf.dev', plural='kopfexamples')),
    ({'group': 'kopf.dev', 'version': 'v1', 'plural': 'kopfexamples', 'kind': None},
     Selector(group='kopf.dev', version='v1', plural='kopfexamples')),
])
def test_selector_from_keywords(names, expected):
    assert Selector.from_args(**names) == expected


def test_selector_from_a_callable_and_keywords():
    def chosen(resource):
        return resource.plural == 'kopfexamples'

    assert Selector.from_args(chosen) == Selector(predicate=chosen)
    assert Selector.from_args(chosen, group='kopf.dev') == Selector(predicate=chosen, group='kopf.dev')
    assert Selector.from_args(chosen, category='all') == Selector(predicate=chosen, category='all')


@pytest.mark.parametrize('args, names', [
    ((), {}),
    (('a', 'b', 'c', 'd'), {}),
    (('',), {}),
    (('kopf.dev/v1/x',), {}),
    (('kopf.dev/v1/x', 'kopfexamples'), {}),
    (('/v1', 'kopfexamples'), {}),
    (('', 'kopfexamples'), {}),  # an empty group needs a version
    (('kopf.dev', 'v1', ''), {}),
    ((None, 'kopfexamples'), {}),
    (('kopfexamples',), {'kind': 'KopfExample'}),  # named twice
    (('kopf.dev', 'kopfexamples'), {'group': 'other.dev'}),  # a group twice, differently
    (('kopfexamples',), {'category': 'all'}),
    ((EVERYTHING,), {'plural': 'pods'}),
    ((lambda r: True, 'pods'), {}),
    ((lambda r: True,), {'kind': 'Pod'}),
    ((), {'plural': ''}),
    ((), {'group': 'kopf.dev'}),  # a group is not a resource
    ((), {'unknown': 'x'}),
])
def test_selector_rejects_malformed_args(args, names):
    with pytest.raises((TypeError, ValueError)):
        Selector.from_args(*args, **names)


def test_selector_needs_something_to_select():
    with pytest.raises(TypeError):
        Selector(group='kopf.dev')
    with pytest.raises(TypeError, match='EVERYTHING'):
        Selector(everything=True, plural='pods')


def test_selector_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Selector(name='pods').name = 'x'  # type: ignore[misc]


@pytest.mark.parametrize('selector, text', [
    (Selector(name='kopfexamples'), 'kopfexamples'),
    (Selector(name='kopfexamples', group='kopf.dev'), 'kopfexamples.kopf.dev'),
    (Selector(name='kopfexamples', group='kopf.dev', version='v1'), 'kopfexamples.v1.kopf.dev'),
    (Selector(name='pods', group='', version='v1'), 'pods.v1'),
    (Selector(name='pods', group=''), 'pods (core)'),
    (Selector(kind='KopfExample', group='kopf.dev'), 'kind=KopfExample.kopf.dev'),
    (Selector(category='all'), "the category 'all'"),
    (Selector(everything=True), 'everything'),
])
def test_selector_str_for_messages(selector, text):
    assert str(selector) == text


@pytest.mark.parametrize('selector, rank', [
    (Selector(name='kopfexamples'), 0),
    (Selector(name='KopfExamples'), 0),  # any case
    (Selector(name='kopfexample'), 1),  # singular
    (Selector(name='KOPFEXAMPLE'), 1),
    (Selector(name='KopfExample'), 1),  # the singular, case-insensitively (also the kind)
    (Selector(name='kex'), 3),  # short name
    (Selector(name='KEX'), 3),
    (Selector(name='kopfexamples', group='kopf.dev'), 0),
    (Selector(name='kopfexamples', group='kopf.dev', version='v1'), 0),
    (Selector(plural='kopfexamples', group='kopf.dev', version='v1'), 0),
    (Selector(kind='KopfExample'), 0),
    (Selector(singular='kopfexample'), 0),
    (Selector(shortcut='kex'), 0),
    (Selector(category='kopf'), 0),
    (Selector(everything=True), 0),
    (Selector(predicate=lambda resource: resource.kind == 'KopfExample'), 0),
    (Selector(name='pods'), None),
    (Selector(name='kopfexamples', group='other.dev'), None),
    (Selector(name='kopfexamples', version='v2'), None),
    (Selector(name='kopfexamples', group=''), None),
    (Selector(plural='KopfExample', group='kopf.dev', version='v1'), None),  # keywords are exact
    (Selector(kind='kopfexample'), None),
    (Selector(shortcut='KEX'), None),
    (Selector(category='apps'), None),
    (Selector(predicate=lambda resource: False), None),
    (Selector(predicate=lambda resource: True, group='apps'), None),
])
def test_selector_match_rank(selector, rank):
    assert selector.match_rank(KEX_NAMES) == rank


@pytest.mark.parametrize('name, rank', [('configmaps', 0), ('configmap', 1), ('ConfigMap', 1), ('cm', 3), ('CM', 3)])
def test_selector_matches_every_name_of_a_builtin_resource(name, rank):
    assert Selector.from_args('v1', name).match_rank(CONFIGMAPS) == rank
    assert Selector.from_args('', 'v1', name).match_rank(CONFIGMAPS) == rank
    assert Selector.from_args(name).match_rank(CONFIGMAPS) == rank


def test_selector_matches_the_kind_when_there_is_no_singular():
    assert Selector(name='KopfExample').match_rank(KOPF_EXAMPLES) == 2
    assert Selector(name='kopfexample').match_rank(KOPF_EXAMPLES) == 2
    assert Selector(name='Pod').match_rank(KOPF_EXAMPLES) is None


def test_selectors_of_one_resource_are_specific_the_others_are_not():
    assert Selector(name='pods').is_specific
    assert Selector(kind='Pod', group='').is_specific
    assert not Selector(everything=True).is_specific
    assert not Selector(category='all').is_specific
    assert not Selector(predicate=lambda resource: True).is_specific


# --- kopf.EVERYTHING and the other selectors of many resources -----------------------------------

def test_everything_is_a_selector_of_its_own():
    selector = Selector.from_args(EVERYTHING)
    assert selector == Selector(everything=True)
    assert str(selector) == 'everything'
    assert repr(EVERYTHING) == 'kopf.EVERYTHING'


@pytest.mark.parametrize('resource', [CORE_PODS, KOPF_EXAMPLES, NAMESPACES, CRDS, NEW_EVENTS])
def test_everything_matches_every_resource(resource):
    assert Selector(everything=True).match_rank(resource) == 0


def test_core_events_are_left_out_of_everything_and_callables_but_not_when_named():
    assert not Selector(everything=True).check(CORE_EVENTS)
    assert not Selector(predicate=lambda resource: True).check(CORE_EVENTS)
    assert Selector.from_args('v1', 'events').check(CORE_EVENTS)
    assert Selector.from_args('events').check(CORE_EVENTS)


def test_everything_cannot_be_combined_with_names():
    with pytest.raises(TypeError, match='EVERYTHING'):
        Selector(everything=True, plural='pods')
    with pytest.raises(TypeError):
        Selector.from_args('kopf.dev', 'v1', 'kopfexamples', EVERYTHING)
