import datetime

import pytest

from kopf.storage import records


def test_decoding_accepts_json_text_and_dicts():
    text = '{"started":"2020-01-01T00:00:00+00:00","retries":2,"success":true,"message":"m"}'
    expected = {'started': '2020-01-01T00:00:00+00:00', 'retries': 2, 'success': True, 'message': 'm'}
    assert records.decode_record(text) == expected
    assert records.decode_record(expected) == expected


def test_decoding_keeps_subrefs():
    assert records.decode_record({'subrefs': ['p/a', 'p/b']}) == {'subrefs': ['p/a', 'p/b']}


def test_decoding_drops_nulls_and_ignores_unknown_fields():
    assert records.decode_record({'started': None, 'retries': 1, 'future': 'x'}) == {'retries': 1}


@pytest.mark.parametrize('value, problem', [
    ('{not json', 'not valid JSON'),
    ('[1, 2]', 'expected a JSON object, got list'),
    ('"text"', 'expected a JSON object, got str'),
    ({'retries': '3'}, "'retries'"),
    ({'retries': -1}, "'retries'"),
    ({'retries': True}, "'retries'"),
    ({'success': 'no'}, "'success'"),
    ({'message': 5}, "'message'"),
    ({'started': 'yesterday'}, 'not an ISO-8601 time'),
    ({'subrefs': 'p/c'}, "'subrefs'"),
    ({'subrefs': ['p/c', 1]}, "'subrefs'"),
])
def test_decoding_explains_corrupt_records(value, problem):
    with pytest.raises(ValueError, match=problem):
        records.decode_record(value)


def test_encoding_is_compact_and_drops_nulls_unless_verbose():
    record = {'started': 's', 'stopped': None, 'retries': 1}
    assert records.encode_record(record) == '{"retries":1,"started":"s"}'
    assert records.encode_record(record, verbose=True) == '{"retries":1,"started":"s","stopped":null}'


def test_times_parse_with_and_without_timezones():
    utc = datetime.timezone.utc
    assert records.parse_time('2020-01-01T10:00:00+00:00') == datetime.datetime(2020, 1, 1, 10, tzinfo=utc)
    assert records.parse_time('2020-01-01T12:00:00+02:00') == datetime.datetime(2020, 1, 1, 10, tzinfo=utc)
    assert records.parse_time('2020-01-01T10:00:00Z') == datetime.datetime(2020, 1, 1, 10, tzinfo=utc)
    # Older versions wrote naive UTC times:
    naive = records.parse_time('2020-01-01T10:00:00.123456')
    assert naive == datetime.datetime(2020, 1, 1, 10, 0, 0, 123456, tzinfo=utc)


def test_times_format_as_utc_iso8601():
    tz = datetime.timezone(datetime.timedelta(hours=2))
    assert records.format_time(datetime.datetime(2020, 1, 1, 12, tzinfo=tz)) == '2020-01-01T10:00:00+00:00'


@pytest.mark.parametrize('value, expected', [
    ('{"started":"2020-01-01T00:00:00"}', True),
    ('{"started":"x","success":true,"retries":1}', True),
    ('{"retries":1}', False),
    ('{"started":"x","unknown":1}', False),
    ('{"spec":{}}', False),
    ('not json', False),
    ('{broken', False),
    ('[1]', False),
    ('{"st\\u0061rted":"x"}', True),  # escaped, yet the same key
    ('{"spec":{"started":"x"}}', False),
    ('{"spec":{"field":"\\"started\\""}}', False),
])
def test_progress_records_are_recognised_in_annotation_values(value, expected):
    assert records.looks_like_record(value) is expected


@pytest.mark.parametrize('value', [
    # As the released Kopf wrote them: 1.45 (aware times, purpose, a parent with subrefs), 0.28 (naive), 0.27 (spaces).
    '{"started":"2026-11-30T07:37:37.779133+00:00","stopped":"2026-11-30T07:37:37.784942+00:00",'
    '"purpose":"create","retries":1,"success":true,"failure":false}',
    '{"started":"2026-11-30T07:37:37.779155+00:00","purpose":"create","retries":1,"success":false,'
    '"failure":false,"message":"None","subrefs":["parent/child1"]}',
    '{"started":"2026-11-30T07:38:25.471159","purpose":"create","retries":0,"success":false,"failure":false}',
    '{"started": "2026-11-30T07:38:26.158655", "retries": 0, "success": false, "failure": false}',
])
def test_kopfs_records_are_recognised_and_read(value):
    assert records.looks_like_record(value)
    record = records.decode_record(value)
    assert 'purpose' not in record
    assert record['started'].startswith('2026-11-30T07:3')


@pytest.mark.parametrize('less, more', [
    ({'retries': 5}, {'retries': 1, 'success': True}),
    ({'retries': 5}, {'retries': 1, 'failure': True}),
    ({'retries': 1}, {'retries': 2}),
    ({}, {'retries': 1}),
])
def test_advancement_orders_finished_over_retrying_and_more_attempts_over_fewer(less, more):
    assert records.advancement(less) < records.advancement(more)
