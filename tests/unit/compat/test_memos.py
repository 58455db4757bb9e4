"""
Kopf's in-memory containers (its "In-memory containers" page): the operator's memo and the objects' memos.

Events of two objects are processed as the operator processes them; only
event handlers are involved, so nothing is sent to the API.
"""
import copy
import dataclasses

import kopf
from kopf._cycle import processing
from kopf._handlers.registries import OperatorRegistry
from kopf._structs.resources import Resource, Selector
from kopf.config import OperatorConfig

KEX = Resource(group='kopf.dev', version='v1', plural='kopfexamples', kind='KopfExample')


def event(name, uid):
    return {'type': 'MODIFIED', 'object': {'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
                                           'metadata': {'name': name, 'namespace': 'ns', 'uid': uid,
                                                        'resourceVersion': '1'}}}


async def process(registry, memo, *events):
    watch = processing.ResourceWatch(context=None, resource=KEX, selector=Selector.from_args('kopfexamples'),
                                     registry=registry, config=OperatorConfig(), memo=memo)
    for raw_event in events:
        await processing.process_event(watch, raw_event, False)


async def test_each_object_has_its_own_memo_filled_from_the_operators_as_in_kopf():
    registry = OperatorRegistry()
    queue = []
    operator_memo = kopf.Memo(my_queue=queue)
    seen = []

    @kopf.on.event('kopfexamples', registry=registry)
    def pinged(memo, namespace, name, **_):
        if not memo.get('is_seen'):
            memo.my_queue.append(f"{namespace}/{name}")
            memo.is_seen = True
        memo.counter = memo.get('counter', 0) + 1
        seen.append((name, memo.counter))

    await process(registry, operator_memo, event('a', 'uid-a'), event('b', 'uid-b'), event('a', 'uid-a'))

    assert queue == ['ns/a', 'ns/b']  # the operator's mutable values are shared by all objects
    assert seen == [('a', 1), ('b', 1), ('a', 2)]  # the objects' own values are not
    assert operator_memo == {'my_queue': queue}  # and do not go back into the operator's memo


async def test_a_custom_memo_class_decides_how_it_is_copied_as_in_kopf():
    @dataclasses.dataclass()
    class CustomContext:
        create_tpl: str

        def __copy__(self):
            return self

    registry = OperatorRegistry()
    context = CustomContext(create_tpl="Hello, {name}!")
    greetings = []

    @kopf.on.event('kopfexamples', registry=registry)
    def greet(memo, **kwargs):
        greetings.append((memo.create_tpl.format(**kwargs), memo is context))

    await process(registry, context, event('a', 'uid-a'), event('b', 'uid-b'))

    assert greetings == [("Hello, a!", True), ("Hello, b!", True)]
    assert copy.copy(context) is context
