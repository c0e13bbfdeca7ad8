"""plan_call for every command type, outcome rules and the retry policy (pure, no server)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import pytest

from schema.messages import (
    Command,
    CreateObject,
    DashboardRef,
    DeleteCollection,
    DeleteObject,
    EmitEvent,
    ObjectRef,
    PatchObject,
    PatchStatus,
    StopRayJob,
)
from services.edge.apply.plan import RETRY_BACKOFF, is_transient, outcome_of_error, plan_call, requested_delay
from services.edge.calls import ApiCall, ApiError
from services.edge.events import event_name
from services.runtime.errors import PermanentError

NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)


def ref(api_version: str, kind: str, name: str = "obj", namespace: str = "ns", uid: str = "") -> ObjectRef:
    return ObjectRef(api_version=api_version, kind=kind, namespace=namespace, name=name, uid=uid)


def plan(command: Command) -> ApiCall:
    return plan_call(command, now=NOW, generate=lambda kind: f"generated-{kind}")


@pytest.mark.parametrize(
    ("command", "method", "path"),
    [
        pytest.param(
            CreateObject(target=ref("v1", "Pod", "p"), body={"metadata": {"name": "p"}}),
            "POST",
            "/api/v1/namespaces/ns/pods",
            id="create-core",
        ),
        pytest.param(
            CreateObject(target=ref("ray.io/v1", "RayCluster", "c"), body={}),
            "POST",
            "/apis/ray.io/v1/namespaces/ns/rayclusters",
            id="create-custom",
        ),
        pytest.param(
            CreateObject(target=ref("batch/v1", "Job", "j"), body={}),
            "POST",
            "/apis/batch/v1/namespaces/ns/jobs",
            id="create-group",
        ),
        pytest.param(
            CreateObject(target=ref("rbac.authorization.k8s.io/v1", "RoleBinding", "rb"), body={}),
            "POST",
            "/apis/rbac.authorization.k8s.io/v1/namespaces/ns/rolebindings",
            id="create-rbac",
        ),
        pytest.param(
            CreateObject(target=ref("gateway.networking.k8s.io/v1", "HTTPRoute", "r"), body={}),
            "POST",
            "/apis/gateway.networking.k8s.io/v1/namespaces/ns/httproutes",
            id="create-gateway",
        ),
        pytest.param(
            PatchObject(target=ref("v1", "Service", "svc.1"), patch={"spec": {}}),
            "PATCH",
            "/api/v1/namespaces/ns/services/svc.1",
            id="patch-core",
        ),
        pytest.param(
            PatchStatus(target=ref("ray.io/v1", "RayJob", "rj"), status={"jobStatus": "RUNNING"}),
            "PATCH",
            "/apis/ray.io/v1/namespaces/ns/rayjobs/rj/status",
            id="status-subresource",
        ),
        pytest.param(
            DeleteObject(target=ref("networking.k8s.io/v1", "Ingress", "ing")),
            "DELETE",
            "/apis/networking.k8s.io/v1/namespaces/ns/ingresses/ing",
            id="delete",
        ),
        pytest.param(
            DeleteCollection(api_version="v1", kind="Pod", namespace="ns", label_selector="ray.io/cluster=c"),
            "DELETE",
            "/api/v1/namespaces/ns/pods",
            id="deletecollection",
        ),
        pytest.param(
            EmitEvent(regarding=ref("ray.io/v1", "RayCluster", "c"), event_type="Normal", reason="R", message="m"),
            "POST",
            "/api/v1/namespaces/ns/events",
            id="event",
        ),
        pytest.param(
            CreateObject(target=ref("ray.io/v2", "RayCluster", "c"), body={}),
            "POST",
            "/apis/ray.io/v1/namespaces/ns/rayclusters",
            id="another-version-of-a-known-kind-resolves-to-the-table",
        ),
    ],
)
def test_paths(command: Command, method: str, path: str) -> None:
    call = plan(command)
    assert (call.method, call.path) == (method, path)


def test_create_fills_identity_and_counts_conflict_as_done() -> None:
    call = plan(CreateObject(target=ref("v1", "ServiceAccount", "sa"), body={"metadata": {"labels": {"a": "b"}}}))
    assert call.body == {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"labels": {"a": "b"}, "name": "sa", "namespace": "ns"},
    }
    assert call.content_type == "application/json"
    assert (call.on_conflict, call.on_not_found) == ("already_done", None)


def test_create_of_a_generated_secret_fills_the_token() -> None:
    body: dict[str, Any] = {"metadata": {"name": "c", "annotations": {"raybus.io/generate": "auth_token"}}}
    call = plan(CreateObject(target=ref("v1", "Secret", "c"), body=body))
    assert call.body["data"] == {"auth_token": base64.b64encode(b"generated-auth_token").decode()}
    assert "data" not in body  # the command is not mutated


def test_create_of_an_unknown_generation_fails() -> None:
    body = {"metadata": {"annotations": {"raybus.io/generate": "password"}}}
    with pytest.raises(PermanentError, match="password"):
        plan(CreateObject(target=ref("v1", "Secret", "c"), body=body))


@pytest.mark.parametrize(
    ("patch_type", "target", "patch", "resource_version", "content_type", "body"),
    [
        pytest.param(
            "merge",
            ref("v1", "Pod", "p"),
            {"metadata": {"labels": {"a": "b"}}},
            "",
            "application/merge-patch+json",
            {"metadata": {"labels": {"a": "b"}}},
            id="merge",
        ),
        pytest.param(
            "merge",
            ref("v1", "Pod", "p"),
            {"metadata": {"labels": {"a": "b"}}},
            "42",
            "application/merge-patch+json",
            {"metadata": {"labels": {"a": "b"}, "resourceVersion": "42"}},
            id="merge-with-precondition",
        ),
        pytest.param(
            "strategic",
            ref("v1", "Pod", "p"),
            {"spec": {}},
            "",
            "application/strategic-merge-patch+json",
            {"spec": {}},
            id="strategic-on-builtin",
        ),
        pytest.param(
            "strategic",
            ref("ray.io/v1", "RayCluster", "c"),
            {"spec": {}},
            "",
            "application/merge-patch+json",
            {"spec": {}},
            id="strategic-on-custom-becomes-merge",
        ),
        pytest.param(
            "json",
            ref("v1", "Pod", "p"),
            [{"op": "remove", "path": "/metadata/finalizers/0"}],
            "7",
            "application/json-patch+json",
            [
                {"op": "replace", "path": "/metadata/resourceVersion", "value": "7"},
                {"op": "remove", "path": "/metadata/finalizers/0"},
            ],
            id="json-with-precondition",
        ),
    ],
)
def test_patches(
    patch_type: Any, target: ObjectRef, patch: Any, resource_version: str, content_type: str, body: Any
) -> None:
    call = plan(PatchObject(target=target, patch=patch, patch_type=patch_type, resource_version=resource_version))
    assert call.content_type == content_type
    assert call.body == body
    assert call.on_not_found == "dropped"
    assert call.on_conflict == ("dropped" if resource_version else None)


@pytest.mark.parametrize(
    ("patch_type", "patch"),
    [
        pytest.param("json", {"a": 1}, id="json-needs-a-list"),
        pytest.param("merge", [{"op": "add"}], id="merge-needs-an-object"),
    ],
)
def test_malformed_patches_fail(patch_type: Any, patch: Any) -> None:
    with pytest.raises(PermanentError):
        plan(PatchObject(target=ref("v1", "Pod"), patch=patch, patch_type=patch_type))


def test_status_patch() -> None:
    call = plan(
        PatchStatus(target=ref("ray.io/v1", "RayCluster", "c"), status={"state": "ready"}, resource_version="9")
    )
    assert call.body == {"status": {"state": "ready"}, "metadata": {"resourceVersion": "9"}}
    assert call.content_type == "application/merge-patch+json"
    assert (call.on_conflict, call.on_not_found) == ("dropped", "dropped")
    plain = plan(PatchStatus(target=ref("ray.io/v1", "RayCluster", "c"), status={}))
    assert plain.on_conflict is None


def test_status_patch_of_a_kind_without_status_subresource_patches_the_object() -> None:
    call = plan(PatchStatus(target=ref("v1", "ServiceAccount", "sa"), status={"x": 1}))
    assert call.path == "/api/v1/namespaces/ns/serviceaccounts/sa"


@pytest.mark.parametrize(
    ("command", "body", "on_conflict"),
    [
        pytest.param(
            DeleteObject(target=ref("ray.io/v1", "RayCluster", "c")),
            {"apiVersion": "v1", "kind": "DeleteOptions"},
            None,
            id="plain",
        ),
        pytest.param(
            DeleteObject(target=ref("batch/v1", "Job", "j"), propagation="Background"),
            {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"},
            None,
            id="propagation",
        ),
        pytest.param(
            DeleteObject(target=ref("v1", "Pod", "p", uid="u-1"), propagation="Foreground"),
            {
                "apiVersion": "v1",
                "kind": "DeleteOptions",
                "propagationPolicy": "Foreground",
                "preconditions": {"uid": "u-1"},
            },
            "already_done",
            id="uid-precondition",
        ),
    ],
)
def test_deletes(command: DeleteObject, body: dict[str, Any], on_conflict: str | None) -> None:
    call = plan(command)
    assert call.body == body
    assert call.on_not_found == "already_done"
    assert call.on_conflict == on_conflict


def test_deletecollection_carries_the_selector_and_refuses_none() -> None:
    call = plan(DeleteCollection(api_version="v1", kind="Pod", namespace="ns", label_selector="ray.io/cluster=c,a!=b"))
    assert call.query == (("labelSelector", "ray.io/cluster=c,a!=b"),)
    assert call.body is None
    with pytest.raises(PermanentError, match="selector"):
        plan(DeleteCollection(api_version="v1", kind="Pod", namespace="ns", label_selector=""))


def test_event_body() -> None:
    regarding = ref("ray.io/v1", "RayJob", "rj", uid="u-9")
    command = EmitEvent(id="cmd-1", regarding=regarding, event_type="Warning", reason="Failed", message="boom")
    call = plan(command)
    body = call.body
    assert body["metadata"] == {"name": event_name(regarding, "cmd-1", "Failed", "boom"), "namespace": "ns"}
    assert body["metadata"]["name"].startswith("rj.")
    assert body["involvedObject"] == {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "namespace": "ns",
        "name": "rj",
        "uid": "u-9",
    }
    assert (body["reason"], body["message"], body["type"], body["count"]) == ("Failed", "boom", "Warning", 1)
    assert body["source"] == {"component": "raybus"}
    assert body["firstTimestamp"] == body["lastTimestamp"] == "2025-03-01T12:00:00Z"
    assert call.on_conflict == "already_done"


def test_event_names_are_stable_and_distinct() -> None:
    r = ref("v1", "Pod", "p")
    assert event_name(r, "a", "R", "m") == event_name(r, "a", "X", "y")
    assert event_name(r, "a", "R", "m") != event_name(r, "b", "R", "m")
    assert event_name(r, "", "R", "m") != event_name(r, "", "R", "n")


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(CreateObject(target=ref("v1", "ConfigMap"), body={}), id="unknown-kind"),
        pytest.param(PatchObject(target=ref("discovery.k8s.io/v1", "EndpointSlice"), patch={}), id="read-only-kind"),
        pytest.param(DeleteObject(target=ref("v1", "Pod", namespace="")), id="missing-namespace"),
        pytest.param(
            StopRayJob(dashboard=DashboardRef(namespace="ns", service="s", port=8265, cluster="c"), job_id="j"),
            id="dashboard-command",
        ),
    ],
)
def test_unplannable_commands(command: Command) -> None:
    with pytest.raises(PermanentError):
        plan(command)


CREATE = ApiCall(method="POST", path="/x", on_conflict="already_done")
PATCH_RV = ApiCall(method="PATCH", path="/x", on_not_found="dropped", on_conflict="dropped")
PATCH = ApiCall(method="PATCH", path="/x", on_not_found="dropped")
DELETE = ApiCall(method="DELETE", path="/x", on_not_found="already_done")


@pytest.mark.parametrize(
    ("call", "error", "outcome"),
    [
        pytest.param(CREATE, ApiError(409, "AlreadyExists"), "already_done", id="create-exists"),
        pytest.param(CREATE, ApiError(404, "NotFound"), None, id="create-namespace-missing"),
        pytest.param(DELETE, ApiError(404, "NotFound"), "already_done", id="delete-missing"),
        pytest.param(PATCH_RV, ApiError(409, "Conflict"), "dropped", id="stale-patch"),
        pytest.param(PATCH, ApiError(409, "Conflict"), None, id="conflict-without-precondition"),
        pytest.param(PATCH, ApiError(404, "NotFound"), "dropped", id="patch-of-a-gone-object"),
        pytest.param(PATCH, ApiError(422, "Invalid"), None, id="invalid"),
        pytest.param(PATCH, ApiError(500, "InternalError"), None, id="server-error"),
    ],
)
def test_outcome_of_error(call: ApiCall, error: ApiError, outcome: str | None) -> None:
    assert outcome_of_error(call, error) == outcome


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        pytest.param(ApiError(0, "ConnectionError"), True, id="no-answer"),
        pytest.param(ApiError(429, "TooManyRequests"), True, id="throttled"),
        pytest.param(ApiError(503, "ServiceUnavailable"), True, id="5xx"),
        pytest.param(ApiError(400, "BadRequest"), False, id="4xx-never"),
        pytest.param(ApiError(403, "Forbidden"), False, id="forbidden-never"),
        pytest.param(ApiError(409, "Conflict"), False, id="conflict-never"),
        pytest.param(PermanentError("no"), False, id="not-an-api-error"),
    ],
)
def test_is_transient(error: Exception, transient: bool) -> None:
    assert is_transient(error) is transient


def test_transient_failures_are_retried_five_times_over_about_nine_seconds() -> None:
    delays = [RETRY_BACKOFF.delay(failures) for failures in range(1, 6)]
    assert delays == pytest.approx([0.1, 0.3, 0.9, 2.7, 5.0])
    assert not RETRY_BACKOFF.exhausted(5)
    assert RETRY_BACKOFF.exhausted(6)


@pytest.mark.parametrize(
    ("error", "delay"),
    [
        pytest.param(ApiError(429, "TooManyRequests", retry_after=3.0), 3.0, id="retry-after-honoured"),
        pytest.param(ApiError(429, "TooManyRequests", retry_after=3600.0), 30.0, id="retry-after-capped"),
        pytest.param(ApiError(503, "ServiceUnavailable"), 0.0, id="no-retry-after"),
        pytest.param(PermanentError("no"), 0.0, id="not-an-api-error"),
    ],
)
def test_requested_delay(error: Exception, delay: float) -> None:
    assert requested_delay(error) == delay


def test_api_error_text() -> None:
    assert str(ApiError(422, "Invalid", 'Pod "p" is invalid')) == '422 Invalid: Pod "p" is invalid'
    assert str(ApiError(0, "ConnectionError", "refused")) == "connection error: refused"
