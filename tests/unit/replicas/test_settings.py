import pytest

from kopf._replicas import settings
from kopf._replicas.settings import PeeringError
from kopf.config import PeeringConfig


def test_the_namespace_is_the_explicit_one_then_the_served_one_then_the_credentials_one():
    config = PeeringConfig(mode='ha', name='op', identity='me')
    assert settings.resolve(config, namespaces=['a'], clusterwide=False, default_namespace='c').namespace == 'a'
    assert settings.resolve(config, namespaces=['a', 'b'], clusterwide=False, default_namespace='c').namespace == 'c'
    assert settings.resolve(config, namespaces=[], clusterwide=True, default_namespace=None).namespace == 'default'
    config.namespace = 'x'
    assert settings.resolve(config, namespaces=['a'], clusterwide=False, default_namespace='c').namespace == 'x'


def test_names_and_identities_must_fit_into_lease_names():
    with pytest.raises(PeeringError, match="identity 'Not_Valid'"):
        settings.resolve(PeeringConfig(mode='ha', name='op', identity='Not_Valid'), namespaces=[],
                         clusterwide=True, default_namespace=None)
    with pytest.raises(PeeringError, match="name 'a,b'"):
        settings.resolve(PeeringConfig(mode='shards', name='a,b', identity='me'), namespaces=[],
                         clusterwide=True, default_namespace=None)


def test_the_timing_must_leave_a_margin_before_the_lease_expires():
    config = PeeringConfig(mode='ha', name='op', identity='me', renew_deadline=20)
    with pytest.raises(PeeringError, match='retry_period < renew_deadline < lease_duration'):
        settings.resolve(config, namespaces=[], clusterwide=True, default_namespace=None)


def test_the_priority_must_be_a_whole_number():
    config = PeeringConfig(mode='ha', name='op', identity='me', priority='high')  # type: ignore[arg-type]
    with pytest.raises(PeeringError, match=r"config\.peering\.priority must be a whole number; got 'high'"):
        settings.resolve(config, namespaces=[], clusterwide=True, default_namespace=None)


def test_default_names_come_from_the_operators_code():
    assert settings.default_name(['path/to/my_op.py', 'pkg.mod']) == 'kopf-my-op-pkg-mod'
    assert len(settings.default_name(['x' * 100 + '.py'])) <= 63


def test_default_identities_are_valid_and_unique():
    identities = {settings.default_identity() for _ in range(10)}
    assert len(identities) == 10
    assert all(settings.NAME_RE.match(identity) and len(identity) <= 63 for identity in identities)


def test_the_fences_and_the_member_lease_name_follow_from_the_settings():
    resolved = settings.resolve(PeeringConfig(mode='shards', name='op', identity='me', lease_duration=15,
                                              renew_deadline=10, retry_period=2),
                                namespaces=[], clusterwide=True, default_namespace=None)
    assert resolved.soft_fence == resolved.request_timeout == 8
    assert resolved.member_lease_name == 'op-me'
