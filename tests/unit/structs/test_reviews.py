import pytest

from kopf._structs.reviews import InvalidReviewError, parse_review


def review(**request):
    return {
        'apiVersion': 'admission.k8s.io/v1',
        'kind': 'AdmissionReview',
        'request': {
            'uid': 'uid-1',
            'kind': {'group': 'kopf.dev', 'version': 'v1', 'kind': 'KopfExample'},
            'resource': {'group': 'kopf.dev', 'version': 'v1', 'resource': 'kopfexamples'},
            'name': 'kex1',
            'namespace': 'ns1',
            'operation': 'UPDATE',
            'userInfo': {'username': 'admin', 'groups': ['system:masters']},
            'object': {'spec': {'x': 2}},
            'oldObject': {'spec': {'x': 1}},
            'dryRun': True,
            **request,
        },
    }


def test_a_valid_review_is_parsed_into_its_request():
    request = parse_review(review(subResource='status'))
    assert request.api_version == 'admission.k8s.io/v1'
    assert request.uid == 'uid-1'
    assert (request.group, request.version, request.plural, request.kind) == \
           ('kopf.dev', 'v1', 'kopfexamples', 'KopfExample')
    assert request.subresource == 'status'
    assert request.operation == 'UPDATE'
    assert (request.name, request.namespace) == ('kex1', 'ns1')
    assert request.userinfo == {'username': 'admin', 'groups': ['system:masters']}
    assert request.object == {'spec': {'x': 2}}
    assert request.old_object == {'spec': {'x': 1}}
    assert request.dryrun is True


def test_the_core_group_and_absent_optional_fields():
    payload = review(resource={'group': '', 'version': 'v1', 'resource': 'pods'}, operation='CREATE',
                     oldObject=None, dryRun=None, userInfo=None, name='')
    request = parse_review(payload)
    assert request.group == ''
    assert request.old_object is None
    assert request.dryrun is False
    assert request.userinfo == {}
    assert request.name is None
    assert request.subresource is None


def test_v1beta1_reviews_are_accepted():
    payload = {**review(), 'apiVersion': 'admission.k8s.io/v1beta1'}
    assert parse_review(payload).api_version == 'admission.k8s.io/v1beta1'


@pytest.mark.parametrize('payload, message', [
    ([], "must be a JSON object, got list"),
    ('text', "must be a JSON object, got str"),
    ({'kind': 'Pod', 'apiVersion': 'v1'}, "Not an AdmissionReview: kind='Pod'"),
    ({**review(), 'apiVersion': 'admission.k8s.io/v2'}, "Unsupported AdmissionReview apiVersion"),
    ({'kind': 'AdmissionReview', 'apiVersion': 'admission.k8s.io/v1'}, "has no 'request'"),
    (review(uid=None), "has no 'uid'"),
    (review(resource=None), "has no 'resource'"),
    (review(resource={'group': 'x'}), "has no 'resource'"),
    (review(operation='PATCH'), "Unknown operation='PATCH'"),
    (review(object='not-a-dict'), "'object' must be an object or null"),
    (review(oldObject=[1]), "'oldObject' must be an object or null"),
])
def test_invalid_reviews_are_refused_in_one_line(payload, message):
    with pytest.raises(InvalidReviewError) as e:
        parse_review(payload)
    assert message in str(e.value)
    assert '\n' not in str(e.value)
