"""Which watch streams run for which resources and namespaces, and how they start and stop as those change."""
import asyncio

from kopf._daemons.keeper import Daemons
from kopf._handlers.registries import OperatorRegistry
from kopf._indexing import indexing
from kopf._runtime import orchestration
from kopf._runtime.orchestration import Plan, Stream, desired_streams, plan
from kopf._structs.resources import Resource, Selector
from kopf._structs.stoppers import DaemonStoppingReason

CMS = Resource('', 'v1', 'configmaps', 'ConfigMap', namespaced=True)
KEX = Resource('kopf.dev', 'v1', 'kopfexamples', 'KopfExample', namespaced=True)
NODES = Resource('', 'v1', 'nodes', 'Node', namespaced=False)
S_CMS, S_KEX, S_NODES = Selector(name='configmaps'), Selector(name='kopfexamples'), Selector(name='nodes')


def test_namespaced_resources_are_watched_in_every_namespace_and_cluster_scoped_ones_once():
    streams = desired_streams({S_CMS: CMS, S_NODES: NODES}, ['ns1', 'ns2'])
    assert streams == {Stream(S_CMS, CMS, 'ns1'), Stream(S_CMS, CMS, 'ns2'), Stream(S_NODES, NODES, None)}


def test_cluster_wide_means_one_stream_per_resource():
    assert desired_streams({S_CMS: CMS, S_NODES: NODES}, [None]) == {
        Stream(S_CMS, CMS, None), Stream(S_NODES, NODES, None)}


def test_no_namespace_yet_means_only_the_cluster_scoped_resources():
    assert desired_streams({S_CMS: CMS, S_NODES: NODES}, []) == {Stream(S_NODES, NODES, None)}


def test_a_namespace_that_appears_starts_its_streams_and_nothing_else():
    resources = {S_CMS: CMS, S_KEX: KEX, S_NODES: NODES}
    before = desired_streams(resources, ['ns1'])
    after = desired_streams(resources, ['ns1', 'ns2'])
    assert plan(before, after) == Plan(start=(Stream(S_CMS, CMS, 'ns2'), Stream(S_KEX, KEX, 'ns2')), stop=())


def test_a_namespace_that_goes_stops_its_streams_only():
    resources = {S_CMS: CMS, S_KEX: KEX, S_NODES: NODES}
    assert plan(desired_streams(resources, ['ns1', 'ns2']), desired_streams(resources, ['ns2'])) == Plan(
        start=(), stop=(Stream(S_CMS, CMS, 'ns1'), Stream(S_KEX, KEX, 'ns1')))


def test_a_resource_that_appears_starts_in_every_served_namespace():
    before = desired_streams({S_CMS: CMS}, ['ns1', 'ns2'])
    after = desired_streams({S_CMS: CMS, S_KEX: KEX}, ['ns1', 'ns2'])
    assert plan(before, after) == Plan(start=(Stream(S_KEX, KEX, 'ns1'), Stream(S_KEX, KEX, 'ns2')), stop=())


def test_a_resource_that_goes_stops_everywhere():
    before = desired_streams({S_CMS: CMS, S_KEX: KEX}, ['ns1', 'ns2'])
    after = desired_streams({S_CMS: CMS}, ['ns1', 'ns2'])
    assert plan(before, after) == Plan(start=(), stop=(Stream(S_KEX, KEX, 'ns1'), Stream(S_KEX, KEX, 'ns2')))


def test_a_new_version_of_a_resource_replaces_its_streams():
    newer = Resource('kopf.dev', 'v2', 'kopfexamples', 'KopfExample', namespaced=True)
    assert plan(desired_streams({S_KEX: KEX}, ['ns1']), desired_streams({S_KEX: newer}, ['ns1'])) == Plan(
        start=(Stream(S_KEX, newer, 'ns1'),), stop=(Stream(S_KEX, KEX, 'ns1'),))


def test_a_resource_named_by_several_selectors_is_watched_once_under_the_first():
    by_kind = Selector(name='ConfigMap')
    assert desired_streams({S_CMS: CMS, by_kind: CMS}, ['ns1']) == {Stream(S_CMS, CMS, 'ns1')}


def test_nothing_changed_means_nothing_to_do():
    streams = desired_streams({S_CMS: CMS, S_NODES: NODES}, ['ns1'])
    assert plan(streams, streams) == Plan()


def test_a_stream_names_its_resource_and_namespace():
    assert str(Stream(S_CMS, CMS, 'ns1')) == "configmaps.v1 in 'ns1'"
    assert str(Stream(S_NODES, NODES, None)) == "nodes.v1 cluster-wide"


# --- carrying the plans out -----------------------------------------------------------------------

class FakeStreams:
    """What the spawned streams did: each runs until its stop flag is set."""

    def __init__(self, *, keepers: bool = False) -> None:
        self.started: list[Stream] = []
        self.ended: list[Stream] = []
        self.keepers: dict[Stream, Daemons] = {}
        self.with_keepers = keepers

    def spawn(self, stream: Stream, stop: asyncio.Event):
        self.started.append(stream)

        async def run():
            await stop.wait()
            self.ended.append(stream)

        keeper = None
        if self.with_keepers:
            keeper = self.keepers[stream] = Daemons(patcher=None)
        return asyncio.create_task(run()), keeper


async def until(condition, *, turns: int = 100) -> None:
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition did not come true")


async def test_following_starts_and_stops_only_the_changes():
    fake = FakeStreams()
    streams = orchestration.Streams(spawn=fake.spawn, exit_timeout=1, daemons_timeout=1)
    streams.follow(desired_streams({S_CMS: CMS}, ['ns1', 'ns2']))
    assert sorted(map(str, fake.started)) == ["configmaps.v1 in 'ns1'", "configmaps.v1 in 'ns2'"]
    streams.follow(desired_streams({S_CMS: CMS}, ['ns2', 'ns3']))
    await until(lambda: fake.ended)
    assert fake.ended == [Stream(S_CMS, CMS, 'ns1')]
    assert [str(s) for s in fake.started[2:]] == ["configmaps.v1 in 'ns3'"]
    assert set(streams.streams) == {Stream(S_CMS, CMS, 'ns2'), Stream(S_CMS, CMS, 'ns3')}
    assert len(streams.tasks) == 2
    streams.stop()
    await streams.wait(timeout=1)
    assert len(fake.ended) == 3


async def test_a_stopped_stream_that_does_not_end_is_cancelled_after_the_timeout():
    cancelled = asyncio.Event()

    def spawn(stream, stop):
        async def stubborn():
            try:
                await asyncio.Event().wait()
            finally:
                cancelled.set()
        return asyncio.create_task(stubborn()), None

    streams = orchestration.Streams(spawn=spawn, exit_timeout=0.01, daemons_timeout=1)
    streams.follow({Stream(S_CMS, CMS, 'ns1')})
    streams.follow(set())
    await asyncio.wait_for(cancelled.wait(), timeout=5)


async def test_a_stopped_stream_stops_its_daemons_as_deleted_and_leaves_the_indexes():
    registry = OperatorRegistry()
    indexes = indexing.OperatorIndexes(registry)
    fake = FakeStreams(keepers=True)
    streams = orchestration.Streams(spawn=fake.spawn, exit_timeout=1, daemons_timeout=1, indexes=indexes)
    gone = Stream(S_CMS, CMS, 'ns1')
    indexes.expect(gone.listing)  # it has not listed yet: the handlers wait for it
    streams.follow({gone})
    assert not indexes.is_ready
    closed = []
    keeper = fake.keepers[gone]
    original = keeper.close

    async def close(*, timeout, reason=DaemonStoppingReason.OPERATOR_EXITING):
        closed.append(reason)
        await original(timeout=timeout, reason=reason)

    keeper.close = close
    streams.follow(set())
    await until(lambda: closed and indexes.is_ready)
    assert closed == [DaemonStoppingReason.RESOURCE_DELETED]
    assert indexes.is_ready  # not waited for any more


async def test_a_stream_that_ends_by_itself_is_cleaned_up_and_started_again_only_by_a_new_plan():
    fake = FakeStreams()
    streams = orchestration.Streams(spawn=fake.spawn, exit_timeout=1, daemons_timeout=1)
    stream = Stream(S_CMS, CMS, 'ns1')
    streams.follow({stream})
    [task] = list(streams.tasks)
    assert streams.stream_of(task) == stream
    streams.ended(task)
    assert not streams.tasks
    await until(lambda: fake.ended)
    streams.follow({stream})  # still wanted: started again only when the plan says so anew
    assert fake.started == [stream, stream]
    streams.stop()
    await streams.wait(timeout=1)
