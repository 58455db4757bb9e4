"""
The filters of sub-handlers: ``kopf.register(fn, labels=..., when=..., ...)`` and ``@kopf.subhandler(...)``.

A sub-handler that its filters do not accept is not run, and its parent
does not wait for it; the filters see the object as the parent does.
"""
import logging

import pytest

import kopf
from tests.unit.conftest import RESOURCE, fetch


async def test_metadata_and_field_filters_select_the_sub_handlers(server, registry):
    calls = []
    server.change({'metadata': {'labels': {'tier': 'web'}, 'annotations': {'team': 'a'}}})

    @kopf.on.create(*RESOURCE, id='parent', registry=registry)
    def parent(**_):
        for name, options in [
            ('labelled', {'labels': {'tier': 'web'}}),
            ('mislabelled', {'labels': {'tier': 'db'}}),
            ('annotated', {'annotations': {'team': kopf.PRESENT}}),
            ('unannotated', {'annotations': {'team': kopf.ABSENT}}),
            ('with_field', {'field': 'spec.field'}),
            ('with_value', {'field': 'spec.field', 'value': 'x'}),
            ('with_other_value', {'field': 'spec.field', 'value': 'y'}),
            ('without_field', {'field': 'spec.nothing', 'value': kopf.ABSENT}),
            ('with_callback', {'field': 'spec.other', 'value': lambda value, **_: value < 10}),
        ]:
            kopf.register(lambda label=name, **_: calls.append(label), id=name, **options)

    results = await server.run()

    assert sorted(calls) == ['annotated', 'labelled', 'with_callback', 'with_field', 'with_value', 'without_field']
    assert results[-1].done  # the parent has not waited for those left out


async def test_when_gets_the_parents_cause_and_the_memo(server, registry):
    asked = []

    @kopf.on.update(*RESOURCE, id='parent', registry=registry)
    def parent(**_):
        @kopf.subhandler(id='child', when=lambda reason, diff, memo, **_: asked.append((reason, memo)) or False)
        def child(**_):
            raise AssertionError("never called")

    await server.run()
    server.change({'spec': {'field': 'y'}})
    await server.run()

    assert asked == [('update', server.memo)]


async def test_old_and_new_check_how_the_parents_cause_has_changed_the_field(server, registry):
    calls = []

    @kopf.on.update(*RESOURCE, id='parent', registry=registry)
    def parent(**_):
        kopf.register(lambda **_: calls.append('to_y'), id='to_y', field='spec.field', old='x', new='y')
        kopf.register(lambda **_: calls.append('to_z'), id='to_z', field='spec.field', new='z')
        kopf.register(lambda **_: calls.append('other'), id='other', field='spec.other', new=kopf.PRESENT)

    await server.run()
    server.change({'spec': {'field': 'y'}})
    await server.run()

    assert calls == ['to_y']  # spec.other is present, but has not changed


async def test_a_failing_filter_skips_the_sub_handler_and_is_reported(server, registry, caplog):
    calls = []

    @kopf.on.create(*RESOURCE, id='parent', registry=registry)
    def parent(**_):
        kopf.register(lambda **_: calls.append('broken'), id='broken', when=lambda **_: 1 / 0)
        kopf.register(lambda **_: calls.append('fine'), id='fine')

    with caplog.at_level(logging.ERROR):
        results = await server.run()

    assert calls == ['fine']
    assert results[-1].done
    assert "The filters of Handler 'parent/broken' have failed; the sub-handler is skipped." in caplog.text


async def test_a_sub_handler_left_out_is_not_waited_for_while_the_others_retry(server, registry, clock):
    calls = []
    attempts = iter([kopf.TemporaryError("later", delay=5), None])

    @kopf.on.create(*RESOURCE, id='parent', registry=registry)
    def parent(**_):
        @kopf.subhandler(id='retried')
        def retried(**_):
            calls.append('retried')
            error = next(attempts)
            if error is not None:
                raise error

        @kopf.subhandler(id='left_out', labels={'never': 'there'})
        def left_out(**_):
            calls.append('left_out')

    results = await server.run()

    assert calls == ['retried', 'retried']
    assert results[-1].done
    assert fetch(server, 'parent/left_out') is None


@pytest.mark.parametrize('options', [{'value': 'x'}, {'old': 'x'}, {'field': 'spec.x', 'value': 1, 'new': 2}])
async def test_field_filters_without_a_field_or_mixed_are_refused(server, registry, options):
    errors = []

    @kopf.on.create(*RESOURCE, id='parent', registry=registry, errors=kopf.ErrorsMode.PERMANENT)
    def parent(**_):
        try:
            kopf.register(lambda **_: None, id='child', **options)
        except TypeError as e:
            errors.append(e)

    await server.run()

    assert len(errors) == 1
    assert "need the field they apply to" in str(errors[0]) or "Use either value=" in str(errors[0])
