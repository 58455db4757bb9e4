"""The null recorder: every call does nothing and makes nothing (shared scopes); the recorder is per context."""
import asyncio
import contextvars

from kopf._observability import recording
from kopf._observability.recording import NULL, Recorder
from kopf._structs.resources import Resource

RESOURCE = Resource(group='kopf.dev', version='v1', plural='kopfexamples')
BODY = {'metadata': {'name': 'ex', 'namespace': 'ns', 'uid': 'u'}}


def test_the_default_recorder_is_the_null_one_and_records_nothing():
    assert recording.current() is NULL
    assert not NULL.enabled
    assert NULL.api_request('GET', 'https://k/api') is recording.NULL_REQUEST


ERROR = TimeoutError()
PATCH: dict[str, object] = {}


def _everything(recorder: Recorder) -> None:
    """Every call that the operator makes on a recorder, once (with arguments made beforehand)."""
    with recorder.cycle(RESOURCE, BODY, 'ADDED'):
        recorder.caused('create', 1.0)
        with recorder.handler(RESOURCE, 'create', 'fn') as call:
            call.ended(final=True, error=None)
        recorder.patched(RESOURCE, PATCH)
        recorder.patch_refused(RESOURCE, 'conflict_rebased')
    recorder.cycle_failed(RESOURCE)
    queue = recorder.queue(RESOURCE)
    queue.arrived('key')
    queue.taken('key', woken_up=False)
    queue.forget('key')
    watch = recorder.watch(RESOURCE, 'ns')
    watch.listed(3)
    watch.opened()
    watch.event('ADDED')
    watch.restarted('error')
    watch.closed()
    recorder.daemon_started(RESOURCE, 'daemon')
    recorder.daemon_restarted(RESOURCE, 'fn', 'daemon')
    recorder.daemon_ended(RESOURCE, 'daemon')
    recorder.webhook('fn', 'allowed')
    with recorder.api_request('GET', 'https://x/api/v1/pods') as request:
        request.answered(200)
    recorder.api_retry('GET', 'https://x/api/v1/pods', throttled=True, delay=1.0)
    recorder.lease_renewed('ha', 0.1)
    recorder.lease_failed('ha', ERROR)


def test_every_call_of_the_operator_is_accepted_by_the_null_recorder():
    _everything(NULL)  # nothing to see: no errors, no state
    assert vars(NULL) == {}


def test_the_null_scopes_and_probes_are_shared():
    assert NULL.cycle(RESOURCE, BODY, None) is NULL.cycle(RESOURCE, BODY, 'ADDED')
    assert NULL.handler(RESOURCE, 'create', 'a') is NULL.handler(None, 'timer', 'b')
    assert NULL.queue(RESOURCE) is NULL.queue(RESOURCE)
    assert NULL.watch(RESOURCE, None) is NULL.watch(RESOURCE, 'ns')


async def test_an_installed_recorder_is_the_current_one_for_the_tasks_started_then():
    mine = Recorder()
    token = recording.install(mine)
    try:
        inherited = asyncio.create_task(asyncio.sleep(0, result=None))
        seen = await asyncio.create_task(_current())
        await inherited
    finally:
        recording.uninstall(token)
    assert seen is mine
    assert recording.current() is NULL


async def test_another_context_has_its_own_recorder():
    mine = Recorder()
    elsewhere = contextvars.Context()
    token = recording.install(mine)
    try:
        assert elsewhere.run(recording.current) is NULL
    finally:
        recording.uninstall(token)


async def _current() -> Recorder:
    return recording.current()


def test_the_null_recorder_keeps_nothing_of_its_calls():
    import tracemalloc
    _everything(NULL)  # anything lazily made once is made now
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for _ in range(1000):
            _everything(NULL)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    mine = [tracemalloc.Filter(True, recording.__file__)]
    grown = [stat for stat in after.filter_traces(mine).compare_to(before.filter_traces(mine), 'lineno')
             if stat.size_diff > 0]
    assert grown == []
