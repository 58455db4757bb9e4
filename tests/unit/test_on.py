import inspect
from collections.abc import Callable
from typing import Any

import pytest

import kopf.on
from kopf._handlers import subhandling
from kopf._handlers.filters import ABSENT, PRESENT
from kopf._handlers.reasons import Reason
from kopf._handlers.registries import Activity, OperatorRegistry
from kopf._structs.resources import Selector
from kopf.errors import ErrorsMode


@pytest.fixture()
def registry():
    return OperatorRegistry()


def fn(**_):
    pass


def only_changing(registry, reason=None):
    selector, = registry.selectors
    if reason is None:
        handler, = registry.get_field_handlers(selector)
    else:
        handler, = registry.get_changing_handlers(selector, reason)
    return selector, handler


@pytest.mark.parametrize('args, expected', [
    (('kopf.dev', 'v1', 'kopfexamples'), Selector(group='kopf.dev', version='v1', name='kopfexamples')),
    (('', 'v1', 'pods'), Selector(group='', version='v1', name='pods')),
    (('kopf.dev/v1', 'kopfexamples'), Selector(group='kopf.dev', version='v1', name='kopfexamples')),
    (('v1', 'ConfigMap'), Selector(group='', version='v1', name='ConfigMap')),
    (('kopf.dev', 'kopfexamples'), Selector(group='kopf.dev', name='kopfexamples')),
    (('kopfexamples',), Selector(name='kopfexamples')),
    (('KopfExample',), Selector(name='KopfExample')),
    (('kopfexamples.kopf.dev',), Selector(name='kopfexamples', group='kopf.dev')),
    ((kopf.EVERYTHING,), Selector(everything=True)),
])
def test_resource_forms(registry, args, expected):
    kopf.on.create(*args, registry=registry)(fn)

    assert registry.selectors == (expected,)


ALL_RESOURCE_DECORATORS = [
    kopf.on.create, kopf.on.update, kopf.on.delete, kopf.on.resume, kopf.on.event, kopf.on.daemon, kopf.on.timer,
    kopf.on.index, kopf.on.validate, kopf.on.mutate,
]


@pytest.mark.parametrize('decorator', ALL_RESOURCE_DECORATORS)
def test_every_resource_decorator_takes_kopfs_keyword_selectors(registry, decorator):
    decorator(group='kopf.dev', version='v1', kind='KopfExample', registry=registry, id='by-kind')(fn)
    decorator(plural='kopfexamples', registry=registry, id='by-plural')(fn)
    decorator(singular='kopfexample', registry=registry, id='by-singular')(fn)
    decorator(shortcut='kex', registry=registry, id='by-shortcut')(fn)
    decorator(category='all', registry=registry, id='by-category')(fn)
    selectors = registry.admission_selectors if decorator in (kopf.on.validate, kopf.on.mutate) \
        else registry.selectors
    assert selectors == (Selector(group='kopf.dev', version='v1', kind='KopfExample'),
                         Selector(plural='kopfexamples'), Selector(singular='kopfexample'),
                         Selector(shortcut='kex'), Selector(category='all'))


def test_field_handlers_take_keyword_selectors(registry):
    kopf.on.field(kind='KopfExample', field='spec.x', registry=registry)(fn)
    assert registry.selectors == (Selector(kind='KopfExample'),)


def test_a_callable_selects_resources(registry):
    def chosen(resource):
        return resource.plural == 'kopfexamples'

    kopf.on.event(chosen, group='kopf.dev', registry=registry)(fn)
    assert registry.selectors == (Selector(predicate=chosen, group='kopf.dev'),)


def test_decorators_return_the_function_unchanged(registry):
    decorated = kopf.on.update('pods', registry=registry)(kopf.on.create('pods', registry=registry)(fn))
    assert decorated is fn


@pytest.mark.parametrize('decorator, reason', [
    (kopf.on.create, Reason.CREATE),
    (kopf.on.update, Reason.UPDATE),
    (kopf.on.delete, Reason.DELETE),
    (kopf.on.resume, Reason.RESUME),
])
def test_changing_handlers_keep_their_options(registry, decorator, reason):
    def when(**_):
        return True

    decorator('pods', id='my-id', retries=3, timeout=30, backoff=5, errors=ErrorsMode.PERMANENT,
              labels={'a': PRESENT}, annotations={'b': ABSENT}, when=when, param='p', registry=registry)(fn)

    _, handler = only_changing(registry, reason)
    assert handler.fn is fn
    assert handler.id == 'my-id'
    assert handler.reason == reason
    assert (handler.retries, handler.timeout, handler.backoff) == (3, 30, 5)
    assert handler.errors == ErrorsMode.PERMANENT
    assert handler.labels == {'a': PRESENT}
    assert handler.annotations == {'b': ABSENT}
    assert handler.when is when
    assert handler.param == 'p'
    assert handler.field is None
    assert not handler.optional


def test_changing_handler_defaults(registry):
    kopf.on.create('pods', registry=registry)(fn)

    _, handler = only_changing(registry, Reason.CREATE)
    assert handler.id == 'fn'
    assert handler.retries is None
    assert handler.timeout is None
    assert handler.backoff is None  # settings.execution.default_backoff decides when it is needed
    assert handler.errors == ErrorsMode.TEMPORARY


def test_optional_delete_handlers(registry):
    kopf.on.delete('pods', optional=True, registry=registry)(fn)

    _, handler = only_changing(registry, Reason.DELETE)
    assert handler.optional


def test_field_handlers_need_a_field(registry):
    kopf.on.field('pods', field='spec.size', registry=registry)(fn)

    _, handler = only_changing(registry)
    assert handler.field == ('spec', 'size')
    assert handler.id == 'fn/spec.size'
    assert handler.reason is None
    with pytest.raises(TypeError):
        kopf.on.field('pods', registry=registry)
    with pytest.raises(ValueError):
        kopf.on.field('pods', field='', registry=registry)


def test_event_handlers(registry):
    kopf.on.event('pods', labels={'x': '1'}, param=5, registry=registry)(fn)

    handler, = registry.get_watching_handlers(Selector(name='pods'))
    assert handler.fn is fn
    assert handler.id == 'fn'
    assert handler.labels == {'x': '1'}
    assert handler.param == 5


@pytest.mark.parametrize('decorator, reason', [
    (kopf.on.create, Reason.CREATE),
    (kopf.on.update, Reason.UPDATE),
    (kopf.on.delete, Reason.DELETE),
    (kopf.on.resume, Reason.RESUME),
])
def test_changing_handlers_with_field_filters_are_known_by_the_field_as_in_kopf(registry, decorator, reason):
    decorator('pods', field='spec.size', value=3, registry=registry)(fn)
    decorator('pods', id='named', field=['spec', 'size'], registry=registry)(fn)

    selector, = registry.selectors
    first, second = registry.get_changing_handlers(selector, reason)
    assert (first.id, first.field, first.value) == ('fn/spec.size', ('spec', 'size'), 3)
    assert (second.id, second.field, second.value) == ('named/spec.size', ('spec', 'size'), None)
    assert first.watches_change is (reason == Reason.UPDATE)


@pytest.mark.parametrize('decorator, options', [(kopf.daemon, {}), (kopf.timer, {'interval': 1})])
def test_daemons_and_timers_with_field_filters_are_known_by_the_field_as_in_kopf(registry, decorator, options):
    decorator('pods', field='spec.size', registry=registry, **options)(fn)
    decorator('pods', id='named', field='spec.size', registry=registry, **options)(fn)
    decorator('pods', id='plain', registry=registry, **options)(fn)

    handlers = registry.get_spawning_handlers(Selector(name='pods'))
    assert [handler.id for handler in handlers] == ['fn/spec.size', 'named/spec.size', 'plain']


def test_update_and_field_handlers_filter_old_and_new_values(registry):
    kopf.on.update('pods', id='u', field='spec.size', old=1, new=kopf.PRESENT, registry=registry)(fn)
    kopf.on.field('pods', id='f', field='spec.size', value=2, registry=registry)(fn)

    selector, = registry.selectors
    update, = registry.get_changing_handlers(selector, Reason.UPDATE)
    field, = registry.get_field_handlers(selector)
    assert (update.old, update.new, update.value) == (1, kopf.PRESENT, None)
    assert (field.old, field.new, field.value) == (None, None, 2)
    assert update.watches_change and field.watches_change


def test_update_handlers_with_a_status_field_keep_it_in_the_essence(registry):
    kopf.on.update('pods', field='status.phase', registry=registry)(fn)
    kopf.on.create('pods', field='status.other', registry=registry)(fn)  # checks the object, not the essence

    assert registry.get_extra_fields(Selector(name='pods')) == [('status', 'phase')]


def test_event_handlers_with_field_filters(registry):
    kopf.on.event('pods', field='spec.size', value=kopf.ABSENT, registry=registry)(fn)

    handler, = registry.get_watching_handlers(Selector(name='pods'))
    assert (handler.id, handler.field, handler.value) == ('fn/spec.size', ('spec', 'size'), kopf.ABSENT)


def test_index_functions(registry):
    def when(**_):
        return True

    kopf.index('pods', registry=registry)(fn)
    kopf.on.index('pods', id='by_size', field='spec.size', value=kopf.PRESENT, labels={'a': 'b'},
                  annotations={'c': kopf.ABSENT}, when=when, errors=ErrorsMode.TEMPORARY, retries=3, timeout=9,
                  backoff=1, param='p', registry=registry)(fn)

    selector, = registry.selectors
    plain, full = registry.get_indexing_handlers(selector)
    assert (plain.fn, plain.id, plain.errors, plain.field) == (fn, 'fn', None, None)
    assert full.id == 'by_size'  # the index's name: no field in it
    assert (full.field, full.value) == (('spec', 'size'), kopf.PRESENT)
    assert (full.labels, full.annotations, full.when) == ({'a': 'b'}, {'c': kopf.ABSENT}, when)
    assert (full.errors, full.retries, full.timeout, full.backoff, full.param) == (ErrorsMode.TEMPORARY, 3, 9, 1, 'p')
    with pytest.raises(TypeError):
        kopf.index('pods', value=1, registry=registry)


@pytest.mark.parametrize('decorator, activity', [
    (kopf.on.startup, Activity.STARTUP),
    (kopf.on.cleanup, Activity.CLEANUP),
    (kopf.on.login, Activity.LOGIN),
    (kopf.on.probe, Activity.PROBE),
])
def test_activity_handlers(registry, decorator, activity):
    decorator(id='act', retries=2, timeout=5, backoff=1, errors=ErrorsMode.IGNORED, registry=registry)(fn)

    handler, = registry.get_activity_handlers(activity)
    assert handler.fn is fn
    assert handler.id == 'act'
    assert (handler.retries, handler.timeout, handler.backoff) == (2, 5, 1)
    assert handler.errors == ErrorsMode.IGNORED


@pytest.mark.parametrize('options', [{'retries': -1}, {'timeout': -1}, {'backoff': -1}])
def test_negative_policies_are_rejected(registry, options):
    with pytest.raises(ValueError):
        kopf.on.create('pods', registry=registry, **options)


def test_bad_resources_are_rejected(registry):
    with pytest.raises((TypeError, ValueError)):
        kopf.on.create(registry=registry)
    with pytest.raises((TypeError, ValueError)):
        kopf.on.create('a', 'b', 'c', 'd', registry=registry)


def test_register_and_execute_are_exported():
    assert kopf.on.register is subhandling.register
    assert kopf.on.execute is subhandling.execute


async def test_subhandler_decorator_registers_into_the_running_handler():
    ran = []

    async def run(children, lifecycle):
        ran.extend(child.id for child in children)

    context = subhandling.SubhandlingContext(parent_id='parent', run=run)
    token = subhandling.subhandling_context.set(context)
    try:
        @kopf.on.subhandler(id='child', retries=2)
        def child(**_):
            pass
        kopf.on.register(fn)
        await kopf.on.execute()
    finally:
        subhandling.subhandling_context.reset(token)

    assert [h.id for h in context.registry] == ['parent/child', 'parent/fn']
    assert [h.retries for h in context.registry] == [2, None]
    assert ran == ['parent/child', 'parent/fn']
    assert context.pending == []


async def test_execute_never_runs_the_same_subhandler_twice_per_invocation():
    ran = []

    async def run(children, lifecycle):
        ran.extend(child.id for child in children)

    context = subhandling.SubhandlingContext(parent_id='p', run=run)
    token = subhandling.subhandling_context.set(context)
    try:
        await kopf.on.execute(fns={'a': fn})
        await kopf.on.execute(fns={'a': fn, 'b': fn})
        with pytest.raises(TypeError):
            await kopf.on.execute(fns=[fn], registry=subhandling.SubRegistry())
    finally:
        subhandling.subhandling_context.reset(token)

    assert ran == ['p/a', 'p/b']


async def test_this_is_kopfs_earlier_name_of_the_subhandler_decorator():
    async def run(children, lifecycle):
        pass

    context = subhandling.SubhandlingContext(parent_id='parent', run=run)
    token = subhandling.subhandling_context.set(context)
    try:
        @kopf.on.this(id='child')
        def child(**_):
            pass
    finally:
        subhandling.subhandling_context.reset(token)

    assert [h.id for h in context.registry] == ['parent/child']
    assert kopf.on.this is kopf.on.subhandler is kopf.subhandler


def test_decorator_type_names_describe_the_decorators():
    handler_decorator = Callable[[Callable[..., Any]], Callable[..., Any]]
    assert kopf.on.ActivityDecorator == handler_decorator
    assert kopf.on.ChangingDecorator == handler_decorator
    assert kopf.on.WatchingDecorator == handler_decorator


@pytest.mark.parametrize('decorator', [
    lambda **kw: kopf.on.create('kopfexamples', **kw),
    lambda **kw: kopf.on.update('kopfexamples', field='spec.x', **kw),
    lambda **kw: kopf.on.field('kopfexamples', field='spec.x', **kw),
    lambda **kw: kopf.on.event('kopfexamples', **kw),
    lambda **kw: kopf.on.event('kopfexamples', field='spec.x', **kw),
    lambda **kw: kopf.on.startup(**kw),
    lambda **kw: kopf.on.login(**kw),
    lambda **kw: kopf.on.cleanup(**kw),
    lambda **kw: kopf.on.probe(**kw),
    lambda **kw: kopf.daemon('kopfexamples', **kw),
    lambda **kw: kopf.timer('kopfexamples', interval=1, **kw),
    lambda **kw: kopf.index('kopfexamples', **kw),
    lambda **kw: kopf.on.validate('kopfexamples', **kw),
    lambda **kw: kopf.on.mutate('kopfexamples', field='spec.x', **kw),
], ids=['create', 'update-field', 'field', 'event', 'event-field', 'startup', 'login', 'cleanup', 'probe',
        'daemon', 'timer', 'index', 'validate', 'mutate-field'])
@pytest.mark.parametrize('id, error, message', [
    (123, TypeError, r"A handler's id= must be a string, got int: 123 \(for tests\.unit\.test_on\.fn\)"),
    ('', ValueError, r"A handler's id= must not be empty, got '' \(for tests\.unit\.test_on\.fn\)"),
    ('  ', ValueError, r"must not be empty"),
])
def test_invalid_ids_are_refused_at_registration_naming_the_function(registry, decorator, id, error, message):
    with pytest.raises(error, match=message):
        decorator(id=id, registry=registry)(fn)
    assert not registry.selectors
    assert not registry.admission_selectors
    assert not any(registry.get_activity_handlers(activity) for activity in Activity)


@pytest.mark.parametrize('options, error, message', [
    ({'retries': '3'}, TypeError, r"retries= must be a number, got str: '3'"),
    ({'timeout': [1]}, TypeError, r"timeout= must be a number"),
    ({'errors': 'bogus'}, ValueError, r"errors= must be a kopf.ErrorsMode .* got 'bogus'"),
])
@pytest.mark.parametrize('decorator', [
    lambda **kw: kopf.on.create('kopfexamples', **kw),
    lambda **kw: kopf.on.startup(**kw),
    lambda **kw: kopf.daemon('kopfexamples', **kw),
    lambda **kw: kopf.timer('kopfexamples', interval=1, **kw),
    lambda **kw: kopf.index('kopfexamples', **kw),
], ids=['create', 'startup', 'daemon', 'timer', 'index'])
def test_invalid_options_are_refused_at_registration(registry, decorator, options, error, message):
    with pytest.raises(error, match=message):
        decorator(registry=registry, **options)(fn)


def test_errors_modes_given_by_name_are_taken(registry):
    kopf.on.create('kopfexamples', errors='permanent', registry=registry)(fn)
    _, handler = only_changing(registry, Reason.CREATE)
    assert handler.errors is ErrorsMode.PERMANENT


async def test_invalid_sub_handler_ids_are_refused():
    context = subhandling.SubhandlingContext(parent_id='parent', run=None)
    token = subhandling.subhandling_context.set(context)
    try:
        with pytest.raises(TypeError, match="got int: 5"):
            kopf.register(fn, id=5)
        with pytest.raises(ValueError, match="must not be empty"):
            kopf.register(fn, id='')
    finally:
        subhandling.subhandling_context.reset(token)


# The decorators' options are explicit, typed keyword parameters: IDEs and ``help()`` show them.
# Each list is fixed here, so that no option is lost (or renamed, or reordered) when the code changes.
POLICY = ['id', 'errors', 'timeout', 'retries', 'backoff', 'param']
FILTERS = ['labels', 'annotations', 'when', 'field', 'value']
CHANGING = ['*resource', 'id', 'retries', 'timeout', 'backoff', 'errors', *FILTERS]
ADMISSION = ['*resource', 'id', 'param', 'operation', 'operations', 'subresource', 'persistent', 'side_effects',
             'ignore_failures', *FILTERS, 'registry', '**names']
SUBHANDLER = [*POLICY, *FILTERS, 'old', 'new']
PARAMETERS = {
    'startup': [*POLICY, 'registry'],
    'cleanup': [*POLICY, 'registry'],
    'login': [*POLICY, 'registry'],
    'probe': [*POLICY, 'registry'],
    'create': [*CHANGING, 'param', 'registry', '**names'],
    'update': [*CHANGING, 'old', 'new', 'param', 'registry', '**names'],
    'resume': [*CHANGING, 'deleted', 'param', 'registry', '**names'],
    'delete': [*CHANGING, 'optional', 'param', 'registry', '**names'],
    'field': ['*resource', 'field', 'id', 'retries', 'timeout', 'backoff', 'errors', 'labels', 'annotations', 'when',
              'value', 'old', 'new', 'param', 'registry', '**names'],
    'event': ['*resource', 'id', *FILTERS, 'param', 'registry', '**names'],
    'daemon': ['*resource', 'id', 'param', 'errors', 'timeout', 'retries', 'backoff', 'initial_delay',
               'cancellation_backoff', 'cancellation_timeout', 'cancellation_polling', *FILTERS, 'optional',
               'registry', '**names'],
    'timer': ['*resource', 'id', 'param', 'errors', 'timeout', 'retries', 'backoff', 'interval', 'initial_delay',
              'sharp', 'idle', *FILTERS, 'optional', 'registry', '**names'],
    'index': ['*resource', 'id', 'errors', 'timeout', 'retries', 'backoff', *FILTERS, 'param', 'registry', '**names'],
    'validate': ADMISSION,
    'mutate': ADMISSION,
    'subhandler': SUBHANDLER,
    'this': SUBHANDLER,
    'register': ['fn', *SUBHANDLER],
    'execute': ['fns', 'handlers', 'registry', 'lifecycle'],
}


def _listed(parameter):
    prefix = {inspect.Parameter.VAR_POSITIONAL: '*', inspect.Parameter.VAR_KEYWORD: '**'}
    return prefix.get(parameter.kind, '') + parameter.name


@pytest.mark.parametrize('name, expected', PARAMETERS.items(), ids=list(PARAMETERS))
def test_every_decorator_lists_its_options_as_typed_keyword_parameters(name, expected):
    decorator = getattr(kopf.on, name)
    parameters = list(inspect.signature(decorator).parameters.values())

    assert inspect.isfunction(decorator)
    assert [_listed(parameter) for parameter in parameters] == expected
    assert all(parameter.annotation is not inspect.Parameter.empty for parameter in parameters)
    options = [p.name for p in parameters if p.kind == inspect.Parameter.KEYWORD_ONLY]
    assert options == [option for option in expected if not option.startswith('*') and option != 'fn']
