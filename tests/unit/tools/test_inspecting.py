"""
What ``kopf inspect`` shows of an object: the handlers' progress, the last-handled configuration, the finalizer.
"""
import datetime
import json

import kopf
from kopf._structs.bodies import Body
from kopf._tools import inspecting

NOW = datetime.datetime(2024, 1, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)
FINALIZER = 'kopf.zalando.org/KopfFinalizerMarker'


def body(**annotations):
    return Body({'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
                 'metadata': {'name': 'ex1', 'namespace': 'ns1', 'uid': 'uid-1', 'finalizers': [FINALIZER],
                              'annotations': {key: json.dumps(value) if isinstance(value, dict) else value
                                              for key, value in annotations.items()}},
                 'spec': {'field': 'x'}})


async def view(obj, **kwargs):
    return await inspecting.inspect_object(
        obj, resource='kopfexamples.v1.kopf.dev', progress=kopf.SmartProgressStorage(),
        diffbase=kopf.AnnotationsDiffBaseStorage(), ids=kwargs.pop('ids', []), finalizer=FINALIZER, now=NOW)


async def test_each_handlers_state_is_told():
    obj = body(**{
        'kopf.zalando.org/done': {'started': '2024-01-01T11:00:00+00:00', 'retries': 1, 'success': True},
        'kopf.zalando.org/failed': {'started': '2024-01-01T11:00:00+00:00', 'retries': 3, 'failure': True,
                                    'message': 'gave up'},
        'kopf.zalando.org/waiting': {'started': '2024-01-01T11:00:00+00:00', 'retries': 1,
                                     'delayed': '2024-01-01T12:01:00+00:00', 'message': 'not yet'},
        'kopf.zalando.org/due': {'started': '2024-01-01T11:00:00+00:00', 'retries': 2,
                                 'delayed': '2024-01-01T11:59:00+00:00'},
        'kopf.zalando.org/fresh': {'started': '2024-01-01T11:00:00+00:00'},
        'kopf.zalando.org/last-handled-configuration': '{"spec":{"field":"old"}}',
    })
    result = await view(obj)
    states = {h.id: (h.state, h.attempts, h.next_retry, h.last_error) for h in result.handlers}
    assert states == {
        'done': ('succeeded', 1, None, None),
        'failed': ('failed', 3, None, 'gave up'),
        'waiting': ('waiting', 1, '2024-01-01T12:01:00+00:00', 'not yet'),
        'due': ('due', 2, None, None),
        'fresh': ('started', 0, None, None),
    }
    assert result.last_handled == {'spec': {'field': 'old'}}
    assert result.finalizer_present and not result.deleting

    table = inspecting.as_table([result], now=NOW)
    assert 'kopfexamples.v1.kopf.dev ns1/ex1  (uid uid-1)' in table
    assert f'finalizer:     {FINALIZER} (present)' in table
    assert 'last handled:  {"spec":{"field":"old"}}' in table
    waiting = next(line for line in table.splitlines() if line.strip().startswith('waiting'))
    assert waiting.split() == ['waiting', 'waiting', '1', '2024-01-01T11:00:00Z', '2024-01-01T12:01:00Z', '(in',
                               '60s)', 'not', 'yet']

    [data] = json.loads(inspecting.as_json([result]))
    assert data['name'] == 'ex1' and data['last_handled'] == {'spec': {'field': 'old'}}
    assert {h['id']: h['state'] for h in data['handlers']}['failed'] == 'failed'


async def test_an_object_at_rest_shows_no_progress():
    result = await view(body(**{'kopf.zalando.org/last-handled-configuration': '{"spec":{}}'}))
    assert result.handlers == ()
    assert 'progress:      none (nothing is being handled)' in inspecting.as_table([result], now=NOW)


def test_no_objects_is_said_plainly():
    assert inspecting.as_table([], now=NOW) == "No objects found."
    assert json.loads(inspecting.as_json([])) == []
