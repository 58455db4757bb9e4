import datetime
import io
import json
import logging

import pytest

import kopf
from kopf._handlers import loggers

BODY = {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': 'n', 'namespace': 'ns', 'uid': 'u'}}


def capture(formatter):
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    log = logging.getLogger('test.loggers')
    log.handlers[:] = [handler]
    log.propagate = False
    log.setLevel(logging.DEBUG)
    return log, stream


def test_object_logger_attaches_the_reference():
    log, stream = capture(logging.Formatter('%(message)s'))
    records = []
    log.addFilter(lambda r: records.append(r) or True)
    loggers.ObjectLogger(body=BODY, logger=log).info("hello %s", 'world')
    assert records[0].k8s_ref == {'apiVersion': 'v1', 'kind': 'ConfigMap', 'name': 'n', 'namespace': 'ns', 'uid': 'u'}
    assert stream.getvalue() == 'hello world\n'


def test_object_formatter_prefixes_per_object_messages_only():
    log, stream = capture(loggers.ObjectFormatter('%(levelname)s %(message)s'))
    loggers.ObjectLogger(body=BODY, logger=log).info("handled")
    log.info("general")
    assert stream.getvalue() == 'INFO [ns/n] handled\nINFO general\n'


def test_json_formatter_emits_one_object_per_line_with_kopfs_keys():
    log, stream = capture(loggers.JsonFormatter())
    loggers.ObjectLogger(body=BODY, logger=log).warning("careful")
    data = json.loads(stream.getvalue())
    assert set(data) == {'message', 'object', 'timestamp', 'severity'}
    assert data['severity'] == 'warn'
    assert data['message'] == 'careful'
    assert data['object']['name'] == 'n'
    assert datetime.datetime.fromisoformat(data['timestamp']).tzinfo is not None


@pytest.mark.parametrize('level, name', [
    (logging.DEBUG, 'debug'), (logging.INFO, 'info'), (25, 'warn'), (logging.WARNING, 'warn'),
    (logging.ERROR, 'error'), (logging.CRITICAL, 'fatal'),
])
def test_json_severities_are_named_as_in_kopf(level, name):
    log, stream = capture(loggers.JsonFormatter())
    log.setLevel(logging.DEBUG)
    log.log(level, "x")
    assert json.loads(stream.getvalue())['severity'] == name


def test_json_logs_carry_the_extra_fields_and_the_traceback():
    log, stream = capture(loggers.JsonFormatter())
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed", extra={"custom_field": 42, "odd": object()})
    data = json.loads(stream.getvalue())
    assert data['custom_field'] == 42
    assert data['odd'].startswith('<object')  # what JSON cannot hold is written as text
    assert data['exc_info'].startswith('Traceback') and 'ValueError: boom' in data['exc_info']


def test_json_formatter_puts_the_reference_under_the_refkey():
    log, stream = capture(loggers.JsonFormatter(refkey='k8s'))
    loggers.ObjectLogger(body=BODY, logger=log).info("hi")
    data = json.loads(stream.getvalue())
    assert data['k8s']['name'] == 'n'
    assert 'object' not in data


def test_local_object_logger_marks_its_records_as_not_for_posting():
    log, stream = capture(loggers.ObjectFormatter('%(message)s'))
    records = []
    log.addFilter(lambda r: records.append(r) or True)
    loggers.LocalObjectLogger(body=BODY, logger=log).info("local only")
    loggers.ObjectLogger(body=BODY, logger=log).info("postable")
    assert [getattr(r, 'k8s_skip', False) for r in records] == [True, False]
    assert stream.getvalue() == '[ns/n] local only\n[ns/n] postable\n'


def test_object_logger_carries_its_own_settings_when_given():
    settings = kopf.OperatorSettings()
    records = []
    log, _ = capture(logging.Formatter('%(message)s'))
    log.addFilter(lambda r: records.append(r) or True)
    kopf.ObjectLogger(body=BODY, settings=settings, logger=log).info("x")
    loggers.ObjectLogger(body=BODY, logger=log).info("y")
    assert records[0].k8s_settings is settings
    assert not hasattr(records[1], 'k8s_settings')
