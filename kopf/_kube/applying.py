"""
Server-side apply: ``kopf.apply(child)`` makes an object look as desired, owned by the handled object.

The desired object is sent whole as an ``application/apply-patch+yaml``
PATCH (JSON is YAML): the server creates it if it is missing, and otherwise
sets exactly the fields that it names, merging lists and maps by their
keys, and tracks which *field manager* owns which field. Fields that
another manager owns (e.g. someone's ``kubectl edit``) are a conflict
unless ``force=True`` takes them over; a field that we stop naming is
removed, if we were its only manager. This is what a reconcile handler
wants from its children: declare the whole child every time, and let the
server do the diffing. A merge-patch, in contrast, only ever adds what it
names, replaces lists whole, and cannot tell our fields from others'.

Inside a handler the operator's own API session is used (the handlers run
in a context that has it, :data:`context_var`); the owner is the handled
object unless given. The object as applied is reported to
:data:`listener_var` if set: a reconciliation knows its own writes when
their watch events come back.
"""
from __future__ import annotations

import asyncio
import contextvars
import copy
import re
from collections.abc import Callable, Mapping
from typing import Any

from kopf._kube import discovery
from kopf._kube.errors import APIConflictError
from kopf._kube.session import APIContext
from kopf._structs import hierarchies
from kopf._structs.resources import Resource, Selector

APPLY_PATCH = 'application/apply-patch+yaml'
DEFAULT_FIELD_MANAGER = 'kopf'

# The operator's API session and event loop, for kopf.apply() in handlers (set by the runtime).
context_var: contextvars.ContextVar[APIContext] = contextvars.ContextVar('kopf.apply.context')
loop_var: contextvars.ContextVar[asyncio.AbstractEventLoop] = contextvars.ContextVar('kopf.apply.loop')
# Told of every object applied in this context (e.g. by a reconciliation, to know its own writes' events).
listener_var: contextvars.ContextVar[Callable[[Resource, Mapping[str, Any]], None] | None] = \
    contextvars.ContextVar('kopf.apply.listener', default=None)

_CONFLICT = re.compile(r'conflicts? with "(?P<manager>[^"]+)"')


class ApplyConflictError(APIConflictError):
    """``kopf.apply()`` would take over fields that another field manager owns; the message names both."""

    def __init__(self, message: str, *, fields: list[str], managers: list[str], status: int = 409,
                 details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message, status=status, reason='Conflict', details=details)
        self.fields = fields
        self.managers = managers


class _Default:
    """The owner of an applied object unless given: the object being handled."""

    def __repr__(self) -> str:
        return '<the handled object>'


HANDLED = _Default()


async def apply_async(
        body: Mapping[str, Any],
        *,
        owner: Mapping[str, Any] | _Default | None = HANDLED,
        field_manager: str = DEFAULT_FIELD_MANAGER,
        force: bool = False,
        context: APIContext | None = None,
) -> dict[str, Any]:
    """
    Apply the desired object server-side; return it as the server has it now.

    The owner (the handled object unless given; ``None`` for none) gets an
    owner reference in the object (as the controller), and its namespace is
    the object's unless the object names one. ``force=True`` takes over the
    fields of other managers instead of failing with
    :class:`ApplyConflictError`.
    """
    context = context if context is not None else _context()
    desired = prepare(body, owner=_owner(owner))
    resource = await discovery.resolve(context=context, selector=selector_of(desired))
    applied = await apply_obj(context=context, resource=resource, body=desired,
                              field_manager=field_manager, force=force)
    listener = listener_var.get()
    if listener is not None:
        listener(resource, applied)
    return applied


def apply(
        body: Mapping[str, Any],
        *,
        owner: Mapping[str, Any] | _Default | None = HANDLED,
        field_manager: str = DEFAULT_FIELD_MANAGER,
        force: bool = False,
        timeout: float | None = None,
) -> dict[str, Any]:
    """
    Apply the desired object server-side and wait for it: for plain (``def``) handlers.

    The same as :func:`apply_async`, which ``async def`` handlers await
    instead: this one blocks its thread until the operator's event loop has
    applied the object (or ``timeout`` seconds have passed).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("kopf.apply() blocks until the object is applied, which would stop the event loop that "
                           "applies it: in async handlers, use `await kopf.apply_async(...)` instead.")
    try:
        loop = loop_var.get()
    except LookupError:
        raise RuntimeError("kopf.apply() needs the operator's API session: call it from a handler of a running "
                           "operator (or await kopf.apply_async(..., context=...) with a session of your own)."
                           ) from None
    resolved = _owner(owner)  # in this thread's context: the handled object is known here
    future = asyncio.run_coroutine_threadsafe(
        apply_async(body, owner=resolved, field_manager=field_manager, force=force), loop)
    return future.result(timeout)


def prepare(body: Mapping[str, Any], *, owner: Mapping[str, Any] | None) -> dict[str, Any]:
    """The object to send: a copy, owned by the owner (if any), in its namespace, without server-kept fields."""
    if not isinstance(body, Mapping):
        raise TypeError(f"kopf.apply() takes the desired object as a dict, got {type(body).__name__}.")
    desired = copy.deepcopy(dict(body))
    meta = desired.setdefault('metadata', {})
    if not desired.get('apiVersion') or not desired.get('kind') or not meta.get('name'):
        raise ValueError("kopf.apply() needs apiVersion, kind and metadata.name in the desired object "
                         "(server-side apply cannot generate names).")
    meta.pop('managedFields', None)
    if owner is not None:
        owner_meta = owner.get('metadata') or {}
        owner_namespace = owner_meta.get('namespace')
        if owner_namespace and not meta.get('namespace'):
            meta['namespace'] = owner_namespace
        if owner_namespace and meta.get('namespace') != owner_namespace:
            raise ValueError(f"{desired['kind']} {meta['name']!r} in the namespace {meta.get('namespace')!r} cannot "
                             f"be owned by an object in the namespace {owner_namespace!r}: Kubernetes deletes "
                             f"children with owners in other namespaces. Pass owner=None for no owner.")
        hierarchies.append_owner_reference(desired, owner)
    return desired


def selector_of(body: Mapping[str, Any]) -> Selector:
    """The resource of an object, by its ``apiVersion`` and ``kind``."""
    group, _, version = str(body['apiVersion']).rpartition('/')
    return Selector(group=group, version=version, kind=str(body['kind']))


async def apply_obj(
        *,
        context: APIContext,
        resource: Resource,
        body: Mapping[str, Any],
        field_manager: str,
        force: bool = False,
) -> dict[str, Any]:
    """Send one server-side apply; a conflict is raised as :class:`ApplyConflictError`, naming fields and managers."""
    meta = body.get('metadata') or {}
    namespace = meta.get('namespace') if resource.namespaced else None
    if resource.namespaced and not namespace:
        raise ValueError(f"{resource.kind or resource.plural} {meta.get('name')!r} needs a namespace: "
                         f"give it one, or an owner to take it from.")
    url = resource.get_url(server=context.server, namespace=namespace, name=str(meta['name']))
    params: dict[str, str] = {'fieldManager': field_manager}
    if force:
        params['force'] = 'true'
    try:
        answer = await context.request('PATCH', url, json=dict(body), params=params,
                                       headers={'Content-Type': APPLY_PATCH})
    except APIConflictError as e:
        raise conflict(e, body=body, resource=resource, field_manager=field_manager) from None
    return answer if isinstance(answer, dict) else {}


def conflict(
        error: APIConflictError,
        *,
        body: Mapping[str, Any],
        resource: Resource,
        field_manager: str,
) -> ApplyConflictError:
    """The server's conflict, in one line: the object, the fields, their managers, and the ways out."""
    causes = (error.details or {}).get('causes') or []
    fields = [str(cause.get('field')) for cause in causes if isinstance(cause, Mapping) and cause.get('field')]
    managers: list[str] = []
    for cause in causes:
        match = _CONFLICT.search(str(cause.get('message', ''))) if isinstance(cause, Mapping) else None
        if match and match['manager'] not in managers:
            managers.append(match['manager'])
    meta = body.get('metadata') or {}
    where = f"{meta.get('namespace')}/{meta.get('name')}" if meta.get('namespace') else f"{meta.get('name')}"
    others = ', '.join(repr(manager) for manager in managers) or 'another field manager'
    named = ', '.join(fields) or 'some fields'
    message = (f"Applying {body.get('kind') or resource.plural} {where} as the field manager {field_manager!r} "
               f"conflicts with {others} on {named}: leave these fields out of the desired object, or pass "
               f"force=True to take them over. ({error.message})")
    return ApplyConflictError(message, fields=fields, managers=managers, details=error.details)


def _owner(owner: Mapping[str, Any] | _Default | None) -> Mapping[str, Any] | None:
    if not isinstance(owner, _Default):
        if owner is not None and not isinstance(owner, Mapping):
            raise TypeError(f"kopf.apply() takes the owner as a dict (e.g. the handler's body), "
                            f"got {type(owner).__name__}.")
        return owner
    try:
        return hierarchies.owner_var.get()
    except LookupError:
        raise LookupError("kopf.apply() is not inside a handler, so there is no object to own the applied one: "
                          "pass owner=... (or owner=None).") from None


def _context() -> APIContext:
    try:
        return context_var.get()
    except LookupError:
        raise RuntimeError("kopf.apply_async() needs the operator's API session: call it from a handler of a running "
                           "operator, or pass context=... of your own.") from None
