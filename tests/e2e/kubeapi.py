"""
A minimal synchronous Kubernetes API client for end-to-end tests.

Deliberately independent of ``kopf._kube``: the tests check what the real
server holds with a second, plain client, so a bug in our client cannot hide
itself.
"""
from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar

from tests.e2e.controlplane import ControlPlane

T = TypeVar('T')

MERGE_PATCH = 'application/merge-patch+json'


class KubeAPIError(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status = status
        self.body = body


class KubeAPI:
    """Plain HTTPS calls with the control plane's admin client certificate."""

    def __init__(self, control_plane: ControlPlane) -> None:
        self.server = control_plane.server
        self.ssl: ssl.SSLContext = control_plane.ssl_context()

    def request(self, method: str, path: str, body: Any = None, *, content_type: str = 'application/json',
                params: dict[str, str] | None = None) -> Any:
        url = f"{self.server}{path}"
        if params:
            url += '?' + urllib.parse.urlencode(params)
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, method=method, headers={'Content-Type': content_type})
        try:
            with urllib.request.urlopen(request, context=self.ssl, timeout=30) as response:
                payload = response.read()
        except urllib.error.HTTPError as e:
            raise KubeAPIError(e.code, e.read().decode(errors='replace')) from None
        return json.loads(payload) if payload else None

    def get(self, path: str) -> Any:
        return self.request('GET', path)

    def text(self, path: str) -> str:
        """A document that is not JSON, e.g. the server's own ``/metrics``."""
        request = urllib.request.Request(f"{self.server}{path}", method='GET')
        with urllib.request.urlopen(request, context=self.ssl, timeout=30) as response:
            return str(response.read().decode())

    def find(self, path: str) -> Any:
        """The object, or ``None`` if it does not exist."""
        try:
            return self.get(path)
        except KubeAPIError as e:
            if e.status == 404:
                return None
            raise

    def create(self, collection: str, obj: dict[str, Any]) -> Any:
        return self.request('POST', collection, obj)

    def patch(self, path: str, patch: dict[str, Any]) -> Any:
        return self.request('PATCH', path, patch, content_type=MERGE_PATCH)

    def delete(self, path: str) -> Any:
        try:
            return self.request('DELETE', path)
        except KubeAPIError as e:
            if e.status != 404:
                raise
            return None

    def apply_crd(self, crd: dict[str, Any], *, timeout: float = 30) -> None:
        """Create (or replace) a CRD and wait until it is established and served."""
        name = crd['metadata']['name']
        existing = self.find(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        if existing is None:
            self.create('/apis/apiextensions.k8s.io/v1/customresourcedefinitions', crd)
        else:
            crd = {**crd, 'metadata': {**crd['metadata'],
                                       'resourceVersion': existing['metadata']['resourceVersion']}}
            self.request('PUT', f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}", crd)

        def established() -> bool:
            obj = self.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            conditions = (obj.get('status') or {}).get('conditions') or []
            return any(c['type'] == 'Established' and c['status'] == 'True' for c in conditions)

        wait_for(established, timeout=timeout, what=f"CRD {name} to be established")
        group, version = crd['spec']['group'], crd['spec']['versions'][0]['name']
        plural = crd['spec']['names']['plural']
        wait_for(lambda: self._served(f"/apis/{group}/{version}/{plural}"), timeout=timeout,
                 what=f"{plural} to be served")

    def _served(self, path: str) -> bool:
        try:
            self.get(path)
        except KubeAPIError:
            return False
        return True

    def ensure_namespace(self, name: str) -> None:
        if self.find(f"/api/v1/namespaces/{name}") is None:
            self.create('/api/v1/namespaces', {'apiVersion': 'v1', 'kind': 'Namespace', 'metadata': {'name': name}})


def wait_for(condition: Callable[[], T], *, timeout: float = 30, interval: float = 0.1, what: str = '') -> T:
    """Poll until the condition gives a truthy value; fail with a description on timeout."""
    deadline = time.monotonic() + timeout
    last: T = condition()
    while not last:
        if time.monotonic() > deadline:
            raise AssertionError(f"Timed out after {timeout}s waiting for {what or condition}. Last: {last!r}")
        time.sleep(interval)
        last = condition()
    return last
