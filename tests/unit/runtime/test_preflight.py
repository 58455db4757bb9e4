"""
The startup check: storages that write where a served resource's schema prunes are reported before any handling.
"""
import logging

import pytest

import kopf
from kopf._runtime import preflight
from kopf._structs.resources import Resource
from kopf.config import PersistenceConfig

KEX = Resource('kopf.dev', 'v1', 'kopfexamples', 'KopfExample', namespaced=True)
PODS = Resource('', 'v1', 'pods', 'Pod', namespaced=True)
CLUSTERS = Resource('kopf.dev', 'v1', 'clusters', 'Cluster', namespaced=False)
CRD_PATH = '/apis/apiextensions.k8s.io/v1/customresourcedefinitions/kopfexamples.kopf.dev'


def crd(status):
    return {'spec': {'versions': [{'name': 'v1', 'schema': {'openAPIV3Schema': {
        'type': 'object', 'properties': {'status': status}}}}]}}


def status_storage(**kwargs):
    return PersistenceConfig(progress_storage=kopf.StatusProgressStorage(), **kwargs)


async def test_a_pruning_schema_is_one_warning_naming_the_crd_the_field_and_the_ways_out(
        context, aresponses, host, caplog):
    aresponses.add(host, CRD_PATH, 'GET', crd({'type': 'object'}))
    with caplog.at_level(logging.WARNING):
        await preflight.check_persistence(context=context, resources=[KEX, KEX], persistence=status_storage())
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    text = warning.getMessage()
    assert 'kopfexamples.kopf.dev' in text and 'status.kopf' in text and 'status.kopf.progress' in text
    assert 'x-kubernetes-preserve-unknown-fields' in text and 'kopf.AnnotationsProgressStorage' in text


async def test_a_schema_that_keeps_the_fields_is_fine(context, aresponses, host, caplog):
    aresponses.add(host, CRD_PATH, 'GET', crd({'type': 'object', 'x-kubernetes-preserve-unknown-fields': True}))
    await preflight.check_persistence(context=context, resources=[KEX], persistence=status_storage())
    assert not [r for r in caplog.records if r.name.startswith('kopf')]


async def test_a_built_in_resource_is_reported_without_asking_for_a_crd(context, caplog):
    await preflight.check_persistence(context=context, resources=[PODS], persistence=status_storage())
    assert 'pods.v1' in caplog.text and 'fixed schema' in caplog.text and 'kopf.SQLiteProgressStorage' in caplog.text


async def test_the_option_turns_the_warning_into_a_startup_error(context, aresponses, host, caplog):
    aresponses.add(host, CRD_PATH, 'GET', crd({'type': 'object'}))
    with pytest.raises(kopf.StorageError, match=r'status\.kopf.*fail_on_pruning'):
        await preflight.check_persistence(context=context, resources=[KEX],
                                          persistence=status_storage(fail_on_pruning=True))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_without_the_permission_to_read_crds_the_check_is_skipped(context, aresponses, host, caplog):
    aresponses.add(host, CRD_PATH, 'GET', aresponses.Response(status=403, text='{"message": "forbidden"}'))
    with caplog.at_level(logging.INFO):
        await preflight.check_persistence(context=context, resources=[KEX],
                                          persistence=status_storage(fail_on_pruning=True))
    [note] = [r for r in caplog.records if r.name == 'kopf._runtime.preflight']
    assert note.levelno == logging.INFO and 'forbidden' in note.getMessage()


async def test_the_default_storages_need_no_check_and_no_request(context):
    await preflight.check_persistence(context=context, resources=[KEX, PODS], persistence=PersistenceConfig())


async def test_configmap_storages_need_a_namespace_for_cluster_scoped_resources(context):
    persistence = PersistenceConfig(progress_storage=kopf.ConfigMapProgressStorage())
    with pytest.raises(kopf.StorageError, match=r'clusters\.v1\.kopf\.dev is cluster-scoped'):
        await preflight.check_persistence(context=context, resources=[KEX, CLUSTERS], persistence=persistence)
    persistence = PersistenceConfig(progress_storage=kopf.ConfigMapProgressStorage(namespace='op'))
    await preflight.check_persistence(context=context, resources=[CLUSTERS], persistence=persistence)
