"""The label/annotation filters and ``when=``, with the combinators of filter callbacks."""
import pytest

import kopf
from kopf.reactor import registries
from kopf.reactor.filters import ABSENT, PRESENT, match_meta, match_when

LABELS = {'app': 'demo', 'tier': 'web'}


def is_demo(value, **_):
    return value == 'demo'


def is_web(value, **_):
    return value == 'web'


@pytest.mark.parametrize('criteria, expected', [
    ({'app': 'demo'}, True),
    ({'app': 'other'}, False),
    ({'app': PRESENT, 'missing': ABSENT}, True),
    ({'missing': PRESENT}, False),
    ({'app': is_demo}, True),
    ({'tier': is_demo}, False),
])
def test_plain_criteria(criteria, expected):
    assert match_meta(criteria, LABELS) is expected


@pytest.mark.parametrize('combined, value, expected', [
    (kopf.all_([is_demo, lambda value, **_: value is not None]), 'demo', True),
    (kopf.all_([is_demo, is_web]), 'demo', False),
    (kopf.all_([]), 'anything', True),
    (kopf.any_([is_demo, is_web]), 'web', True),
    (kopf.any_([is_demo, is_web]), 'db', False),
    (kopf.any_([]), 'anything', False),
    (kopf.none_([is_demo, is_web]), 'db', True),
    (kopf.none_([is_demo, is_web]), 'demo', False),
    (kopf.not_(is_demo), 'web', True),
    (kopf.not_(is_demo), 'demo', False),
])
def test_combinators_as_label_values(combined, value, expected):
    assert match_meta({'key': combined}, {'key': value}) is expected


def test_combinators_nest():
    either_but_not_both = kopf.all_([kopf.any_([is_demo, is_web]), kopf.not_(kopf.all_([is_demo, is_web]))])
    assert match_meta({'app': either_but_not_both}, LABELS)
    assert not match_meta({'app': either_but_not_both}, {'app': 'db'})


def test_combinators_as_when_callbacks_receive_the_handler_kwargs():
    seen = []

    def has_spec(spec, **_):
        seen.append(spec)
        return bool(spec)

    def named(name, **_):
        return name == 'obj'

    when = kopf.all_([has_spec, kopf.not_(named)])
    assert not match_when(when, {'spec': {'a': 1}, 'name': 'obj'})
    assert match_when(when, {'spec': {'a': 1}, 'name': 'other'})
    assert not match_when(kopf.any_([has_spec]), {'spec': {}, 'name': 'obj'})
    assert seen == [{'a': 1}, {'a': 1}, {}]


def test_combinators_stop_at_the_first_decisive_callback():
    calls = []

    def record(result):
        def fn(*_, **__):
            calls.append(result)
            return result
        return fn

    assert not kopf.all_([record(False), record(True)])()
    assert kopf.any_([record(True), record(False)])()
    assert calls == [False, True]


def test_a_handler_filtered_with_combinators_is_registered_with_them():
    registry = kopf.OperatorRegistry()
    labels = {'app': kopf.any_([is_demo, is_web])}
    kopf.on.create('pods', labels=labels, when=kopf.not_(lambda **_: False), registry=registry)(lambda **_: None)
    selector, = registry.selectors
    handler, = registry.get_all_changing_handlers(selector)
    assert registries.matches(handler, body=kopf.Body({'metadata': {'labels': {'app': 'web'}}}), kwargs={})
    assert not registries.matches(handler, body=kopf.Body({'metadata': {'labels': {'app': 'db'}}}), kwargs={})
