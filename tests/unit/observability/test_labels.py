"""Label values: resources and requests named in few words, never by an object's name."""
import pytest

from kopf._observability import labels
from kopf._observability.outcomes import handler_outcome
from kopf._structs.resources import Resource, Selector
from kopf.errors import HandlerRetriesError, HandlerTimeoutError, PermanentError, TemporaryError


@pytest.mark.parametrize('resource, expected', [
    (Resource(group='kopf.dev', version='v1', plural='kopfexamples'), 'kopfexamples.kopf.dev'),
    (Resource(group='', version='v1', plural='configmaps'), 'configmaps'),
    (Selector.from_args('kopf.dev', 'v1', 'kopfexamples'), 'kopfexamples.v1.kopf.dev'),  # as the selector says
    (Selector(group='kopf.dev', version='v1', plural='kopfexamples'), 'kopfexamples.kopf.dev'),
    (None, ''),
])
def test_resource_labels(resource, expected):
    assert labels.resource_label(resource) == expected


@pytest.mark.parametrize('method, url, expected', [
    ('GET', 'https://k:6443/api/v1/namespaces/ns/configmaps?limit=500', ('LIST', 'configmaps')),
    ('GET', 'https://k:6443/api/v1/namespaces/ns/configmaps?watch=true&resourceVersion=5', ('WATCH', 'configmaps')),
    ('GET', 'https://k:6443/api/v1/namespaces/ns/configmaps/my-object', ('GET', 'configmaps')),
    ('PATCH', 'https://k:6443/apis/kopf.dev/v1/namespaces/ns/kopfexamples/ex', ('PATCH', 'kopfexamples.kopf.dev')),
    ('PATCH', 'https://k:6443/apis/kopf.dev/v1/namespaces/ns/kopfexamples/ex/status',
     ('PATCH', 'kopfexamples.kopf.dev/status')),
    ('GET', 'https://k:6443/apis/kopf.dev/v1/kopfexamples', ('LIST', 'kopfexamples.kopf.dev')),
    ('GET', 'https://k:6443/api/v1/namespaces/ns', ('GET', 'namespaces')),
    ('GET', 'https://k:6443/api/v1/namespaces', ('LIST', 'namespaces')),
    ('PUT', 'https://k:6443/apis/coordination.k8s.io/v1/namespaces/ns/leases/op',
     ('PUT', 'leases.coordination.k8s.io')),
    ('GET', 'https://k:6443/apis', ('GET', 'discovery')),
    ('GET', 'https://k:6443/apis/kopf.dev/v1', ('GET', 'discovery')),
    ('GET', 'https://k:6443/version', ('GET', 'discovery')),
    ('POST', '/apis/authorization.k8s.io/v1/selfsubjectaccessreviews',
     ('POST', 'selfsubjectaccessreviews.authorization.k8s.io')),
])
def test_request_labels_name_the_verb_and_the_resource_never_the_object(method, url, expected):
    assert labels.request_labels(method, url) == expected


@pytest.mark.parametrize('final, error, expected', [
    (True, None, 'success'),
    (False, TemporaryError("later"), 'temporary_error'),
    (False, ValueError("a bug"), 'temporary_error'),
    (True, PermanentError("never"), 'permanent_error'),
    (True, ValueError("errors=PERMANENT"), 'permanent_error'),
    (True, HandlerTimeoutError("too long"), 'timeout'),
    (True, HandlerRetriesError("too often"), 'exhausted'),
    (False, None, 'waiting'),
])
def test_handler_outcomes(final, error, expected):
    assert handler_outcome(final=final, error=error) == expected
