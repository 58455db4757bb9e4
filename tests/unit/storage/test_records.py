import datetime
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kopf._handlers import progression
from kopf._storage import records


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


@pytest.mark.parametrize('value, problem', [
    ({'subrefs': 5}, "'subrefs' has an invalid value 5"),
    ({'subrefs': {'a': 1}}, "'subrefs'"),
    ({'retries': 2.5}, "'retries'"),
    ({'started': '0001-01-01T00:00:00+01:00'}, "'started' is not an ISO-8601 time"),
    ({'delayed': '9999-12-31T23:00:00-05:00'}, "'delayed' is not an ISO-8601 time"),
    ({'stopped': 5}, "'stopped'"),
    ('[' * 100_000, 'nested too deeply'),
    ('{"message":' * 100_000, 'nested too deeply'),
    ('1' * 5000, 'not valid JSON'),
])
def test_every_corrupt_record_is_a_value_error_with_an_explanation(value, problem):
    with pytest.raises(ValueError, match=problem):
        records.decode_record(value)


def test_long_invalid_values_are_cut_in_the_explanation():
    with pytest.raises(ValueError) as e:
        records.decode_record({'message': ['x' * 10_000]})
    assert len(str(e.value)) < 200


def test_deeply_nested_values_are_not_taken_for_records():
    assert records.looks_like_record('{"a":' * 20_000) is False


def _json_values() -> st.SearchStrategy[Any]:
    scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40)
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) |
                        st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=12)


# Times as a corrupted or hand-edited record may have them: valid shapes with any numbers, any offsets.
_times = st.builds(
    lambda date, sep, offset: f"{date.isoformat()}{sep}{offset}",
    st.datetimes(min_value=datetime.datetime(1, 1, 1), max_value=datetime.datetime(9999, 12, 31, 23, 59)),
    st.sampled_from(['', 'Z', '+00:00']),
    st.sampled_from(['', '+01:00', '-05:00', '+23:59', '-23:59:59.999999']),
) | st.text(max_size=40)

_valid_fields = {
    'started': _times, 'stopped': _times, 'delayed': _times,
    'retries': st.integers(min_value=0), 'success': st.booleans(), 'failure': st.booleans(),
    'message': st.text(max_size=40), 'subrefs': st.lists(st.text(max_size=10), max_size=3),
}


@st.composite
def _records(draw: st.DrawFn) -> dict[str, Any]:
    """A record with plausible fields, one or two of them replaced by anything at all."""
    record = draw(st.fixed_dictionaries({}, optional=_valid_fields))
    for field in draw(st.lists(st.sampled_from([*_valid_fields, 'purpose']), max_size=2)):
        record[field] = draw(_json_values())
    return record


@settings(max_examples=500, deadline=None)
@given(value=_records() | _json_values())
def test_no_record_makes_the_decoder_raise_anything_but_value_error(value):
    for raw in (value, json.dumps(value)):
        try:
            record = records.decode_record(raw)
        except ValueError:
            continue
        # What the decoder accepts, the handling can use: a state, and a record again.
        state = progression.HandlerState.from_record(record)
        written = {key: item for key, item in state.as_record().items() if item is not None}
        assert records.decode_record(records.encode_record(state.as_record())) == written
        records.advancement(record)


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=200) | st.from_regex(r'\{"started":.{0,60}\}', fullmatch=True))
def test_no_text_makes_the_decoder_raise_anything_but_value_error(text):
    try:
        records.decode_record(text)
    except ValueError:
        pass
    assert isinstance(records.looks_like_record(text), bool)
    assert isinstance(records.is_orphan_candidate(text), bool)
