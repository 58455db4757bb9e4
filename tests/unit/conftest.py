"""
What the specifications of the handling cycle share: a simulated API server and a fake clock.

An object lives on the simulated server: every cycle handles the object as
the server holds it, and the returned patch is applied to it the way the
server would (JSON merge-patch). The clock is frozen and moved explicitly
(by the tests, or by handlers that "take time"), so that delays and the
cycle's time budget are exact.
"""
import asyncio
import copy
import datetime
import json
import logging
import time

import pytest

from kopf._cycle.cycle import HandlingResult, handle_object
from kopf._handlers.registries import OperatorRegistry
from kopf._structs.bodies import Body
from kopf._structs.patches import Patch, apply
from kopf._structs.resources import Selector
from kopf.config import OperatorConfig

UTC = datetime.timezone.utc
T0 = datetime.datetime(2020, 1, 1, 0, 0, 0, tzinfo=UTC)
RESOURCE = ('kopf.dev', 'v1', 'kopfexamples')
SELECTOR = Selector.from_args(*RESOURCE)
LAST_HANDLED = 'kopf.zalando.org/last-handled-configuration'
FINALIZER = 'kopf.zalando.org/KopfFinalizerMarker'
logger = logging.getLogger('test-object')


class FakeClock:
    """Both the wall clock and the monotonic clock of the cycle, moved only by ``advance()``."""

    def __init__(self):
        self.wall = T0
        self.mono = 1000.0
        self.sleepers = []  # (deadline, loop, future) of those waiting for the clock to move

    def now(self):
        return self.wall

    def monotonic(self):
        return self.mono

    async def sleep(self, seconds):
        """Wait until the clock is moved this far (by the test, or by a handler in a thread)."""
        future = asyncio.get_running_loop().create_future()
        self.sleepers.append((self.mono + seconds, asyncio.get_running_loop(), future))
        self._wake()
        await future

    def call_later(self, seconds, callback):
        """Call back when the clock is moved this far; the returned timer can be cancelled."""
        timer = asyncio.get_running_loop().create_future()
        timer.add_done_callback(lambda f: None if f.cancelled() else callback())
        self.sleepers.append((self.mono + seconds, asyncio.get_running_loop(), timer))
        self._wake()
        return timer

    def advance(self, seconds):
        self.wall += datetime.timedelta(seconds=seconds)
        self.mono += seconds
        self._wake()

    @property
    def next_deadline(self):
        """When the earliest of those waiting for the clock wakes up; ``None`` if nobody waits."""
        return min((deadline for deadline, _, future in self.sleepers if not future.done()), default=None)

    def _wake(self):
        due = [sleeper for sleeper in self.sleepers if sleeper[0] <= self.mono]
        self.sleepers = [sleeper for sleeper in self.sleepers if sleeper[0] > self.mono]
        for _, loop, future in due:
            loop.call_soon_threadsafe(lambda f=future: f.done() or f.set_result(None))


@pytest.fixture()
def clock():
    return FakeClock()


async def idle():
    """Yield to the event loop until nothing else is ready to run: whatever waits, waits for something else."""
    loop = asyncio.get_running_loop()
    for _ in range(10_000):
        await asyncio.sleep(0)
        if not loop._ready:  # nothing scheduled after this task: every other task waits
            return
    raise AssertionError("The event loop never became idle.")


async def until(condition, *, timeout=10.0):
    """
    Yield to the event loop until the condition holds (sockets and other threads go on meanwhile).

    The timeout (real time) only turns a condition that never comes true into a failure; nothing waits for it.
    """
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"The condition never came true: {condition}")
        await asyncio.sleep(0)


async def in_fake_time(clock, awaitable):
    """
    Await it while moving the clock: whenever everything else waits, to the earliest deadline of those waiting.

    So code that waits on the clock runs as it would in real time, only without the waiting.
    """
    task = asyncio.ensure_future(awaitable)
    while not task.done():
        await idle()
        if task.done():
            break
        if clock.next_deadline is None:  # e.g. a handler in a thread: it comes back to the loop later
            await until(lambda: task.done() or clock.next_deadline is not None)
            continue
        clock.advance(max(0.0, clock.next_deadline - clock.mono))
    return task.result()


@pytest.fixture()
def registry():
    return OperatorRegistry()


@pytest.fixture()
def config():
    return OperatorConfig()


@pytest.fixture()
def raw():
    return {
        'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
        'metadata': {'name': 'ex1', 'namespace': 'ns1', 'uid': 'uid1', 'resourceVersion': '1'},
        'spec': {'field': 'x', 'other': 1},
    }


class Server:
    """One object on a simulated API server, handled cycle by cycle."""

    def __init__(self, raw, *, registry, config, clock):
        self.raw = copy.deepcopy(raw)
        self.registry = registry
        self.config = config
        self.clock = clock
        self.memo = object()
        self.gone = False
        self.patches = []  # every non-empty patch sent, as JSON
        self.early = []  # the patches sent while a cycle ran (a handler running long), as JSON

    @property
    def body(self):
        return Body(self.raw)

    @property
    def annotations(self):
        return dict(self.body.metadata.annotations)

    def change(self, patch):
        """A user's change to the object."""
        self._apply(patch)

    def _apply(self, patch):
        self.raw = apply(self.raw, patch)
        self.raw['metadata']['resourceVersion'] = str(int(self.raw['metadata']['resourceVersion']) + 1)
        if self.raw['metadata'].get('deletionTimestamp') and not self.raw['metadata'].get('finalizers'):
            self.gone = True

    async def send_early(self, patch, essential):
        wire = json.loads(json.dumps(patch))
        self.early.append(wire)
        self._apply(wire)
        return copy.deepcopy(self.raw)

    async def cycle(self, *, first_seen=False, event_type='MODIFIED', lifecycle=None, early=False) -> HandlingResult:
        result = await handle_object(
            registry=self.registry, config=self.config, resource=SELECTOR, event_type=event_type,
            body=Body(copy.deepcopy(self.raw)), first_seen=first_seen, memo=self.memo, logger=logger,
            lifecycle=lifecycle, clock=self.clock, send_early=self.send_early if early else None)
        assert isinstance(result.patch, Patch)
        wire = json.loads(json.dumps(result.patch))  # what would be sent: it must be JSON
        if wire:
            self.patches.append(wire)
            self._apply(wire)
        return result

    async def run(self, *, first_seen=False, limit=20, lifecycle=None) -> list[HandlingResult]:
        """Cycles until the cause is handled; the clock moves by the delays asked for."""
        results = []
        for index in range(limit):
            result = await self.cycle(first_seen=first_seen and index == 0, lifecycle=lifecycle)
            results.append(result)
            if result.done:
                return results
            if result.delay:
                self.clock.advance(result.delay)
        raise AssertionError(f"Not done after {limit} cycles: {results}")


@pytest.fixture()
def server(raw, registry, config, clock):
    return Server(raw, registry=registry, config=config, clock=clock)


def make_handler(calls, name, *, result=None, failures=(), duration=0, clock=None):
    """A handler that records its calls, raises the given exceptions on its first calls, and may take time."""
    failures = list(failures)

    def fn(**kwargs):
        calls.append((name, kwargs))
        if duration:
            clock.advance(duration)
        if failures:
            raise failures.pop(0)
        return result
    fn.__qualname__ = name
    return fn


def names(calls):
    return [name for name, _ in calls]


def fetch(server, key):
    """The record of a handler as the default storage reads it from the object now."""
    return server.config.persistence.progress_storage.fetch(key=key, body=server.body)
