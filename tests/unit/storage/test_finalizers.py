from kopf._storage import finalizers
from kopf._structs.bodies import Body
from kopf._structs.patches import Patch

OURS = 'kopf.zalando.org/KopfFinalizerMarker'


def body(*fins, deleted=False):
    meta = {'name': 'n', 'resourceVersion': '7', 'finalizers': list(fins)}
    if deleted:
        meta['deletionTimestamp'] = '2020-01-01T00:00:00Z'
    return Body({'metadata': meta})


def test_deletion_ongoing_and_blocked():
    assert finalizers.is_deletion_ongoing(body(deleted=True))
    assert not finalizers.is_deletion_ongoing(body())
    assert finalizers.is_deletion_blocked(body('a', OURS), OURS)
    assert not finalizers.is_deletion_blocked(body('a'), OURS)


def test_block_keeps_foreign_finalizers_and_guards_the_version():
    patch = Patch()
    finalizers.block_deletion(body=body('foreign/a', 'foreign/b'), patch=patch, finalizer=OURS)
    assert patch == {'metadata': {'finalizers': ['foreign/a', 'foreign/b', OURS], 'resourceVersion': '7'}}


def test_block_is_a_noop_when_already_blocked():
    patch = Patch()
    finalizers.block_deletion(body=body(OURS), patch=patch, finalizer=OURS)
    assert patch == {}


def test_allow_removes_only_ours():
    patch = Patch()
    finalizers.allow_deletion(body=body('foreign/a', OURS, 'foreign/b'), patch=patch, finalizer=OURS)
    assert patch == {'metadata': {'finalizers': ['foreign/a', 'foreign/b'], 'resourceVersion': '7'}}


def test_allow_is_a_noop_when_not_blocked():
    patch = Patch()
    finalizers.allow_deletion(body=body('foreign/a'), patch=patch, finalizer=OURS)
    assert patch == {}


def test_changes_within_one_patch_build_on_each_other():
    patch = Patch()
    b = body('foreign/a')
    finalizers.block_deletion(body=b, patch=patch, finalizer=OURS)
    finalizers.block_deletion(body=b, patch=patch, finalizer='second/fin')
    finalizers.allow_deletion(body=b, patch=patch, finalizer=OURS)
    assert patch['metadata']['finalizers'] == ['foreign/a', 'second/fin']
