import json
import logging

import pytest
from aiohttp import web

from kopf._kube.errors import APIConflictError, APIServerError, APIUnprocessableError
from kopf._kube.patching import find_dropped, patch_obj
from kopf._structs.patches import apply
from kopf._structs.resources import Resource

WITH_STATUS = Resource('kopf.dev', 'v1', 'kopfexamples', 'KopfExample', subresources=frozenset({'status'}))
WITHOUT_STATUS = Resource('kopf.dev', 'v1', 'kopfexamples', 'KopfExample', namespaced=True)
PODS = Resource('', 'v1', 'pods', 'Pod', namespaced=True, subresources=frozenset({'status'}))
MAIN = '/apis/kopf.dev/v1/namespaces/ns1/kopfexamples/kex1'
STATUS = MAIN + '/status'

ORIGINAL = {
    'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
    'metadata': {'name': 'kex1', 'namespace': 'ns1', 'resourceVersion': '1', 'annotations': {'old': 'x'}},
    'spec': {'field': 'value'},
    'status': {'existing': 1},
}


def server_applying(*, prune=(), ignore_status=False, only_status=False):
    """
    A handler acting like the API server: applies the merge-patch, minus pruned fields.

    ``prune`` lists top-level sections' keys the "schema" does not know, as
    ('status', 'kopf') pairs; the main endpoint ignores status with a status
    subresource, and /status ignores everything else.
    """
    state = {'obj': json.loads(json.dumps(ORIGINAL))}

    async def handler(request):
        patch = await request.json()
        if ignore_status:
            patch.pop('status', None)
        if only_status:
            patch = {'status': patch.get('status', {})}
        new = apply(state['obj'], patch)
        for section, key in prune:
            new.get(section, {}).pop(key, None)
        new['metadata']['resourceVersion'] = str(int(new['metadata']['resourceVersion']) + 1)
        state['obj'] = new
        return web.json_response(new)

    return handler, state


async def bodies(requests):
    return [(r.path, await r.json()) for r in requests]


async def test_without_status_subresource_everything_goes_to_the_main_endpoint(context, aresponses, host, history):
    handler, _ = server_applying()
    aresponses.add(host, MAIN, 'PATCH', handler)
    patch = {'metadata': {'annotations': {'a': 'b'}}, 'status': {'kopf': {'progress': {'fn': {'retries': 1}}}}}
    result = await patch_obj(context=context, resource=WITHOUT_STATUS, namespace='ns1', name='kex1', patch=patch)
    assert await bodies(history()) == [(MAIN, patch)]
    assert history()[0].headers['Content-Type'] == 'application/merge-patch+json'
    assert result is not None
    assert result['status']['kopf'] == {'progress': {'fn': {'retries': 1}}}


async def test_with_status_subresource_the_patch_is_split_status_first(context, aresponses, host, history):
    status_handler, state = server_applying(only_status=True)
    aresponses.add(host, STATUS, 'PATCH', status_handler)

    async def main_on_the_same_object(request):  # continue from what the status patch left
        patch = await request.json()
        state['obj'] = apply(state['obj'], {key: value for key, value in patch.items() if key != 'status'})
        return web.json_response(state['obj'])

    aresponses.add(host, MAIN, 'PATCH', main_on_the_same_object)
    patch = {'metadata': {'annotations': {'a': 'b'}}, 'spec': {'x': 1}, 'status': {'done': True}}
    result = await patch_obj(context=context, resource=WITH_STATUS, namespace='ns1', name='kex1', patch=patch)
    # The main part (where the diff-base and the progress live) last: visible, it says the results are too.
    assert await bodies(history()) == [
        (STATUS, {'status': {'done': True}}),
        (MAIN, {'metadata': {'annotations': {'a': 'b'}}, 'spec': {'x': 1}}),
    ]
    assert all(r.headers['Content-Type'] == 'application/merge-patch+json' for r in history())
    assert result == state['obj']  # the object of the last response
    assert result['status']['done'] is True
    assert result['metadata']['annotations']['a'] == 'b'


async def test_no_status_request_without_status_in_the_patch(context, aresponses, host, history):
    handler, _ = server_applying(ignore_status=True)
    aresponses.add(host, MAIN, 'PATCH', handler)
    patch = {'metadata': {'annotations': {'a': 'b'}}}
    await patch_obj(context=context, resource=WITH_STATUS, namespace='ns1', name='kex1', patch=patch)
    assert [r.path for r in history()] == [MAIN]


async def test_no_main_request_with_only_status_in_the_patch(context, aresponses, host, history):
    handler, _ = server_applying(only_status=True)
    aresponses.add(host, STATUS, 'PATCH', handler)
    result = await patch_obj(context=context, resource=WITH_STATUS, namespace='ns1', name='kex1',
                             patch={'status': {'x': None}})
    assert await bodies(history()) == [(STATUS, {'status': {'x': None}})]
    assert result is not None


async def test_empty_patch_sends_nothing(context, aresponses, history):
    assert await patch_obj(context=context, resource=WITH_STATUS, namespace='ns1', name='kex1', patch={}) is None
    assert await patch_obj(context=context, resource=WITH_STATUS, namespace='ns1', name='kex1',
                           patch={'status': {}}) is None
    assert history() == []


async def test_cluster_scoped_and_core_urls(context, aresponses, host, history):
    aresponses.add(host, '/api/v1/namespaces/ns1/pods/p1', 'PATCH', {'metadata': {'labels': {'a': 'b'}}})
    await patch_obj(context=context, resource=PODS, namespace='ns1', name='p1',
                    patch={'metadata': {'labels': {'a': 'b'}}})
    assert [r.path for r in history()] == ['/api/v1/namespaces/ns1/pods/p1']


# --- Dropped fields -------------------------------------------------------------------------------

async def test_pruned_fields_are_warned_about_once_naming_each_field(context, aresponses, host, caplog):
    handler, _ = server_applying(prune=[('status', 'kopf'), ('spec', 'unknown')])
    aresponses.add(host, MAIN, 'PATCH', handler)
    patch = {'spec': {'field': 'new', 'unknown': 1},
             'status': {'kopf': {'progress': {'fn1': {'retries': 1}, 'fn2': {'retries': 0}}}}}
    with caplog.at_level(logging.WARNING, logger='kopf._kube.patching'):
        result = await patch_obj(context=context, resource=WITHOUT_STATUS, namespace='ns1', name='kex1',
                                 patch=patch)
    assert result is not None
    warnings = [r for r in caplog.records if r.name == 'kopf._kube.patching' and r.levelno == logging.WARNING]
    assert len(warnings) == 1
    message = warnings[0].getMessage()
    assert 'status.kopf.progress.fn1.retries' in message
    assert 'status.kopf.progress.fn2.retries' in message
    assert 'spec.unknown' in message
    assert 'spec.field' not in message
    assert 'KopfExample ns1/kex1' in message
    assert 'x-kubernetes-preserve-unknown-fields' in message
    assert 'kopf.AnnotationsProgressStorage' in message


async def test_status_ignored_by_the_main_endpoint_is_warned_about(context, aresponses, host, caplog):
    # The resource declares no status subresource, but the server behaves as if it had one.
    handler, _ = server_applying(ignore_status=True)
    aresponses.add(host, MAIN, 'PATCH', handler)
    await patch_obj(context=context, resource=WITHOUT_STATUS, namespace='ns1', name='kex1',
                    patch={'status': {'kopf': {'dummy': 'x'}}})
    assert 'status.kopf.dummy' in caplog.text


async def test_pruned_status_via_the_status_subresource_is_warned_about(context, aresponses, host, caplog):
    handler, _ = server_applying(only_status=True, prune=[('status', 'kopf')])
    aresponses.add(host, STATUS, 'PATCH', handler)
    await patch_obj(context=context, resource=WITH_STATUS, namespace='ns1', name='kex1',
                    patch={'status': {'kopf': {'progress': {'fn': {'retries': 2}}}}})
    assert 'status.kopf.progress.fn.retries' in caplog.text


async def test_kept_fields_cause_no_warning(context, aresponses, host, caplog):
    handler, _ = server_applying()
    aresponses.add(host, MAIN, 'PATCH', handler)
    patch = {'metadata': {'annotations': {'a': 'b', 'old': None}, 'resourceVersion': '1'},
             'spec': {'list': [1, {'x': 2}], 'field': None},
             'status': {'nested': {'deep': {'value': 0}}, 'flag': False}}
    with caplog.at_level(logging.DEBUG, logger='kopf._kube.patching'):
        await patch_obj(context=context, resource=WITHOUT_STATUS, namespace='ns1', name='kex1', patch=patch)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


async def test_a_deletion_that_did_not_happen_is_warned_about(context, aresponses, host, caplog):
    aresponses.add(host, MAIN, 'PATCH', ORIGINAL)  # the server ignores the patch entirely
    await patch_obj(context=context, resource=WITHOUT_STATUS, namespace='ns1', name='kex1',
                    patch={'metadata': {'annotations': {'old': None}}})
    assert 'metadata.annotations.old' in caplog.text


async def test_the_warning_goes_to_the_given_logger(context, aresponses, host, caplog):
    handler, _ = server_applying(prune=[('status', 'kopf')])
    aresponses.add(host, MAIN, 'PATCH', handler)
    logger = logging.getLogger('kopf.objects.test')
    with caplog.at_level(logging.WARNING):
        await patch_obj(context=context, resource=WITHOUT_STATUS, namespace='ns1', name='kex1',
                        patch={'status': {'kopf': {'x': 1}}}, logger=logger)
    assert [r.name for r in caplog.records if r.levelno == logging.WARNING] == ['kopf.objects.test']


def test_find_dropped():
    sent = {'a': {'b': 1, 'c': [1, 2], 'd': None, 'e': {'f': 'g'}}, 'metadata': {'resourceVersion': '5'}}
    kept = {'a': {'b': 1, 'c': [1, 2], 'e': {'f': 'g'}}, 'metadata': {'resourceVersion': '6'}}
    assert find_dropped(sent, kept) == []
    changed = {'a': {'b': 2, 'c': [1], 'd': 0}}
    assert find_dropped(sent, changed) == [('a', 'b'), ('a', 'c'), ('a', 'd'), ('a', 'e', 'f')]
    assert find_dropped(sent, {'a': 'not-a-dict'}) == [('a', 'b'), ('a', 'c'), ('a', 'e', 'f')]


# --- Errors ---------------------------------------------------------------------------------------

def status(aresponses, code, message):
    return aresponses.Response(status=code, content_type='application/json',
                               text=json.dumps({'kind': 'Status', 'code': code, 'message': message}))


async def test_gone_object_gives_none_quietly(context, aresponses, host, history, caplog):
    aresponses.add(host, STATUS, 'PATCH', status(aresponses, 404, 'not found'))
    with caplog.at_level(logging.DEBUG, logger='kopf._kube.patching'):
        result = await patch_obj(context=context, resource=WITH_STATUS, namespace='ns1', name='kex1',
                                 patch={'metadata': {'annotations': {'a': 'b'}}, 'status': {'x': 1}})
    assert result is None
    assert [r.path for r in history()] == [STATUS]  # no main part after the object is gone
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.parametrize('code, cls', [(409, APIConflictError), (422, APIUnprocessableError)])
async def test_4xx_errors_are_raised_typed(context, aresponses, host, history, code, cls):
    aresponses.add(host, MAIN, 'PATCH', status(aresponses, code, 'the reason'), repeat=5)
    with pytest.raises(cls, match='the reason'):
        await patch_obj(context=context, resource=WITHOUT_STATUS, namespace='ns1', name='kex1',
                        patch={'spec': {'x': 1}})
    assert len(history()) == 1


async def test_5xx_is_raised_after_the_bounded_retries(context, aresponses, host, history):
    aresponses.add(host, MAIN, 'PATCH', status(aresponses, 500, 'etcd timeout'), repeat=10)
    with pytest.raises(APIServerError, match='etcd timeout'):
        await patch_obj(context=context, resource=WITHOUT_STATUS, namespace='ns1', name='kex1',
                        patch={'spec': {'x': 1}})
    assert len(history()) == 3  # 1 + 2 retries of the test context


def test_an_emptied_list_that_comes_back_absent_is_not_dropped():
    # Removing the last finalizer: the server omits the empty list in its answer.
    assert find_dropped({'metadata': {'finalizers': []}}, {'metadata': {'name': 'n'}}) == []
    assert find_dropped({'metadata': {'finalizers': ['a']}}, {'metadata': {'name': 'n'}}) == [
        ('metadata', 'finalizers')]
