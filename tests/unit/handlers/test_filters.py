"""The label/annotation filters and ``when=``, with the combinators of filter callbacks."""
import pytest

import kopf
from kopf._handlers import registries
from kopf._handlers.filters import (
    ABSENT,
    PRESENT,
    Transition,
    call,
    check_field_filters,
    match,
    match_field,
    match_meta,
    match_value,
    match_when,
)
from kopf._handlers.registries import ChangingHandler, WatchingHandler
from kopf._structs.ids import HandlerId

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


# Values: exact, present or absent, or a callback with the handler's kwargs.

KWARGS = {'spec': {'size': 3}, 'name': 'obj', 'logger': None}


@pytest.mark.parametrize('criterion, value, expected', [
    ('x', 'x', True),
    ('x', 'y', False),
    ('x', None, False),
    (3, 3, True),
    ({'a': 1}, {'a': 1}, True),
    ('', '', True),  # empty strings are values like any other
    (PRESENT, '', True),
    (PRESENT, 0, True),
    (PRESENT, None, False),
    (ABSENT, None, True),
    (ABSENT, 'x', False),
])
def test_value_criteria(criterion, value, expected):
    assert match_value(criterion, value, KWARGS) is expected


def test_value_callbacks_get_the_value_and_the_handler_kwargs():
    seen = []

    def check(value, spec, name, **kwargs):
        seen.append((value, spec, name, sorted(kwargs)))
        return value == spec['size']

    assert match_value(check, 3, KWARGS)
    assert not match_value(check, None, KWARGS)
    assert seen == [(3, {'size': 3}, 'obj', ['logger']), (None, {'size': 3}, 'obj', ['logger'])]


def test_callbacks_get_only_the_kwargs_they_declare_unless_they_take_them_all():
    assert call(lambda value: value == 1, 1, **KWARGS)
    assert call(lambda v, name: (v, name) == (1, 'obj'), 1, **KWARGS)
    assert call(lambda *, spec: spec == {'size': 3}, **KWARGS)
    assert call(lambda **kw: kw == KWARGS, **KWARGS)
    with pytest.raises(TypeError):  # a callback that needs more than there is fails as a filter
        call(lambda value, unknown: True, 1, **KWARGS)


def test_label_callbacks_and_their_combinators_get_the_handler_kwargs():
    def sized(value, spec, **_):
        return spec['size'] > 2

    criteria = {'app': kopf.all_([is_demo, sized]), 'tier': kopf.not_(lambda value, name: name == 'other')}
    assert match_meta(criteria, LABELS, KWARGS)
    assert not match_meta(criteria, LABELS, {**KWARGS, 'spec': {'size': 1}})
    assert not match_meta(criteria, LABELS, {**KWARGS, 'name': 'other'})


# Fields: the object's field now, or a change of the field.

BODY = kopf.Body({'metadata': {'labels': LABELS}, 'spec': {'size': 3, 'mode': ''}, 'status': {'phase': 'up'}})


def handler(cls=ChangingHandler, **options):
    return cls(fn=lambda **_: None, id=HandlerId('h'), **options)


@pytest.mark.parametrize('field, value, expected', [
    (None, None, True),
    (('spec', 'size'), None, True),  # field= alone: present
    (('spec', 'missing'), None, False),
    (('spec', 'mode'), None, True),  # an empty value is there
    (('spec', 'size'), 3, True),
    (('spec', 'size'), 4, False),
    (('status', 'phase'), 'up', True),
    (('spec', 'missing'), ABSENT, True),
    (('spec', 'size'), ABSENT, False),
    (('spec', 'size'), PRESENT, True),
    (('spec', 'size'), lambda value, spec, **_: value == spec['size'], True),
    (('spec', 'size'), lambda value, **_: value > 5, False),
])
def test_field_filters_check_the_object_as_it_is(field, value, expected):
    spec = handler(WatchingHandler, field=field, value=value)
    assert match_field(spec, body=BODY, kwargs=KWARGS) is expected


@pytest.mark.parametrize('options, before, after, changed, expected', [
    # field= alone: any change, including appearing and disappearing.
    ({}, 1, 2, True, True),
    ({}, None, 2, True, True),
    ({}, 1, None, True, True),
    ({}, 1, 1, False, False),
    # value=: either side.
    ({'value': 'x'}, 'x', 'y', True, True),
    ({'value': 'x'}, 'y', 'x', True, True),
    ({'value': 'x'}, 'y', 'z', True, False),
    ({'value': 'x'}, 'x', 'x', False, False),  # no change, no call
    ({'value': PRESENT}, None, 'x', True, True),
    ({'value': ABSENT}, 'x', 'y', True, False),
    # old=/new=: each side; an unspecified side is not checked.
    ({'old': 'x', 'new': 'y'}, 'x', 'y', True, True),
    ({'old': 'x', 'new': 'y'}, 'y', 'x', True, False),
    ({'new': 'world'}, None, 'world', True, True),
    ({'new': 'world'}, 'world', 'other', True, False),
    ({'old': 'world'}, 'world', None, True, True),
    ({'old': 'world'}, 'other', 'world', True, False),
    ({'old': ABSENT, 'new': PRESENT}, None, 'x', True, True),
    ({'old': ABSENT, 'new': PRESENT}, 'x', None, True, False),
    ({'old': PRESENT, 'new': ABSENT}, 'x', None, True, True),
    ({'old': lambda value, **_: value < 5, 'new': lambda value, **_: value >= 5}, 4, 6, True, True),
    ({'old': lambda value, **_: value < 5, 'new': lambda value, **_: value >= 5}, 6, 7, True, False),
])
def test_field_filters_of_changes_check_the_transition(options, before, after, changed, expected):
    old, new = options.pop('old', None), options.pop('new', None)
    spec = handler(field=('spec', 'f'), old=old, new=new, **options)
    transition = Transition(before=before, after=after, changed=changed, old=old, new=new)
    assert match_field(spec, body=BODY, kwargs=KWARGS, transition=transition) is expected


def test_when_is_asked_only_if_the_other_filters_agree():
    asked = []
    spec = handler(labels={'app': 'other'}, when=lambda **kw: asked.append(kw) or True)
    assert not match(spec, body=BODY, kwargs=KWARGS)
    assert asked == []
    spec = handler(field=('spec', 'size'), value=3, when=lambda **kw: asked.append(kw) or True)
    assert match(spec, body=BODY, kwargs=KWARGS)
    assert asked == [KWARGS]


@pytest.mark.parametrize('options, message', [
    ({'value': 'x'}, r"value= filter\(s\) need the field they apply to: add field='spec.something'"),
    ({'old': 'x', 'new': 'y'}, r"old=, new= filter\(s\) need the field"),
    ({'field': 'spec.x', 'value': 'x', 'old': 'y'}, r"either value= .* or old=/new= .*, not both"),
])
def test_meaningless_field_filters_are_refused_when_declared(options, message):
    with pytest.raises(TypeError, match=message):
        check_field_filters(**options)
    decorator = kopf.on.update if 'old' in options or 'new' in options else kopf.on.create
    with pytest.raises(TypeError, match=message):
        decorator('pods', registry=kopf.OperatorRegistry(), **options)
