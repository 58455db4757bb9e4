import pytest

from kopf.reactor.causation import Reason, detect_reason
from kopf.structs.bodies import Body
from kopf.structs.diffs import Diff, DiffItem, DiffOperation

FINALIZER = 'my-op/finalizer'
SOME_DIFF = Diff([DiffItem(DiffOperation.CHANGE, ('spec', 'x'), 1, 2)])
NO_DIFF = Diff()


def make_body(*, deleting=False, finalizers=()):
    meta = {'name': 'n', 'finalizers': list(finalizers)}
    if deleting:
        meta['deletionTimestamp'] = '2020-01-01T00:00:00Z'
    return Body({'metadata': meta})


def detect(*, event_type='MODIFIED', deleting=False, finalizers=(), requires_finalizer=False,
           old_exists=True, diff=NO_DIFF, resuming=False):
    return detect_reason(
        event_type=event_type, body=make_body(deleting=deleting, finalizers=finalizers),
        finalizer=FINALIZER, requires_finalizer=requires_finalizer,
        old_exists=old_exists, diff=diff, resuming=resuming)


def test_watch_deletion_means_gone_whatever_else():
    assert detect(event_type='DELETED', deleting=True, finalizers=[FINALIZER], old_exists=False) == Reason.GONE


def test_deletion_with_our_finalizer_is_a_delete():
    assert detect(deleting=True, finalizers=['other', FINALIZER], diff=SOME_DIFF) == Reason.DELETE


def test_deletion_without_our_finalizer_is_nothing_to_do():
    assert detect(deleting=True, finalizers=['other'], requires_finalizer=True) == Reason.NOOP


def test_missing_but_required_finalizer_goes_first():
    assert detect(requires_finalizer=True, old_exists=False) == Reason.FINALIZER
    assert detect(requires_finalizer=True, finalizers=[FINALIZER], old_exists=False) == Reason.CREATE


@pytest.mark.parametrize('event_type', [None, 'ADDED', 'MODIFIED'])
def test_never_handled_is_a_creation(event_type):
    assert detect(event_type=event_type, old_exists=False, resuming=True) == Reason.CREATE


def test_a_diff_is_an_update_even_on_the_first_sight():
    assert detect(diff=SOME_DIFF, resuming=True) == Reason.UPDATE


def test_no_diff_on_the_first_sight_is_a_resume():
    assert detect(resuming=True) == Reason.RESUME


def test_no_diff_otherwise_is_nothing():
    assert detect() == Reason.NOOP


def test_reasons_are_strings_for_handlers():
    assert Reason.CREATE == 'create'
    assert str(Reason.UPDATE) == 'update'
    assert {r.value for r in Reason} == {'create', 'update', 'delete', 'resume', 'noop', 'gone', 'finalizer'}
