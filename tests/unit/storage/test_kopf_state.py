"""
What the released Kopf (0.27 to 1.x) leaves on objects is read as ours, purged with ours, replaced by ours.

The records and keys here are as Kopf wrote them on a real API server
(observed with ``kopf run`` of Kopf 0.27.1, 0.28.3, 1.36.2 and 1.45.2).
"""
import copy
import json
import logging

import pytest

from kopf._storage.diffbase import AnnotationsDiffBaseStorage
from kopf._storage.progress import AnnotationsProgressStorage, SmartProgressStorage, StatusProgressStorage
from kopf._structs.bodies import Body
from kopf._structs.ids import HandlerId
from kopf._structs.patches import Patch

from .conftest import applied

LONG = HandlerId('a-very-long-handler-id-that-goes-well-beyond-sixty-three-characters-in-total')
LONG_V2 = 'kopf.zalando.org/a-very-long-handler-id-that-goes-well-beyond-sixty-three-whspPA'
LONG_V1 = 'kopf.zalando.org/a-very-long-handler-id-that-goes-well-b-whspPA'

# Kopf 1.45.2:
K1_SUCCESS = ('{"started":"2026-11-30T07:37:37.779133+00:00","stopped":"2026-11-30T07:37:37.784942+00:00",'
              '"purpose":"create","retries":1,"success":true,"failure":false}')
K1_RETRYING = ('{"started":"2026-11-30T07:37:37.779158+00:00","delayed":"2026-11-30T07:37:40.824233+00:00",'
               '"purpose":"create","retries":1,"success":false,"failure":false,"message":"not yet"}')
K1_RETRYING_2 = ('{"started":"2026-11-30T07:37:37.779158+00:00","delayed":"2026-11-30T07:37:43.833119+00:00",'
                 '"purpose":"create","retries":2,"success":false,"failure":false,"message":"not yet"}')
K1_PARENT = ('{"started":"2026-11-30T07:37:37.779155+00:00","delayed":"2026-11-30T07:37:37.819404+00:00",'
             '"purpose":"create","retries":1,"success":false,"failure":false,"message":"None",'
             '"subrefs":["parent/child1","parent/child2"]}')
# Kopf 0.28.3 (naive times):
K028_STARTED = '{"started":"2026-11-30T07:38:25.471159","purpose":"create","retries":0,"success":false,"failure":false}'
# Kopf 0.27.1 (spaces, no purpose):
K027_SUCCESS = ('{"started": "2026-11-30T07:38:26.158655", "stopped": "2026-11-30T07:38:26.159240", '
                '"retries": 1, "success": true, "failure": false}')


def body_with(annotations=None, status=None, spec=None):
    raw = {'apiVersion': 'e2e.kopf.dev/v1', 'kind': 'KopfPeer',
           'metadata': {'name': 'obj', 'namespace': 'ns', 'annotations': {'user': 'x', **(annotations or {})}},
           'spec': spec or {'field': 'a'}}
    if status is not None:
        raw['status'] = status
    return Body(raw)


# Reading

@pytest.mark.parametrize('key', [LONG_V2, LONG_V1])
@pytest.mark.parametrize('value', [K1_SUCCESS, K027_SUCCESS])
def test_a_long_id_is_read_under_either_of_kopfs_forms(key, value):
    record = AnnotationsProgressStorage().fetch(key=LONG, body=body_with({key: value}))
    assert record is not None
    assert record['success'] is True and record['retries'] == 1


@pytest.mark.parametrize('handler_id, key', [
    ('parent/child1', 'kopf.zalando.org/parent.child1'),
    ('fieldfn/spec.field', 'kopf.zalando.org/fieldfn.spec.field'),
])
def test_sub_handlers_and_field_handlers_are_read_under_kopfs_dotted_keys(handler_id, key):
    storage = AnnotationsProgressStorage()
    assert storage.make_key(HandlerId(handler_id)) != key  # ours differs: it carries a hash
    assert storage.fetch(key=HandlerId(handler_id), body=body_with({key: K1_SUCCESS}))['success'] is True


def test_kopfs_extra_fields_are_read_not_rejected():
    record = AnnotationsProgressStorage().fetch(key=HandlerId('parent'),
                                                body=body_with({'kopf.zalando.org/parent': K1_PARENT}))
    assert record == {
        'started': '2026-11-30T07:37:37.779155+00:00', 'delayed': '2026-11-30T07:37:37.819404+00:00',
        'retries': 1, 'success': False, 'failure': False, 'message': 'None',
        'subrefs': ['parent/child1', 'parent/child2'],
    }


def test_kopfs_keys_under_a_custom_prefix():
    storage = AnnotationsProgressStorage(prefix='my-operator.example.com')
    body = body_with({'my-operator.example.com/a-very-long-handler-id-that-goes-whspPA': K1_SUCCESS,
                      'kopf.zalando.org/' + LONG_V1.split('/')[1]: K1_RETRYING})
    assert storage.fetch(key=LONG, body=body)['success'] is True


def test_the_most_advanced_record_wins_and_the_choice_is_logged(caplog):
    body = body_with({LONG_V2: K1_RETRYING, LONG_V1: K1_SUCCESS})
    with caplog.at_level(logging.DEBUG, logger='kopf._storage'):
        record = AnnotationsProgressStorage().fetch(key=LONG, body=body)
    assert record['success'] is True
    [message] = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert LONG_V1 in message.getMessage() and 'most advanced' in message.getMessage()


def test_more_retries_beat_fewer():
    body = body_with({LONG_V2: K1_RETRYING, LONG_V1: K1_RETRYING_2})
    assert AnnotationsProgressStorage().fetch(key=LONG, body=body)['retries'] == 2


def test_our_record_loses_to_a_more_advanced_one_of_kopf():
    storage = AnnotationsProgressStorage()
    ours = storage.make_key(HandlerId('parent/child1'))
    body = body_with({ours: K1_RETRYING, 'kopf.zalando.org/parent.child1': K1_SUCCESS})
    assert storage.fetch(key=HandlerId('parent/child1'), body=body)['success'] is True


def test_identical_copies_are_no_choice_and_are_not_logged(caplog):
    body = body_with({LONG_V2: K1_SUCCESS, LONG_V1: K1_SUCCESS})
    with caplog.at_level(logging.DEBUG, logger='kopf._storage'):
        assert AnnotationsProgressStorage().fetch(key=LONG, body=body)['success'] is True
    assert not caplog.records


def test_a_corrupt_kopf_record_warns_once_and_counts_as_absent(caplog):
    body = body_with({LONG_V2: '{"started": 5', LONG_V1: K028_STARTED})
    with caplog.at_level(logging.WARNING, logger='kopf._storage'):
        record = AnnotationsProgressStorage().fetch(key=LONG, body=body)
    assert record == {'started': '2026-11-30T07:38:25.471159', 'retries': 0, 'success': False, 'failure': False}
    [warning] = caplog.records
    assert LONG_V2 in warning.getMessage() and 'ns/obj' in warning.getMessage()


# Writing and forgetting

def test_store_writes_ours_and_removes_kopfs_forms():
    storage = AnnotationsProgressStorage()
    body = body_with({LONG_V2: K1_RETRYING, LONG_V1: K1_RETRYING, 'kopf.zalando.org/plain': K1_SUCCESS})
    patch = Patch()
    storage.store(key=LONG, record={'started': '2020-01-01T00:00:00+00:00', 'retries': 2}, body=body, patch=patch)
    assert patch['metadata']['annotations'] == {
        storage.make_key(LONG): '{"retries":2,"started":"2020-01-01T00:00:00+00:00"}',
        LONG_V2: None,
        LONG_V1: None,
    }
    assert storage.fetch(key=LONG, body=applied(body, patch))['retries'] == 2


def test_store_keeps_the_key_when_ours_and_kopfs_coincide():
    body = body_with({'kopf.zalando.org/plain': K1_RETRYING})
    patch = Patch()
    AnnotationsProgressStorage().store(key=HandlerId('plain'), record={'started': 's'}, body=body, patch=patch)
    assert patch == {'metadata': {'annotations': {'kopf.zalando.org/plain': '{"started":"s"}'}}}


def test_purge_removes_every_form():
    storage = AnnotationsProgressStorage()
    body = body_with({LONG_V2: K1_SUCCESS, LONG_V1: K1_SUCCESS, storage.make_key(LONG): K1_SUCCESS})
    patch = Patch()
    storage.purge(key=LONG, body=body, patch=patch)
    assert patch == {'metadata': {'annotations': {LONG_V2: None, LONG_V1: None, storage.make_key(LONG): None}}}


def test_purge_of_a_parent_removes_sub_handler_records_that_kopf_027_left_behind():
    body = body_with({
        'kopf.zalando.org/parent.child1': K027_SUCCESS,
        'kopf.zalando.org/parent.child2-with-a-long-name-3cWIFA': K027_SUCCESS,
        'kopf.zalando.org/parent.notes': 'not a record: stays',
        'kopf.zalando.org/parentx': K027_SUCCESS,  # another handler: stays
        'other.prefix/parent.child1': K027_SUCCESS,  # another operator's: stays
    })
    patch = Patch()
    AnnotationsProgressStorage().purge(key=HandlerId('parent'), body=body, patch=patch)
    assert patch == {'metadata': {'annotations': {
        'kopf.zalando.org/parent.child1': None,
        'kopf.zalando.org/parent.child2-with-a-long-name-3cWIFA': None,
    }}}


def test_status_purge_of_a_parent_removes_its_sub_handlers_records():
    status = {'kopf': {'progress': {'parent': json.loads(K027_SUCCESS), 'parent/child1': json.loads(K027_SUCCESS),
                                    'parentx': json.loads(K027_SUCCESS)}}}
    patch = Patch()
    StatusProgressStorage().purge(key=HandlerId('parent'), body=body_with(status=status), patch=patch)
    assert patch == {'status': {'kopf': {'progress': {'parent': None, 'parent/child1': None}}}}


def test_smart_reads_kopfs_status_records_and_moves_them_to_annotations():
    status = {'kopf': {'progress': {'parent/child1': json.loads(K028_STARTED)}, 'dummy': '2026-11-30T07:38:29'}}
    body = body_with(status=status)
    storage = SmartProgressStorage()
    assert storage.fetch(key=HandlerId('parent/child1'), body=body)['retries'] == 0
    patch = Patch()
    storage.store(key=HandlerId('parent/child1'), record={'started': 's', 'retries': 1}, body=body, patch=patch)
    assert patch['status'] == {'kopf': {'progress': {'parent/child1': None}}}
    assert patch['metadata']['annotations'] == {storage.annotations.make_key(HandlerId('parent/child1')):
                                                '{"retries":1,"started":"s"}'}


def test_smart_clearing_the_wake_up_marker_clears_kopfs_status_marker_too():
    body = body_with({'kopf.zalando.org/touch-dummy': 't'}, status={'kopf': {'dummy': '2026-11-30T07:38:29'}})
    patch = Patch()
    SmartProgressStorage().touch(body=body, patch=patch, value=None)
    assert patch == {'metadata': {'annotations': {'kopf.zalando.org/touch-dummy': None}},
                     'status': {'kopf': {'dummy': None}}}
    patch = Patch()
    SmartProgressStorage().touch(body=body, patch=patch, value='wake up')
    assert patch == {'metadata': {'annotations': {'kopf.zalando.org/touch-dummy': 'wake up'}}}


# The essence

KOPF_LEFTOVERS = {
    LONG_V2: K1_RETRYING,
    LONG_V1: K1_RETRYING,
    'kopf.zalando.org/parent': K1_PARENT,
    'kopf.zalando.org/parent.child1': K027_SUCCESS,
    'kopf.zalando.org/fieldfn.spec.field': K028_STARTED,
    'kopf.zalando.org/touch-dummy': '2026-11-30T07:37:39.836907+00:00',
    'kopf.zalando.org/last-handled-configuration': '{"spec":{"field":"a"},"metadata":{"annotations":{"user":"x"}}}\n',
    'other-op.example.com/flaky': K1_RETRYING,
    'other-op.example.com/touch-dummy': '2026-11-30T07:37:39',
    'other-op.example.com/kopf-managed': 'yes',
    'other-op.example.com/last-handled-configuration': '{"spec":{}}\n',
}


@pytest.mark.parametrize('progress', [AnnotationsProgressStorage, SmartProgressStorage, StatusProgressStorage])
def test_the_essence_drops_everything_kopf_wrote_in_any_form_and_prefix(progress):
    body = body_with(KOPF_LEFTOVERS, status={'kopf': {'progress': {'flaky': json.loads(K1_RETRYING)}}})
    essence = progress().clear(essence=AnnotationsDiffBaseStorage().build(body=body))
    assert essence == {'metadata': {'annotations': {'user': 'x'}}, 'spec': {'field': 'a'}}


def test_kopfs_essence_is_equal_to_ours_so_nothing_looks_changed():
    body = body_with(KOPF_LEFTOVERS)
    diffbase = AnnotationsDiffBaseStorage()
    new = AnnotationsProgressStorage().clear(essence=diffbase.build(body=body))
    old = AnnotationsProgressStorage().clear(essence=copy.deepcopy(diffbase.fetch(body=body)))
    assert new == old


@pytest.mark.parametrize('value', [
    '{"spec":{"field":"a"},"metadata":{"annotations":{"user":"x"}}}\n',  # Kopf 0.28 - 1.x
    '{"spec": {"field": "a"}, "metadata": {"annotations": {"user": "x"}}}',  # Kopf 0.27
])
def test_kopfs_diff_base_is_read_and_not_rewritten_when_unchanged(value):
    body = body_with({'kopf.zalando.org/last-handled-configuration': value})
    storage = AnnotationsDiffBaseStorage()
    essence = storage.fetch(body=body)
    assert essence == {'spec': {'field': 'a'}, 'metadata': {'annotations': {'user': 'x'}}}
    patch = Patch()
    storage.store(body=body, patch=patch, essence=essence)
    assert patch == {}
    storage.store(body=body, patch=patch, essence={'spec': {'field': 'b'}})
    assert patch['metadata']['annotations'] == {'kopf.zalando.org/last-handled-configuration': '{"spec":{"field":"b"}}'}
