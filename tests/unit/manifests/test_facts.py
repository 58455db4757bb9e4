"""What an operator's code and settings say about its permissions: results, writes, finalizers, storages."""
from __future__ import annotations

import pydantic
import pytest

import kopf
from kopf._manifests import facts
from kopf._structs.resources import Resource, Selector
from kopf.typed import Condition, CustomResource

APPS = Resource(group='example.com', version='v1', plural='apps', subresources=frozenset({'status'}))
PLAIN = Resource(group='example.com', version='v1', plural='apps')


def returns_dict(**_):
    return {'message': 'hello'}


def returns_nothing(**_):
    print('no result')


def returns_none_explicitly(**_):
    if _:
        return None
    return


def annotated(**_) -> None:
    return  # the annotation says enough


def nested_returns_only(**_):
    def inner():
        return 1
    later = lambda: 2  # noqa: E731 -- a lambda's return is its own
    inner(), later()


def registers(**_):
    kopf.register(returns_nothing, id='sub')


@pytest.mark.parametrize('fn, expected', [
    (returns_dict, True), (returns_nothing, False), (returns_none_explicitly, False), (annotated, False),
    (nested_returns_only, False), (registers, True), (lambda **_: None, False), (lambda **_: 1, True),
    (print, True),  # no source to read: it may
])
def test_whether_a_handler_returns_a_result(fn, expected):
    assert facts.returns_value(fn) is expected


def test_whether_a_handler_takes_the_patch():
    assert facts.takes_patch(lambda patch, **_: None)
    assert not facts.takes_patch(lambda **_: None)


@pytest.mark.parametrize('storage, places', [
    (kopf.SmartProgressStorage(), {'annotations'}),
    (kopf.AnnotationsProgressStorage(), {'annotations'}),
    (kopf.StatusProgressStorage(), {'status'}),
    (kopf.MultiProgressStorage([kopf.AnnotationsProgressStorage(), kopf.StatusProgressStorage()]),
     {'annotations', 'status'}),
    (kopf.AnnotationsDiffBaseStorage(), {'annotations'}),
    (kopf.StatusDiffBaseStorage(), {'status'}),
    (kopf.ConfigMapProgressStorage(), {'configmaps'}),
    (kopf.SQLiteProgressStorage(path=':memory:'), {'outside'}),
    (type('Mine', (kopf.ProgressStorage,), {'fetch': None, 'store': None, 'purge': None})(),
     {'annotations', 'status'}),  # a storage of one's own: anywhere
])
def test_where_storages_keep_their_records(storage, places):
    assert facts.storage_places(storage) == places


def test_the_namespaces_of_configmap_storages():
    assert facts.configmap_namespaces(kopf.ConfigMapProgressStorage(namespace='state'),
                                      kopf.ConfigMapDiffBaseStorage()) == ('state', None)
    assert facts.configmap_namespaces(kopf.SmartProgressStorage(), kopf.AnnotationsDiffBaseStorage()) == ()


def serve(registry, config, resource=APPS, selector=None):
    selector = selector or Selector(group=resource.group, version=resource.version, plural=resource.plural)
    served, = facts.serve(registry, {selector: resource}, config)
    return served


SELECTOR = ('example.com', 'v1', 'apps')


def test_changing_handlers_write_their_progress_into_the_objects(registry, config):
    kopf.on.create(*SELECTOR, registry=registry)(returns_nothing)
    served = serve(registry, config)
    assert (served.watched, served.writes, served.writes_status, served.rereads, served.posts) == (
        True, True, False, False, False)  # no events: the handlers post none, the logs are not posted


def test_results_go_to_the_status_subresource_or_to_the_main_endpoint(registry, config):
    kopf.on.create(*SELECTOR, registry=registry)(returns_dict)
    assert serve(registry, config).writes_status
    assert serve(registry, config, resource=PLAIN).writes  # no subresource: the status goes with the rest


def test_a_delete_handler_needs_the_finalizer_and_rereads(registry, config):
    kopf.on.delete(*SELECTOR, registry=registry)(returns_nothing)
    served = serve(registry, config)
    assert served.writes and served.rereads


def test_an_optional_delete_handler_needs_no_finalizer(registry, config):
    config.persistence.progress_storage = kopf.SQLiteProgressStorage(path=':memory:')
    config.persistence.diffbase_storage = kopf.SQLiteDiffBaseStorage(path=':memory:')
    kopf.on.delete(*SELECTOR, registry=registry, optional=True)(returns_nothing)
    served = serve(registry, config)
    assert not served.writes and not served.rereads and not served.writes_status


def test_daemons_need_the_finalizer_unless_optional(registry, config):
    kopf.daemon(*SELECTOR, registry=registry)(returns_nothing)
    assert serve(registry, config).rereads
    other = kopf.OperatorRegistry()
    kopf.timer(*SELECTOR, registry=other, interval=1, optional=True)(returns_nothing)
    served = serve(other, config)
    assert not served.writes and not served.rereads


def test_event_handlers_and_indexes_only_watch(registry, config):
    kopf.on.event(*SELECTOR, registry=registry)(returns_nothing)
    kopf.index(*SELECTOR, registry=registry)(returns_dict)
    served = serve(registry, config)
    assert served.watched and not served.writes and not served.writes_status and not served.rereads


def test_a_handler_that_takes_the_patch_may_write(registry, config):
    kopf.on.event(*SELECTOR, registry=registry)(lambda patch, **_: None)
    assert serve(registry, config).writes


def test_the_status_storage_writes_into_the_status(registry, config):
    config.persistence.progress_storage = kopf.StatusProgressStorage()
    kopf.on.create(*SELECTOR, registry=registry)(returns_nothing)
    assert serve(registry, config).writes_status


def posting(body, **_):
    kopf.info(body, reason='Done', message='done')


def logging_only(logger, **_):
    logger.info("kopf.info is not called here")


@pytest.mark.parametrize('fn, expected', [(posting, True), (logging_only, False), (returns_nothing, False)])
def test_whether_a_handler_posts_events(fn, expected):
    assert facts.posts_events(fn) is expected


def test_events_when_handlers_post_them_or_logs_are_posted(registry, config):
    kopf.on.create(*SELECTOR, registry=registry)(posting)
    assert serve(registry, config).posts
    other = kopf.OperatorRegistry()
    kopf.on.create(*SELECTOR, registry=other)(returns_nothing)
    config.posting.loggers = True
    assert serve(other, config).posts


CONFIGMAPS = Resource(group='', version='v1', plural='configmaps')


def applying(body, **_):
    kopf.apply({'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': 'child'}}, owner=body)


@pytest.mark.parametrize('fn, expected', [(applying, True), (posting, False), (returns_nothing, False)])
def test_whether_a_handler_applies_objects(fn, expected):
    assert facts.applies_objects(fn) is expected


def serve_all(registry, config):
    """Serve the apps and the configmaps, as the cluster resolves the selectors that the handlers give."""
    selector = Selector(group=APPS.group, version=APPS.version, plural=APPS.plural)
    owned = {relation.selector: CONFIGMAPS for _, handler in registry.iter_reconciling_handlers()
             for relation in handler.owns}
    return {served.resource.plural: served for served in facts.serve(registry, {selector: APPS, **owned}, config)}


def test_a_reconcile_handler_that_applies_creates_and_changes_its_owned_children(registry, config):
    kopf.on.reconcile(*SELECTOR, registry=registry, owns=['configmaps'])(applying)
    served = serve_all(registry, config)
    assert served['configmaps'].watched and served['configmaps'].applied
    assert not served['configmaps'].writes  # the children are applied, not patched as handled objects
    assert served['apps'].writes and not served['apps'].applied  # its back-off is kept in the annotations


def test_a_reconcile_handler_that_applies_nothing_only_watches_its_children(registry, config):
    kopf.on.reconcile(*SELECTOR, registry=registry, owns=['configmaps'])(returns_nothing)
    served = serve_all(registry, config)
    assert served['configmaps'].watched and not served['configmaps'].applied


def test_a_reconcile_handler_result_goes_to_the_status(registry, config):
    kopf.on.reconcile(*SELECTOR, registry=registry)(returns_dict)
    assert serve(registry, config).writes_status


def test_no_events_when_posting_is_off(registry, config):
    config.posting.enabled = False
    kopf.on.create(*SELECTOR, registry=registry)(posting)
    assert not serve(registry, config).posts


class Spec(pydantic.BaseModel):
    image: str


class CheckedSpec(pydantic.BaseModel):
    image: str

    @pydantic.field_validator('image')
    @classmethod
    def tagged(cls, value: str) -> str:
        if ':' not in value:
            raise ValueError("an image needs a tag")
        return value


class Status(pydantic.BaseModel):
    conditions: list[Condition] = []


class WithConditions(CustomResource, group='example.com', version='v1', plural='apps'):
    spec: CheckedSpec
    status: Status = Status()


class SchemaOnly(CustomResource, group='example.com', version='v1', kind='SchemaOnly', plural='apps'):
    spec: Spec
    status: Status = Status()


def test_a_typed_resource_with_validators_reports_invalid_specs_in_its_status_and_events(registry, config):
    kopf.on.create(WithConditions, registry=registry)(returns_nothing)
    served = serve(registry, config, selector=WithConditions.__kopf_selector__)
    assert served.writes_status and served.posts


def test_a_typed_resource_that_its_schema_checks_fully_never_reports(registry, config):
    kopf.on.create(SchemaOnly, registry=registry)(returns_nothing)
    served = serve(registry, config, selector=SchemaOnly.__kopf_selector__)
    assert not served.writes_status and not served.posts  # the server refuses all that the model would
