"""
Typed errors of the Kubernetes API, one class per status the framework reacts to.

Callers decide by type (a conflict is retried, a missing object is skipped,
``410 Gone`` means relist) instead of by parsing numbers and texts; the
server's own ``Status`` message is kept in the error for the logs.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import aiohttp


class APIError(Exception):
    """An error response of the API server (HTTP status 400 and above)."""

    def __init__(
            self,
            message: str,
            *,
            status: int,
            reason: str | None = None,
            details: Mapping[str, Any] | None = None,
            body: Any = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason
        self.details = details
        self.body = body


class APIUnauthorizedError(APIError):
    """401: the credentials are missing, wrong, or expired."""


class APIForbiddenError(APIError):
    """403: authenticated, but RBAC does not allow this request."""


class APINotFoundError(APIError):
    """404: the object (or the resource, or the namespace) does not exist."""


class APIConflictError(APIError):
    """409: a concurrent change (resourceVersion mismatch) or an existing name."""


class APIGoneError(APIError):
    """410: the requested resourceVersion is too old; a watch must relist."""


class APIUnprocessableError(APIError):
    """422: the object or the patch is invalid for the resource's schema."""


class APIServerError(APIError):
    """5xx: the server failed; usually temporary."""


class APIMalformedResponseError(APIServerError):
    """
    An answer that is not what the Kubernetes API gives, whatever its status.

    An HTML page of a proxy or a load balancer in between, JSON cut off in the
    middle, a listing without its ``resourceVersion``: usually a hiccup of
    something between us and the server, so it is retried as a 5xx is.
    """


class APITooManyRequestsError(APIServerError):
    """
    429: the server sheds load and asks to come back later (``retry_after`` seconds).

    A server-side, temporary condition like a 5xx, hence a subclass of
    :class:`APIServerError`: callers that re-send on 5xx re-send on it too.
    The client itself waits out the ``Retry-After`` several times before a
    caller ever sees this error.
    """

    @property
    def retry_after(self) -> float | None:
        """The server's ``Retry-After`` in seconds, if it has said so."""
        value = (self.details or {}).get('retryAfterSeconds')
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class LoginError(Exception):
    """No usable credentials were found; the message says what was tried and why it failed."""


class APIConnectionError(ConnectionError):
    """
    The server could not be reached (after the retries, if any).

    Not an :class:`APIError`: there is no response, hence no status; callers
    that treat both alike catch ``(APIError, APIConnectionError)``.
    """


_CLASSES: dict[int, type[APIError]] = {
    401: APIUnauthorizedError,
    403: APIForbiddenError,
    404: APINotFoundError,
    409: APIConflictError,
    410: APIGoneError,
    422: APIUnprocessableError,
    429: APITooManyRequestsError,
}


def error_class(status: int) -> type[APIError]:
    """The most specific error class for an HTTP status code."""
    if status >= 500:
        return APIServerError
    return _CLASSES.get(status, APIError)


def error_from_status(payload: Any, *, status: int | None = None, where: str | None = None) -> APIError:
    """
    Build the typed error from a response body or a watch's ``ERROR`` event.

    ``payload`` is usually a ``Status`` object (``{'kind': 'Status', 'code':
    410, 'reason': 'Expired', 'message': '...'}``) but may be any text or JSON
    if a proxy in between answered instead of the API server.
    """
    is_status = isinstance(payload, Mapping)
    code = status
    if code is None and is_status and isinstance(payload.get('code'), int):
        code = payload['code']
    code = code if code is not None else 500
    reason = str(payload.get('reason')) if is_status and payload.get('reason') else None
    details = payload.get('details') if is_status and isinstance(payload.get('details'), Mapping) else None
    if is_status and payload.get('message'):
        text = str(payload['message'])
    elif isinstance(payload, str) and payload.strip():
        text = payload.strip()[:1000]
    else:
        text = reason or 'no message'
    message = f"{code} {reason or 'Error'}: {text}"
    message = f"{message} [{where}]" if where else message
    return error_class(code)(message, status=code, reason=reason, details=details, body=payload)


async def check_response(response: aiohttp.ClientResponse) -> None:
    """Raise the typed error if the response is an error; do nothing otherwise."""
    if response.status < 400:
        return
    text = await response.text(errors='replace')
    payload: Any
    try:
        payload = json.loads(text) if text else None
    except ValueError:
        payload = text
    where = f"{response.method} {response.url.path}"
    error = error_from_status(payload, status=response.status, where=where)
    retry_after = parse_retry_after(response.headers.get('Retry-After'))
    if retry_after is not None and isinstance(error, APITooManyRequestsError):
        error.details = {**(error.details or {}), 'retryAfterSeconds': retry_after}
    raise error


def too_large(error: APIError) -> bool:
    """
    Whether the server refuses the request for its size: repeating it cannot help.

    The API server says so with 413; etcd behind it with a 500 whose message
    reads "etcdserver: request is too large" (a gRPC ``ResourceExhausted``).
    """
    text = str(error).lower()
    return error.status == 413 or 'too large' in text or 'resourceexhausted' in text.replace(' ', '')


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (the API server sends seconds; dates are not used)."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 and seconds == seconds else None


def describe_api_failure(error: APIError | APIConnectionError) -> str:
    """One line for a request that has failed for good, saying what it means and what to check."""
    if isinstance(error, APIConnectionError):
        return (f"Cannot reach the Kubernetes API: {error}. "
                f"Check the server address of the kubeconfig (or the login handlers) and the network.")
    if isinstance(error, APIUnauthorizedError):
        return (f"The Kubernetes API has refused the credentials, also after logging in again: {error}. "
                f"Check the user of the kubeconfig's context (its token, certificate, or exec plugin), "
                f"or the login handlers.")
    if isinstance(error, APIForbiddenError):
        return (f"The Kubernetes API has forbidden a request: {error}. "
                f"Grant the operator's user or service account this permission (RBAC).")
    return f"The Kubernetes API has failed: {error}"
