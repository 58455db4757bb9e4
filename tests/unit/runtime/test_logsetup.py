"""``kopf.configure()``: the levels and formats of ``kopf run``'s logging options."""
import json
import logging

import pytest

import kopf
from kopf._handlers.loggers import ObjectLogger
from kopf._runtime import logsetup

BODY = {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': 'n', 'namespace': 'ns', 'uid': 'u'}}


@pytest.fixture(autouse=True)
def restore_root_logging():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {name: logging.getLogger(name).level for name in ('asyncio', 'aiohttp')}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, old in levels.items():
        logging.getLogger(name).setLevel(old)


def output_of(capsys, **kwargs):
    kopf.configure(**kwargs)
    ObjectLogger(body=BODY, logger=logging.getLogger('test.logsetup')).warning("about the object")
    logging.getLogger('test.logsetup').warning("general")
    return capsys.readouterr().err.splitlines()


@pytest.mark.parametrize('kwargs, level', [
    ({}, logging.INFO),
    ({'verbose': True}, logging.DEBUG),
    ({'debug': True}, logging.DEBUG),
    ({'quiet': True}, logging.WARNING),
])
def test_levels(kwargs, level):
    kopf.configure(**kwargs)
    assert logging.getLogger().level == level


def test_verbose_keeps_the_libraries_quieter_than_debug():
    kopf.configure(verbose=True)
    assert logging.getLogger('aiohttp').level == logging.INFO
    kopf.configure(debug=True)
    assert logging.getLogger('aiohttp').level == logging.DEBUG


def test_plain_format_without_prefix_by_default_as_in_kopf(capsys):
    assert output_of(capsys, log_format=kopf.LogFormat.PLAIN) == ['about the object', 'general']


def test_plain_format_with_the_object_prefix(capsys):
    lines = output_of(capsys, log_format=kopf.LogFormat.PLAIN, log_prefix=True)
    assert lines == ['[ns/n] about the object', 'general']


def test_full_format_as_kopf_run_does_it(capsys):
    first, second = output_of(capsys, log_format='full', log_prefix=None)
    assert first.endswith('[WARNING ] [ns/n] about the object')
    assert first.startswith('[')
    assert second.endswith('[WARNING ] general')


def test_json_format_with_a_custom_refkey(capsys):
    first, second = output_of(capsys, log_format=kopf.LogFormat.JSON, log_refkey='k8s-obj')
    assert json.loads(first)['k8s-obj']['name'] == 'n'
    assert json.loads(first)['message'] == 'about the object'
    assert 'k8s-obj' not in json.loads(second)


def test_configuring_again_replaces_the_handler_instead_of_adding_one(capsys):
    kopf.configure()
    kopf.configure(log_format='plain')
    logging.getLogger('test.logsetup').warning("once")
    assert capsys.readouterr().err == 'once\n'


def test_unknown_formats_are_rejected_with_the_known_ones():
    with pytest.raises(ValueError, match='plain, full, json'):
        kopf.configure(log_format='fancy')


def test_log_formats_are_those_of_kopf():
    assert [f.name for f in kopf.LogFormat] == ['PLAIN', 'FULL', 'JSON']
    assert logsetup.parse_format('JSON') is kopf.LogFormat.JSON
