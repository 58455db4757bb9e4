"""
Trimmed essences: the biggest fields become digests, and unchanged ones are put back when read.
"""
import kopf
from kopf._storage import trimming
from kopf._structs.bodies import Body
from kopf._structs.diffs import diff


def essence(**spec):
    return {'metadata': {'labels': {'app': 'x'}}, 'spec': spec}


def test_an_essence_within_the_limit_is_left_as_it_is():
    original = essence(field='x')
    assert trimming.trim(original, 1000) == (original, [])


def test_the_smallest_field_that_is_enough_is_trimmed():
    original = essence(small='s' * 100, big='b' * 5000, bigger='c' * 9000)
    trimmed, paths = trimming.trim(original, trimming.encoded_size(original) - 4000)
    assert paths == [('spec', 'big')]
    assert trimmed['spec']['big'] == {'$kopf-trimmed': trimming.digest('b' * 5000), 'bytes': 5002}
    assert trimmed['spec']['bigger'] == 'c' * 9000
    assert original['spec']['big'] == 'b' * 5000  # not modified in place


def test_several_fields_are_trimmed_when_one_is_not_enough():
    original = essence(a='a' * 3000, b='b' * 3000, c='c' * 3000)
    trimmed, paths = trimming.trim(original, 4000)
    assert len(paths) == 2 and trimming.encoded_size(trimmed) <= 4000


def test_the_status_and_the_containers_of_labels_and_annotations_are_never_trimmed():
    original = {'metadata': {'annotations': {'user': 'u' * 3000}}, 'status': {'x': 's' * 3000}, 'spec': {}}
    trimmed, paths = trimming.trim(original, 3200)
    assert paths == [('metadata', 'annotations', 'user')]
    assert trimmed['status'] == original['status']
    assert trimming.trim({'status': {'x': 's' * 3000}}, 100) is None  # nothing that may be trimmed is left


def test_unchanged_trimmed_fields_are_restored_and_changed_ones_stay_digests():
    handled = essence(big='b' * 5000, other='o' * 5000)
    trimmed, _ = trimming.trim(handled, 6000)
    [path] = trimming.trimmed_paths(trimmed)
    assert trimming.restore(trimmed, current=handled) == handled

    changed = essence(big='B' * 5000, other='O' * 5000)
    restored = trimming.restore(trimmed, current=changed)
    assert trimming.is_marker(restored['spec'][path[1]])
    assert [(op, field) for op, field, *_ in diff(restored, changed)] == [
        ('change', ('spec', 'big')), ('change', ('spec', 'other'))]


def test_diffbase_storages_restore_what_they_fetch(raw):
    raw['spec'] = {'big': 'b' * 5000, 'small': 1}
    body = Body(raw)
    storage = kopf.AnnotationsDiffBaseStorage()
    full = storage.build(body=body)
    trimmed, _ = trimming.trim(full, 2000)
    stored = Body({**raw, 'metadata': {**raw['metadata'], 'annotations': {
        **raw['metadata']['annotations'],
        'kopf.zalando.org/last-handled-configuration': trimming._encode(trimmed)}}})
    assert storage.fetch(body=stored) == full
