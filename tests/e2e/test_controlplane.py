"""Kubernetes behaviours the framework relies on, checked against a real server.

Plain HTTPS with the generated certificates, no client library: these tests
pin down what the server does, independently of our own client code.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from http.client import HTTPResponse
from typing import Any

import pytest
import yaml

from kopf.testing import ControlPlane

GROUP = "kopf.dev"
VERSION = "v1"
PLURAL = "kopfexamples"
CRD_NAME = f"{PLURAL}.{GROUP}"
NAMESPACE = "default"
COLLECTION = f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/{PLURAL}"
MERGE_PATCH = "application/merge-patch+json"

CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": CRD_NAME},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {
            "plural": PLURAL,
            "singular": "kopfexample",
            "kind": "KopfExample",
            "shortNames": ["kex"],
        },
        "versions": [
            {
                "name": VERSION,
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "field": {"type": "string"},
                                    "duration": {"type": "integer"},
                                    "items": {"type": "array", "items": {"type": "string"}},
                                },
                            },
                            # Deliberately strict: no x-kubernetes-preserve-unknown-fields.
                            "status": {
                                "type": "object",
                                "properties": {
                                    "phase": {"type": "string"},
                                    "message": {"type": "string"},
                                    "observedGeneration": {"type": "integer"},
                                },
                            },
                        },
                    }
                },
            }
        ],
    },
}


class Api:
    """A minimal JSON-over-HTTPS client for the control plane's admin user."""

    def __init__(self, plane: ControlPlane) -> None:
        self.server = plane.server
        self.context: ssl.SSLContext = plane.ssl_context()

    def open(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float = 10,
    ) -> HTTPResponse:
        """Send a request; HTTP errors come back as responses, not exceptions."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.server + path,
            data=data,
            method=method,
            headers={"Content-Type": content_type, "Accept": "application/json"},
        )
        try:
            response: HTTPResponse = urllib.request.urlopen(request, context=self.context, timeout=timeout)
        except urllib.error.HTTPError as exc:
            return exc  # type: ignore[return-value]  # An HTTPError is a response too.
        return response

    def call(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> tuple[int, Any]:
        """Send a request and decode the JSON reply."""
        with self.open(method, path, body, content_type) as response:
            payload = response.read()
            return response.status, json.loads(payload) if payload else None

    def get(self, path: str) -> tuple[int, Any]:
        return self.call("GET", path)

    def post(self, path: str, body: Any) -> tuple[int, Any]:
        return self.call("POST", path, body)

    def merge_patch(self, path: str, body: Any) -> tuple[int, Any]:
        return self.call("PATCH", path, body, MERGE_PATCH)

    def delete(self, path: str) -> tuple[int, Any]:
        return self.call("DELETE", path)


def unique(prefix: str) -> str:
    """A fresh object name, so tests never see each other's leftovers."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def wait_for(predicate: Callable[[], object], timeout: float = 30, message: str = "condition") -> object:
    """Poll until ``predicate()`` returns something truthy, and return it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.1)
    pytest.fail(f"Timed out after {timeout}s waiting for {message}.")


@pytest.fixture(scope="module")
def api(control_plane: ControlPlane) -> Api:
    return Api(control_plane)


@pytest.fixture(scope="module")
def kopfexamples(api: Api) -> str:
    """The ``kopfexamples.kopf.dev`` CRD, established and served; yields its collection path."""
    status, body = api.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", CRD)
    assert status in (201, 409), body

    def established() -> bool:
        _, crd = api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}")
        conditions = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or []}
        return conditions.get("Established") == "True"

    wait_for(established, message=f"CRD {CRD_NAME} to be Established")
    wait_for(lambda: api.get(COLLECTION)[0] == 200, message=f"{COLLECTION} to be served")
    return COLLECTION


def create_example(api: Api, name: str, **extra: Any) -> dict[str, Any]:
    """Create one KopfExample with a simple spec (plus any extra top-level keys)."""
    obj: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "KopfExample",
        "metadata": {"name": name},
        "spec": {"field": "value", "duration": 1, "items": ["a", "b"]},
        **extra,
    }
    status, body = api.post(COLLECTION, obj)
    assert status == 201, body
    return dict(body)


# --------------------------------------------------------------------------- #
# 1. Version
# --------------------------------------------------------------------------- #


def test_version_reports_the_built_release(api: Api) -> None:
    status, body = api.get("/version")
    assert status == 200, body
    assert body["gitVersion"].startswith("v1.34."), body
    assert body["major"] == "1"
    assert body["minor"] == "34"


# --------------------------------------------------------------------------- #
# 2. CRDs: structural schemas, pruning, the status subresource, annotations
# --------------------------------------------------------------------------- #


def test_crd_is_established_with_a_structural_schema(api: Api, kopfexamples: str) -> None:
    status, crd = api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}")
    assert status == 200, crd
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions["Established"] == "True"
    assert conditions["NamesAccepted"] == "True"
    assert "NonStructuralSchema" not in conditions


def test_unknown_fields_are_pruned_on_creation(api: Api, kopfexamples: str) -> None:
    name = unique("pruned")
    obj: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "KopfExample",
        "metadata": {"name": name},
        "spec": {"field": "value", "undeclared": "dropped"},
    }
    status, body = api.post(kopfexamples, obj)
    assert status == 201, body
    assert body["spec"] == {"field": "value"}

    status, body = api.get(f"{kopfexamples}/{name}")
    assert status == 200, body
    assert body["spec"] == {"field": "value"}


def test_main_endpoint_ignores_status(api: Api, kopfexamples: str) -> None:
    name = unique("main")
    create_example(api, name)

    status, body = api.merge_patch(
        f"{kopfexamples}/{name}",
        {"spec": {"field": "changed"}, "status": {"phase": "Ignored"}},
    )
    assert status == 200, body
    assert body["spec"]["field"] == "changed"
    assert "phase" not in body.get("status", {})

    _, body = api.get(f"{kopfexamples}/{name}")
    assert body["spec"]["field"] == "changed"
    assert "phase" not in body.get("status", {})


def test_status_endpoint_prunes_unknown_fields_and_ignores_the_rest(api: Api, kopfexamples: str) -> None:
    name = unique("status")
    create_example(api, name)

    status, body = api.merge_patch(
        f"{kopfexamples}/{name}/status",
        {
            "spec": {"field": "ignored-via-status"},
            "status": {
                "phase": "Running",
                "kopf": {"progress": {"handler": {"started": "2020-01-01T00:00:00Z"}}},
            },
        },
    )
    assert status == 200, body
    assert body["status"] == {"phase": "Running"}  # The undeclared ``kopf`` is pruned silently.
    assert body["spec"]["field"] == "value"  # Spec changes via /status are ignored.

    _, body = api.get(f"{kopfexamples}/{name}")
    assert body["status"] == {"phase": "Running"}
    assert body["spec"]["field"] == "value"


def test_annotations_are_kept_and_null_deletes_them(api: Api, kopfexamples: str) -> None:
    name = unique("annotations")
    create_example(api, name)
    state = json.dumps({"spec": {"field": "value"}})
    annotations = {
        "kopf.zalando.org/last-handled-configuration": state,
        "kopf.zalando.org/handler.progress": '{"started": "2020-01-01T00:00:00Z", "retries": 0}',
    }

    patch: dict[str, Any] = {"metadata": {"annotations": annotations}}
    status, body = api.merge_patch(f"{kopfexamples}/{name}", patch)
    assert status == 200, body
    assert body["metadata"]["annotations"] == annotations

    # RFC 7386: null removes a key, the other keys stay as they are.
    patch = {"metadata": {"annotations": {"kopf.zalando.org/handler.progress": None}}}
    status, body = api.merge_patch(f"{kopfexamples}/{name}", patch)
    assert status == 200, body
    assert body["metadata"]["annotations"] == {
        "kopf.zalando.org/last-handled-configuration": state,
    }

    _, body = api.get(f"{kopfexamples}/{name}")
    assert body["metadata"]["annotations"] == {
        "kopf.zalando.org/last-handled-configuration": state,
    }


def test_status_endpoint_ignores_metadata_changes(api: Api, kopfexamples: str) -> None:
    # Whatever must be persisted in annotations goes through the main endpoint.
    name = unique("status-meta")
    create_example(api, name)

    patch = {"metadata": {"annotations": {"kopf.dev/ignored": "yes"}, "labels": {"ignored": "yes"}}}
    status, body = api.merge_patch(f"{kopfexamples}/{name}/status", {**patch, "status": {"phase": "Kept"}})
    assert status == 200, body
    assert body["status"] == {"phase": "Kept"}
    assert "annotations" not in body["metadata"]
    assert "labels" not in body["metadata"]


# --------------------------------------------------------------------------- #
# 3. Finalizers
# --------------------------------------------------------------------------- #


def test_finalizers_hold_deletion_until_removed(api: Api, kopfexamples: str) -> None:
    name = unique("finalized")
    path = f"{kopfexamples}/{name}"
    create_example(api, name, metadata={"name": name, "finalizers": ["kopf.dev/test"]})

    status, body = api.delete(path)
    assert status in (200, 202), body

    status, body = api.get(path)
    assert status == 200, body  # Still there...
    assert body["metadata"]["deletionTimestamp"]  # ...but marked for deletion.
    assert body["metadata"]["finalizers"] == ["kopf.dev/test"]

    status, body = api.merge_patch(path, {"metadata": {"finalizers": None}})
    assert status == 200, body

    wait_for(lambda: api.get(path)[0] == 404, timeout=10, message=f"{name} to be gone")


# --------------------------------------------------------------------------- #
# 4. Watches
# --------------------------------------------------------------------------- #


def read_events(response: HTTPResponse, until: str | None = None) -> list[dict[str, Any]]:
    """Read JSON-lines watch events until an event of type ``until`` or the end."""
    events = []
    while line := response.readline():
        event = json.loads(line)
        events.append(event)
        if event["type"] == until:
            break
    return events


def watch_path(collection: str, name: str, resource_version: str, timeout: int) -> str:
    """A watch URL for one object, from a given resource version."""
    query = urllib.parse.urlencode(
        {
            "watch": "true",
            "resourceVersion": resource_version,
            "fieldSelector": f"metadata.name={name}",
            "timeoutSeconds": str(timeout),
        }
    )
    return f"{collection}?{query}"


def change_and_delete(api: Api, collection: str, name: str) -> None:
    """Produce one ADDED, one MODIFIED, and one DELETED event for ``name``."""
    create_example(api, name)
    status, body = api.merge_patch(f"{collection}/{name}", {"spec": {"field": "modified"}})
    assert status == 200, body
    status, body = api.delete(f"{collection}/{name}")
    assert status == 200, body


def test_watch_streams_changes_as_they_happen(api: Api, kopfexamples: str) -> None:
    name = unique("watched")
    _, listing = api.get(kopfexamples)
    path = watch_path(kopfexamples, name, listing["metadata"]["resourceVersion"], timeout=30)

    with api.open("GET", path, timeout=30) as response:
        assert response.status == 200
        change_and_delete(api, kopfexamples, name)  # After the stream is open.
        events = read_events(response, until="DELETED")

    assert [event["type"] for event in events] == ["ADDED", "MODIFIED", "DELETED"]
    assert {event["object"]["metadata"]["name"] for event in events} == {name}
    assert events[1]["object"]["spec"]["field"] == "modified"
    versions = [int(event["object"]["metadata"]["resourceVersion"]) for event in events]
    assert versions == sorted(versions)


def test_watch_from_an_older_resource_version_replays_changes(api: Api, kopfexamples: str) -> None:
    name = unique("replayed")
    _, listing = api.get(kopfexamples)
    change_and_delete(api, kopfexamples, name)  # Before the stream is open.

    path = watch_path(kopfexamples, name, listing["metadata"]["resourceVersion"], timeout=30)
    with api.open("GET", path, timeout=30) as response:
        assert response.status == 200
        events = read_events(response, until="DELETED")

    assert [event["type"] for event in events] == ["ADDED", "MODIFIED", "DELETED"]


def test_watch_stream_ends_after_timeout_seconds(api: Api, kopfexamples: str) -> None:
    name = unique("quiet")
    _, listing = api.get(kopfexamples)
    path = watch_path(kopfexamples, name, listing["metadata"]["resourceVersion"], timeout=1)

    started = time.monotonic()
    with api.open("GET", path, timeout=30) as response:
        assert response.status == 200
        events = read_events(response)
    elapsed = time.monotonic() - started

    assert events == []
    assert elapsed < 10, f"the stream lasted {elapsed:.1f}s despite timeoutSeconds=1"


def test_watch_from_an_expired_resource_version_reports_410_gone(api: Api, kopfexamples: str) -> None:
    # The failure comes as an ERROR event inside a 200 OK stream, not as an HTTP status.
    path = f"{kopfexamples}?watch=true&resourceVersion=1&timeoutSeconds=5"
    with api.open("GET", path, timeout=30) as response:
        assert response.status == 200
        events = read_events(response)

    assert len(events) == 1, events
    assert events[0]["type"] == "ERROR"
    assert events[0]["object"]["kind"] == "Status"
    assert events[0]["object"]["code"] == 410
    assert events[0]["object"]["reason"] == "Expired"


# --------------------------------------------------------------------------- #
# 6. Non-admin users, for RBAC tests
# --------------------------------------------------------------------------- #


def test_a_user_kubeconfig_authenticates_as_that_user_and_grants_nothing(control_plane: ControlPlane) -> None:
    path = control_plane.user_kubeconfig("jane", groups=("team-a", "team-b"))
    config = yaml.safe_load(path.read_text())
    user = config["users"][0]["user"]
    context = ssl.create_default_context(cafile=config["clusters"][0]["cluster"]["certificate-authority"])
    context.load_cert_chain(user["client-certificate"], user["client-key"])
    server = config["clusters"][0]["cluster"]["server"]

    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    request = urllib.request.Request(f"{server}/apis/authentication.k8s.io/v1/selfsubjectreviews", method="POST",
                                     data=json.dumps(review).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, context=context, timeout=10) as response:
        info = json.loads(response.read())["status"]["userInfo"]
    assert info["username"] == "jane"
    assert {"team-a", "team-b", "system:authenticated"} <= set(info["groups"])

    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{server}/api/v1/namespaces", context=context, timeout=10)
    assert err.value.code == 403
