"""
The annotation budget: no patch makes the annotations exceed 256 KiB; room is made, and it is said once, loudly.
"""
import json
import logging

import pytest

import kopf
from kopf._storage import budget, trimming
from kopf._structs.bodies import Body
from kopf._structs.patches import Patch

LAST = 'kopf.zalando.org/last-handled-configuration'
KUBECTL = 'kubectl.kubernetes.io/last-applied-configuration'
FINALIZER = 'kopf.zalando.org/KopfFinalizerMarker'
logger = logging.getLogger('test')


def big_object(*, spec_size=150_000, kubectl_size=150_000, annotations=None):
    spec = {'blob': 'b' * spec_size, 'field': 'value'}
    return Body({
        'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
        'metadata': {'name': 'big', 'namespace': 'ns1', 'uid': 'u', 'finalizers': [FINALIZER],
                     'annotations': {KUBECTL: 'k' * kubectl_size, **(annotations or {})}},
        'spec': spec,
    })


def concluding_patch(body, **extra):
    """What the cycle sends at the end of a creation: the records purged, the essence stored."""
    essence = kopf.AnnotationsProgressStorage().clear(essence=kopf.AnnotationsDiffBaseStorage().build(body=body))
    patch = Patch({'metadata': {'annotations': {LAST: json.dumps(essence, separators=(',', ':')), **extra}}})
    return patch, essence


def test_sizes_are_counted_as_kubernetes_does():
    assert budget.size({'a/b': 'cd', 'é': 'x', 'gone': None}) == 5 + 3
    assert budget.LIMIT == 262144


def test_a_patch_that_fits_is_sent_as_it_is(body):
    patch = Patch({'metadata': {'annotations': {LAST: '{}'}}})
    fitted = budget.fit(body=body, patch=patch, essential=None, extras=(), diffbase=kopf.AnnotationsDiffBaseStorage(),
                        logger=logger)
    assert fitted.patch is patch


def test_a_big_diffbase_that_still_fits_is_a_warning(caplog):
    body = big_object(spec_size=140_000, kubectl_size=10)
    patch, _ = concluding_patch(body)
    fitted = budget.fit(body=body, patch=patch, essential=None, extras=(), diffbase=kopf.AnnotationsDiffBaseStorage(),
                        logger=logger)
    assert fitted.patch is patch
    [warning] = caplog.records
    assert warning.levelno == logging.WARNING and 'KopfExample ns1/big' in warning.getMessage()
    assert '262144 bytes together' in warning.getMessage()


def test_an_oversized_diffbase_is_stored_trimmed_and_it_is_said_once(caplog):
    body = big_object()
    patch, essence = concluding_patch(body)
    with caplog.at_level(logging.ERROR):
        fitted = budget.fit(body=body, patch=patch, essential=None, extras=(),
                            diffbase=kopf.AnnotationsDiffBaseStorage(), logger=logger)
    after = budget.annotations_after(body, fitted.patch)
    assert budget.size(after) <= budget.LIMIT
    stored = json.loads(after[LAST])
    assert trimming.trimmed_paths(stored) == [('spec', 'blob')]
    assert stored['spec']['field'] == 'value'  # the rest stays precise
    assert trimming.restore(stored, current=essence) == essence  # and unchanged, it reads as unchanged

    [error] = caplog.records  # no other warnings about it
    assert error.levelno == logging.ERROR
    text = error.getMessage()
    assert 'KopfExample ns1/big' in text and str(budget.LIMIT) in text
    assert f'{KUBECTL} (150048 bytes)' in text and LAST in text  # the biggest keys with their sizes
    assert 'spec.blob' in text and 'kopf.SQLiteDiffBaseStorage' in text


def test_a_diffbase_kept_elsewhere_too_is_dropped_from_the_annotations():
    body = big_object()
    patch, _ = concluding_patch(body)
    diffbase = kopf.MultiDiffBaseStorage([kopf.AnnotationsDiffBaseStorage(), kopf.StatusDiffBaseStorage()])
    patch['status'] = {'kopf': {'last-handled-configuration': 'x'}}
    fitted = budget.fit(body=body, patch=patch, essential=None, extras=(), diffbase=diffbase, logger=logger)
    assert LAST not in fitted.patch['metadata']['annotations']
    assert fitted.patch['status'] == patch['status']


def test_long_error_messages_are_cut_when_the_essence_cannot_make_enough_room():
    body = big_object(spec_size=10, kubectl_size=262144 - 3000)
    record = {'started': '2020-01-01T00:00:00+00:00', 'retries': 1, 'message': 'm' * 1024}
    patch = Patch({'metadata': {'annotations': {f'kopf.zalando.org/h{i}': json.dumps(record) for i in range(3)}}})
    fitted = budget.fit(body=body, patch=patch, essential=None, extras=(), diffbase=kopf.AnnotationsDiffBaseStorage(),
                        logger=logger)
    values = [json.loads(v) for v in fitted.patch['metadata']['annotations'].values()]
    assert all(len(v['message']) == budget.SHORT_MESSAGE and v['retries'] == 1 for v in values)
    assert budget.size(budget.annotations_after(body, fitted.patch)) <= budget.LIMIT


def test_the_handlers_own_annotations_give_way_to_the_progress(caplog):
    body = big_object(spec_size=10, kubectl_size=200_000)
    ours = {'kopf.zalando.org/h0': json.dumps({'started': '2020-01-01T00:00:00+00:00', 'success': True})}
    patch = Patch({'metadata': {'annotations': {**ours, 'user/huge': 'u' * 70_000}}, 'status': {'h0': 'result'}})
    essential = Patch({'metadata': {'annotations': dict(ours)}})
    fitted = budget.fit(body=body, patch=patch, essential=essential,
                        extras=('status.h0', 'metadata.annotations.user/huge'),
                        diffbase=kopf.AnnotationsDiffBaseStorage(), logger=logger)
    assert fitted.patch['metadata']['annotations'] == ours
    assert fitted.patch['status'] == {'h0': 'result'}  # results do not count against annotations
    assert fitted.essential == essential
    assert fitted.extras == ('status.h0',)  # what the patch still carries beyond the essential part
    assert "annotations were not stored: user/huge" in caplog.text


def test_with_no_room_for_the_essence_the_cause_is_not_concluded_and_nothing_runs_again(caplog):
    records = {f'kopf.zalando.org/h{i}': json.dumps({'started': '2020-01-01T00:00:00+00:00', 'success': True})
               for i in range(2)}
    body = big_object(spec_size=2000, kubectl_size=budget.LIMIT - len(KUBECTL) - budget.size(records),
                      annotations=records)  # full to the last byte: the purges leave no room for an essence
    assert budget.size(body.metadata.annotations) == budget.LIMIT
    patch, _ = concluding_patch(body, **{key: None for key in records})
    fitted = budget.fit(body=body, patch=patch, essential=None, extras=(), diffbase=kopf.AnnotationsDiffBaseStorage(),
                        logger=logger)
    assert fitted.patch['metadata']['annotations'] == {}  # neither the essence nor the purges
    assert 'none of them runs again' in caplog.text


def test_a_deletion_is_never_blocked():
    records = {'kopf.zalando.org/h0': json.dumps({'started': '2020-01-01T00:00:00+00:00', 'success': True})}
    body = big_object(kubectl_size=100_000, annotations={LAST: 'l' * 150_000, **records})
    patch = Patch({'metadata': {'annotations': {'kopf.zalando.org/h0': None}, 'finalizers': []}})
    fitted = budget.fit(body=body, patch=patch, essential=None, extras=(), diffbase=kopf.AnnotationsDiffBaseStorage(),
                        logger=logger)
    assert fitted.patch == patch


@pytest.mark.parametrize('size', [1000, 300_000])
def test_the_cycle_sends_only_patches_within_the_budget(size):
    """Through the real handling cycle: a creation of a big object concludes with a patch that fits."""
    import asyncio

    from kopf._cycle import cycle
    from kopf._structs.resources import Selector

    registry = kopf.OperatorRegistry()
    kopf.on.create('kopfexamples', registry=registry)(lambda **_: None)
    raw = dict(big_object(spec_size=size // 2, kubectl_size=size // 2).raw)
    config = kopf.OperatorConfig()
    result = asyncio.run(cycle.handle_object(
        registry=registry, config=config, resource=Selector.from_args('kopfexamples'), event_type='MODIFIED',
        body=Body(raw), first_seen=False, memo=None, logger=logger))
    assert result.done
    assert budget.size(budget.annotations_after(Body(raw), result.patch)) <= budget.LIMIT
    assert LAST in result.patch['metadata']['annotations']
