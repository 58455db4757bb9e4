import logging

import pytest

import kopf
from kopf.config import OperatorConfig


def test_settings_and_config_are_the_same_class():
    assert kopf.OperatorSettings is kopf.OperatorConfig


def test_persistence_defaults():
    config = OperatorConfig()
    assert isinstance(config.persistence.progress_storage, kopf.SmartProgressStorage)
    assert isinstance(config.persistence.diffbase_storage, kopf.AnnotationsDiffBaseStorage)
    assert config.persistence.finalizer == 'kopf.zalando.org/KopfFinalizerMarker'
    assert config.persistence.max_unpersisted_time == 1.0


def test_configs_do_not_share_storages():
    assert OperatorConfig().persistence.progress_storage is not OperatorConfig().persistence.progress_storage


def test_persistence_is_configurable_as_in_the_seed_example():
    config = OperatorConfig()
    config.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix='my-op.example.com')
    config.persistence.progress_storage = kopf.StatusProgressStorage(field='status.my-op')
    config.persistence.progress_storage = kopf.SmartProgressStorage(prefix='my-op.example.com', field='status.my-op')
    config.persistence.diffbase_storage = kopf.StatusDiffBaseStorage()
    assert isinstance(config.persistence.progress_storage, kopf.SmartProgressStorage)


@pytest.mark.parametrize('name, value, expected', [
    ('progress_storage', kopf.AnnotationsDiffBaseStorage(), 'kopf.ProgressStorage'),
    ('diffbase_storage', kopf.AnnotationsProgressStorage(), 'kopf.DiffBaseStorage'),
    ('progress_storage', 'annotations', 'kopf.ProgressStorage'),
    ('finalizer', None, 'str'),
    ('max_unpersisted_time', '1s', 'float'),
    ('max_unpersisted_time', True, 'float'),
])
def test_wrong_types_are_rejected_naming_the_expected_class(name, value, expected):
    config = OperatorConfig()
    with pytest.raises(TypeError, match=expected):
        setattr(config.persistence, name, value)


@pytest.mark.parametrize('value, expected', [(0, 0.0), (2, 2.0), (0.5, 0.5)])
def test_the_unpersisted_time_is_a_number_of_seconds(value, expected):
    config = OperatorConfig()
    config.persistence.max_unpersisted_time = value
    assert config.persistence.max_unpersisted_time == expected
    assert isinstance(config.persistence.max_unpersisted_time, float)


@pytest.mark.parametrize('value', [-1, -0.1, float('nan')])
def test_the_unpersisted_time_cannot_be_negative(value):
    with pytest.raises(ValueError, match=r'config.persistence.max_unpersisted_time must be a number of seconds >= 0'):
        OperatorConfig().persistence.max_unpersisted_time = value


def test_unknown_persistence_settings_are_rejected():
    with pytest.raises(AttributeError, match='progress_store'):
        OperatorConfig().persistence.progress_store = kopf.SmartProgressStorage()


def test_frozen_persistence_ignores_changes_loudly(caplog):
    config = OperatorConfig()
    original = config.persistence.progress_storage
    config.persistence.freeze()
    with caplog.at_level(logging.WARNING, logger='kopf.config'):
        config.persistence.progress_storage = kopf.AnnotationsProgressStorage()
    assert config.persistence.progress_storage is original
    assert 'has no effect' in caplog.text


def test_other_groups_have_defaults():
    config = OperatorConfig()
    assert config.posting.enabled is True
    assert config.posting.level == logging.INFO
    assert config.watching.reconnect_backoff > 0
    assert config.batching.batch_window > 0
    assert config.batching.idle_timeout > 0
    assert config.execution.executor is not None


def test_max_workers_resizes_the_executor():
    config = OperatorConfig()
    old = config.execution.executor
    config.execution.max_workers = 3
    assert config.execution.max_workers == 3
    assert config.execution.executor is not old
    with pytest.raises(ValueError):
        config.execution.max_workers = 0


def test_peering_defaults_are_those_of_kubernetes_controllers():
    peering = OperatorConfig().peering
    assert peering.mode == 'standalone' and peering.standalone
    assert (peering.lease_duration, peering.renew_deadline, peering.retry_period) == (15, 10.0, 2.0)
    peering.validate()


@pytest.mark.parametrize('changes, message', [
    ({'mode': 'peers'}, "mode must be one of standalone, ha, shards"),
    ({'lease_duration': 1.5}, "lease_duration must be a whole number"),
    ({'renew_deadline': 15}, "retry_period < renew_deadline < lease_duration"),
    ({'retry_period': 0}, "retry_period < renew_deadline < lease_duration"),
])
def test_peering_settings_that_cannot_work_are_named(changes, message):
    peering = OperatorConfig().peering
    for name, value in changes.items():
        setattr(peering, name, value)
    with pytest.raises(ValueError, match=message):
        peering.validate()


def test_peering_standalone_is_kopfs_spelling_of_the_mode():
    peering = OperatorConfig().peering
    peering.mode = 'shards'
    peering.standalone = True
    assert peering.mode == 'standalone'
    with pytest.raises(ValueError, match=r"set config\.peering\.mode to 'ha' or 'shards'"):
        peering.standalone = False


@pytest.mark.parametrize('value', ['bad finalizer!!', 'Example.com/fin', 'a/b/c', '', 'x' * 64, 'ns/-fin'])
def test_an_invalid_finalizer_is_refused_naming_it(value):
    config = OperatorConfig()
    with pytest.raises(ValueError, match=r"config\.persistence\.finalizer must be a valid finalizer name, got "):
        config.persistence.finalizer = value
    assert config.persistence.finalizer == 'kopf.zalando.org/KopfFinalizerMarker'


@pytest.mark.parametrize('value', ['my-op.example.com/finalizer', 'simple-name', 'example.com/Fin_1.x'])
def test_valid_finalizers_are_accepted(value):
    config = OperatorConfig()
    config.persistence.finalizer = value
    assert config.persistence.finalizer == value


@pytest.mark.parametrize('storage_class', [kopf.StatusProgressStorage, kopf.SmartProgressStorage])
@pytest.mark.parametrize('field', ['metadata.name', 'spec', 'status', 'metadata.annotations.x'])
def test_status_progress_storages_refuse_fields_outside_of_the_status(storage_class, field):
    with pytest.raises(ValueError, match=f"must be a field under 'status' .* not '{field}'"):
        storage_class(field=field)
    with pytest.raises(ValueError, match=f"not '{field}'"):
        kopf.StatusProgressStorage(touch_field=field)


@pytest.mark.parametrize('field', ['metadata.annotations', 'spec.x', 'status'])
def test_status_diffbase_storages_refuse_fields_outside_of_the_status(field):
    with pytest.raises(ValueError, match=f"must be a field under 'status' .* not '{field}'"):
        kopf.StatusDiffBaseStorage(field=field)
    storage = kopf.StatusDiffBaseStorage()
    with pytest.raises(ValueError, match=f"not '{field}'"):
        storage.field = field
