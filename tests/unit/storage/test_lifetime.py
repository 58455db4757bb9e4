"""
Storages' lifetime hooks: entered when the operator starts, exited when it stops, told when an object is gone.
"""
import pytest

import kopf
from kopf._runtime import running
from kopf._storage import calls
from kopf.config import OperatorConfig


class Tracked(kopf.ProgressStorage):
    def __init__(self, name, log, *, fail_on_enter=False):
        self.name, self.log, self.fail_on_enter = name, log, fail_on_enter

    def fetch(self, *, key, body):
        return None

    def store(self, *, key, record, body, patch):
        pass

    def purge(self, *, key, body, patch):
        pass

    async def __aenter__(self):
        if self.fail_on_enter:
            raise ConnectionError(f"{self.name} is unreachable")
        self.log.append(f'enter {self.name}')
        return self

    async def __aexit__(self, *exc_info):
        self.log.append(f'exit {self.name}')


class TrackedDiffBase(kopf.DiffBaseStorage):
    def __init__(self, log):
        self.log = log

    def fetch(self, *, body):
        return None

    def store(self, *, body, patch, essence):
        pass

    async def __aenter__(self):
        self.log.append('enter diffbase')
        return self

    async def __aexit__(self, *exc_info):
        self.log.append('exit diffbase')


@pytest.mark.parametrize('storage', [
    kopf.AnnotationsProgressStorage(), kopf.StatusProgressStorage(), kopf.SmartProgressStorage(),
    kopf.AnnotationsDiffBaseStorage(), kopf.StatusDiffBaseStorage(),
])
async def test_builtin_storages_have_no_op_hooks(storage, body):
    assert storage.erase(body=body) is None
    async with storage as entered:
        assert entered is storage


async def test_multi_storages_enter_in_order_and_exit_in_reverse():
    log = []
    multi = kopf.MultiProgressStorage([Tracked('a', log), Tracked('b', log)])
    async with multi as entered:
        assert entered is multi
        log.append('inside')
    assert log == ['enter a', 'enter b', 'inside', 'exit b', 'exit a']


async def test_multi_storage_exits_the_entered_children_when_one_fails_to_enter():
    log = []
    multi = kopf.MultiProgressStorage([Tracked('a', log), Tracked('b', log, fail_on_enter=True)])
    with pytest.raises(ConnectionError, match='b is unreachable'):
        await multi.__aenter__()
    assert log == ['enter a', 'exit a']


async def test_multi_storages_pass_erase_on_to_their_children(body):
    erased = []

    class Erasing(Tracked):
        async def erase(self, *, body):
            erased.append((self.name, body.metadata.name))

    class Diff(TrackedDiffBase):
        def erase(self, *, body):
            erased.append(('diffbase', body.metadata.name))

    await calls.call(kopf.MultiProgressStorage([Erasing('a', []), Tracked('b', []), Erasing('c', [])]).erase,
                     body=body)
    await calls.call(kopf.MultiDiffBaseStorage([Diff([]), kopf.AnnotationsDiffBaseStorage()]).erase, body=body)
    assert erased == [('a', 'ex1'), ('c', 'ex1'), ('diffbase', 'ex1')]


async def test_the_operator_enters_its_storages_for_its_lifetime():
    log = []
    config = OperatorConfig()
    config.persistence.progress_storage = kopf.MultiProgressStorage([Tracked('a', log), Tracked('b', log)])
    config.persistence.diffbase_storage = TrackedDiffBase(log)
    async with running._storages(config):
        log.append('operating')
    assert log == ['enter a', 'enter b', 'enter diffbase', 'operating', 'exit diffbase', 'exit b', 'exit a']


async def test_the_operator_enters_a_storage_serving_as_both_only_once():
    log = []

    class Both(Tracked, TrackedDiffBase):
        pass

    both = Both('both', log)
    config = OperatorConfig()
    config.persistence.progress_storage = both
    config.persistence.diffbase_storage = both
    async with running._storages(config):
        pass
    assert log == ['enter both', 'exit both']


async def test_storages_in_the_cluster_get_the_operators_api_before_they_are_entered():
    from kopf._kube.session import APIContext
    from kopf._storage.cluster import ClusterAccess
    from kopf._structs.credentials import ConnectionInfo

    log = []

    class InCluster(Tracked):
        def use_cluster(self, cluster):
            log.append(('cluster', self.name, type(cluster)))

    config = OperatorConfig()
    config.persistence.progress_storage = kopf.MultiProgressStorage([Tracked('a', log), InCluster('b', log)])
    context = APIContext(ConnectionInfo(server='https://127.0.0.1:1'))
    async with running._storages(config, context=context):
        pass
    assert log == [('cluster', 'b', ClusterAccess), 'enter a', 'enter b', 'exit b', 'exit a']
