"""
Causation: the cause of a cycle, from the event and the object alone, in the order of precedence.
"""
import json

import pytest

from kopf._cycle.causation import detect
from kopf._handlers.reasons import Reason
from kopf._storage.diffbase import AnnotationsDiffBaseStorage
from kopf._storage.persistence import Persistence
from kopf._storage.progress import SmartProgressStorage
from kopf._structs.bodies import Body
from kopf._structs.ids import HandlerId

FINALIZER = 'my-op/finalizer'
LAST_HANDLED = 'kopf.zalando.org/last-handled-configuration'
RESUME = HandlerId('resume_fn')
SPEC = {'x': 1}


def make_body(*, deleting=False, finalizers=(), handled=True, changed=False, resume_pending=False):
    annotations = {}
    if handled:
        annotations[LAST_HANDLED] = json.dumps({'spec': SPEC})
    if resume_pending:
        annotations['kopf.zalando.org/resume_fn'] = '{"started":"2020-01-01T00:00:00+00:00"}'
    meta = {'name': 'n', 'finalizers': list(finalizers), 'annotations': annotations}
    if deleting:
        meta['deletionTimestamp'] = '2020-01-01T00:00:00Z'
    return Body({'metadata': meta, 'spec': {'x': 2} if changed else SPEC})


async def detect_for(*, event_type='MODIFIED', first_seen=False, has_handlers=True, requires_finalizer=False,
                     has_daemons=False, resume_ids=(RESUME,), **body_options):
    body = make_body(**body_options)
    storage = Persistence(progress=SmartProgressStorage(), diffbase=AnnotationsDiffBaseStorage(), body=body)
    return await detect(event_type=event_type, body=body, finalizer=FINALIZER, first_seen=first_seen,
                        handled=has_handlers, guarded=has_daemons, resume_ids=list(resume_ids),
                        requires_finalizer=lambda essences: requires_finalizer, persistence=storage)


async def test_watch_deletion_means_gone_whatever_else():
    cause = await detect_for(event_type='DELETED', deleting=True, finalizers=[FINALIZER], handled=False)
    assert cause.reason == Reason.GONE
    assert cause.essences is None


async def test_deletion_with_our_finalizer_is_a_delete():
    cause = await detect_for(deleting=True, finalizers=['other', FINALIZER], changed=True, first_seen=True)
    assert cause.reason == Reason.DELETE
    assert cause.deleting
    assert not cause.resuming  # objects being deleted never resume
    assert cause.new == {'spec': {'x': 2}}


async def test_deletion_with_our_finalizer_is_a_delete_even_without_change_handlers():
    cause = await detect_for(deleting=True, finalizers=[FINALIZER], has_handlers=False)
    assert cause.reason == Reason.DELETE


async def test_deletion_without_our_finalizer_is_nothing_to_do():
    cause = await detect_for(deleting=True, finalizers=['other'], requires_finalizer=True)
    assert cause.reason == Reason.NOOP
    assert cause.deleting
    assert cause.essences is None


async def test_a_resource_without_change_handlers_has_nothing_to_do():
    cause = await detect_for(has_handlers=False, handled=False)
    assert cause.reason == Reason.NOOP
    assert cause.essences is None


async def test_a_resource_with_only_daemons_or_timers_needs_only_the_finalizer():
    first = await detect_for(has_handlers=False, has_daemons=True, requires_finalizer=True, handled=False,
                             first_seen=True)
    assert first.reason == Reason.FINALIZER
    assert not first.resuming  # nothing to resume without change handlers
    later = await detect_for(has_handlers=False, has_daemons=True, requires_finalizer=True, handled=False,
                             finalizers=[FINALIZER])
    assert later.reason == Reason.NOOP  # never a create: no diff-base is stored for daemons
    deleted = await detect_for(has_handlers=False, has_daemons=True, finalizers=[FINALIZER], deleting=True)
    assert deleted.reason == Reason.DELETE


async def test_missing_but_required_finalizer_goes_first():
    assert (await detect_for(requires_finalizer=True, handled=False)).reason == Reason.FINALIZER
    cause = await detect_for(requires_finalizer=True, finalizers=[FINALIZER], handled=False)
    assert cause.reason == Reason.CREATE


async def test_the_finalizer_cycle_remembers_a_first_sight_of_a_handled_object():
    assert (await detect_for(requires_finalizer=True, first_seen=True)).resuming
    assert not (await detect_for(requires_finalizer=True, first_seen=False)).resuming
    assert not (await detect_for(requires_finalizer=True, first_seen=True, handled=False)).resuming


@pytest.mark.parametrize('event_type', [None, 'ADDED', 'MODIFIED'])
async def test_never_handled_is_a_creation(event_type):
    cause = await detect_for(event_type=event_type, handled=False, first_seen=True)
    assert cause.reason == Reason.CREATE
    assert cause.old is None
    assert not cause.resuming


async def test_a_diff_is_an_update():
    cause = await detect_for(changed=True)
    assert cause.reason == Reason.UPDATE
    assert cause.old == {'spec': {'x': 1}} and cause.new == {'spec': {'x': 2}}
    assert [tuple(item) for item in cause.diff] == [('change', ('spec', 'x'), 1, 2)]
    assert not cause.resuming


async def test_a_diff_on_the_first_sight_is_an_update_while_resuming():
    cause = await detect_for(changed=True, first_seen=True)
    assert cause.reason == Reason.UPDATE
    assert cause.resuming


async def test_no_diff_on_the_first_sight_is_a_resume():
    cause = await detect_for(first_seen=True)
    assert cause.reason == Reason.RESUME
    assert cause.resuming


async def test_without_resume_handlers_the_first_sight_of_a_handled_object_is_nothing_to_do():
    assert (await detect_for(first_seen=True, resume_ids=())).reason == Reason.NOOP
    cause = await detect_for(first_seen=True, changed=True, resume_ids=())
    assert cause.reason == Reason.UPDATE and not cause.resuming


async def test_resuming_lasts_while_resume_handlers_have_progress_stored():
    assert (await detect_for(resume_pending=True)).reason == Reason.RESUME
    cause = await detect_for(resume_pending=True, changed=True)
    assert cause.reason == Reason.UPDATE and cause.resuming


async def test_no_diff_otherwise_is_nothing():
    cause = await detect_for()
    assert cause.reason == Reason.NOOP
    assert not cause.deleting
    assert cause.essences is not None


def test_reasons_are_strings_for_handlers():
    assert Reason.CREATE == 'create'
    assert str(Reason.UPDATE) == 'update'
    assert {r.value for r in Reason} == {'create', 'update', 'delete', 'resume', 'noop', 'gone', 'finalizer'}
