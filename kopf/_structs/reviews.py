"""
Admission reviews: what the API server sends to webhooks and what it expects back.

The API server POSTs an ``AdmissionReview`` (``admission.k8s.io/v1``) with a
``request`` stanza and expects the same kind and version back with a
``response`` stanza: the request's ``uid``, ``allowed``, and optionally a
``status`` (code and message) for a rejection, ``warnings`` for the client,
and a base64-encoded JSONPatch for mutations. This module holds those shapes,
the protocol between webhook servers and the framework, and the parsing of
incoming reviews -- pure data, so that servers, handlers and tests share it.
"""
from __future__ import annotations

import dataclasses
import enum
from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import Any, Literal, Protocol, TypeAlias, TypedDict, cast

Operation: TypeAlias = Literal['CREATE', 'UPDATE', 'DELETE', 'CONNECT']
OPERATIONS: tuple[Operation, ...] = ('CREATE', 'UPDATE', 'DELETE', 'CONNECT')

# The versions of AdmissionReview that webhooks accept, in the order of preference.
REVIEW_VERSIONS: tuple[str, ...] = ('admission.k8s.io/v1', 'admission.k8s.io/v1beta1')

Headers: TypeAlias = Mapping[str, str]
SSLPeer: TypeAlias = Mapping[str, Any]


class WebhookType(str, enum.Enum):
    """Which admission configuration a handler belongs to."""

    VALIDATING = 'validating'
    MUTATING = 'mutating'

    def __str__(self) -> str:
        return self.value


class UserInfo(TypedDict, total=False):
    """Who sends the API request under admission, exactly as the API server tells it."""

    username: str
    uid: str
    groups: list[str]
    extra: dict[str, list[str]]


class WebhookClientConfigService(TypedDict, total=False):
    """A Service in the cluster that fronts the webhook server."""

    namespace: str
    name: str
    path: str
    port: int


class WebhookClientConfig(TypedDict, total=False):
    """How the API server reaches a webhook: ``.webhooks[].clientConfig`` of the configurations."""

    caBundle: str  # base64-encoded PEM of the CA that signed the server's certificate
    url: str
    service: WebhookClientConfigService


class ResponseStatus(TypedDict, total=False):
    code: int
    message: str


class Response(TypedDict, total=False):
    uid: str
    allowed: bool
    status: ResponseStatus
    warnings: list[str]
    patchType: Literal['JSONPatch']
    patch: str  # base64-encoded JSON of RFC 6902 operations


class Review(TypedDict):
    """The reply to the API server: the same apiVersion and kind as the request, with a ``response``."""

    apiVersion: str
    kind: Literal['AdmissionReview']
    response: Response


class WebhookFn(Protocol):
    """
    The framework's entry point that servers call for every review they receive.

    ``webhook`` is the handler id taken from the URL (only that handler runs);
    ``headers`` and ``sslpeer`` describe the HTTPS request and reach the
    handlers as kwargs. A request that is not an admission review raises
    :class:`InvalidReviewError`, which servers answer with HTTP 400.
    """

    def __call__(
            self,
            request: Mapping[str, Any],
            *,
            webhook: str | None = None,
            headers: Headers | None = None,
            sslpeer: SSLPeer | None = None,
    ) -> Awaitable[Review]: ...


class WebhookServerProtocol(Protocol):
    """
    A webhook server or tunnel: ``settings.admission.server``.

    Called once with the framework's :class:`WebhookFn`, it starts serving and
    yields a client config every time its endpoint changes (usually once),
    then keeps running until cancelled.
    """

    def __call__(self, fn: WebhookFn) -> AsyncIterator[WebhookClientConfig]: ...


class InvalidReviewError(ValueError):
    """The payload is not an admission review that the framework can answer."""


@dataclasses.dataclass(frozen=True)
class Request:
    """The parts of an admission request that the framework uses, parsed and checked."""

    api_version: str
    uid: str
    group: str
    version: str
    plural: str
    kind: str | None
    subresource: str | None
    operation: Operation
    name: str | None
    namespace: str | None
    userinfo: UserInfo
    object: Mapping[str, Any] | None
    old_object: Mapping[str, Any] | None
    dryrun: bool


def parse_review(payload: Any) -> Request:
    """
    Check an incoming AdmissionReview and extract its request.

    Raises :class:`InvalidReviewError` with one line that says what is wrong,
    so that a server can answer a bad request plainly instead of crashing.
    """
    if not isinstance(payload, Mapping):
        raise InvalidReviewError(f"An AdmissionReview must be a JSON object, got {type(payload).__name__}.")
    api_version = payload.get('apiVersion')
    if payload.get('kind') != 'AdmissionReview':
        raise InvalidReviewError(f"Not an AdmissionReview: kind={payload.get('kind')!r}.")
    if api_version not in REVIEW_VERSIONS:
        raise InvalidReviewError(f"Unsupported AdmissionReview apiVersion={api_version!r}; "
                                 f"supported: {', '.join(REVIEW_VERSIONS)}.")
    request = payload.get('request')
    if not isinstance(request, Mapping):
        raise InvalidReviewError("The AdmissionReview has no 'request' object.")
    uid = request.get('uid')
    if not isinstance(uid, str) or not uid:
        raise InvalidReviewError("The AdmissionReview's request has no 'uid'.")
    resource = request.get('resource')
    if not isinstance(resource, Mapping) or not isinstance(resource.get('resource'), str):
        raise InvalidReviewError("The AdmissionReview's request has no 'resource' with group, version, resource.")
    operation = request.get('operation')
    if operation not in OPERATIONS:
        raise InvalidReviewError(f"Unknown operation={operation!r}; expected one of: {', '.join(OPERATIONS)}.")
    obj, old = request.get('object'), request.get('oldObject')
    for field, value in (('object', obj), ('oldObject', old)):
        if value is not None and not isinstance(value, Mapping):
            raise InvalidReviewError(f"The request's {field!r} must be an object or null.")
    kind = request.get('kind')
    userinfo = request.get('userInfo')
    return Request(
        api_version=str(api_version),
        uid=uid,
        group=str(resource.get('group') or ''),
        version=str(resource.get('version') or ''),
        plural=str(resource['resource']),
        kind=str(kind['kind']) if isinstance(kind, Mapping) and kind.get('kind') else None,
        subresource=str(request['subResource']) if request.get('subResource') else None,
        operation=operation,
        name=str(request['name']) if request.get('name') else None,
        namespace=str(request['namespace']) if request.get('namespace') else None,
        userinfo=cast(UserInfo, dict(userinfo)) if isinstance(userinfo, Mapping) else UserInfo(),
        object=obj,
        old_object=old,
        dryrun=bool(request.get('dryRun', False)),
    )
