"""
Handling cycles of one object in memory: the framework's real cycle, without a server, in milliseconds.

:class:`Simulation` keeps one object the way the API server would: each
cycle runs the real :func:`~kopf._cycle.cycle.handle_object` on it (causes,
filters, lifecycles, retries, sub-handlers, progress and diff-base storages),
and the resulting patch is applied to it as a JSON merge-patch, as the
server would apply it. What happened is returned as a :class:`Cycle`: the
patch, every handler called with its keyword arguments, every outcome, the
progress records left on the object, and when the framework would come back.

The time is frozen: a cycle takes no time, and :meth:`Simulation.run` moves
the clock by the delays the framework asks for, so that a retry in an hour
is tested in a millisecond. Nothing here talks to a server: handlers that
call the API need it mocked, or a test with the control plane.
"""
from __future__ import annotations

import asyncio
import copy
import dataclasses
import datetime
import json
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kopf import cli
from kopf._cycle.cycle import handle_object
from kopf._handlers import execution, lifecycles
from kopf._handlers.execution import HandlerOutcome
from kopf._handlers.registries import (
    BaseHandler,
    OperatorRegistry,
    get_default_registry,
    set_default_registry,
)
from kopf._storage import calls, records
from kopf._storage.records import ProgressRecord
from kopf._structs.bodies import Body
from kopf._structs.clocks import Timer
from kopf._structs.patches import Patch, apply
from kopf._structs.resources import Resource
from kopf.config import OperatorConfig

MAX_CYCLES = 100  # run() gives up after so many cycles: a cause that never ends is the test's failure
SUCCESS, RETRY, FAILURE = 'success', 'retry', 'failure'


class SimulationError(AssertionError):
    """The simulated object cannot be handled as asked; the message says why."""


@dataclasses.dataclass(frozen=True)
class Call:
    """One call of a handler: its id and the keyword arguments it got (``body``, ``spec``, ``retry``, ...)."""

    handler: str
    kwargs: Mapping[str, Any]

    def __getitem__(self, name: str) -> Any:
        return self.kwargs[name]


@dataclasses.dataclass(frozen=True)
class Outcome:
    """
    How one attempt of a handler ended, as the framework judged it.

    ``status`` is ``'success'``, ``'retry'`` (with the ``delay`` in seconds;
    ``None``: as soon as possible) or ``'failure'`` (for good: a permanent
    error, or the retries or the timeout used up). ``result`` is what goes
    into ``status.<handler id>``, ``exception`` what the handler raised.
    """

    handler: str
    status: str
    delay: float | None = None
    result: Any = None
    exception: BaseException | None = None

    @property
    def message(self) -> str | None:
        return str(self.exception) if self.exception is not None else None


@dataclasses.dataclass(frozen=True)
class Cycle:
    """
    What one handling cycle did.

    ``cause``: ``'create'``, ``'update'``, ``'delete'``, ``'resume'``,
    ``'noop'``, ``'finalizer'`` (our finalizer added before the handlers
    run) or ``'gone'``. ``patch``: what would be sent to the server (JSON).
    ``calls`` and ``outcomes``: every handler called, in order, and how each
    ended (by handler id; sub-handlers as ``parent/child``). ``progress``:
    the progress records left on the object after the patch (empty once the
    cause is handled). ``done``: the cause is fully handled; else ``delay``
    says in how many seconds the framework would come back (``None``: on the
    event of its own patch). ``body``: the object after the patch.
    ``logs``: what the cycle logged, as ``LEVEL message`` lines.
    """

    cause: str
    patch: Mapping[str, Any]
    calls: tuple[Call, ...]
    outcomes: Mapping[str, Outcome]
    progress: Mapping[str, ProgressRecord]
    done: bool
    delay: float | None
    body: Mapping[str, Any]
    logs: tuple[str, ...]

    @property
    def called(self) -> list[str]:
        """The ids of the handlers called, in order (a retried handler once per call)."""
        return [call.handler for call in self.calls]

    def call(self, handler: str) -> Call:
        """The last call of this handler in the cycle; a clear failure if it was not called."""
        for call in reversed(self.calls):
            if call.handler == handler:
                return call
        raise AssertionError(f"The handler {handler!r} was not called in this {self.cause} cycle; "
                             f"called: {self.called or 'none'}.")

    def outcome(self, handler: str) -> Outcome:
        """How the handler ended in this cycle; a clear failure if it was not attempted."""
        try:
            return self.outcomes[handler]
        except KeyError:
            raise AssertionError(f"The handler {handler!r} was not attempted in this {self.cause} cycle; "
                                 f"attempted: {list(self.outcomes) or 'none'}.") from None


class FrozenClock:
    """The simulation's time: it stands still unless moved; sleeping moves it."""

    def __init__(self, now: datetime.datetime | None = None) -> None:
        self.wall = now or datetime.datetime.now(datetime.timezone.utc)
        if self.wall.tzinfo is None:
            self.wall = self.wall.replace(tzinfo=datetime.timezone.utc)
        self.mono = 0.0

    def now(self) -> datetime.datetime:
        return self.wall

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.wall += datetime.timedelta(seconds=seconds)
        self.mono += seconds

    async def sleep(self, seconds: float) -> None:
        self.advance(max(seconds, 0.0))
        await asyncio.sleep(0)

    def call_later(self, seconds: float, callback: Callable[[], object]) -> Timer:
        return asyncio.get_running_loop().call_soon(callback)


class _Recorder:
    """The observer of the handlers (see :data:`kopf._handlers.execution.observer`) for one cycle."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.outcomes: dict[str, Outcome] = {}

    def called(self, handler: BaseHandler, kwargs: Mapping[str, Any]) -> None:
        self.calls.append(Call(handler=str(handler.id), kwargs=dict(kwargs)))

    def judged(self, handler: BaseHandler, outcome: HandlerOutcome) -> None:
        status = RETRY if not outcome.final else FAILURE if outcome.exception is not None else SUCCESS
        self.outcomes[str(handler.id)] = Outcome(handler=str(handler.id), status=status, delay=outcome.delay,
                                                 result=outcome.result, exception=outcome.exception)


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.getMessage()}")


class Simulation:
    """
    One object, handled cycle by cycle by the real handling code, in memory (see the module docstring).

    ``body``: the object as a dict (name, namespace, uid and resourceVersion
    are filled in if missing). ``registry``: the operator's handlers (by
    default, the default registry, where the decorators of imported code
    register; see :func:`load_operator`). ``settings``: the operator's
    settings (storages, finalizer, back-off). ``resource``: the plural name
    when it is not the kind's plain English plural (``KopfExample`` →
    ``kopfexamples``). ``old``: the object as last handled (its diff-base is
    stored, so the first cycle sees an update). ``progress``: records of
    handlers already in progress, by handler id (e.g. ``{'create_fn':
    {'retries': 2}}``; ``started`` defaults to now). ``memo``: the
    operator's memo. ``now``: the start of the simulated time.
    """

    def __init__(
            self,
            body: Mapping[str, Any],
            *,
            registry: OperatorRegistry | None = None,
            settings: OperatorConfig | None = None,
            resource: str | None = None,
            old: Mapping[str, Any] | None = None,
            progress: Mapping[str, Mapping[str, Any]] | None = None,
            memo: Any = None,
            now: datetime.datetime | None = None,
            lifecycle: lifecycles.LifeCycleFn | None = None,
    ) -> None:
        self.registry = registry if registry is not None else get_default_registry()
        self.settings = settings if settings is not None else OperatorConfig()
        self.clock = FrozenClock(now)
        self.memo = memo if memo is not None else _default_memo()
        self.lifecycle = lifecycle
        self.cycles: list[Cycle] = []
        self.raw: dict[str, Any] = _completed(body)
        self.gone = False
        self._seen = False
        self.resource = resource_of(self.raw, plural=resource)
        self.logger = logging.getLogger(f"kopf.testing.{self.resource.plural}")
        if old is not None or progress:
            _run_sync(self._prepare(old=old, progress=progress or {}), what='Simulation()')

    @property
    def body(self) -> Body:
        """The object as the simulated server holds it now."""
        return Body(copy.deepcopy(self.raw))

    # Changes from outside, as a user or another controller would make them.

    def change(self, patch: Mapping[str, Any]) -> None:
        """Change the object with a merge-patch (``None`` deletes a key); the next cycle sees an update."""
        self._apply(_plain(patch))

    def delete(self) -> None:
        """Request the deletion: the server marks the object, or removes it at once if nothing holds it."""
        if self.raw['metadata'].get('deletionTimestamp') is None:
            self._apply({'metadata': {'deletionTimestamp': _iso(self.clock.now())}})

    def advance(self, seconds: float) -> None:
        """Let the simulated time pass (e.g. past a retry's delay, or a handler's timeout)."""
        self.clock.advance(seconds)

    # The handling.

    def cycle(self) -> Cycle:
        """One handling cycle on the object as it is now; its patch is applied to the object."""
        cycle: Cycle = _run_sync(self.acycle(), what='Simulation.cycle()')
        return cycle

    def run(self, *, limit: int = MAX_CYCLES) -> list[Cycle]:
        """Cycles until the current cause is handled (or the object is gone), moving the clock by their delays."""
        cycles: list[Cycle] = _run_sync(self.arun(limit=limit), what='Simulation.run()')
        return cycles

    async def acycle(self) -> Cycle:
        """:meth:`cycle` for async tests."""
        recorder, lines = _Recorder(), _Lines()
        first_seen, self._seen = not self._seen, True
        event = 'DELETED' if self.gone else 'ADDED' if first_seen else 'MODIFIED'
        body = Body(copy.deepcopy(self.raw))
        token = execution.observer.set(recorder)
        self.logger.addHandler(lines)
        self.logger.setLevel(logging.DEBUG)
        try:
            result = await handle_object(
                registry=self.registry, config=self.settings, resource=self.resource, event_type=event,
                body=body, first_seen=first_seen, memo=self.memo, logger=self.logger, lifecycle=self.lifecycle,
                clock=self.clock, resolved=self.resource)
        finally:
            execution.observer.reset(token)
            self.logger.removeHandler(lines)
        patch = _plain(result.patch)
        if patch and not self.gone:
            self._apply(patch)
            for fn in result.fns:
                self.raw = _plain(fn(copy.deepcopy(self.raw)))
        progress = await self._progress()
        cycle = Cycle(cause=result.cause, patch=patch, calls=tuple(recorder.calls), outcomes=recorder.outcomes,
                      progress=progress, done=result.done, delay=result.delay, body=copy.deepcopy(self.raw),
                      logs=tuple(lines.lines))
        self.cycles.append(cycle)
        return cycle

    async def arun(self, *, limit: int = MAX_CYCLES) -> list[Cycle]:
        """:meth:`run` for async tests."""
        cycles: list[Cycle] = []
        for _ in range(limit):
            cycle = await self.acycle()
            cycles.append(cycle)
            if cycle.done or self.gone:
                return cycles
            if cycle.delay:
                self.clock.advance(cycle.delay)
        causes = ', '.join(cycle.cause for cycle in cycles[-5:])
        raise SimulationError(f"The object was not handled in {limit} cycles (the last causes: {causes}); "
                              f"the handlers still in progress: {sorted(cycles[-1].progress)}.")

    # Internals.

    def _apply(self, patch: Mapping[str, Any]) -> None:
        if self.gone:
            raise SimulationError("The object is gone (deleted, with no finalizers left): it cannot change.")
        self.raw = apply(self.raw, patch)
        meta = self.raw['metadata']
        meta['resourceVersion'] = str(int(meta.get('resourceVersion') or 0) + 1)
        if meta.get('deletionTimestamp') and not meta.get('finalizers'):
            self.gone = True

    async def _prepare(self, *, old: Mapping[str, Any] | None, progress: Mapping[str, Mapping[str, Any]]) -> None:
        """Store the diff-base of the old object and the given progress, with the settings' own storages."""
        body, patch = Body(copy.deepcopy(self.raw)), Patch()
        storages = self.settings.persistence
        if old is not None:
            extra = self.registry.get_extra_fields(self.resource)
            essence = storages.diffbase_storage.build(body=Body(_completed(old)), extra_fields=extra)
            await calls.call(storages.diffbase_storage.store, body=body, patch=patch, essence=essence)
        for handler_id, given in progress.items():
            record = ProgressRecord(**{'started': _iso(self.clock.now()), **given})  # type: ignore[typeddict-item]
            await calls.call(storages.progress_storage.store, key=handler_id, record=record, body=body, patch=patch)
        await calls.call(storages.progress_storage.flush)
        self.raw = apply(self.raw, _plain(patch))

    async def _progress(self) -> dict[str, ProgressRecord]:
        """The progress records on the object, as the settings' progress storage reads them."""
        if self.gone:
            return {}
        storage = self.settings.persistence.progress_storage
        try:
            found: Mapping[str, ProgressRecord] = await calls.call(storage.list_records,
                                                                   body=Body(copy.deepcopy(self.raw)))
        except NotImplementedError:  # a storage that cannot list: the handlers' own records
            ids = [str(handler.id) for handler in self.registry.get_all_changing_handlers(self.resource)]
            fetched = {key: await calls.call(storage.fetch, key=key, body=Body(copy.deepcopy(self.raw)))
                       for key in ids}
            found = {key: record for key, record in fetched.items() if record}
        return {str(key): value for key, value in found.items()}


def handle(body: Mapping[str, Any], **options: Any) -> Cycle:
    """One handling cycle of an object seen for the first time; ``options`` are :class:`Simulation`'s."""
    return Simulation(body, **options).cycle()


def call_handler(handler: str | Callable[..., Any], body: Mapping[str, Any], **options: Any) -> Cycle:
    """
    One cycle in which only this handler of changes may run: by its id, or by its function.

    The handler is taken from the ``registry`` (by default, the default
    one) with its filters and its retry policy, alone: the object's cause
    must be the handler's (``old=`` for an update handler, a
    ``deletionTimestamp`` and our finalizer for a delete handler). The
    other ``options`` are :class:`Simulation`'s.
    """
    registry = options.pop('registry', None) or get_default_registry()
    alone = OperatorRegistry()
    found = [(selector, candidate) for selector, candidate in registry.changing
             if candidate.id == handler or candidate.fn is handler]
    if not found:
        known = [str(candidate.id) for _, candidate in registry.changing]
        raise SimulationError(f"No handler of changes {handler!r} in the registry; there are: {known or 'none'}.")
    for selector, candidate in found:
        alone.register_changing_handler(selector, candidate)
    return Simulation(body, registry=alone, **options).cycle()


def load_operator(*paths: str | Path, modules: Sequence[str] = ()) -> OperatorRegistry:
    """
    Import an operator's files (and modules) into a fresh registry, as ``kopf run`` would, and give it.

    The default registry is left as it was, so the same operator can be
    loaded again by the next test (its decorators register once per load).
    """
    previous = get_default_registry()
    registry = OperatorRegistry()
    set_default_registry(registry)
    try:
        cli.load_operator_code([str(path) for path in paths], modules)
    finally:
        set_default_registry(previous)
    return registry


def _default_memo() -> Any:
    from kopf._structs.ephemera import Memo
    return Memo()


def _run_sync(coro: Any, *, what: str) -> Any:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    coro.close()
    raise SimulationError(f"{what} is for synchronous tests; in an async test, await its a-prefixed twin "
                          f"(e.g. `await simulation.acycle()`).")


def _completed(body: Mapping[str, Any]) -> dict[str, Any]:
    """The object as a server would hold it: with a namespace, a uid, a resourceVersion and a creation time."""
    raw: dict[str, Any] = _plain(body)
    if not isinstance(raw.get('apiVersion'), str) or not isinstance(raw.get('kind'), str):
        raise SimulationError("The object needs an apiVersion and a kind, e.g. "
                              "{'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample', 'metadata': {'name': 'x'}}.")
    meta = raw.setdefault('metadata', {})
    if not meta.get('name'):
        raise SimulationError("The object needs metadata.name.")
    meta.setdefault('namespace', 'default')
    meta.setdefault('uid', str(uuid.uuid4()))
    meta.setdefault('resourceVersion', '1')
    meta.setdefault('creationTimestamp', '2020-01-01T00:00:00Z')
    return raw


def resource_of(raw: Mapping[str, Any], *, plural: str | None = None) -> Resource:
    """The resource the object belongs to, as discovery would describe it."""
    group, _, version = str(raw['apiVersion']).rpartition('/')
    kind = str(raw['kind'])
    return Resource(group=group, version=version, plural=plural or _plural(kind), kind=kind,
                    singular=kind.lower(), namespaced=True, subresources=frozenset({'status'}))


def _plural(kind: str) -> str:
    """The plural Kubernetes derives from a kind for the common cases (Policy → policies, Ingress → ingresses)."""
    name = kind.lower()
    if name.endswith(('s', 'x', 'z', 'ch', 'sh')):
        return f"{name}es"
    if name.endswith('y') and name[-2:-1] not in 'aeiou':
        return f"{name[:-1]}ies"
    return f"{name}s"


def _iso(moment: datetime.datetime) -> str:
    return records.format_time(moment)


def _plain(value: Any) -> Any:
    """A JSON copy: what a server would have received and would answer."""
    return json.loads(json.dumps(value))
