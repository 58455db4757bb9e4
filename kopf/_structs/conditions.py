"""
Status conditions the Kubernetes way: ``status.conditions``, one entry per ``type``.

Each condition says ``status`` (``"True"``, ``"False"`` or ``"Unknown"``),
a CamelCase ``reason``, a human ``message``, when its status last changed
(``lastTransitionTime``: only when the status changes, not on every write),
and which ``metadata.generation`` of the object it was judged from
(``observedGeneration``): a client that sees ``observedGeneration`` lag
behind ``metadata.generation`` knows that the condition is stale.

:func:`set_condition` writes into the handler's ``patch`` only what changes,
and nothing at all if nothing does, so that a reconciliation that finds
everything in place costs no API request. ``status.conditions`` is a list,
which a merge-patch replaces whole: the list is written whole, with the
other conditions as they are.
"""
from __future__ import annotations

import datetime
from collections.abc import Mapping, MutableMapping
from typing import Any, TypedDict

Status = bool | str | None


class Condition(TypedDict, total=False):
    """One entry of ``status.conditions``, as Kubernetes defines it (``metav1.Condition``)."""

    type: str
    status: str
    reason: str
    message: str
    lastTransitionTime: str
    observedGeneration: int


def condition_status(value: Status) -> str:
    """``True``/``False``/``None`` (or the strings) as a condition's status: ``"True"``, ``"False"``, ``"Unknown"``."""
    if value is True or value == 'True':
        return 'True'
    if value is False or value == 'False':
        return 'False'
    if value is None or value == 'Unknown':
        return 'Unknown'
    raise ValueError(f"A condition's status is True, False or None (unknown), got {value!r}.")


def get_condition(body: Mapping[str, Any], type: str, *, patch: Mapping[str, Any] | None = None) -> Condition | None:
    """The object's condition of this type (as the patch will leave it, if given), or ``None``."""
    for condition in _conditions(body, patch):
        if condition.get('type') == type:
            return condition
    return None


def is_observed(body: Mapping[str, Any], type: str | None = None) -> bool:
    """
    Whether the object's current generation has been observed: by this condition, or by all of them.

    An object without ``metadata.generation`` (some built-in kinds) is
    never observed; nor is one without the condition (or any conditions).
    """
    generation = (body.get('metadata') or {}).get('generation')
    conditions = [c for c in _conditions(body, None) if type is None or c.get('type') == type]
    return generation is not None and bool(conditions) and all(
        c.get('observedGeneration') == generation for c in conditions)


def set_condition(
        body: Mapping[str, Any],
        patch: MutableMapping[str, Any],
        *,
        type: str,
        status: Status,
        reason: str = '',
        message: str = '',
        now: datetime.datetime | None = None,
) -> bool:
    """
    Set a condition of the object in the patch, if it changes; return whether it does.

    ``lastTransitionTime`` is kept unless the status changes;
    ``observedGeneration`` is the object's ``metadata.generation``. Other
    conditions stay as they are (or as earlier calls on the same patch have
    left them).
    """
    if not isinstance(type, str) or not type:
        raise ValueError(f"A condition needs a type, e.g. 'Ready'; got {type!r}.")
    value = condition_status(status)
    generation = (body.get('metadata') or {}).get('generation')
    current = _conditions(body, patch)
    previous = next((c for c in current if c.get('type') == type), None)
    condition: Condition = {'type': type, 'status': value, 'reason': reason, 'message': message}
    if previous is not None and previous.get('status') == value and previous.get('lastTransitionTime'):
        condition['lastTransitionTime'] = str(previous['lastTransitionTime'])
    else:
        moment = now if now is not None else datetime.datetime.now(datetime.timezone.utc)
        condition['lastTransitionTime'] = moment.astimezone(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')
    if isinstance(generation, int):
        condition['observedGeneration'] = generation
    if previous is not None and dict(previous) == dict(condition):
        return False
    updated = [condition if c is previous else c for c in current] if previous is not None else [*current, condition]
    status_patch = patch.get('status')
    if not isinstance(status_patch, MutableMapping):
        status_patch = patch['status'] = {}
    status_patch['conditions'] = [dict(c) for c in updated]
    return True


def _conditions(body: Mapping[str, Any], patch: Mapping[str, Any] | None) -> list[Condition]:
    """The conditions as the patch will leave them (a patch replaces the whole list), else as the object has them."""
    if patch is not None:
        patched = (patch.get('status') or {}).get('conditions') if isinstance(patch.get('status'), Mapping) else None
        if isinstance(patched, list):
            return [c for c in patched if isinstance(c, Mapping)]  # type: ignore[misc]
    listed = (body.get('status') or {}).get('conditions')
    return [c for c in listed if isinstance(c, Mapping)] if isinstance(listed, list) else []  # type: ignore[misc]
