import dataclasses

import pytest

from kopf.structs.resources import EVERYTHING, Resource, Selector, build_query

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

@pytest.mark.parametrize('args, expected', [
    (('kopf.dev', 'v1', 'kopfexamples'), Selector(group='kopf.dev', version='v1', plural='kopfexamples')),
    (('', 'v1', 'pods'), Selector(group='', version='v1', plural='pods')),
    (('kopf.dev/v1', 'kopfexamples'), Selector(group='kopf.dev', version='v1', plural='kopfexamples')),
    (('v1', 'pods'), Selector(group='', version='v1', plural='pods')),
    (('kopfexamples',), Selector(name='kopfexamples')),
    (('KopfExample',), Selector(name='KopfExample')),
    (('pods',), Selector(name='pods')),
    (('configmaps',), Selector(name='configmaps')),
    (('kopfexamples.kopf.dev',), Selector(name='kopfexamples', group='kopf.dev')),
    (('deployments.apps',), Selector(name='deployments', group='apps')),
    (('deployments.v1.apps',), Selector(name='deployments', version='v1', group='apps')),
    (('ingresses.v1.networking.k8s.io',), Selector(name='ingresses', version='v1', group='networking.k8s.io')),
    (('ingresses.networking.k8s.io',), Selector(name='ingresses', group='networking.k8s.io')),
])
def test_selector_from_args(args, expected):
    assert Selector.from_args(*args) == expected


@pytest.mark.parametrize('args', [(), ('a', 'b', 'c', 'd'), ('',), ('kopf.dev/v1/x',), ('kopf.dev', 'kopfexamples')])
def test_selector_rejects_malformed_args(args):
    with pytest.raises((TypeError, ValueError)):
        Selector.from_args(*args)


def test_selector_needs_exactly_one_of_plural_and_name():
    with pytest.raises(TypeError):
        Selector(group='kopf.dev')
    with pytest.raises(TypeError):
        Selector(plural='a', name='a')


def test_selector_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Selector(name='pods').name = 'x'  # type: ignore[misc]


@pytest.mark.parametrize('selector, text', [
    (Selector(name='kopfexamples'), 'kopfexamples'),
    (Selector(name='kopfexamples', group='kopf.dev'), 'kopfexamples.kopf.dev'),
    (Selector(plural='kopfexamples', group='kopf.dev', version='v1'), 'kopfexamples.v1.kopf.dev'),
    (Selector(plural='pods', group='', version='v1'), 'pods.v1'),
    (Selector(name='pods', group=''), 'pods (core)'),
])
def test_selector_str_for_messages(selector, text):
    assert str(selector) == text


@pytest.mark.parametrize('selector, rank', [
    (Selector(name='kopfexamples'), 0),
    (Selector(name='kopfexample'), 1),  # singular
    (Selector(name='KopfExample'), 1),  # the singular, case-insensitively (also the kind)
    (Selector(name='kopfexample'.upper()), 1),  # names are case-insensitive, like kubectl's
    (Selector(name='kex'), 3),  # short name
    (Selector(name='kopfexamples', group='kopf.dev'), 0),
    (Selector(plural='kopfexamples', group='kopf.dev', version='v1'), 0),
    (Selector(name='pods'), None),
    (Selector(name='kopfexamples', group='other.dev'), None),
    (Selector(name='kopfexamples', version='v2'), None),
    (Selector(name='kopfexamples', group=''), None),
    (Selector(plural='KopfExample', group='kopf.dev', version='v1'), None),  # plurals are exact
])
def test_selector_match_rank(selector, rank):
    assert selector.match_rank(KOPF_EXAMPLES, singular='kopfexample', short_names=['kex']) == rank


def test_selector_matches_the_kind_when_there_is_no_singular():
    assert Selector(name='KopfExample').match_rank(KOPF_EXAMPLES) == 2
    assert Selector(name='kopfexample').match_rank(KOPF_EXAMPLES) == 2
    assert Selector(name='Pod').match_rank(KOPF_EXAMPLES) is None


# --- kopf.EVERYTHING ----------------------------------------------------------------------------

def test_everything_is_a_selector_of_its_own():
    selector = Selector.from_args(EVERYTHING)
    assert selector == Selector(everything=True)
    assert str(selector) == 'everything'
    assert repr(EVERYTHING) == 'kopf.EVERYTHING'


@pytest.mark.parametrize('resource', [CORE_PODS, KOPF_EXAMPLES, NAMESPACES, CRDS])
def test_everything_matches_every_resource(resource):
    assert Selector(everything=True).match_rank(resource) == 0


def test_everything_cannot_be_combined_with_names():
    with pytest.raises(TypeError, match='EVERYTHING'):
        Selector.from_args('kopf.dev', EVERYTHING)
    with pytest.raises(TypeError, match='exactly one'):
        Selector(everything=True, plural='pods')
