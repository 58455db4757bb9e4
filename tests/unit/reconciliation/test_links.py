"""Links between objects and their owners: owner references, mappers' answers, relistings, and ``children``."""
import pytest

from kopf._reconciliation.links import Children, Links, Listing, owner_names, owner_uids
from kopf._structs.resources import Resource

CONFIGMAPS = Resource('', 'v1', 'configmaps', 'ConfigMap')
SECRETS = Resource('', 'v1', 'secrets', 'Secret')
OWNERS = {('kopf.dev', 'KopfExample')}


def child(name, *refs, rv='1', namespace='ns'):
    return {'apiVersion': 'v1', 'kind': 'ConfigMap',
            'metadata': {'name': name, 'namespace': namespace, 'uid': f'uid-{name}', 'resourceVersion': rv,
                         'ownerReferences': [dict(ref) for ref in refs]}}


def ref(uid, *, api_version='kopf.dev/v1', kind='KopfExample', name='owner'):
    return {'apiVersion': api_version, 'kind': kind, 'name': name, 'uid': uid}


# Owner references.

def test_owners_are_found_by_group_and_kind_in_any_version():
    body = child('c', ref('o1'), ref('o2', api_version='kopf.dev/v2'))
    assert owner_uids(body, OWNERS) == (frozenset({'o1', 'o2'}), [])


def test_owners_of_other_resources_are_ignored_and_named_for_the_logs():
    body = child('c', ref('o1', kind='Deployment', api_version='apps/v1', name='web'),
                 ref('o2', api_version='other.dev/v1'), ref('o3', api_version='v1', kind='KopfExample'))
    matched, others = owner_uids(body, OWNERS)
    assert matched == frozenset()
    assert others == ['Deployment web', 'KopfExample owner', 'KopfExample owner']


def test_malformed_owner_references_are_skipped():
    body = child('c', ref(''), {'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample'})
    body['metadata']['ownerReferences'].append('not a reference')
    assert owner_uids(body, OWNERS)[0] == frozenset()


# Linking.

def test_a_child_is_linked_to_its_owners_and_affects_them():
    links = Links()
    assert links.link(CONFIGMAPS, 'c1', child('c1'), {'o1'}) == {'o1'}
    assert links.linked('o1') == {CONFIGMAPS: [child('c1')]}
    assert links.linked('o2') == {}


def test_a_child_that_moves_to_another_owner_affects_both():
    links = Links()
    links.link(CONFIGMAPS, 'c1', child('c1'), {'o1'})
    assert links.link(CONFIGMAPS, 'c1', child('c1', rv='2'), {'o2'}) == {'o1', 'o2'}
    assert links.linked('o1') == {}
    assert links.linked('o2')[CONFIGMAPS][0]['metadata']['resourceVersion'] == '2'


def test_a_gone_child_affects_its_owners_and_is_forgotten():
    links = Links()
    links.link(CONFIGMAPS, 'c1', child('c1'), {'o1', 'o2'})
    assert links.link(CONFIGMAPS, 'c1', None, {'o1'}) == {'o1', 'o2'}
    assert links.linked('o1') == {} and links.owners(CONFIGMAPS, 'c1') == frozenset()
    assert len(links) == 0


def test_objects_without_owners_cost_nothing():
    links = Links()
    assert links.link(CONFIGMAPS, 'c1', child('c1'), set()) == frozenset()
    assert len(links) == 0 and links.body(CONFIGMAPS, 'c1') is None


def test_children_are_grouped_by_resource_and_ordered_by_name():
    links = Links()
    for name in ['b', 'a', 'c']:
        links.link(CONFIGMAPS, name, child(name), {'o1'})
    links.link(SECRETS, 's', child('s'), {'o1'})
    linked = links.linked('o1')
    assert [body['metadata']['name'] for body in linked[CONFIGMAPS]] == ['a', 'b', 'c']
    assert len(linked[SECRETS]) == 1


# Mappers' answers.

@pytest.mark.parametrize('result, expected', [
    (None, set()),
    ([], set()),
    ('owner', {('ns', 'owner')}),
    (('other', 'owner'), {('other', 'owner')}),
    ((None, 'cluster-owner'), {(None, 'cluster-owner')}),
    ({'metadata': {'name': 'owner', 'namespace': 'other'}}, {('other', 'owner')}),
    ({'name': 'owner'}, {('ns', 'owner')}),
    (['a', ('other', 'b'), None, {'metadata': {'name': 'c'}}], {('ns', 'a'), ('other', 'b'), ('ns', 'c')}),
    ({'a', 'b'}, {('ns', 'a'), ('ns', 'b')}),
])
def test_a_mappers_answer_names_owners(result, expected):
    assert owner_names(result, namespace='ns') == expected


@pytest.mark.parametrize('result', [42, [42], {'spec': {}}, b'owner', [('a', 'b', 'c')]])
def test_a_mappers_wrong_answer_is_named(result):
    with pytest.raises(TypeError, match=r"a mapper returned .* it must return the owners to reconcile"):
        owner_names(result, namespace='ns')


# Relistings.

def test_a_relisting_reports_what_it_no_longer_has():
    listing = Listing()
    for uid in ['a', 'b', 'c']:
        listing.see(uid, None)
    assert listing.relisted() == set()
    listing.see('d', 'ADDED')
    listing.see('b', 'DELETED')
    for uid in ['a', 'd']:  # a re-opened stream lists again; c went while it was closed
        listing.see(uid, None)
    assert listing.relisted() == {'c'}


def test_an_empty_relisting_means_that_everything_is_gone():
    listing = Listing()
    listing.see('a', None)
    listing.relisted()
    assert listing.relisted() == {'a'}


# What handlers get.

def test_children_are_named_as_declared_and_empty_where_there_are_none():
    children = Children({'configmaps': [child('a')], ('apps', 'v1', 'deployments'): []})
    assert [body.metadata.name for body in children['configmaps']] == ['a']
    assert children[('apps', 'v1', 'deployments')] == ()
    assert list(children) == ['configmaps', ('apps', 'v1', 'deployments')]
    assert "'configmaps': 1" in repr(children)


def test_children_of_an_undeclared_resource_are_an_error_that_names_the_declared_ones():
    children = Children({'configmaps': []})
    with pytest.raises(KeyError, match=r"'secrets' is not among the resources of owns= and watches= \('configmaps'\)"):
        children['secrets']


def test_objects_are_kept_without_the_servers_bookkeeping_of_fields():
    links = Links()
    body = child('c1')
    body['metadata']['managedFields'] = [{'manager': 'kopf', 'fieldsV1': {'f:data': {}}}]
    links.link(CONFIGMAPS, 'c1', body, {'o1'})
    kept, = links.linked('o1')[CONFIGMAPS]
    assert 'managedFields' not in kept['metadata'] and kept['metadata']['name'] == 'c1'
    assert 'managedFields' in body['metadata']  # the event's own object is not changed
