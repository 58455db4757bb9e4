"""
Admission: answering one admission review with the operator's validating and mutating handlers.

The webhook server hands over the parsed JSON of a review; the handlers of
the reviewed resource run one after another with the usual object kwargs and
the admission ones (``dryrun``, ``warnings``, ``userinfo``, ``headers``,
``sslpeer``, ``subresource``, ``operation``, and ``patch`` for mutations).
Every handler runs, also after another one has failed; then one failure
decides, as in Kopf: :class:`kopf.AdmissionError` (which rejects with its
message and code) before :class:`kopf.PermanentError`, before
:class:`kopf.TemporaryError`, before any other exception, and the first of
them in the handlers' order. The others reject with the code 500 and a
message that names the handler, unless the handler tolerates failures
(``ignore_failures=True``).
What mutating handlers put into their ``patch`` (a merge-patch, as elsewhere
in the framework, and its transformation functions ``patch.fns``) is
answered as the JSONPatch that the API server requires.
"""
from __future__ import annotations

import base64
import copy
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from kopf._handlers import invocation, registries
from kopf._handlers.loggers import ObjectLogger
from kopf._handlers.registries import AdmissionHandler, OperatorRegistry
from kopf._observability import recording
from kopf._structs import diffs, patches, reviews
from kopf._structs.bodies import Body
from kopf._structs.patches import Patch
from kopf._structs.resources import Resource, Selector
from kopf._structs.reviews import Headers, Review, SSLPeer, WebhookType
from kopf.config import OperatorConfig
from kopf.errors import AdmissionError, PermanentError, TemporaryError

logger = logging.getLogger('kopf._admission.handling')

# Admission messages are not posted as Kubernetes Events: the object may not exist (yet, or at all).
_objects_logger = logging.getLogger('kopf.admission')


async def serve_admission_request(
        payload: Mapping[str, Any],
        *,
        webhook: str | None = None,
        headers: Headers | None = None,
        sslpeer: SSLPeer | None = None,
        registry: OperatorRegistry,
        resources: Mapping[Selector, Resource],
        config: OperatorConfig,
        memo: Any,
        indexes: Mapping[str, Any] | None = None,
        served: Callable[[str], bool] | None = None,
) -> Review:
    """
    Answer one AdmissionReview; raises :class:`~kopf._structs.reviews.InvalidReviewError` if it is not one.

    ``webhook`` (the handler id from the URL) limits the review to that
    handler; without it, all admission handlers of the resource run. The
    handlers get the ``indexes`` as they are (maybe not filled yet: admission
    does not wait, or the API server would time out). ``served`` says which
    namespaces the operator serves when the webhook configuration cannot say
    it (namespace patterns): objects elsewhere are admitted untouched.
    """
    request = reviews.parse_review(payload)
    resource, handlers = _select(registry, resources, request, webhook=webhook)
    if served is not None and request.namespace is not None and not served(request.namespace):
        handlers = []
    original: Mapping[str, Any] = request.object if request.object is not None else (request.old_object or {})
    body = Body(original)
    warnings: list[str] = []
    base: dict[str, Any] = {
        **invocation.body_kwargs(body),
        'old': Body(request.old_object) if request.old_object is not None else None,
        'new': Body(request.object) if request.object is not None else None,
        'diff': diffs.diff(request.old_object, request.object),
        'logger': ObjectLogger(body=original, logger=_objects_logger),
        'memo': memo,
        'resource': resource, 'subresource': request.subresource, 'operation': request.operation,
        'dryrun': request.dryrun, 'warnings': warnings, 'userinfo': request.userinfo,
        'headers': dict(headers or {}), 'sslpeer': dict(sslpeer or {}),  # {} without a client certificate, as in Kopf
    }
    mutated: Any = original
    rejections: list[tuple[int, reviews.ResponseStatus]] = []  # (precedence, status)
    for handler in handlers:
        patch = Patch()
        kwargs = {**base, 'patch': patch, 'param': handler.param, **(indexes or {})}
        try:
            if not registries.matches(handler, body=body, kwargs=kwargs):
                continue
            await invocation.invoke(handler.fn, kwargs=kwargs, executor=config.execution.executor)
            contributed = _mutated(mutated, patch) if patch and handler.type == WebhookType.MUTATING else None
        except AdmissionError as e:
            recording.current().webhook(handler.id, 'rejected')
            logger.info("%s rejected the %s of %s: %s", handler, request.operation, _describe(request), e)
            rejections.append((0, _status(e, handler)))
            continue
        except Exception as e:
            recording.current().webhook(handler.id, 'ignored_failure' if handler.ignore_failures else 'failed')
            if handler.ignore_failures:
                logger.warning("%s failed: %s: %s; the request is allowed, as ignore_failures=True.",
                               handler, type(e).__name__, e)
                continue
            logger.exception("%s failed; the %s of %s is rejected.", handler, request.operation, _describe(request))
            rejections.append((_precedence(e), {'code': 500, 'message': f"{handler} failed: {type(e).__name__}: {e}"}))
            continue
        recording.current().webhook(handler.id, 'allowed')
        if contributed is not None:
            mutated = contributed
        elif patch:
            logger.warning("%s is a validating handler; its patch is ignored: %r. "
                           "Use @kopf.on.mutate to change objects.", handler, dict(patch))
    if rejections:  # one answer only: the first of the most telling kind of failure
        return _review(request, warnings=warnings, status=min(rejections, key=lambda rejection: rejection[0])[1])
    import jsonpatch  # only operators with mutating webhooks need it

    operations = jsonpatch.make_patch(original, mutated).patch if request.object is not None else []
    return _review(request, warnings=warnings, operations=operations)


def _select(
        registry: OperatorRegistry,
        resources: Mapping[Selector, Resource],
        request: reviews.Request,
        *,
        webhook: str | None,
) -> tuple[Resource, list[AdmissionHandler]]:
    """The reviewed resource as the operator knows it, and the handlers to run for this request."""
    matching = {selector: resource for selector, resource in resources.items()
                if resource.group == request.group and resource.plural == request.plural}
    resource = next(iter(matching.values()), None) or Resource(
        group=request.group, version=request.version, plural=request.plural, kind=request.kind)
    candidates: list[AdmissionHandler] = []
    for served in dict.fromkeys(matching.values()):
        for handler in registry.get_admission_handlers(served):
            if not any(handler is known for known in candidates):
                candidates.append(handler)
    if webhook is not None:
        known = {handler.id for _, handler in registry.iter_admission_handlers()}
        if webhook not in known:
            logger.warning("An admission request came for the unknown webhook %r (a stale webhook "
                           "configuration?); it is allowed. Known webhooks: %s.", webhook, sorted(known))
        candidates = [handler for handler in candidates if handler.id == webhook]
    handlers = [
        handler for handler in candidates
        if (handler.operations is None or request.operation in handler.operations)
        and _subresource_matches(handler.subresource, request.subresource)
    ]
    return resource, handlers


def _subresource_matches(wanted: str | None, actual: str | None) -> bool:
    return wanted == '*' or wanted == actual


def _mutated(obj: Any, patch: Patch) -> Any:
    """The object with a mutating handler's merge-patch, then its transformation functions (``patch.fns``)."""
    mutated = patches.apply(obj, dict(patch))
    if patch.fns:
        mutated = copy.deepcopy(mutated)  # the functions mutate it in place; the request's object stays intact
        for fn in patch.fns:
            fn(mutated)
    return mutated


def _precedence(error: Exception) -> int:
    """Which failure is reported when several handlers fail (after the admission errors, 0): the lowest."""
    if isinstance(error, PermanentError):
        return 1
    if isinstance(error, TemporaryError):
        return 2
    return 3


def _status(error: AdmissionError, handler: AdmissionHandler) -> reviews.ResponseStatus:
    status = reviews.ResponseStatus(message=str(error) or f"{handler} rejected the request.")
    if error.code is not None:
        status['code'] = error.code
    return status


def _review(
        request: reviews.Request,
        *,
        warnings: list[str],
        status: reviews.ResponseStatus | None = None,
        operations: list[dict[str, Any]] | None = None,
) -> Review:
    response = reviews.Response(uid=request.uid, allowed=status is None)
    if status is not None:
        response['status'] = status
    if warnings:
        response['warnings'] = [str(warning) for warning in warnings]
    if operations:
        response['patchType'] = 'JSONPatch'
        response['patch'] = base64.b64encode(json.dumps(operations).encode('utf-8')).decode('ascii')
    return Review(apiVersion=request.api_version, kind='AdmissionReview', response=response)


def _describe(request: reviews.Request) -> str:
    name = request.name or '(a new object)'
    where = f"{request.namespace}/{name}" if request.namespace else name
    sub = f"/{request.subresource}" if request.subresource else ''
    return f"{request.plural}{sub} {where}"
