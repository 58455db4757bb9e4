import logging

import pytest
from aiohttp import web

from kopf._kube.auth import APIContext
from kopf._kube.discovery import AmbiguousResourceError, ResourceNotFoundError, resolve, scan, select
from kopf._kube.errors import APIServerError
from kopf._structs.resources import EVERYTHING, Resource, Selector


def entry(name, kind='', *, singular='', namespaced=True, short=(), categories=()):
    return {'name': name, 'singularName': singular, 'namespaced': namespaced, 'kind': kind,
            'verbs': ['get', 'list', 'watch'], 'shortNames': list(short), 'categories': list(categories)}


def group(name, *versions, preferred=None):
    return {'name': name, 'versions': [{'groupVersion': f'{name}/{v}', 'version': v} for v in versions],
            'preferredVersion': {'groupVersion': f'{name}/{preferred or versions[0]}',
                                 'version': preferred or versions[0]}}


def resource_list(group_version, *entries):
    return {'kind': 'APIResourceList', 'groupVersion': group_version, 'resources': list(entries)}


@pytest.fixture()
def documents():
    """The discovery documents of a fake cluster, by path; tests may change them."""
    return {
        '/api/v1': resource_list(
            'v1',
            entry('pods', 'Pod', singular='pod', short=['po'], categories=['all']),
            entry('pods/status', 'Pod'),
            entry('pods/log', 'Pod'),
            entry('configmaps', 'ConfigMap', singular='configmap', short=['cm']),
            entry('namespaces', 'Namespace', singular='namespace', namespaced=False, short=['ns']),
            entry('events', 'Event', singular='event', short=['ev']),
        ),
        '/apis': {'kind': 'APIGroupList', 'groups': [
            group('apps', 'v1'),
            group('events.k8s.io', 'v1'),
            group('extensions', 'v1beta1'),
            group('networking.k8s.io', 'v1'),
            group('kopf.dev', 'v1beta1', 'v1', preferred='v1'),
            group('metrics.k8s.io', 'v1beta1'),
        ]},
        '/apis/apps/v1': resource_list(
            'apps/v1',
            entry('deployments', 'Deployment', singular='deployment', short=['deploy'], categories=['all']),
            entry('deployments/status', 'Deployment'),
            entry('deployments/scale', 'Scale'),
        ),
        '/apis/events.k8s.io/v1': resource_list('events.k8s.io/v1', entry('events', 'Event', singular='event')),
        '/apis/extensions/v1beta1': resource_list('extensions/v1beta1', entry('ingresses', 'Ingress')),
        '/apis/networking.k8s.io/v1': resource_list('networking.k8s.io/v1', entry('ingresses', 'Ingress')),
        '/apis/kopf.dev/v1': resource_list(
            'kopf.dev/v1',
            entry('kopfexamples', 'KopfExample', singular='kopfexample', short=['kex']),
            entry('kopfexamples/status', 'KopfExample'),
            entry('clusterthings', 'ClusterThing', singular='clusterthing', namespaced=False),
        ),
        '/apis/kopf.dev/v1beta1': resource_list(
            'kopf.dev/v1beta1',
            entry('kopfexamples', 'KopfExample', singular='kopfexample', short=['kex']),
            entry('oldthings', 'OldThing', singular='oldthing'),
        ),
        # '/apis/metrics.k8s.io/v1beta1' fails with 503: an aggregated API whose backend is down.
    }


@pytest.fixture()
def cluster(aresponses, host, documents):
    async def handler(request):
        if request.path == '/apis/metrics.k8s.io/v1beta1':
            return web.json_response({'kind': 'Status', 'code': 503, 'message': 'metrics are down'}, status=503)
        if request.path in documents:
            return web.json_response(documents[request.path])
        return web.json_response({'kind': 'Status', 'code': 404, 'reason': 'NotFound'}, status=404)

    aresponses.add(host, aresponses.ANY, 'GET', handler, repeat=aresponses.INFINITY)
    return documents


KEX = Resource('kopf.dev', 'v1', 'kopfexamples', 'KopfExample', namespaced=True, subresources=frozenset({'status'}))
PODS = Resource('', 'v1', 'pods', 'Pod', namespaced=True, subresources=frozenset({'status', 'log'}))


def described(resource):
    """Resources are equal by group, version and plural (as in Kopf): compare what discovery tells too."""
    return (resource, resource.kind, resource.namespaced, resource.subresources)


@pytest.mark.parametrize('args, expected', [
    (('kopfexamples',), KEX),
    (('kopfexamples.kopf.dev',), KEX),
    (('kopfexamples.v1.kopf.dev',), KEX),
    (('KopfExample',), KEX),
    (('kopfexample',), KEX),
    (('kex',), KEX),
    (('kopf.dev', 'v1', 'kopfexamples'), KEX),
    (('kopf.dev', 'v1beta1', 'kopfexamples'), Resource('kopf.dev', 'v1beta1', 'kopfexamples', 'KopfExample')),
    (('kopf.dev/v1beta1', 'kopfexamples'), Resource('kopf.dev', 'v1beta1', 'kopfexamples', 'KopfExample')),
    (('clusterthings',), Resource('kopf.dev', 'v1', 'clusterthings', 'ClusterThing', namespaced=False)),
    (('pods',), PODS),
    (('Pod',), PODS),
    (('', 'v1', 'pods'), PODS),
    (('v1', 'pods'), PODS),
    (('configmaps',), Resource('', 'v1', 'configmaps', 'ConfigMap', namespaced=True)),
    (('cm',), Resource('', 'v1', 'configmaps', 'ConfigMap', namespaced=True)),
    (('namespaces',), Resource('', 'v1', 'namespaces', 'Namespace', namespaced=False)),
    (('deployments.v1.apps',), Resource('apps', 'v1', 'deployments', 'Deployment', namespaced=True,
                                        subresources=frozenset({'status', 'scale'}))),
    (('deploy',), Resource('apps', 'v1', 'deployments', 'Deployment', namespaced=True,
                           subresources=frozenset({'status', 'scale'}))),
    # Kopf's forms with a name other than the plural, after an API group and/or version:
    (('v1', 'ConfigMap'), Resource('', 'v1', 'configmaps', 'ConfigMap', namespaced=True)),
    (('', 'v1', 'configmap'), Resource('', 'v1', 'configmaps', 'ConfigMap', namespaced=True)),
    (('v1', 'cm'), Resource('', 'v1', 'configmaps', 'ConfigMap', namespaced=True)),
    (('v1', 'CONFIGMAPS'), Resource('', 'v1', 'configmaps', 'ConfigMap', namespaced=True)),
    (('kopf.dev', 'v1', 'kopfexample'), KEX),
    (('kopf.dev/v1', 'KopfExample'), KEX),
    (('kopf.dev', 'kex'), KEX),  # a group alone: its preferred version
    (('kopfexample.kopf.dev',), KEX),
    (('pods.v1',), PODS),
    (('apps', 'Deployment'), Resource('apps', 'v1', 'deployments', 'Deployment', namespaced=True,
                                      subresources=frozenset({'status', 'scale'}))),
])
async def test_resolution(cluster, context, args, expected):
    assert described(await resolve(context=context, selector=Selector.from_args(*args))) == described(expected)


async def test_core_group_wins_over_other_groups(cluster, context):
    resource = await resolve(context=context, selector=Selector.parse('events'))
    assert resource == Resource('', 'v1', 'events', 'Event', namespaced=True)


async def test_other_group_when_named(cluster, context):
    resource = await resolve(context=context, selector=Selector.parse('events.events.k8s.io'))
    assert resource == Resource('events.k8s.io', 'v1', 'events', 'Event', namespaced=True)


async def test_legacy_extensions_group_loses(cluster, context):
    resource = await resolve(context=context, selector=Selector.parse('ingresses'))
    assert resource.group == 'networking.k8s.io'


async def test_preferred_version_is_used_without_an_explicit_version(cluster, context, history):
    resource = await resolve(context=context, selector=Selector.parse('kopfexamples.kopf.dev'))
    assert resource.version == 'v1'
    assert history('/apis/kopf.dev/v1beta1') == []


async def test_other_versions_are_searched_if_the_preferred_one_lacks_the_resource(cluster, context):
    resource = await resolve(context=context, selector=Selector.parse('oldthings'))
    assert resource == Resource('kopf.dev', 'v1beta1', 'oldthings', 'OldThing', namespaced=True)


async def test_not_found_names_the_selector(cluster, context):
    with pytest.raises(ResourceNotFoundError, match=r'nothings.*kopf\.dev/v1'):
        await resolve(context=context, selector=Selector.parse('nothings'))


async def test_not_found_for_an_unserved_group(cluster, context):
    with pytest.raises(ResourceNotFoundError, match=r"kopfexamples\.other\.dev.*'other\.dev' is not served"):
        await resolve(context=context, selector=Selector.parse('kopfexamples.other.dev'))


async def test_not_found_for_an_unserved_version(cluster, context):
    with pytest.raises(ResourceNotFoundError, match=r'kopfexamples\.v2\.kopf\.dev'):
        await resolve(context=context, selector=Selector.from_args('kopf.dev', 'v2', 'kopfexamples'))


async def test_ambiguity_between_custom_groups_lists_the_candidates(cluster, context):
    cluster['/apis']['groups'].append(group('other.dev', 'v1'))
    cluster['/apis/other.dev/v1'] = resource_list('other.dev/v1', entry('kopfexamples', 'KopfExample'))
    with pytest.raises(AmbiguousResourceError) as excinfo:
        await resolve(context=context, selector=Selector.parse('kopfexamples'))
    assert 'kopfexamples.kopf.dev' in str(excinfo.value)
    assert 'kopfexamples.other.dev' in str(excinfo.value)
    assert {r.group for r in excinfo.value.candidates} == {'kopf.dev', 'other.dev'}
    # The group disambiguates:
    resource = await resolve(context=context, selector=Selector.parse('kopfexamples.other.dev'))
    assert resource.group == 'other.dev'


async def test_plural_match_beats_short_names_of_other_resources(cluster, context):
    cluster['/apis/kopf.dev/v1']['resources'].append(entry('tricks', 'Trick', short=['pods']))
    resource = await resolve(context=context, selector=Selector.parse('pods'))
    assert resource.group == ''


async def test_explicit_group_and_version_skip_the_group_list(cluster, context, history):
    await resolve(context=context, selector=Selector.from_args('kopf.dev', 'v1', 'kopfexamples'))
    assert [r.path for r in history()] == ['/apis/kopf.dev/v1']


async def test_core_group_is_read_from_api_v1(cluster, context, history):
    await resolve(context=context, selector=Selector.from_args('', 'v1', 'pods'))
    assert [r.path for r in history()] == ['/api/v1']


async def test_results_are_cached_per_context(cluster, context, history, info):
    await resolve(context=context, selector=Selector.parse('kopfexamples'))
    await resolve(context=context, selector=Selector.parse('pods'))
    count = len(history())
    await resolve(context=context, selector=Selector.parse('kopfexamples'))
    await resolve(context=context, selector=Selector.parse('pods'))
    await resolve(context=context, selector=Selector.parse('configmaps'))  # from the cached documents
    assert len(history()) == count
    async with APIContext(info, retries=0) as other_context:
        await resolve(context=other_context, selector=Selector.parse('kopfexamples'))
    assert len(history()) > count


async def test_a_miss_refreshes_the_cache_once(cluster, context):
    await resolve(context=context, selector=Selector.parse('kopfexamples'))
    cluster['/apis']['groups'].append(group('new.dev', 'v1'))
    cluster['/apis/new.dev/v1'] = resource_list('new.dev/v1', entry('newthings', 'NewThing'))
    resource = await resolve(context=context, selector=Selector.parse('newthings'))
    assert resource == Resource('new.dev', 'v1', 'newthings', 'NewThing', namespaced=True)


async def test_a_broken_aggregated_api_does_not_break_resolution(cluster, context, caplog):
    with caplog.at_level(logging.WARNING, logger='kopf._kube.discovery'):
        resource = await resolve(context=context, selector=Selector.parse('kopfexamples'))
    assert resource.group == 'kopf.dev'
    assert any('metrics.k8s.io' in r.getMessage() for r in caplog.records if r.name == 'kopf._kube.discovery')


async def test_a_broken_aggregated_api_is_not_asked_again_until_a_refresh(cluster, context, history):
    await resolve(context=context, selector=Selector.parse('kopfexamples'))
    count = len(history('/apis/metrics.k8s.io/v1beta1'))
    await resolve(context=context, selector=Selector.parse('pods'))
    assert len(history('/apis/metrics.k8s.io/v1beta1')) == count


async def test_a_failing_named_group_is_an_error_not_a_miss(cluster, context):
    with pytest.raises(APIServerError, match='metrics are down'):
        await resolve(context=context, selector=Selector.parse('nodes.metrics.k8s.io'))


async def test_scan_finds_every_listable_watchable_resource_in_preferred_versions(cluster, context, caplog):
    cluster['/api/v1']['resources'].append({'name': 'bindings', 'kind': 'Binding', 'verbs': ['create']})
    with caplog.at_level(logging.WARNING):
        resources = await scan(context=context)
    assert {f'{r.plural}.{r.version}.{r.group}'.rstrip('.') for r in resources} == {
        'pods.v1', 'configmaps.v1', 'namespaces.v1', 'events.v1',
        'deployments.v1.apps', 'events.v1.events.k8s.io', 'ingresses.v1beta1.extensions',
        'ingresses.v1.networking.k8s.io', 'kopfexamples.v1.kopf.dev', 'clusterthings.v1.kopf.dev',
    }
    assert KEX in resources
    assert Resource('', 'v1', 'pods', 'Pod', namespaced=True, subresources=frozenset({'status', 'log'})) in resources
    assert 'metrics.k8s.io' in caplog.text  # the failing group is skipped, loudly


async def test_resources_tell_what_discovery_says_of_them_as_in_kopf(cluster, context):
    pods = await resolve(context=context, selector=Selector.parse('po'))
    assert (pods.singular, pods.shortcuts) == ('pod', frozenset({'po'}))
    assert pods.verbs == frozenset({'get', 'list', 'watch'})
    assert pods.preferred
    assert pods == Resource('', 'v1', 'pods')  # equal by group, version, plural, as in Kopf
    assert hash(pods) == hash(Resource('', 'v1', 'pods', kind='Other'))
    assert pods.get_url(namespace='ns', name='p') == '/api/v1/namespaces/ns/pods/p'  # without a server: a path
    old = await resolve(context=context, selector=Selector.parse('oldthings'))
    assert not old.preferred  # served only by kopf.dev/v1beta1, while v1 is the group's preferred version


@pytest.mark.parametrize('names, expected', [
    ({'kind': 'KopfExample'}, KEX),
    ({'plural': 'kopfexamples'}, KEX),
    ({'singular': 'kopfexample'}, KEX),
    ({'shortcut': 'kex'}, KEX),
    ({'group': 'kopf.dev', 'plural': 'kopfexamples'}, KEX),
    ({'group': 'kopf.dev', 'version': 'v1beta1', 'kind': 'KopfExample'},
     Resource('kopf.dev', 'v1beta1', 'kopfexamples', 'KopfExample')),
])
async def test_resolution_by_kopfs_keywords(cluster, context, names, expected):
    assert described(await resolve(context=context, selector=Selector.from_args(**names))) == described(expected)


async def test_keywords_are_exact_unlike_bare_names(cluster, context):
    with pytest.raises(ResourceNotFoundError, match='kind=kopfexample'):
        await resolve(context=context, selector=Selector.from_args(kind='kopfexample'))


async def test_a_selector_of_many_resources_serves_what_it_selects_in_preferred_versions(cluster, context):
    scanned = await scan(context=context)
    assert {str(r) for r in select(Selector.from_args('kopf.dev', EVERYTHING), scanned)} == {
        'kopfexamples.v1.kopf.dev', 'clusterthings.v1.kopf.dev'}
    everything = {str(r) for r in select(Selector.from_args(EVERYTHING), scanned)}
    assert everything >= {'pods.v1', 'events.v1.events.k8s.io', 'kopfexamples.v1.kopf.dev'}
    assert 'events.v1' not in everything  # core events only when named
    assert {str(r) for r in select(Selector.from_args(category='all'), scanned)} == {'pods.v1', 'deployments.v1.apps'}


async def test_a_callable_selects_among_all_versions(cluster, context):
    scanned = await scan(context=context, all_versions=True)
    chosen = select(Selector.from_args(lambda resource: resource.group == 'kopf.dev'), scanned)
    assert {(str(r), r.preferred) for r in chosen} == {
        ('kopfexamples.v1.kopf.dev', True), ('clusterthings.v1.kopf.dev', True),
        ('kopfexamples.v1beta1.kopf.dev', False), ('oldthings.v1beta1.kopf.dev', False)}
