"""CustomResourceDefinitions: serving, structural defaults, pruning and validation, through the official client.

Runs on a private server (so registering KubeRay's and Gateway API's own CRDs does not clash with the
project CRDs of the session server).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.fixtures.kubesim import KubeSimHandle, start_kubesim
from tests.helpers import eventually_sync
from tests.kubeobjects import error_body
from tests.kubesim.crd_inputs import gateway_crd, kuberay_crd, widget_crd

GROUP = "kubesim.test"


@pytest.fixture(scope="module")
def crd_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeSimHandle]:
    handle = start_kubesim(workdir=tmp_path_factory.mktemp("kubesim-crds"))
    ext = client.ApiextensionsV1Api(handle.api_client)
    for crd in (kuberay_crd("rayclusters"), gateway_crd("gateways"), gateway_crd("gatewayclasses"), widget_crd(GROUP)):
        ext.create_custom_resource_definition(crd, _preload_content=False)  # type: ignore[arg-type]
    try:
        yield handle
    finally:
        handle.close()


@pytest.fixture
def ns(crd_sim: KubeSimHandle) -> str:
    name = f"crd-{secrets.token_hex(4)}"
    client.CoreV1Api(crd_sim.api_client).create_namespace({"metadata": {"name": name}})  # type: ignore[arg-type]
    return name


@pytest.fixture
def custom(crd_sim: KubeSimHandle) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(crd_sim.api_client)


def _widget(obj_name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": obj_name}, "spec": {"size": 1, **spec}}


def _raycluster(name: str, workers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    container = {"name": "ray-head", "image": "rayproject/ray:2.9.0"}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name},
        "spec": {
            "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [container]}}},
            "workerGroupSpecs": workers or [],
        },
    }


def _create_widget(custom: client.CustomObjectsApi, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    created = custom.create_namespaced_custom_object(GROUP, "v1", ns, "widgets", body)
    assert isinstance(created, dict)
    return created


def _invalid(exc: client.ApiException) -> dict[str, Any]:
    assert exc.status == 422, exc.body
    body = error_body(exc)
    assert body["reason"] == "Invalid"
    return body


def test_crd_is_established_and_discoverable(crd_sim: KubeSimHandle) -> None:
    ext = client.ApiextensionsV1Api(crd_sim.api_client)
    crd = ext.read_custom_resource_definition("rayclusters.ray.io")
    assert crd.status is not None and crd.status.conditions is not None
    conditions = {c.type: c.status for c in crd.status.conditions}
    resources = client.CustomObjectsApi(crd_sim.api_client).get_api_resources("ray.io", "v1")
    assert conditions == {"NamesAccepted": "True", "Established": "True"}
    assert {r.name for r in resources.resources} >= {"rayclusters", "rayclusters/status"}


def test_cr_crud_through_custom_objects_api(custom: client.CustomObjectsApi, ns: str) -> None:
    created: Any = custom.create_namespaced_custom_object("ray.io", "v1", ns, "rayclusters", _raycluster("rc"))
    got: Any = custom.get_namespaced_custom_object("ray.io", "v1", ns, "rayclusters", "rc")
    listed: Any = custom.list_namespaced_custom_object("ray.io", "v1", ns, "rayclusters")
    custom.delete_namespaced_custom_object("ray.io", "v1", ns, "rayclusters", "rc")
    assert got["metadata"]["uid"] == created["metadata"]["uid"]
    assert [i["metadata"]["name"] for i in listed["items"]] == ["rc"]
    assert listed["kind"] == "RayClusterList"
    with pytest.raises(client.ApiException) as err:
        custom.get_namespaced_custom_object("ray.io", "v1", ns, "rayclusters", "rc")
    assert err.value.status == 404
    assert error_body(err.value)["message"] == 'rayclusters.ray.io "rc" not found'


def test_nested_array_defaults_are_applied(custom: client.CustomObjectsApi, ns: str) -> None:
    worker = {"groupName": "small", "maxReplicas": 3, "template": {"spec": {"containers": []}}}
    rc: Any = custom.create_namespaced_custom_object("ray.io", "v1", ns, "rayclusters", _raycluster("rc", [worker]))
    group = rc["spec"]["workerGroupSpecs"][0]
    assert group["replicas"] == 0
    assert group["minReplicas"] == 0
    assert group["numOfHosts"] == 1
    assert group["maxReplicas"] == 3


def test_defaults_inside_nested_objects(custom: client.CustomObjectsApi, ns: str) -> None:
    env = [{"name": "X", "valueFrom": {"configMapKeyRef": {"key": "k"}}}]
    body = _raycluster("rc")
    body["spec"]["autoscalerOptions"] = {"env": env}
    rc: Any = custom.create_namespaced_custom_object("ray.io", "v1", ns, "rayclusters", body)
    assert rc["spec"]["autoscalerOptions"]["env"][0]["valueFrom"]["configMapKeyRef"] == {"key": "k", "name": ""}


def test_type_error_reports_field_path_like_the_real_server(custom: client.CustomObjectsApi, ns: str) -> None:
    worker = {"groupName": "g", "maxReplicas": 3, "replicas": "many", "template": {}}
    with pytest.raises(client.ApiException) as err:
        custom.create_namespaced_custom_object("ray.io", "v1", ns, "rayclusters", _raycluster("bad", [worker]))
    body = _invalid(err.value)
    assert body["details"]["causes"][0]["field"] == "spec.workerGroupSpecs[0].replicas"
    assert body["message"] == (
        'RayCluster.ray.io "bad" is invalid: spec.workerGroupSpecs[0].replicas: Invalid value: "string": '
        'spec.workerGroupSpecs[0].replicas in body must be of type integer: "string"'
    )
    assert body["details"]["group"] == "ray.io"
    assert body["details"]["kind"] == "RayCluster"


def test_required_field_missing(custom: client.CustomObjectsApi, ns: str) -> None:
    body = _raycluster("bad")
    del body["spec"]["headGroupSpec"]
    with pytest.raises(client.ApiException) as err:
        custom.create_namespaced_custom_object("ray.io", "v1", ns, "rayclusters", body)
    cause = _invalid(err.value)["details"]["causes"][0]
    assert cause == {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.headGroupSpec"}


def test_enum_violation(custom: client.CustomObjectsApi, ns: str) -> None:
    body = _raycluster("bad")
    body["spec"]["autoscalerOptions"] = {"upscalingMode": "Turbo"}
    with pytest.raises(client.ApiException) as err:
        custom.create_namespaced_custom_object("ray.io", "v1", ns, "rayclusters", body)
    cause = _invalid(err.value)["details"]["causes"][0]
    assert cause["field"] == "spec.autoscalerOptions.upscalingMode"
    assert cause["message"] == 'Unsupported value: "Turbo": supported values: "Default", "Aggressive", "Conservative"'


def test_unknown_fields_are_pruned(custom: client.CustomObjectsApi, ns: str) -> None:
    body = _raycluster("rc")
    body["spec"]["notAField"] = {"x": 1}
    body["spec"]["headGroupSpec"]["alsoUnknown"] = True
    body["metadata"]["labels"] = {"kept": "yes"}
    rc: Any = custom.create_namespaced_custom_object("ray.io", "v1", ns, "rayclusters", body)
    assert "notAField" not in rc["spec"]
    assert "alsoUnknown" not in rc["spec"]["headGroupSpec"]
    assert rc["metadata"]["labels"] == {"kept": "yes"}


def test_gateway_api_crd_defaults(crd_sim: KubeSimHandle, custom: client.CustomObjectsApi, ns: str) -> None:
    gateway = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {"name": "gw"},
        "spec": {"gatewayClassName": "kubesim", "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]},
    }
    created: Any = custom.create_namespaced_custom_object("gateway.networking.k8s.io", "v1", ns, "gateways", gateway)
    listener = created["spec"]["listeners"][0]
    assert listener["allowedRoutes"] == {"namespaces": {"from": "Same"}}


def test_gateway_api_pattern_validation(custom: client.CustomObjectsApi, ns: str) -> None:
    gateway = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {"name": "gw"},
        "spec": {"gatewayClassName": "kubesim", "listeners": [{"name": "Bad_Name", "port": 80, "protocol": "HTTP"}]},
    }
    with pytest.raises(client.ApiException) as err:
        custom.create_namespaced_custom_object("gateway.networking.k8s.io", "v1", ns, "gateways", gateway)
    fields = [c["field"] for c in _invalid(err.value)["details"]["causes"]]
    assert "spec.listeners[0].name" in fields


@pytest.mark.parametrize(
    ("spec", "field", "reason"),
    [
        pytest.param({"size": 0}, "spec.size", "FieldValueInvalid", id="minimum"),
        pytest.param({"size": 11}, "spec.size", "FieldValueInvalid", id="maximum"),
        pytest.param({"name": "ABC"}, "spec.name", "FieldValueInvalid", id="pattern"),
        pytest.param({"name": "a"}, "spec.name", "FieldValueInvalid", id="minLength"),
        pytest.param({"name": "abcdefghij"}, "spec.name", "FieldValueTooLong", id="maxLength"),
        pytest.param({"tags": []}, "spec.tags", "FieldValueInvalid", id="minItems"),
        pytest.param({"tags": ["a", "b", "c", "d"]}, "spec.tags", "FieldValueTooMany", id="maxItems"),
        pytest.param({"port": 1.5}, "spec.port", "FieldValueTypeInvalid", id="int-or-string"),
        pytest.param({"labels": {"k": "toolong"}}, "spec.labels[k]", "FieldValueTooLong", id="additionalProperties"),
        pytest.param({"mode": "warp"}, "spec.mode", "FieldValueNotSupported", id="enum"),
        pytest.param({"items": [{"key": "a"}, {"key": "a"}]}, "spec.items[1]", "FieldValueDuplicate", id="list-map"),
        pytest.param({"items": [{"count": 2}]}, "spec.items[0].key", "FieldValueRequired", id="required-in-array"),
        pytest.param({"size": None}, "spec.size", "FieldValueTypeInvalid", id="null-not-nullable"),
    ],
)
def test_schema_rule_violations(
    custom: client.CustomObjectsApi, ns: str, spec: dict[str, Any], field: str, reason: str
) -> None:
    with pytest.raises(client.ApiException) as err:
        _create_widget(custom, ns, _widget("w", **spec))
    causes = _invalid(err.value)["details"]["causes"]
    assert (field, reason) in [(c["field"], c["reason"]) for c in causes]


def test_valid_widget_keeps_preserved_fields_and_defaults(custom: client.CustomObjectsApi, ns: str) -> None:
    widget = _create_widget(
        custom, ns, _widget("w", port="http", free={"any": {"thing": [1]}}, ratio=None, items=[{"key": "a"}])
    )
    assert widget["spec"]["free"] == {"any": {"thing": [1]}}
    assert widget["spec"]["mode"] == "slow"
    assert widget["spec"]["items"] == [{"key": "a", "count": 1}]
    assert widget["spec"]["ratio"] is None


def test_every_served_version_is_served_from_one_storage(custom: client.CustomObjectsApi, ns: str) -> None:
    _create_widget(custom, ns, _widget("w"))
    beta: Any = custom.get_namespaced_custom_object(GROUP, "v1beta1", ns, "widgets", "w")
    assert beta["apiVersion"] == f"{GROUP}/v1beta1"


def test_put_without_resource_version_is_rejected_for_custom_objects(custom: client.CustomObjectsApi, ns: str) -> None:
    _create_widget(custom, ns, _widget("w"))
    with pytest.raises(client.ApiException) as err:
        custom.replace_namespaced_custom_object(GROUP, "v1", ns, "widgets", "w", _widget("w", size=2))
    assert _invalid(err.value)["details"]["causes"][0]["field"] == "metadata.resourceVersion"


def test_update_revalidates(custom: client.CustomObjectsApi, ns: str) -> None:
    widget = _create_widget(custom, ns, _widget("w"))
    widget["spec"]["size"] = 99
    with pytest.raises(client.ApiException) as err:
        custom.replace_namespaced_custom_object(GROUP, "v1", ns, "widgets", "w", widget)
    _invalid(err.value)


def test_strategic_merge_patch_on_custom_object_is_415(custom: client.CustomObjectsApi, ns: str) -> None:
    _create_widget(custom, ns, _widget("w"))
    with pytest.raises(client.ApiException) as err:
        custom.patch_namespaced_custom_object(
            GROUP,
            "v1",
            ns,
            "widgets",
            "w",
            {"spec": {"size": 2}},
            _content_type="application/strategic-merge-patch+json",
        )
    assert err.value.status == 415
    assert error_body(err.value)["reason"] == "UnsupportedMediaType"


def test_deleting_a_crd_removes_its_objects_and_stops_serving(crd_sim: KubeSimHandle, ns: str) -> None:
    ext = client.ApiextensionsV1Api(crd_sim.api_client)
    custom = client.CustomObjectsApi(crd_sim.api_client)
    group = f"g{secrets.token_hex(3)}.kubesim.test"
    ext.create_custom_resource_definition(widget_crd(group), _preload_content=False)  # type: ignore[arg-type]
    custom.create_namespaced_custom_object(group, "v1", ns, "widgets", {**_widget("w"), "apiVersion": f"{group}/v1"})
    ext.delete_custom_resource_definition(f"widgets.{group}")

    def gone() -> bool:
        with pytest.raises(client.ApiException) as err:
            custom.list_namespaced_custom_object(group, "v1", ns, "widgets")
        return bool(err.value.status == 404)

    assert eventually_sync(gone)
