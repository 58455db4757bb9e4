"""
Handler keyword arguments, built from typed parts and rendered into a dict only at the call.

What a handler receives depends on what it handles, exactly as in Kopf:
every handler gets the operator's ``logger`` and ``memo``, ``param``, and
``retry``, ``started``, ``runtime`` (event handlers too: their first and
only attempt); handlers of objects get the object (``body``, ``spec``,
``meta``, ... and ``patch``, ``resource``); handlers of a cause get
``reason``, ``old``, ``new``, ``diff``; event handlers get ``type`` and
``event``; activity handlers get ``activity`` and the operator's settings as
``settings``; and every handler gets the operator's indexes, each by its
name (they win over any other keyword argument of the same name, so that a
name chosen for an index stays the index's even if the framework adds a
keyword later).

One keyword is ours alone: activity handlers get the settings as ``config``
too (the name of :class:`~kopf.config.OperatorConfig`). Resource handlers
get neither ``settings`` nor ``config``, as in Kopf: operators pass their
``**kwargs`` on to their own helpers, and a keyword that Kopf never passes
would collide with such a helper's own ``config`` parameter. Each group is a
frozen part of :class:`Arguments`, so the cycle passes typed values around
and nobody mutates a shared dict; :meth:`Arguments.render` makes the dict
for one call, and the dict is dropped with the call.
"""
from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from kopf._handlers import invocation
from kopf._handlers.reasons import Reason
from kopf._handlers.registries import Activity, BaseHandler, ChangingHandler, ResourceKey
from kopf._structs import dicts, diffs
from kopf._structs.bodies import Body
from kopf._structs.patches import Patch
from kopf._structs.typedefs import Logger
from kopf.config import OperatorConfig


class Named(Protocol):
    """Values by name, as the operator's indexes are given to handlers (each under its own name)."""

    def keys(self) -> Iterable[str]: ...

    def __getitem__(self, name: str) -> Any: ...


class Attempts(Protocol):
    """What a handler is told about its own past attempts (a handler state has all of it)."""

    @property
    def retries(self) -> int: ...

    @property
    def started(self) -> datetime.datetime: ...

    @property
    def runtime(self) -> datetime.timedelta: ...


@dataclasses.dataclass(frozen=True, kw_only=True)
class OperatorArguments:
    """What every handler gets (``indexes`` by their names), and the settings that activity handlers get."""

    logger: Logger
    memo: Any
    config: OperatorConfig
    indexes: Named = dataclasses.field(default_factory=dict[str, Any])

    def render(self) -> dict[str, Any]:
        return {'logger': self.logger, 'memo': self.memo}

    def render_settings(self) -> dict[str, Any]:
        return {'settings': self.config, 'config': self.config}


@dataclasses.dataclass(frozen=True, kw_only=True)
class ObjectArguments:
    """The object being handled, and the patch that handlers may write into; ``spec``: a typed resource's model."""

    body: Body
    patch: Patch
    resource: ResourceKey | None = None
    spec: Any = None

    def render(self) -> dict[str, Any]:
        kwargs = {**invocation.body_kwargs(self.body), 'patch': self.patch, 'resource': self.resource}
        if self.spec is not None:
            kwargs['spec'] = self.spec
        return kwargs


@dataclasses.dataclass(frozen=True, kw_only=True)
class CauseArguments:
    """What happened to the object: the essences it is judged by and their diff."""

    reason: Reason
    old: Any
    new: Any
    diff: diffs.Diff

    def for_field(self, field: dicts.FieldPath) -> CauseArguments:
        """A field handler sees only its field: the old and new values and the diff within it."""
        return CauseArguments(
            reason=self.reason,
            old=dicts.resolve(self.old, field, None),
            new=dicts.resolve(self.new, field, None),
            diff=diffs.reduce(self.diff, field),
        )

    def render(self) -> dict[str, Any]:
        return {'reason': self.reason, 'old': self.old, 'new': self.new, 'diff': self.diff}


@dataclasses.dataclass(frozen=True, kw_only=True)
class EventArguments:
    """The watch event as it came: for event handlers."""

    type: str | None
    raw: Mapping[str, Any]

    def render(self) -> dict[str, Any]:
        return {'type': self.type, 'event': {'type': self.type, 'object': self.raw}}


@dataclasses.dataclass(frozen=True, kw_only=True)
class AttemptArguments:
    """Where the handler stands in its retries."""

    retry: int
    started: datetime.datetime
    runtime: datetime.timedelta

    @classmethod
    def of(cls, past: Attempts) -> AttemptArguments:
        return cls(retry=past.retries, started=past.started, runtime=past.runtime)

    def render(self) -> dict[str, Any]:
        return {'retry': self.retry, 'started': self.started, 'runtime': self.runtime}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Arguments:
    """All keyword arguments of one call, in typed parts; only the parts that apply are set."""

    operator: OperatorArguments
    object: ObjectArguments | None = None
    cause: CauseArguments | None = None
    event: EventArguments | None = None
    attempt: AttemptArguments | None = None
    activity: Activity | None = None
    param: Any = None

    def with_cause(self, cause: CauseArguments) -> Arguments:
        return self._with(cause=cause)

    def with_event(self, event: EventArguments) -> Arguments:
        return self._with(event=event)

    def with_attempt(self, past: Attempts) -> Arguments:
        return self._with(attempt=AttemptArguments.of(past))

    def for_handler(self, handler: BaseHandler) -> Arguments:
        """The handler's own view: its ``param``, and for field handlers, only their field."""
        cause = self.cause
        if cause is not None and isinstance(handler, ChangingHandler) and handler.field:
            cause = cause.for_field(handler.field)
        return self._with(cause=cause, param=handler.param)

    def _with(self, **parts: Any) -> Arguments:
        """A copy with some parts replaced: what :func:`dataclasses.replace` makes, without its per-call cost."""
        copied = object.__new__(Arguments)
        copied.__dict__.update(self.__dict__, **parts)
        return copied

    def render(self) -> dict[str, Any]:
        """The keyword arguments for one call."""
        kwargs = self.operator.render()
        for part in (self.object, self.cause, self.event, self.attempt):
            if part is not None:
                kwargs.update(part.render())
        if self.activity is not None:
            kwargs['activity'] = self.activity
            kwargs.update(self.operator.render_settings())
        kwargs['param'] = self.param
        kwargs.update(self.operator.indexes)
        return kwargs
