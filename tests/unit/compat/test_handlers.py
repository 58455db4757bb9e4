"""
Kopf's handler forms (its "Handlers" and "Arguments" pages), driven through the handling cycle in-process.
"""
import functools

import kopf
from tests.unit.conftest import FINALIZER, RESOURCE, make_handler, names


def deleting(server):
    """The user deletes the object: the finalizer holds it."""
    assert FINALIZER in server.raw['metadata'].get('finalizers', [])
    server.change({'metadata': {'deletionTimestamp': '2020-01-01T00:00:00Z'}})


async def test_resume_handlers_are_not_called_for_an_object_being_deleted_as_in_kopf(server, registry):
    calls = []
    kopf.on.resume(*RESOURCE, id='resumed', registry=registry)(make_handler(calls, 'resumed'))
    kopf.on.delete(*RESOURCE, id='deleted', registry=registry)(make_handler(calls, 'deleted'))
    await server.run()
    deleting(server)  # while the operator is away

    await server.run(first_seen=True)

    assert names(calls) == ['deleted']
    assert server.gone


async def test_resume_handlers_with_deleted_run_beside_the_deletion_as_in_kopf(server, registry):
    calls = []
    kopf.on.resume(*RESOURCE, id='resumed', deleted=True, registry=registry)(make_handler(calls, 'resumed'))
    kopf.on.delete(*RESOURCE, id='deleted', registry=registry)(make_handler(calls, 'deleted'))
    await server.run()
    deleting(server)

    await server.run(first_seen=True)

    assert sorted(names(calls)) == ['deleted', 'resumed']
    assert server.gone


async def test_one_function_as_create_and_resume_handler_tells_the_reason_as_in_kopf(server, registry):
    calls = []
    handler = make_handler(calls, 'start_fn')
    kopf.on.resume(*RESOURCE, registry=registry)(handler)
    kopf.on.create(*RESOURCE, registry=registry)(handler)

    await server.run()
    await server.run(first_seen=True)  # the operator restarts

    assert [kwargs['reason'] for _, kwargs in calls] == ['create', 'resume']


async def test_a_bound_method_of_an_instance_is_a_handler_as_in_kopf(server, registry):
    class Reconciler:
        def __init__(self):
            self.seen = []

        def on_create(self, name, **_):
            self.seen.append(name)
            return 'done'

    reconciler = Reconciler()
    kopf.on.create(*RESOURCE, registry=registry)(reconciler.on_create)

    await server.run()

    assert reconciler.seen == ['ex1']
    assert list(server.raw['status'].values()) == ['done']


async def test_an_update_handler_of_the_status_sees_the_status_change_as_in_kopf(server, registry):
    calls = []
    kopf.on.update(*RESOURCE, field='status', registry=registry)(make_handler(calls, 'status_changed'))
    await server.run()

    server.change({'status': {'phase': 'Running'}})
    await server.run()

    (_, kwargs), = calls
    assert (kwargs['old'], kwargs['new']) == (None, {'phase': 'Running'})


async def test_one_function_on_several_fields_is_called_per_field_with_its_param_as_in_kopf(server, registry):
    calls = []
    handler = make_handler(calls, 'fields_changed')
    kopf.on.update(*RESOURCE, field='spec.field', param='fld', registry=registry)(handler)
    kopf.on.update(*RESOURCE, field='spec.other', param='oth', registry=registry)(handler)
    await server.run()

    server.change({'spec': {'field': 'y', 'other': 2}})
    await server.run()

    assert sorted((kwargs['param'], kwargs['old'], kwargs['new']) for _, kwargs in calls) == [
        ('fld', 'x', 'y'), ('oth', 1, 2)]
    assert set(server.raw['metadata']['annotations']) == {'kopf.zalando.org/last-handled-configuration'}


async def test_field_handlers_get_the_diff_relative_to_their_field_as_in_kopf(server, registry):
    calls = []
    kopf.on.field(*RESOURCE, field='metadata.labels', registry=registry)(make_handler(calls, 'relabel'))
    server.change({'metadata': {'labels': {'label2': 'old-value', 'label3': 'old-value'}}})
    await server.run()
    calls.clear()

    server.change({'metadata': {'labels': {'label1': 'new-value', 'label2': 'new-value', 'label3': None}}})
    await server.run()

    (_, kwargs), = calls
    assert sorted(kwargs['diff']) == [
        ('add', ('label1',), None, 'new-value'),
        ('change', ('label2',), 'old-value', 'new-value'),
        ('remove', ('label3',), 'old-value', None),
    ]


async def test_objects_without_a_namespace_labels_or_annotations_as_in_kopf(server, registry):
    calls = []
    kopf.on.create(*RESOURCE, registry=registry)(make_handler(calls, 'created'))
    del server.raw['metadata']['namespace']  # a cluster-scoped object

    await server.run()

    (_, kwargs), = calls
    assert kwargs['namespace'] is None
    assert dict(kwargs['labels']) == {} and dict(kwargs['annotations']) == {}
    assert kwargs['labels'].get('absent') is None


async def test_sub_handlers_of_partial_functions_are_known_by_their_ids_as_in_kopf(server, registry):
    calls = []

    def handle_item(item, *, spec, **_):
        calls.append((item, dict(spec)))
        return {'item': item}

    @kopf.on.create(*RESOURCE, id='create_fn', registry=registry)
    async def create_fn(spec, **_):
        await kopf.execute(fns={item: functools.partial(handle_item, item=item) for item in ['item1', 'item2']})

    await server.run()

    assert [item for item, _ in calls] == ['item1', 'item2']
    assert server.raw['status'] == {'create_fn/item1': {'item': 'item1'}, 'create_fn/item2': {'item': 'item2'}}


async def test_sub_handlers_accept_the_filters_as_in_kopf(server, registry):
    calls = []
    server.change({'metadata': {'labels': {'tier': 'web'}}})

    @kopf.on.create(*RESOURCE, id='create_fn', registry=registry)
    def create_fn(**_):
        @kopf.subhandler(id='web', labels={'tier': 'web'})
        def web(**_):
            calls.append('web')

        @kopf.subhandler(id='db', labels={'tier': 'db'})
        def db(**_):
            calls.append('db')

        kopf.register(lambda **_: calls.append('big'), id='big', when=lambda spec, **_: spec['other'] > 10)
        kopf.register(lambda **_: calls.append('small'), id='small', when=lambda spec, **_: spec['other'] <= 10)

    await server.run(limit=2)

    assert sorted(calls) == ['small', 'web']
