"""raybus's CRDs on a real API server: apiextensions-apiserver establishes them, and every ray.io object of
KubeRay's samples is accepted and read back as sent. The server may add only what a CRD declares as a
default; a pruned or changed field fails the test, named by its path."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from kubernetes import client

from tests.helpers import ray_samples
from tests.realkube.crds import ensure_crds, established

CRD_FILES = sorted((Path(__file__).resolve().parents[2] / "deploy" / "crds").glob("ray.io_*.yaml"))
CRDS = [yaml.safe_load(path.read_text()) for path in CRD_FILES]
BY_KIND = {crd["spec"]["names"]["kind"]: crd for crd in CRDS}


@pytest.fixture(scope="module")
def ray_crds(kube_admin: client.ApiClient) -> None:
    ensure_crds(kube_admin, CRDS)


def _schema(kind: str, version: str) -> dict[str, Any]:
    [served] = [v for v in BY_KIND[kind]["spec"]["versions"] if v["name"] == version]
    schema: dict[str, Any] = served["schema"]["openAPIV3Schema"]
    return schema


def _child(schema: dict[str, Any] | None, key: str) -> dict[str, Any] | None:
    if schema is None:
        return None
    properties = schema.get("properties") or {}
    if key in properties:
        return dict(properties[key])
    extra = schema.get("additionalProperties")
    return dict(extra) if isinstance(extra, dict) else None


def round_trip_differences(sent: Any, stored: Any, schema: dict[str, Any] | None, path: str) -> list[str]:
    """Every way ``stored`` differs from ``sent`` other than a field the schema gives a default."""
    if isinstance(sent, dict) and isinstance(stored, dict):
        found = []
        for key, value in sent.items():
            if key not in stored:
                found.append(f"{path}.{key}: pruned")
            else:
                found += round_trip_differences(value, stored[key], _child(schema, key), f"{path}.{key}")
        for key in stored.keys() - sent.keys():
            child = _child(schema, key)
            if child is None or "default" not in child:
                found.append(f"{path}.{key}: added by the server, though the CRD declares no default")
        return found
    if isinstance(sent, list) and isinstance(stored, list):
        if len(sent) != len(stored):
            return [f"{path}: {len(sent)} items sent, {len(stored)} read back"]
        items = None if schema is None else schema.get("items")
        found = []
        for index, (a, b) in enumerate(zip(sent, stored, strict=True)):
            found += round_trip_differences(a, b, items, f"{path}[{index}]")
        return found
    return [] if sent == stored else [f"{path}: sent {sent!r}, read back {stored!r}"]


def _accepted(crd: client.V1CustomResourceDefinition) -> bool:
    assert crd.status is not None
    return any(c.type == "NamesAccepted" and c.status == "True" for c in (crd.status.conditions or []))


def test_crds_are_established_and_served(kube_admin: client.ApiClient, ray_crds: None) -> None:
    extensions = client.ApiextensionsV1Api(kube_admin)
    for crd in CRDS:
        stored = extensions.read_custom_resource_definition(crd["metadata"]["name"])
        assert established(stored) and _accepted(stored)
    served = client.CustomObjectsApi(kube_admin).get_api_resources("ray.io", "v1")
    plurals = sorted(crd["spec"]["names"]["plural"] for crd in CRDS)
    assert sorted(r.name for r in served.resources if "/" not in r.name) == plurals


def test_the_comparison_names_a_pruned_field() -> None:
    schema = {"properties": {"a": {"type": "integer", "default": 1}, "b": {"type": "string"}}}
    assert round_trip_differences({"b": "x", "c": 2}, {"a": 1, "b": "x"}, schema, "spec") == ["spec.c: pruned"]
    assert round_trip_differences({}, {"b": "x"}, schema, "spec") == [
        "spec.b: added by the server, though the CRD declares no default"
    ]


def test_an_unknown_field_is_pruned_and_named(
    kube_admin: client.ApiClient, ray_crds: None, kube_namespace: str
) -> None:
    custom = client.CustomObjectsApi(kube_admin)
    head = {"rayStartParams": {}, "template": {"spec": {"containers": [{"name": "ray-head", "image": "ray"}]}}}
    cluster = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "unknown-field"},
        "spec": {"headGroupSpec": head, "notARayField": True},
    }
    custom.create_namespaced_custom_object("ray.io", "v1", kube_namespace, "rayclusters", cluster)
    stored = cast(
        dict[str, Any],
        custom.get_namespaced_custom_object("ray.io", "v1", kube_namespace, "rayclusters", "unknown-field"),
    )
    spec_schema = _child(_schema("RayCluster", "v1"), "spec")
    assert round_trip_differences(cluster["spec"], stored["spec"], spec_schema, "spec") == ["spec.notARayField: pruned"]


@pytest.mark.parametrize("objects", [pytest.param(objects, id=stem) for stem, objects in ray_samples()])
def test_sample_is_accepted_and_read_back_unpruned(
    kube_admin: client.ApiClient, ray_crds: None, objects: list[dict[str, Any]]
) -> None:
    custom = client.CustomObjectsApi(kube_admin)
    namespace = f"sample-{secrets.token_hex(4)}"
    core = client.CoreV1Api(kube_admin)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    try:
        problems = []
        for obj in objects:
            group, version = obj["apiVersion"].split("/")
            plural = BY_KIND[obj["kind"]]["spec"]["names"]["plural"]
            # Read back by the created name: some samples ask for a generated one.
            created = cast(
                dict[str, Any], custom.create_namespaced_custom_object(group, version, namespace, plural, obj)
            )
            name = created["metadata"]["name"]
            stored = cast(dict[str, Any], custom.get_namespaced_custom_object(group, version, namespace, plural, name))
            spec_schema = _child(_schema(obj["kind"], version), "spec")
            where = f"{obj['kind']}/{name} spec"
            problems += round_trip_differences(obj.get("spec", {}), stored.get("spec", {}), spec_schema, where)
        assert not problems, "\n".join(problems)
    finally:
        core.delete_namespace(namespace)
