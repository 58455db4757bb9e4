"""Status conditions the Kubernetes way: transitions, observed generations, and no writes without changes."""
import datetime

import pytest

from kopf._structs.conditions import condition_status, get_condition, is_observed, set_condition
from kopf._structs.patches import Patch

T1 = datetime.datetime(2024, 1, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)
T2 = datetime.datetime(2024, 1, 1, 13, 0, 0, tzinfo=datetime.timezone.utc)


def body(generation=3, *conditions):
    return {'metadata': {'generation': generation}, 'status': {'conditions': list(conditions)}}


READY = {'type': 'Ready', 'status': 'True', 'reason': 'Fine', 'message': 'ok',
         'lastTransitionTime': '2024-01-01T12:00:00Z', 'observedGeneration': 3}
SYNCED = {'type': 'Synced', 'status': 'False', 'reason': 'Waiting', 'message': '',
          'lastTransitionTime': '2024-01-01T11:00:00Z', 'observedGeneration': 2}


def test_a_new_condition_is_added_with_its_transition_time_and_the_observed_generation():
    patch = Patch()
    assert set_condition(body(3, SYNCED), patch, type='Ready', status=True, reason='Fine', message='ok', now=T1)
    assert patch == {'status': {'conditions': [SYNCED, READY]}}


def test_an_unchanged_condition_writes_nothing():
    patch = Patch()
    assert not set_condition(body(3, READY), patch, type='Ready', status=True, reason='Fine', message='ok', now=T2)
    assert patch == {}


def test_a_new_message_keeps_the_transition_time():
    patch = Patch()
    assert set_condition(body(3, READY), patch, type='Ready', status='True', reason='Fine', message='better', now=T2)
    assert patch['status']['conditions'] == [{**READY, 'message': 'better'}]


def test_a_new_generation_is_observed_without_a_transition():
    patch = Patch()
    assert set_condition(body(4, READY), patch, type='Ready', status=True, reason='Fine', message='ok', now=T2)
    assert patch['status']['conditions'] == [{**READY, 'observedGeneration': 4}]


def test_a_new_status_is_a_transition():
    patch = Patch()
    assert set_condition(body(3, READY), patch, type='Ready', status=False, reason='Broken', now=T2)
    assert patch['status']['conditions'] == [{'type': 'Ready', 'status': 'False', 'reason': 'Broken', 'message': '',
                                              'lastTransitionTime': '2024-01-01T13:00:00Z', 'observedGeneration': 3}]


def test_several_conditions_in_one_patch_build_on_each_other():
    patch = Patch()
    set_condition(body(3, READY, SYNCED), patch, type='Synced', status=True, reason='Done', now=T2)
    set_condition(body(3, READY, SYNCED), patch, type='Ready', status=None, reason='Unsure', now=T2)
    types = [(c['type'], c['status']) for c in patch['status']['conditions']]
    assert types == [('Ready', 'Unknown'), ('Synced', 'True')]
    assert get_condition(body(3, READY, SYNCED), 'Synced', patch=patch)['reason'] == 'Done'


def test_objects_without_generations_have_conditions_without_observed_generations():
    patch = Patch()
    set_condition({'metadata': {}}, patch, type='Ready', status=True, now=T1)
    assert 'observedGeneration' not in patch['status']['conditions'][0]


def test_observed_generations():
    assert is_observed(body(3, READY), 'Ready')
    assert not is_observed(body(4, READY), 'Ready')
    assert not is_observed(body(3, READY, SYNCED))  # all of them
    assert is_observed(body(3, READY, SYNCED), 'Ready')
    assert not is_observed(body(3), 'Ready')
    assert not is_observed({'metadata': {}, 'status': {'conditions': [READY]}}, 'Ready')


def test_reading_conditions():
    assert get_condition(body(3, READY), 'Ready') == READY
    assert get_condition(body(3, READY), 'Synced') is None
    assert get_condition({'status': {'conditions': 'garbage'}}, 'Ready') is None


@pytest.mark.parametrize('value, expected', [(True, 'True'), (False, 'False'), (None, 'Unknown'),
                                             ('True', 'True'), ('False', 'False'), ('Unknown', 'Unknown')])
def test_statuses(value, expected):
    assert condition_status(value) == expected


@pytest.mark.parametrize('value', ['yes', 1, 'true'])
def test_a_wrong_status_is_named(value):
    with pytest.raises(ValueError, match="A condition's status is True, False or None"):
        set_condition(body(), Patch(), type='Ready', status=value)


def test_a_condition_needs_a_type():
    with pytest.raises(ValueError, match="A condition needs a type"):
        set_condition(body(), Patch(), type='', status=True)
