"""
The gate before the handlers of a typed resource: a valid spec lets them run with the model, an invalid one stops them.

A spec that the model refuses is reported once per change of the spec (not
on every event, not on our own writes): one ERROR line on the object's
logger, which the operator also posts as a Kubernetes Event (reason
``InvalidSpec``); and, where the resource's status model has ``conditions``,
a condition of the type ``Valid`` with the status ``False`` and the model's
message. Nothing else is stored -- no progress, no diff-base, no finalizer
-- so that once the spec is fixed, the object is handled as if it had just
come: a creation stays a creation. When it is valid again, the condition
turns ``True``.

The gate remembers what it has reported per object, in memory: after a
restart, an object that is still invalid is reported once more.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any, Protocol

from kopf._structs.bodies import Body, object_key
from kopf._structs.clocks import SYSTEM_CLOCK, Clock
from kopf._structs.patches import Patch
from kopf._structs.resources import Resource, Selector
from kopf._structs.typedefs import Logger

CONDITION_TYPE = 'Valid'
INVALID_REASON = 'InvalidSpec'
VALID_REASON = 'ValidSpec'
# The top-level fields that are not the object's content: the content is validated, these are not.
NOT_CONTENT = frozenset({'apiVersion', 'kind', 'metadata', 'status'})


@dataclasses.dataclass(frozen=True)
class Validation:
    """What a model says of an object: its validated spec (if valid), or its problems in one line."""

    valid: bool
    spec: Any = None
    problems: str = ''


class TypedModel(Protocol):
    """What the gate needs of a typed resource's class (see :class:`kopf.typed.CustomResource`)."""

    __qualname__: str

    @classmethod
    def kopf_validate(cls, raw: Mapping[str, Any]) -> Validation: ...

    @classmethod
    def kopf_has_conditions(cls) -> bool: ...


@dataclasses.dataclass(frozen=True)
class Admission:
    """The gate's answer: whether the handlers may run, with which spec, and what to write anyway."""

    admitted: bool
    spec: Any = None
    patch: Patch = dataclasses.field(default_factory=Patch)


def model_of(selectors: tuple[Selector, ...], resource: Resource) -> TypedModel | None:
    """The typed class of a served resource, if a handler names the resource by one."""
    for selector in selectors:
        if selector.model is not None and selector.check(resource):
            model: TypedModel = selector.model  # type: ignore[assignment]
            return model
    return None


class Gate:
    """The typed model of one resource, and what has been reported of its objects (by object, the spec's digest)."""

    def __init__(self, model: TypedModel, *, finalizer: str, clock: Clock = SYSTEM_CLOCK) -> None:
        self.model = model
        self.finalizer = finalizer
        self.clock = clock
        self._reported: dict[str, str] = {}

    def admit(self, body: Body, *, gone: bool, logger: Logger) -> Admission:
        """
        Whether the object's handlers may run now, with its validated spec.

        A gone object is always let through (its handlers and daemons must
        let go of it): with the model if it is valid, else with the raw spec.
        """
        key = object_key(body.raw)
        validation = self.model.kopf_validate(body.raw)
        if gone:
            self._reported.pop(key, None)
            return Admission(admitted=True, spec=validation.spec if validation.valid else None)
        if validation.valid:
            self._reported.pop(key, None)
            patch = self._condition(body, valid=True, message="The spec is valid.")
            return Admission(admitted=True, spec=validation.spec, patch=patch)
        digest = content_digest(body.raw)
        if self._reported.get(key) == digest:
            return Admission(admitted=False)
        self._reported[key] = digest
        deleting = body.metadata.deletion_timestamp is not None and self.finalizer in body.metadata.finalizers
        waiting = (f" Its deletion waits for a valid spec (or for the finalizer {self.finalizer!r} to be removed "
                   f"by hand)." if deleting else "")
        logger.error("The spec is invalid for %s: %s. No handler is called until it is fixed.%s",
                     self.model.__qualname__, validation.problems, waiting, extra={'k8s_reason': INVALID_REASON})
        return Admission(admitted=False, patch=self._condition(body, valid=False, message=validation.problems))

    def _condition(self, body: Body, *, valid: bool, message: str) -> Patch:
        if not self.model.kopf_has_conditions():
            return Patch()
        return condition_patch(body, valid=valid, message=message, now=self.clock.now().isoformat())


def condition_patch(body: Body, *, valid: bool, message: str, now: str) -> Patch:
    """
    The status conditions with ours set (the whole list: a merge-patch replaces lists whole).

    A valid object gets the condition only if it has it already (as not
    valid): objects that were always valid are not written to.
    """
    conditions = [dict(c) for c in body.status.get('conditions') or [] if isinstance(c, Mapping)]
    existing = next((c for c in conditions if c.get('type') == CONDITION_TYPE), None)
    status = 'True' if valid else 'False'
    if (existing is None and valid) or (existing is not None and existing.get('status') == status
                                        and existing.get('message') == message):
        return Patch()
    changed = existing is None or existing.get('status') != status
    condition: dict[str, Any] = {
        'type': CONDITION_TYPE,
        'status': status,
        'reason': VALID_REASON if valid else INVALID_REASON,
        'message': message,
        'lastTransitionTime': now if changed or existing is None else existing.get('lastTransitionTime', now),
    }
    generation = body.metadata.get('generation')
    if isinstance(generation, int):
        condition['observedGeneration'] = generation
    if existing is None:
        conditions.append(condition)
    else:
        conditions[conditions.index(existing)] = condition
    return Patch({'status': {'conditions': conditions}})


def content_digest(raw: Mapping[str, Any]) -> str:
    """A digest of what the model validates (all but the metadata and the status): a change is a new digest."""
    content = {key: value for key, value in raw.items() if key not in NOT_CONTENT}
    text = json.dumps(content, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def describe_errors(errors: list[Mapping[str, Any]]) -> str:
    """Validation errors in one line: where (a dotted path), what was expected, and what was given."""
    parts = []
    for error in errors:
        where = '.'.join(str(part) for part in error.get('loc') or ()) or 'the object'
        given = error.get('input')
        shown = ''
        if error.get('type') != 'missing' and _scalar(given):
            shown = f" (got {json.dumps(given, default=str)[:80]})"
        parts.append(f"{where}: {error.get('msg')}{shown}")
    return '; '.join(parts)


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))

