"""
Declaring: the options of every decorator are checked before the function is known; the handler comes after.
"""
import pytest

from kopf._handlers import declaring
from kopf._handlers.registries import ChangingHandler, IndexingHandler, TimerHandler
from kopf._structs.ids import HandlerId


def fn(**_):
    pass


@pytest.mark.parametrize('field, parent, expected', [
    (None, None, 'fn'),
    (('spec', 'size'), None, 'fn/spec.size'),
    (None, HandlerId('parent'), 'parent/fn'),
    (('spec', 'size'), HandlerId('parent'), 'parent/fn/spec.size'),
])
def test_the_id_is_the_functions_name_with_its_field_and_parent(field, parent, expected):
    assert declaring.handler_id(fn, None, field=field, parent=parent) == expected
    assert declaring.handler_id(fn, 'given', field=field, parent=parent) == expected.replace('fn', 'given')


def test_a_declaration_makes_handlers_of_its_kind_with_the_parsed_field():
    declaration = declaring.declare(ChangingHandler, id=None, field='spec.size', value=3, retries=2)
    handler = declaration.handler(fn)

    assert type(handler) is ChangingHandler
    assert (handler.id, handler.field, handler.value, handler.retries) == ('fn/spec.size', ('spec', 'size'), 3, 2)


def test_a_declaration_not_named_by_its_field_keeps_the_field_out_of_the_id():
    handler = declaring.declare(IndexingHandler, id=None, field='spec.size', named_by_field=False).handler(fn)
    assert (handler.id, handler.field) == ('fn', ('spec', 'size'))


@pytest.mark.parametrize('options, error, message', [
    ({'retries': 0}, ValueError, r"^retries= is the number of attempts and must be at least 1, got 0\.$"),
    ({'retries': 2.5}, TypeError, r"^retries= must be a number, got float: 2\.5\.$"),
    ({'interval': '5'}, ValueError, r"^interval= must be a positive number of seconds, got '5'\.$"),
    ({'idle': True}, ValueError, r"^idle= must be a number of seconds >= 0, got True\.$"),
    ({'value': 1}, TypeError, r"^value= filter\(s\) need the field"),
])
def test_bad_options_are_refused_before_the_function_is_known(options, error, message):
    with pytest.raises(error, match=message):
        declaring.declare(TimerHandler, id=None, **options)


def test_the_policy_types_are_checked_by_the_handler_itself_naming_the_function():
    with pytest.raises(TypeError, match=r"^timeout= must be a number, got str: '1' \(for .*\.fn\)\.$"):
        ChangingHandler(fn=fn, id=HandlerId('h'), timeout='1')
