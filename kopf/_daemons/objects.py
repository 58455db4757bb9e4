"""
What the keeper holds: per object, its latest body and its daemons; per daemon or timer, its task and stop.

An object's entry holds the object's latest body -- the live view that its
daemons see in ``body``, ``spec``, ``status``, ... whenever they read them
-- and when its events came (for ``idle`` and ``initial_delay``). A
:class:`Runner` is one daemon or timer of one object: its task, its stop flag,
when it was asked to stop, and how its stopping goes. Plain data, with no
waiting and no clock of its own: the times are given to it.
"""
from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

from kopf._handlers import invocation
from kopf._handlers.arguments import OperatorArguments
from kopf._handlers.registries import DaemonHandler, ResourceKey, SpawningHandler
from kopf._structs.bodies import Body, Meta, Spec, Status
from kopf._structs.stoppers import DaemonStopper, DaemonStoppingReason
from kopf._structs.typedefs import Logger


@dataclasses.dataclass(eq=False)
class Runner:
    """One daemon or timer of one object: its task, its stop flag, and how its stopping goes."""

    handler: SpawningHandler
    obj: KeptObject
    stopper: DaemonStopper = dataclasses.field(default_factory=DaemonStopper)
    task: asyncio.Task[None] | None = None
    guard: asyncio.Task[None] | None = None
    asked_at: float | None = None  # when it was first asked to stop (on the keeper's monotonic clock)
    abandoned: bool = False
    residence: int | None = None  # its token at the replica's fence, while it runs
    fenced: bool = False  # stopped at once because the Lease was lost

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    @property
    def holding(self) -> bool:
        """Whether it holds the object's deletion: still running, and not abandoned."""
        return self.running and not self.abandoned

    @property
    def threaded(self) -> bool:
        """Whether it runs in a thread of its own (a plain-function daemon), which cannot be cancelled."""
        return isinstance(self.handler, DaemonHandler) and not invocation.is_async(self.handler.fn)

    def stop(self, reason: DaemonStoppingReason, *, now: float) -> None:
        """Set its stop flag (or add a reason to it); the first time is when its stop was asked."""
        self.stopper.set(reason)
        if self.asked_at is None:
            self.asked_at = now

    def reasons(self) -> str:
        """Why it was asked to stop, in words (for the logs)."""
        reason = self.stopper.reason
        if reason is None:
            return "not asked"
        return ', '.join(member.name or '' for member in DaemonStoppingReason if member in reason).lower()


class KeptObject:
    """What the keeper knows of one object: its latest body, when its events came, and its daemons."""

    def __init__(
            self,
            *,
            key: str,
            body: Body,
            operator: OperatorArguments,
            resource: ResourceKey | None,
            now: float,
    ) -> None:
        self.key = key
        self.raw: Mapping[str, Any] = body.raw
        self.operator = operator
        self.resource = resource
        self.runners: dict[str, Runner] = {}
        self.finished: set[str] = set()  # handler ids that are not started again for this object
        self.first_seen = now
        self.changed_at = now
        self.generation = 0
        self._change = asyncio.Event()
        self.body = Body(LiveView(self, ()))

    @property
    def logger(self) -> Logger:
        return self.operator.logger

    def describe(self) -> str:
        return Body(self.raw).describe()

    def update(self, body: Body, *, now: float) -> None:
        """A new event: the object's latest state, which its daemons see from now on."""
        self.raw = body.raw
        self.changed_at = now
        self.generation += 1
        self._change.set()
        self._change = asyncio.Event()

    async def changed(self) -> None:
        """Wait for the next event of the object."""
        await self._change.wait()

    def live_kwargs(self) -> dict[str, Any]:
        """The object's keyword arguments as live views: they show the latest state whenever they are read."""
        meta = self.raw.get('metadata', {})
        return {
            'body': self.body,
            'spec': Spec(LiveView(self, ('spec',))),
            'meta': Meta(LiveView(self, ('metadata',))),
            'status': Status(LiveView(self, ('status',))),
            'labels': LiveView(self, ('metadata', 'labels')),
            'annotations': LiveView(self, ('metadata', 'annotations')),
            'name': meta.get('name'),
            'namespace': meta.get('namespace'),
            'uid': meta.get('uid'),
        }


class LiveView(Mapping[str, Any]):
    """A read-only view of a part of an object's latest state, resolved on every access."""

    def __init__(self, obj: KeptObject, path: tuple[str, ...]) -> None:
        self._obj = obj
        self._path = path

    def _current(self) -> Mapping[str, Any]:
        current: Any = self._obj.raw
        for key in self._path:
            current = current.get(key) if isinstance(current, Mapping) else None
        return current if isinstance(current, Mapping) else {}

    def __getitem__(self, key: str) -> Any:
        return self._current()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._current())

    def __len__(self) -> int:
        return len(self._current())

    def __repr__(self) -> str:
        return repr(dict(self._current()))
