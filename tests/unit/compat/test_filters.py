"""
Kopf's filters (its "Filtering" page), driven through the handling cycle in-process.
"""
import kopf
from tests.unit.conftest import LAST_HANDLED, RESOURCE, make_handler, names


async def test_an_empty_label_is_present_as_in_kopf(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, id='present', labels={'tier': kopf.PRESENT}, registry=registry)(
        make_handler(calls, 'present'))
    kopf.on.create(*RESOURCE, id='empty', labels={'tier': ''}, registry=registry)(make_handler(calls, 'empty'))
    kopf.on.create(*RESOURCE, id='absent', labels={'tier': kopf.ABSENT}, registry=registry)(
        make_handler(calls, 'absent'))
    server.change({'metadata': {'labels': {'tier': ''}}})

    await server.run()

    assert sorted(names(calls)) == ['empty', 'present']


async def test_an_object_that_starts_matching_is_created_not_updated_as_in_kopf(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, id='created', labels={'tier': 'web'}, registry=registry)(
        make_handler(calls, 'created'))
    kopf.on.update(*RESOURCE, id='updated', labels={'tier': 'web'}, registry=registry)(
        make_handler(calls, 'updated'))

    await server.run()  # no handler selects it: it stays out of sight, with no diff-base
    server.change({'metadata': {'labels': {'tier': 'web'}}})
    await server.run()

    assert names(calls) == ['created']
    assert LAST_HANDLED in server.raw['metadata']['annotations']


async def test_a_value_filter_of_an_update_matches_the_old_or_the_new_value_as_in_kopf(server, registry):
    calls = []
    kopf.on.update(*RESOURCE, id='world', field='spec.field', value='world', registry=registry)(
        make_handler(calls, 'world'))
    kopf.on.update(*RESOURCE, id='hello', field='spec.field', new='world', registry=registry)(
        make_handler(calls, 'hello'))
    kopf.on.update(*RESOURCE, id='goodbye', field='spec.field', old='world', registry=registry)(
        make_handler(calls, 'goodbye'))
    await server.run()

    server.change({'spec': {'field': 'world'}})  # into 'world'
    await server.run()
    assert sorted(names(calls)) == ['hello', 'world']
    calls.clear()

    server.change({'spec': {'field': None}})  # out of 'world', by removal
    await server.run()
    assert sorted(names(calls)) == ['goodbye', 'world']


async def test_when_callbacks_can_filter_by_the_reason_and_the_memo_as_in_kopf(server, registry):
    calls, asked = [], []

    def only_creations(reason, memo, **_):
        asked.append((reason, memo is server.memo))
        return reason == 'create'

    handler = make_handler(calls, 'handler')
    kopf.on.create(*RESOURCE, when=only_creations, registry=registry)(handler)
    kopf.on.update(*RESOURCE, when=only_creations, registry=registry)(handler)
    await server.run()
    server.change({'spec': {'field': 'y'}})
    await server.run()

    # Kopf asks a callback as often as it needs to per cycle (1.45.2 asks twice, also with the reason 'noop'):
    # what is promised is that it gets the cycle's reason and the object's memo, not how often it is asked.
    assert set(asked) == {('create', True), ('update', True)}
    assert [kwargs['reason'] for _, kwargs in calls] == ['create']


async def test_a_field_filter_without_a_value_means_the_field_is_present_as_in_kopf(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, id='with_field', field='spec.field', registry=registry)(
        make_handler(calls, 'with_field'))
    kopf.on.create(*RESOURCE, id='with_no_field', field='spec.no-field', registry=registry)(
        make_handler(calls, 'with_no_field'))
    kopf.on.create(*RESOURCE, id='without_field', field='spec.no-field', value=kopf.ABSENT, registry=registry)(
        make_handler(calls, 'without_field'))

    await server.run()

    assert sorted(names(calls)) == ['with_field', 'without_field']
