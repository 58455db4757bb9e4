"""
Handler tables: the handlers of one kind by their keys, with the kind's duplicate rule and the lookup by resource.
"""
import pytest

from kopf._handlers.tables import HandlerTable
from kopf._structs.resources import Resource, Selector
from kopf.errors import DuplicateHandlerError

PODS = Selector(name='pods')
EXAMPLES = Selector(group='kopf.dev', name='kopfexamples')
SERVED = Resource('kopf.dev', 'v1', 'kopfexamples', 'KopfExample')


def never(key, new, other_key, old):
    return None


def same_name_per_key(key, new, other_key, old):
    return f"{new!r} again for {key}" if key == other_key and new == old else None


def test_handlers_stay_in_the_order_of_registration_key_by_key():
    table = HandlerTable(never)
    table.add(PODS, 'a')
    table.add(EXAMPLES, 'b')
    table.add(PODS, 'c')

    assert list(table) == [(PODS, 'a'), (PODS, 'c'), (EXAMPLES, 'b')]
    assert table.keys() == (PODS, EXAMPLES)
    assert table.declared_for(PODS) == ['a', 'c']
    assert table.declared_for(Selector(name='other')) == []
    assert len(table) == 3


def test_the_duplicate_rule_refuses_a_handler_in_its_own_words_and_keeps_the_table_as_it_was():
    table = HandlerTable(same_name_per_key)
    table.add(PODS, 'a')
    table.add(EXAMPLES, 'a')  # another key: the rule allows it

    with pytest.raises(DuplicateHandlerError, match=r"^'a' again for "):
        table.add(PODS, 'a')
    assert list(table) == [(PODS, 'a'), (EXAMPLES, 'a')]


def test_the_rule_sees_both_handlers_and_both_keys():
    seen = []
    table = HandlerTable(lambda *args: seen.append(args))
    table.add(PODS, 'a')
    table.add(EXAMPLES, 'b')

    assert seen == [(EXAMPLES, 'b', PODS, 'a')]


def test_a_served_resource_gets_the_handlers_of_every_selector_that_selects_it():
    table = HandlerTable(never)
    table.add(EXAMPLES, 'a')
    table.add(PODS, 'b')
    table.add(Selector(kind='KopfExample'), 'c')
    table.add(Selector(everything=True), 'd')

    assert table.serving(SERVED) == ('a', 'c', 'd')
    assert table.serving(EXAMPLES) == ('a', 'd')  # a selector: its own handlers, and those of everything


def test_a_handler_under_several_matching_selectors_is_served_once():
    table = HandlerTable(never)
    handler = object()
    table.add(EXAMPLES, handler)
    table.add(Selector(kind='KopfExample'), handler)

    assert table.serving(SERVED) == (handler,)


def test_the_lookup_is_remembered_until_the_next_registration():
    calls = []

    def predicate(resource):
        calls.append(resource)
        return True

    table = HandlerTable(never)
    table.add(Selector(predicate=predicate), 'a')
    assert table.serving(SERVED) == ('a',)
    assert table.serving(SERVED) == ('a',)
    assert len(calls) == 1

    table.add(PODS, 'b')
    assert table.serving(SERVED) == ('a',)
    assert len(calls) == 2
