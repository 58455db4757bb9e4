"""
The handling cycle of a typed resource: handlers get the validated spec; an invalid one stops them, reported once.
"""
from __future__ import annotations

import copy
import json
import logging

import pydantic
import pytest

import kopf
from kopf._cycle.cycle import handle_object
from kopf._structs.bodies import Body
from kopf._structs.patches import apply
from kopf._typed.gate import Gate
from kopf.typed import Condition, CustomResource
from tests.unit.conftest import FINALIZER, LAST_HANDLED


class Spec(pydantic.BaseModel):
    image: str
    replicas: int = pydantic.Field(1, ge=1, le=10)


class Status(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra='allow')
    conditions: list[Condition] = []


class App(CustomResource, group='example.com', version='v1'):
    spec: Spec
    status: Status = Status()


class Plain(CustomResource, group='example.com', version='v1', kind='Plain'):
    spec: Spec


class Typed:
    """One object of a typed resource, handled cycle by cycle as the server would keep it."""

    def __init__(self, model, spec, *, registry, config, clock):
        self.model, self.registry, self.config, self.clock = model, registry, config, clock
        self.raw = {'apiVersion': 'example.com/v1', 'kind': model.__name__, 'spec': spec,
                    'metadata': {'name': 'a1', 'namespace': 'ns1', 'uid': 'uid1', 'generation': 1}}
        self.gate = Gate(model, finalizer=FINALIZER, clock=clock)
        self.patches = []

    async def cycle(self, event_type='MODIFIED'):
        result = await handle_object(
            registry=self.registry, config=self.config, resource=self.model.__kopf_selector__,
            event_type=event_type, body=Body(copy.deepcopy(self.raw)), first_seen=False, memo=None,
            logger=logging.getLogger('test-typed'), clock=self.clock, gate=self.gate)
        wire = json.loads(json.dumps(result.patch))
        if wire:
            self.patches.append(wire)
            self.raw = apply(self.raw, wire)
        return result

    def change(self, spec):
        self.raw = {**self.raw, 'spec': spec,
                    'metadata': {**self.raw['metadata'], 'generation': self.raw['metadata']['generation'] + 1}}

    @property
    def condition(self):
        return next((c for c in (self.raw.get('status') or {}).get('conditions') or [] if c['type'] == 'Valid'), None)


@pytest.fixture()
def calls(registry):
    calls = []

    @kopf.on.create(App, registry=registry)
    @kopf.on.create(Plain, registry=registry)
    def created(spec, body, **_):
        calls.append((spec, body['spec']))
    return calls


async def test_handlers_get_the_validated_model_and_the_raw_spec_stays_in_the_body(registry, config, clock, calls):
    obj = Typed(App, {'image': 'nginx'}, registry=registry, config=config, clock=clock)
    result = await obj.cycle()
    assert result.cause == 'create' and result.done
    assert calls == [(Spec(image='nginx', replicas=1), {'image': 'nginx'})]
    assert isinstance(calls[0][0], Spec)
    assert LAST_HANDLED in obj.raw['metadata']['annotations']
    assert obj.condition is None  # always valid: nothing written about it


async def test_an_invalid_spec_stops_the_handlers_and_is_reported_once(registry, config, clock, calls, caplog):
    caplog.set_level(logging.ERROR)
    obj = Typed(App, {'image': 'nginx', 'replicas': 20}, registry=registry, config=config, clock=clock)
    result = await obj.cycle()
    assert result.cause == 'invalid' and result.done
    assert calls == []
    assert 'annotations' not in obj.raw['metadata']  # no progress, no diff-base: a fix is still a creation
    assert obj.condition['status'] == 'False' and obj.condition['reason'] == 'InvalidSpec'
    assert obj.condition['message'] == "spec.replicas: Input should be less than or equal to 10 (got 20)"
    assert obj.condition['observedGeneration'] == 1
    record, = caplog.records
    assert record.getMessage() == ("The spec is invalid for App: spec.replicas: Input should be less than or "
                                   "equal to 10 (got 20). No handler is called until it is fixed.")
    assert record.k8s_reason == 'InvalidSpec'  # the Event's reason

    # Our own write of the condition comes back as an event: nothing new is reported or written.
    result = await obj.cycle()
    assert result.cause == 'invalid' and not result.patch
    assert len(caplog.records) == 1 and calls == []

    # Another invalid spec is another change: reported again.
    obj.change({'replicas': 1})
    await obj.cycle()
    assert len(caplog.records) == 2 and 'spec.image: Field required' in caplog.records[-1].getMessage()
    assert obj.condition['message'] == 'spec.image: Field required'


async def test_a_fixed_spec_is_handled_as_a_creation_and_the_condition_turns_true(registry, config, clock, calls):
    obj = Typed(App, {'image': 'nginx', 'replicas': 20}, registry=registry, config=config, clock=clock)
    await obj.cycle()
    since = obj.condition['lastTransitionTime']
    clock.advance(60)
    obj.change({'image': 'nginx', 'replicas': 2})
    result = await obj.cycle()
    assert result.cause == 'create'
    assert calls == [(Spec(image='nginx', replicas=2), {'image': 'nginx', 'replicas': 2})]
    assert obj.condition['status'] == 'True' and obj.condition['reason'] == 'ValidSpec'
    assert obj.condition['lastTransitionTime'] != since
    assert obj.condition['observedGeneration'] == 2


async def test_without_conditions_in_the_model_only_the_log_and_the_event_report_it(
        registry, config, clock, calls, caplog):
    caplog.set_level(logging.ERROR)
    obj = Typed(Plain, {'replicas': 0}, registry=registry, config=config, clock=clock)
    result = await obj.cycle()
    assert not result.patch and calls == []
    assert len(caplog.records) == 1
    await obj.cycle()
    assert len(caplog.records) == 1


async def test_an_invalid_object_being_deleted_waits_and_says_so(registry, config, clock, caplog):
    kopf.on.delete(App, registry=registry)(lambda **_: None)
    caplog.set_level(logging.ERROR)
    obj = Typed(App, {'image': 'x', 'replicas': 0}, registry=registry, config=config, clock=clock)
    obj.raw['metadata'].update(finalizers=[FINALIZER], deletionTimestamp='2020-01-01T00:00:00Z')
    result = await obj.cycle()
    assert result.cause == 'invalid'
    assert obj.raw['metadata']['finalizers'] == [FINALIZER]
    assert f"Its deletion waits for a valid spec (or for the finalizer {FINALIZER!r} to be removed by hand)" in \
        caplog.records[0].getMessage()


async def test_a_gone_object_is_let_through_even_if_invalid(registry, config, clock):
    seen = []
    kopf.on.event(App, registry=registry)(lambda spec, type, **_: seen.append((type, dict(spec))))
    obj = Typed(App, {'replicas': 0}, registry=registry, config=config, clock=clock)
    await obj.cycle(event_type='DELETED')
    assert seen == [('DELETED', {'replicas': 0})]
