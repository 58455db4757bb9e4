"""
A minimal synchronous Kubernetes API client for tests: plain HTTPS, JSON in and out.

It is deliberately independent of kopf's own API client (:mod:`kopf._kube`):
tests check what the server really holds with a second, plain client, so
that a bug in the operator's client cannot hide itself. Only the reading
of a kubeconfig is shared (:meth:`KubeAPI.from_kubeconfig`), to reach any
cluster that ``kubectl`` reaches.
"""
from __future__ import annotations

import functools
import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

T = TypeVar('T')

MERGE_PATCH = 'application/merge-patch+json'
APPLY_PATCH = 'application/apply-patch+yaml'
TIMEOUT = 30.0


class Endpoint(Protocol):
    """Where a server is and how to reach it: a local control plane is one."""

    @property
    def server(self) -> str: ...

    def ssl_context(self) -> ssl.SSLContext: ...


class KubeAPIError(Exception):
    """The server has answered with an error: ``status`` is the HTTP status, ``body`` what it said."""

    def __init__(self, status: int, body: str, *, method: str = '', path: str = '') -> None:
        where = f" ({method} {path})" if method else ''
        super().__init__(f"HTTP {status}{where}: {body}")
        self.status = status
        self.body = body


class KubeAPI:
    """Plain HTTPS calls to an API server: the admin's of a local control plane, or a kubeconfig's."""

    def __init__(self, endpoint: Endpoint, *, headers: Mapping[str, str] | None = None) -> None:
        self.server = endpoint.server
        self.ssl: ssl.SSLContext = endpoint.ssl_context()
        self.headers = dict(headers or {})

    @classmethod
    def from_kubeconfig(cls, path: Path | str, *, context: str | None = None) -> KubeAPI:
        """A client with the credentials of a kubeconfig's (current) context, as ``kubectl`` would use them."""
        from kopf._kube import kubeconfig

        info = kubeconfig.connection_info(kubeconfig.load([Path(path).expanduser()]), context=context)
        return cls(_Given(info.server.rstrip('/'), info.as_ssl_context()), headers=info.as_http_headers())

    def request(self, method: str, path: str, body: Any = None, *, content_type: str = 'application/json',
                params: Mapping[str, str] | None = None, timeout: float = TIMEOUT) -> Any:
        """Send a request; the decoded JSON answer, or :class:`KubeAPIError` with what the server said."""
        url = f"{self.server}{path}"
        if params:
            url += '?' + urllib.parse.urlencode(params)
        data = json.dumps(body).encode() if body is not None else None
        headers = {**self.headers, 'Content-Type': content_type, 'Accept': 'application/json'}
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, context=self.ssl, timeout=timeout) as response:
                payload = response.read()
        except urllib.error.HTTPError as e:
            raise KubeAPIError(e.code, e.read().decode(errors='replace'), method=method, path=path) from None
        return json.loads(payload) if payload else None

    def get(self, path: str) -> Any:
        return self.request('GET', path)

    def text(self, path: str) -> str:
        """A document that is not JSON, e.g. the server's own ``/metrics``."""
        request = urllib.request.Request(f"{self.server}{path}", method='GET', headers=self.headers)
        with urllib.request.urlopen(request, context=self.ssl, timeout=TIMEOUT) as response:
            return str(response.read().decode())

    def find(self, path: str) -> Any:
        """The object, or ``None`` if it does not exist."""
        try:
            return self.get(path)
        except KubeAPIError as e:
            if e.status == 404:
                return None
            raise

    def create(self, collection: str, obj: Mapping[str, Any]) -> Any:
        return self.request('POST', collection, obj)

    def patch(self, path: str, patch: Mapping[str, Any]) -> Any:
        """A JSON merge-patch (``None`` deletes a key)."""
        return self.request('PATCH', path, patch, content_type=MERGE_PATCH)

    def delete(self, path: str) -> Any:
        """Delete the object; ``None`` if it is not there (any more)."""
        try:
            return self.request('DELETE', path)
        except KubeAPIError as e:
            if e.status != 404:
                raise
            return None

    def path_of(self, api_version: str, kind: str, *, namespace: str | None = None, name: str | None = None) -> str:
        """The URL path of a kind's collection (or of one object), as the server's discovery names it."""
        base = f"/apis/{api_version}" if '/' in api_version else f"/api/{api_version}"
        for resource in self.get(base)['resources']:
            if resource['kind'] == kind and '/' not in resource['name']:
                scope = f"/namespaces/{namespace}" if resource['namespaced'] and namespace else ''
                return f"{base}{scope}/{resource['name']}" + (f"/{name}" if name else '')
        raise KubeAPIError(404, f"The server serves no kind {kind} in {api_version}.", method='GET', path=base)

    def create_object(self, obj: Mapping[str, Any], *, namespace: str | None = None) -> Any:
        """Create an object in its namespace (or this one), wherever its kind is served; the created object."""
        namespace = namespace or (obj.get('metadata') or {}).get('namespace')
        return self.create(self.path_of(obj['apiVersion'], obj['kind'], namespace=namespace), obj)

    def apply_crd(self, crd: Mapping[str, Any], *, timeout: float = TIMEOUT) -> None:
        """Create (or replace) a CRD and wait until it is established and served."""
        name = crd['metadata']['name']
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
        existing = self.find(path)
        if existing is None:
            self.create('/apis/apiextensions.k8s.io/v1/customresourcedefinitions', crd)
        else:
            crd = {**crd, 'metadata': {**crd['metadata'],
                                       'resourceVersion': existing['metadata']['resourceVersion']}}
            self.request('PUT', path, crd)

        def established() -> bool:
            conditions = (self.get(path).get('status') or {}).get('conditions') or []
            return any(c['type'] == 'Established' and c['status'] == 'True' for c in conditions)

        wait_for(established, timeout=timeout, what=f"the CRD {name} to be established")
        group, plural = crd['spec']['group'], crd['spec']['names']['plural']
        for version in crd['spec']['versions']:
            if version.get('served', True):
                path = f"/apis/{group}/{version['name']}/{plural}"
                wait_for(functools.partial(self._served, path), timeout=timeout, what=f"{path} to be served")

    def _served(self, path: str) -> bool:
        try:
            self.get(path)
        except KubeAPIError:
            return False
        return True

    def ensure_namespace(self, name: str) -> None:
        """Create the namespace unless it exists."""
        if self.find(f"/api/v1/namespaces/{name}") is None:
            try:
                self.create('/api/v1/namespaces', {'apiVersion': 'v1', 'kind': 'Namespace',
                                                   'metadata': {'name': name}})
            except KubeAPIError as e:
                if e.status != 409:  # created meanwhile, e.g. by a parallel worker
                    raise


class _Given:
    """An endpoint as a kubeconfig describes it."""

    def __init__(self, server: str, context: ssl.SSLContext) -> None:
        self.server = server
        self._context = context

    def ssl_context(self) -> ssl.SSLContext:
        return self._context


def wait_for(condition: Callable[[], T], *, timeout: float = TIMEOUT, interval: float = 0.1, what: str = '') -> T:
    """
    Poll until the condition gives a truthy value, and give it; fail with a description on timeout.

    The timeout only turns a condition that never comes true into a clear
    failure (the last value is shown); the test goes on as soon as it holds.
    """
    deadline = time.monotonic() + timeout
    last: T = condition()
    while not last:
        if time.monotonic() > deadline:
            raise AssertionError(f"Timed out after {timeout}s waiting for {what or condition}. Last: {last!r}")
        time.sleep(interval)
        last = condition()
    return last
