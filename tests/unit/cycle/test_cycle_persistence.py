"""
What each kind of event costs in storage calls: the cycle reads one snapshot and writes one patch.

The operator has 5 update and 3 resume handlers (and, where deletion is
concerned, a delete handler). Every storage call is counted, by method and by
handler id, per cycle.
"""
import collections
import copy

import pytest

import kopf.on
from kopf._cycle.cycle import handle_object
from kopf._storage.progress import ProgressStorage, SmartProgressStorage
from kopf._structs.bodies import Body
from kopf._structs.patches import apply
from kopf.config import OperatorConfig
from tests.unit.conftest import FINALIZER, RESOURCE, SELECTOR, logger


class Counter:
    """Calls by method, and fetches by handler id."""

    def __init__(self):
        self.calls = collections.Counter()
        self.fetched = collections.Counter()

    def count(self, method, kwargs):
        self.calls[method] += 1
        if method == 'fetch':
            self.fetched[kwargs['key']] += 1


class CountingSmart(SmartProgressStorage):
    """The default storage (annotations, and the legacy status for reading), counting its calls."""

    def __init__(self):
        super().__init__()
        self.counter = Counter()

    def fetch(self, **kwargs):
        self.counter.count('fetch', kwargs)
        return super().fetch(**kwargs)

    def store(self, **kwargs):
        self.counter.count('store', kwargs)
        return super().store(**kwargs)

    def purge(self, **kwargs):
        self.counter.count('purge', kwargs)
        return super().purge(**kwargs)

    def touch(self, **kwargs):
        self.counter.count('touch', kwargs)
        return super().touch(**kwargs)

    def flush(self):
        self.counter.count('flush', {})


class CountingExternal(ProgressStorage):
    """Records outside of the object, as a database would keep them: every call would be a query."""

    def __init__(self):
        self.counter = Counter()
        self.data = {}

    async def fetch(self, *, key, body):
        self.counter.count('fetch', {'key': key})
        return self.data.get(key)

    async def store(self, *, key, record, body, patch):
        self.counter.count('store', {})
        self.data[key] = dict(record)

    async def purge(self, *, key, body, patch):
        self.counter.count('purge', {})
        self.data.pop(key, None)

    async def flush(self):
        self.counter.count('flush', {})


def make_registry(*, delete):
    registry = kopf.OperatorRegistry()
    for index in range(5):
        kopf.on.update(*RESOURCE, id=f'update{index}', registry=registry)(lambda **_: None)
    for index in range(3):
        kopf.on.resume(*RESOURCE, id=f'resume{index}', registry=registry)(lambda **_: None)
    if delete:
        kopf.on.delete(*RESOURCE, id='delete', registry=registry)(lambda **_: None)
    return registry


async def cycle(registry, config, raw, *, event_type='MODIFIED', first_seen=False):
    return await handle_object(registry=registry, config=config, resource=SELECTOR, event_type=event_type,
                               body=Body(copy.deepcopy(raw)), first_seen=first_seen, memo=None, logger=logger)


async def handled_object(registry, *, delete):
    """An object as it is after its creation was handled: with the diff-base (and the finalizer)."""
    raw = {'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
           'metadata': {'name': 'n', 'namespace': 'ns', 'uid': 'u', 'resourceVersion': '1',
                        'finalizers': [FINALIZER] if delete else []},
           'spec': {'field': 1}}
    result = await cycle(registry, OperatorConfig(), raw, event_type='ADDED')
    assert result.cause == 'create' and result.done
    return apply(raw, result.patch)


EVENTS = {
    # kind: (a change of the handled object, event type, first sight, the expected cause)
    'create': (None, 'ADDED', True, 'create'),
    'update': ({'spec': {'field': 2}}, 'MODIFIED', False, 'update'),
    'resume': ({}, None, True, 'resume'),
    'idle': ({}, 'MODIFIED', False, 'noop'),
    'delete': ({'metadata': {'deletionTimestamp': '2020-01-01T00:00:00Z'}}, 'MODIFIED', False, 'delete'),
    'gone': ({}, 'DELETED', False, 'gone'),
}


async def count_event(kind, storage_class, *, delete):
    registry = make_registry(delete=delete)
    handled = await handled_object(registry, delete=delete)
    change, event_type, first_seen, cause = EVENTS[kind]
    raw = dict(handled, metadata={'name': 'n', 'namespace': 'ns', 'uid': 'u', 'resourceVersion': '1',
                                  'finalizers': handled['metadata']['finalizers']},
               spec={'field': 1}) if change is None else apply(handled, change)
    config = OperatorConfig()
    storage = config.persistence.progress_storage = storage_class()
    result = await cycle(registry, config, raw, event_type=event_type, first_seen=first_seen)
    assert result.cause == (cause if delete or kind != 'delete' else 'noop')
    assert result.done
    return storage.counter


# The default storage keeps everything in the object: it says when nothing is stored, and nothing is fetched.

@pytest.mark.parametrize('delete', [False, True], ids=['5u+3r', '5u+3r+1d'])
@pytest.mark.parametrize('kind', list(EVENTS))
async def test_an_object_without_progress_costs_no_fetch_whatever_the_event(kind, delete):
    counter = await count_event(kind, CountingSmart, delete=delete)
    assert counter.calls['fetch'] == 0  # before: 11 on an idle event, 8-9 on others
    assert counter.calls['store'] == 0  # handlers that finish within the cycle leave no record to store
    assert counter.calls['purge'] == 0  # before: 8-9 at the end of every cause
    assert counter.calls['flush'] == 0


# A storage outside of the object: each record is fetched at most once per cycle; outcomes are written at once.

RAN = {'create': 0, 'update': 5, 'resume': 3, 'idle': 0, 'delete': 1, 'gone': 0}  # handlers run per event


@pytest.mark.parametrize('delete, expected', [
    (False, {'create': 8, 'update': 8, 'resume': 8, 'idle': 8, 'delete': 0, 'gone': 0}),
    (True, {'create': 9, 'update': 9, 'resume': 9, 'idle': 9, 'delete': 9, 'gone': 0}),
], ids=['5u+3r', '5u+3r+1d'])
@pytest.mark.parametrize('kind', list(EVENTS))
async def test_an_external_storage_is_asked_once_per_handler_per_cycle(kind, delete, expected):
    counter = await count_event(kind, CountingExternal, delete=delete)
    ran = RAN[kind] if delete or kind != 'delete' else 0
    assert counter.calls['fetch'] == expected[kind]  # before: 11 on an idle event
    assert all(count == 1 for count in counter.fetched.values()), counter.fetched
    assert counter.calls['store'] == 2 * ran  # each handler's start before it runs, its outcome right after
    assert counter.calls['purge'] == ran  # only the records that exist are purged
    assert counter.calls['flush'] <= ran + 2  # after the starts, after each outcome, at the end


@pytest.mark.parametrize('storage_class, stores, purges, flushes', [
    # In the object: the starts and the outcomes go into each cycle's one patch; a purge is only a key in the
    # patch, so all handlers' keys are purged, unreadable ones too.
    (CountingSmart, [5, 1, 1, 1, 0], 8, 1),
    # Outside of it: the starts, then each outcome right away; only the records known to exist are purged.
    (CountingExternal, [6, 1, 1, 1, 1], 5, 3),
])
async def test_a_cause_over_several_cycles_reads_each_record_once_per_cycle(storage_class, stores, purges,
                                                                             flushes):
    registry = make_registry(delete=False)
    raw = apply(await handled_object(registry, delete=False), {'spec': {'field': 2}})
    config = OperatorConfig()
    config.persistence.max_unpersisted_time = 0  # one handler per cycle: 5 cycles for 5 update handlers
    storage = config.persistence.progress_storage = storage_class()

    cycles = []
    while True:
        storage.counter = Counter()
        result = await cycle(registry, config, raw)
        raw = apply(raw, result.patch)
        cycles.append(storage.counter)
        if result.done:
            break

    assert len(cycles) == 5
    for counter in cycles:
        assert all(count == 1 for count in counter.fetched.values()), counter.fetched
        assert counter.calls['flush'] <= flushes
    assert [c.calls['store'] for c in cycles] == stores
    assert [c.calls['purge'] for c in cycles] == [0, 0, 0, 0, purges]
