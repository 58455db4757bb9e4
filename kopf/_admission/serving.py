"""
Serving admission webhooks for the lifetime of the operator.

When the operator has admission handlers, it runs the configured webhook
server (``settings.admission.server``) and, if ``settings.admission.managed``
names them, keeps the cluster's Validating/MutatingWebhookConfiguration
objects pointing to that server: one webhook per handler id, with the rules,
selectors and policies derived from the handlers' options. On a graceful
exit, the configurations lose their non-persistent webhooks (and are deleted
when none are left) before the server stops, so that a stopped operator does
not block the cluster's requests.

Replicas (``--ha``/``--shards``) share one pair of configurations, and every
replica serves the webhooks. One replica at a time keeps them -- the
*steward*, chosen as if the configurations were an object to handle: the HA
leader, or the shard that owns them by the ring (fenced like any object, so
never two at once). The steward names itself in them
(:data:`STEWARD_ANNOTATION`) and writes them only when they are absent or
differ in substance from what it would write (:func:`same_substance`):
replicas behind one Service (one client config for all) never rewrite them,
and replicas with endpoints of their own rewrite them once per change of the
steward, never back and forth. A replica that exits removes them only if it
is the steward and no other replica is alive; otherwise it keeps serving
until another replica has taken them over (or a Lease duration has passed),
so that requests do not go to a server that has stopped. The rechecks and the
hand-over are timed by an injected clock (the system's by default).
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import re
import urllib.parse
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from typing import Any, Protocol

from kopf import errors
from kopf._admission import configurations
from kopf._admission import handling as admission
from kopf._admission import servers as webhooks
from kopf._handlers.filters import ABSENT, PRESENT, MetaFilter
from kopf._handlers.registries import AdmissionHandler, OperatorRegistry
from kopf._kube.auth import APIContext
from kopf._kube.errors import APIConnectionError, APIError, APIForbiddenError
from kopf._structs.clocks import SYSTEM_CLOCK, Clock
from kopf._structs.resources import Resource, Selector
from kopf._structs.reviews import WebhookClientConfig, WebhookServerProtocol, WebhookType
from kopf.config import OperatorConfig

logger = logging.getLogger('kopf._admission.serving')

# How long the exit may take to remove the webhooks from the configurations.
CLEANUP_TIMEOUT = 10.0

# On the configurations kept by replicas: the identity of the replica that keeps them.
STEWARD_ANNOTATION = 'kopf.dev/steward'

# How often an exiting replica looks whether another one has taken the configurations over.
HANDOVER_POLLING = 0.25

_DNS_LABEL = r'[a-z0-9]([-a-z0-9]*[a-z0-9])?'
_MANAGED_RE = re.compile(rf'^{_DNS_LABEL}(\.{_DNS_LABEL})+$')
_LABEL_VALUE_RE = re.compile(r'^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$')
_LABEL_NAME_RE = re.compile(r'^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$')


class AdmissionSetupError(Exception):
    """The admission webhooks cannot be served as configured; the message says what to change."""


class Replicas(Protocol):
    """
    What the managed configurations need to know of the operator's replicas.

    Implemented by :class:`kopf._replicas.peering.ReplicaView`; a protocol, so
    that admission knows nothing of how replicas coordinate.
    """

    @property
    def identity(self) -> str | None:
        """This replica's identity; ``None`` until it coordinates."""

    def steward(self, key: str) -> bool:
        """Whether this replica keeps the shared object of this key now (never two replicas at once)."""

    @property
    def revision(self) -> int:
        """Grows whenever the stewardship may have changed."""

    async def revised(self, revision: int) -> None:
        """Wait until the revision differs from the given one."""

    async def alone(self) -> bool:
        """At the exit, after the Lease is given up: whether no other replica is alive."""

    @property
    def handover_timeout(self) -> float:
        """How long another replica may take to take over what this one kept."""


def steward_key(managed: str) -> str:
    """The key by which replicas choose the steward of the managed configurations."""
    return f'admission:{managed}'


@contextlib.asynccontextmanager
async def admission_webhooks(
        *,
        context: APIContext,
        registry: OperatorRegistry,
        resources: Mapping[Selector, Resource],
        config: OperatorConfig,
        memo: Any,
        namespaces: Collection[str] | None,
        stop: asyncio.Event,
        indexes: Mapping[str, Any] | None = None,
        replicas: Replicas | None = None,
        served: Callable[[str], bool] | None = None,
        clock: Clock = SYSTEM_CLOCK,
) -> AsyncIterator[None]:
    """
    Serve the admission webhooks (if there are admission handlers) while the block runs.

    ``namespaces`` limits the webhooks to those namespaces (``None``: the
    whole cluster); ``served``, if given, tells the served namespaces apart
    where the configuration cannot (namespace patterns). A server that fails
    or exits sets ``stop`` and makes the block raise
    :class:`AdmissionSetupError` at its end. With ``replicas``, only the
    steward keeps the managed configurations (see the module's docs).
    """
    server = config.admission.server
    if not registry.has_admission_handlers():
        if server is not None:
            logger.info("settings.admission.server is set, but there are no admission handlers: "
                        "no webhook server is started.")
        yield
        return
    managed = config.admission.managed
    check_settings(server=server, managed=managed)
    assert server is not None
    fn = functools.partial(admission.serve_admission_request, registry=registry, resources=resources,
                           config=config, memo=memo, indexes=indexes, served=served)
    layout = functools.partial(build_webhooks, registry, resources, managed=managed or '', namespaces=namespaces)
    endpoints: asyncio.Queue[WebhookClientConfig] = asyncio.Queue()
    token = webhooks.api_server_var.set(context.server)
    try:
        server_task = asyncio.create_task(_run_server(server, fn, endpoints), name='kopf webhook server')
    finally:
        webhooks.api_server_var.reset(token)
    keeper: asyncio.Task[None] | None = None
    failure: list[BaseException] = []
    configured: list[WebhookClientConfig] = []  # the endpoints in the cluster's configurations, the last one last
    try:
        first = await _first_endpoint(server, server_task, endpoints, stop)
        if first is not None and replicas is not None and managed:
            configured.append(first)
            keeper = asyncio.create_task(
                _steward(context, managed, layout, replicas, server_task, endpoints, stop, failure, configured,
                         recheck=float(config.peering.lease_duration), clock=clock),
                name='kopf webhook configurations')
        elif first is not None:
            await _configure(context, managed, layout, first, configured)
            keeper = asyncio.create_task(
                _keep(context, managed, layout, server_task, endpoints, stop, failure, configured),
                name='kopf webhook configurations')
        yield
    finally:
        if keeper is not None:
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)
        if managed and configured and replicas is not None:
            await _leave(context, managed, layout, replicas, configured[-1], clock=clock)
        elif managed and configured:
            await _unconfigure(context, managed, layout, configured[-1])
        server_task.cancel()
        await asyncio.gather(server_task, return_exceptions=True)
    if failure:
        raise AdmissionSetupError(f"The webhook server has stopped: {_text(failure[0])}") from failure[0]


def check_settings(*, server: WebhookServerProtocol | None, managed: str | None) -> None:
    """Fail the startup with an actionable message if the admission settings cannot work."""
    if server is None:
        raise AdmissionSetupError(
            "There are admission handlers (@kopf.on.validate/@kopf.on.mutate), but no webhook server: "
            "set settings.admission.server in a startup handler, e.g. to kopf.WebhookServer().")
    if not callable(server):
        raise AdmissionSetupError(f"settings.admission.server must be a webhook server such as "
                                  f"kopf.WebhookServer(...), got {type(server).__name__}: {server!r}.")
    if managed is not None and (not isinstance(managed, str) or len(managed) > 180
                                or not _MANAGED_RE.match(managed)):
        raise AdmissionSetupError(
            f"settings.admission.managed={managed!r} cannot name webhook configurations: use a lowercase "
            f"DNS name of at least two parts, up to 180 characters, e.g. 'auto.kopf.dev'.")


async def _run_server(
        server: WebhookServerProtocol,
        fn: Any,
        endpoints: asyncio.Queue[WebhookClientConfig],
) -> None:
    async for endpoint in server(fn):
        await endpoints.put(endpoint)
    raise AdmissionSetupError(f"The webhook server {type(server).__name__} has exited; it must keep serving.")


async def _first_endpoint(
        server: WebhookServerProtocol,
        server_task: asyncio.Task[None],
        endpoints: asyncio.Queue[WebhookClientConfig],
        stop: asyncio.Event,
) -> WebhookClientConfig | None:
    """The server's first client config; ``None`` if the operator is stopped before the server is ready."""
    getter = asyncio.create_task(endpoints.get())
    stopper = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait([getter, stopper, server_task], return_when=asyncio.FIRST_COMPLETED)
    finally:
        getter.cancel()
        stopper.cancel()
    if getter.done() and not getter.cancelled():
        return getter.result()
    if server_task.done():
        error = server_task.exception()
        raise AdmissionSetupError(f"The webhook server {type(server).__name__} cannot start: {_text(error)}"
                                  ) from error
    return None


async def _keep(
        context: APIContext,
        managed: str | None,
        layout: functools.partial[list[dict[str, Any]]],
        server_task: asyncio.Task[None],
        endpoints: asyncio.Queue[WebhookClientConfig],
        stop: asyncio.Event,
        failure: list[BaseException],
        configured: list[WebhookClientConfig],
) -> None:
    """Follow the server's new endpoints; stop the operator if the server dies."""
    while True:
        getter = asyncio.create_task(endpoints.get())
        try:
            await asyncio.wait([getter, server_task], return_when=asyncio.FIRST_COMPLETED)
        finally:
            getter.cancel()
        if getter.done() and not getter.cancelled():
            await _configure(context, managed, layout, getter.result(), configured)
            continue
        error = server_task.exception() if not server_task.cancelled() else None
        failure.append(error or AdmissionSetupError("The webhook server was cancelled."))
        logger.error("The webhook server has stopped: %s; stopping the operator.", _text(failure[0]))
        stop.set()
        return


async def _configure(
        context: APIContext,
        managed: str | None,
        layout: functools.partial[list[dict[str, Any]]],
        endpoint: WebhookClientConfig,
        configured: list[WebhookClientConfig],
) -> None:
    if not managed:
        logger.info("Admission webhooks are served at %s; settings.admission.managed is not set, "
                    "so the webhook configurations are left to you.", endpoint.get('url') or endpoint)
        return
    configured.append(endpoint)  # even if writing fails midway: the exit cleans up what was written
    for type in WebhookType:
        entries = layout(type=type, endpoint=endpoint)
        try:
            await configurations.apply_configuration(context=context, type=type, name=managed, webhooks=entries)
        except (APIError, APIConnectionError) as e:
            raise AdmissionSetupError(
                f"Cannot write the {configurations.kind_of(type)} {managed!r}: {e}. The operator needs the "
                f"RBAC permissions to create, patch and delete it.") from e
    logger.info("Admission webhooks are configured in %r for %s.", managed, endpoint.get('url') or endpoint)


async def _unconfigure(
        context: APIContext,
        managed: str,
        layout: functools.partial[list[dict[str, Any]]],
        endpoint: WebhookClientConfig,
) -> None:
    """Keep only the persistent webhooks; delete the configurations that have none."""
    kept: list[str] = []
    failed = False
    for type in WebhookType:
        entries = layout(type=type, endpoint=endpoint, persistent_only=True)
        kind = configurations.kind_of(type)
        try:
            await asyncio.wait_for(
                configurations.apply_configuration(context=context, type=type, name=managed, webhooks=entries),
                CLEANUP_TIMEOUT)
        except (APIError, APIConnectionError, asyncio.TimeoutError) as e:
            failed = True
            logger.error("Cannot remove the webhooks from the %s %r: %s. If they stay, they block requests "
                         "while the operator is down: kubectl delete %s %s", kind, managed, _text(e),
                         kind.lower(), managed)
        kept.extend(entry['name'] for entry in entries)
    if not failed:
        logger.info("Admission webhooks are removed from %r%s.", managed,
                    f" except the persistent ones: {', '.join(kept)}" if kept else "")


# Replicas: one steward keeps the configurations.

async def _steward(
        context: APIContext,
        managed: str,
        layout: functools.partial[list[dict[str, Any]]],
        replicas: Replicas,
        server_task: asyncio.Task[None],
        endpoints: asyncio.Queue[WebhookClientConfig],
        stop: asyncio.Event,
        failure: list[BaseException],
        configured: list[WebhookClientConfig],
        *,
        recheck: float,
        clock: Clock = SYSTEM_CLOCK,
) -> None:
    """
    Keep the configurations while this replica is the steward; follow the server's endpoints.

    The steward looks at the configurations when it becomes the steward,
    when its endpoint changes, and every ``recheck`` seconds (someone may
    have changed or deleted them); it writes only what differs in substance.
    """
    key = steward_key(managed)
    stewarding = False
    checked_at: float | None = None
    while True:
        revision = replicas.revision
        steward, identity = replicas.steward(key), replicas.identity
        due = checked_at is None or clock.monotonic() >= checked_at + recheck
        if steward and identity is not None and (not stewarding or due):
            try:
                await _reconcile(context, managed, layout, configured[-1], identity)
            except APIForbiddenError as e:
                failure.append(AdmissionSetupError(
                    f"Cannot keep the webhook configurations {managed!r}: {e}. The operator needs the RBAC "
                    f"permissions to get, create, patch and delete them."))
                logger.error("%s Stopping the operator.", failure[0])
                stop.set()
                return
            except (APIError, APIConnectionError) as e:
                logger.warning("Cannot keep the webhook configurations %r right now: %s; trying again later.",
                               managed, _text(e))
                steward = False  # try again as if it had just become the steward
            checked_at = clock.monotonic()
        stewarding = steward
        getter = asyncio.create_task(endpoints.get())
        waiter = asyncio.create_task(replicas.revised(revision))
        recheck_due: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        timer = clock.call_later(recheck, functools.partial(_resolve, recheck_due))
        try:
            awaited: list[asyncio.Future[Any]] = [getter, waiter, server_task, recheck_due]
            await asyncio.wait(awaited, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            recheck_due.cancel()
            getter.cancel()
            waiter.cancel()
            await asyncio.gather(getter, waiter, return_exceptions=True)
        if getter.done() and not getter.cancelled() and getter.exception() is None:
            configured.append(getter.result())
            stewarding = False  # a new endpoint: look again
        elif server_task.done():
            error = server_task.exception() if not server_task.cancelled() else None
            failure.append(error or AdmissionSetupError("The webhook server was cancelled."))
            logger.error("The webhook server has stopped: %s; stopping the operator.", _text(failure[0]))
            stop.set()
            return


async def _reconcile(
        context: APIContext,
        managed: str,
        layout: functools.partial[list[dict[str, Any]]],
        endpoint: WebhookClientConfig,
        identity: str,
) -> None:
    """Write the configurations that are absent or differ in substance from ours; leave the others alone."""
    written: list[str] = []
    for type in WebhookType:
        desired = layout(type=type, endpoint=endpoint)
        current = await configurations.read_configuration(context=context, type=type, name=managed)
        if (current is None and not desired) or (current is not None and desired and
                                                  same_substance(current, desired, steward=identity)):
            continue
        await configurations.apply_configuration(context=context, type=type, name=managed, webhooks=desired,
                                                 annotations={STEWARD_ANNOTATION: identity})
        written.append(configurations.kind_of(type))
    if written:
        logger.info("Admission webhooks are configured in %r for %s; this replica (%s) keeps them.",
                    managed, endpoint.get('url') or endpoint, identity)


def same_substance(current: Mapping[str, Any], desired: Sequence[Mapping[str, Any]], *, steward: str) -> bool:
    """
    Whether a configuration as the server has it says what we would write, and names us as its steward.

    The server adds defaults of its own (e.g. ``timeoutSeconds``, a service's
    ``port``), so only what we set is compared; the selectors, which we may
    leave out, are compared whole (the server's default is empty).
    """
    annotations = (current.get('metadata') or {}).get('annotations') or {}
    webhooks = current.get('webhooks') or []
    if annotations.get(STEWARD_ANNOTATION) != steward or len(webhooks) != len(desired):
        return False
    for have, want in zip(webhooks, desired):
        for selector in ('namespaceSelector', 'objectSelector'):
            if (have.get(selector) or {}) != (want.get(selector) or {}):
                return False
        if not _covers(have, {k: v for k, v in want.items() if k not in ('namespaceSelector', 'objectSelector')}):
            return False
    return True


def _covers(have: Any, want: Any) -> bool:
    """Whether the server's value holds everything of ours: the same values, and maybe more keys."""
    if isinstance(want, Mapping):
        return isinstance(have, Mapping) and all(k in have and _covers(have[k], v) for k, v in want.items())
    if isinstance(want, (list, tuple)):
        return (isinstance(have, (list, tuple)) and len(have) == len(want) and
                all(_covers(h, w) for h, w in zip(have, want)))
    return bool(have == want)


async def _stewards(context: APIContext, managed: str) -> set[str | None]:
    """Who keeps the configurations now, by their annotation (``None``: unknown, or not a replica)."""
    found: set[str | None] = set()
    for type in WebhookType:
        try:
            current = await configurations.read_configuration(context=context, type=type, name=managed)
        except (APIError, APIConnectionError) as e:
            logger.warning("Cannot read the %s %r: %s.", configurations.kind_of(type), managed, _text(e))
            found.add(None)
            continue
        if current is not None:
            found.add(((current.get('metadata') or {}).get('annotations') or {}).get(STEWARD_ANNOTATION))
    return found


async def _leave(
        context: APIContext,
        managed: str,
        layout: functools.partial[list[dict[str, Any]]],
        replicas: Replicas,
        endpoint: WebhookClientConfig,
        *,
        clock: Clock = SYSTEM_CLOCK,
) -> None:
    """
    At a replica's exit: remove the configurations if it was the last replica, else hand them over.

    Only the steward acts (another replica keeps them otherwise). If other
    replicas are alive, it keeps serving until one of them names itself in
    the configurations -- it has pointed them to its own server -- and only
    if none does within the hand-over timeout, it removes them, since they
    may point to this server, which stops now (the next steward writes them
    anew).
    """
    identity = replicas.identity
    stewards = await _stewards(context, managed)
    if identity is None or not stewards or (identity not in stewards and None not in stewards):
        return  # not ours: another replica keeps them, or there are none
    if await replicas.alone():
        await _unconfigure(context, managed, layout, endpoint)
        return
    logger.info("Other replicas are alive: the webhook configurations %r stay; waiting for one of them to take "
                "them over.", managed)
    deadline = clock.monotonic() + replicas.handover_timeout
    while clock.monotonic() < deadline:
        stewards = await _stewards(context, managed)
        if identity not in stewards and None not in stewards:
            logger.info("The webhook configurations %r are kept by %s now.", managed,
                        ', '.join(sorted(str(steward) for steward in stewards)) or 'nobody (they are gone)')
            return
        await clock.sleep(HANDOVER_POLLING)
    logger.warning("No other replica has taken the webhook configurations %r over within %.0fs; removing them, "
                   "since they may point to this replica's server, which stops now. The next replica to keep "
                   "them writes them anew.", managed, replicas.handover_timeout)
    await _unconfigure(context, managed, layout, endpoint)


def build_webhooks(
        registry: OperatorRegistry,
        resources: Mapping[Selector, Resource],
        *,
        type: WebhookType,
        endpoint: WebhookClientConfig,
        managed: str,
        namespaces: Collection[str] | None,
        persistent_only: bool = False,
) -> list[dict[str, Any]]:
    """
    The ``webhooks`` of one configuration: one per handler id, with a rule per resource.

    ``persistent_only`` leaves out the webhooks that must not outlive the operator.
    """
    groups: dict[str, list[tuple[Resource, AdmissionHandler]]] = {}
    for selector, handler in registry.iter_admission_handlers():
        if handler.type == type and selector in resources and (handler.persistent or not persistent_only):
            groups.setdefault(handler.id, []).append((resources[selector], handler))
    return [_webhook(id, group, endpoint=endpoint, managed=managed, namespaces=namespaces)
            for id, group in groups.items()]


def _webhook(
        id: str,
        group: list[tuple[Resource, AdmissionHandler]],
        *,
        endpoint: WebhookClientConfig,
        managed: str,
        namespaces: Collection[str] | None,
) -> dict[str, Any]:
    handlers = [handler for _, handler in group]
    webhook: dict[str, Any] = {
        'name': webhook_name(id, managed),
        'clientConfig': client_config(endpoint, id),
        'rules': [_rule(resource, handler) for resource, handler in group],
        'sideEffects': 'NoneOnDryRun' if any(h.side_effects for h in handlers) else 'None',
        'failurePolicy': 'Ignore' if all(h.ignore_failures for h in handlers) else 'Fail',
        'matchPolicy': 'Equivalent',
        'admissionReviewVersions': ['v1', 'v1beta1'],
    }
    selectors = [object_selector(h.labels) for h in handlers]
    if selectors[0] is not None and all(selector == selectors[0] for selector in selectors):
        webhook['objectSelector'] = selectors[0]
    # For cluster-scoped resources, the selector would apply to Namespace objects' own names: not wanted.
    if namespaces is not None and all(resource.namespaced for resource, _ in group):
        webhook['namespaceSelector'] = {'matchExpressions': [
            {'key': 'kubernetes.io/metadata.name', 'operator': 'In', 'values': sorted(namespaces)},
        ]}
    return webhook


def _rule(resource: Resource, handler: AdmissionHandler) -> dict[str, Any]:
    plural = f'{resource.plural}/{handler.subresource}' if handler.subresource else resource.plural
    return {
        'apiGroups': [resource.group],
        'apiVersions': [resource.version],
        'resources': [plural],
        'operations': sorted(handler.operations) if handler.operations else ['*'],
        'scope': 'Namespaced' if resource.namespaced else 'Cluster',
    }


def webhook_name(id: str, managed: str) -> str:
    """
    A webhook's name: the handler id as a DNS label, in the managed configuration's domain.

    Ids that are not valid DNS labels as they are (``check_spec``,
    ``Handler.fn``) get a short hash of the original, so that two ids that
    look alike once cleaned up never share a name.
    """
    label = re.sub(r'[^a-z0-9-]+', '-', id.lower()).strip('-')
    if label != id or len(label) > 63:
        digest = hashlib.sha1(id.encode('utf-8')).hexdigest()[:8]
        label = f"{label[:54].rstrip('-')}-{digest}".lstrip('-')
    return f"{label}.{managed}"


def client_config(endpoint: WebhookClientConfig, id: str) -> WebhookClientConfig:
    """The server's client config with the handler's id appended to the URL or the service path."""
    quoted = urllib.parse.quote(id, safe='')
    config = WebhookClientConfig(**endpoint)
    if 'url' in config:
        config['url'] = f"{config['url'].rstrip('/')}/{quoted}"
    if 'service' in config:
        service = dict(config['service'])
        service['path'] = f"{str(service.get('path') or '').rstrip('/')}/{quoted}"
        config['service'] = service  # type: ignore[typeddict-item]
    return config


def object_selector(labels: MetaFilter | None) -> dict[str, Any] | None:
    """
    The server-side part of a ``labels=`` filter, so that the API server skips what we would skip.

    Exact values, :data:`kopf.PRESENT` and :data:`kopf.ABSENT` are expressible;
    callbacks (and values that are not valid label values) stay client-side.
    """
    match_labels: dict[str, str] = {}
    expressions: list[dict[str, Any]] = []
    for key, value in (labels or {}).items():
        if not _is_label_key(key):
            continue
        if value is PRESENT:
            expressions.append({'key': key, 'operator': 'Exists'})
        elif value is ABSENT:
            expressions.append({'key': key, 'operator': 'DoesNotExist'})
        elif isinstance(value, str) and len(value) <= 63 and _LABEL_VALUE_RE.match(value):
            match_labels[key] = value
    selector: dict[str, Any] = {}
    if match_labels:
        selector['matchLabels'] = match_labels
    if expressions:
        selector['matchExpressions'] = expressions
    return selector or None


def _is_label_key(key: str) -> bool:
    prefix, _, name = key.rpartition('/')
    if prefix and (len(prefix) > 253 or not re.match(rf'^{_DNS_LABEL}(\.{_DNS_LABEL})*$', prefix)):
        return False
    return len(name) <= 63 and bool(_LABEL_NAME_RE.match(name))


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _text(error: BaseException | None) -> str:
    if error is None:
        return 'no error'
    if isinstance(error, (webhooks.WebhookServerError, AdmissionSetupError)):
        return str(error)
    if isinstance(error, asyncio.TimeoutError):
        return "no answer in time"
    return errors.describe(error)
