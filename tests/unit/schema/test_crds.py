"""The generated CRDs: up to date, structural, valid Kubernetes objects, faithful to KubeRay's CRDs,
and accepting every ray.io object of KubeRay's samples.

Sample validation runs the generated OpenAPI schema through ``jsonschema`` the way the API server would
see a create: CRD defaults applied first, ``x-kubernetes-*`` extensions stripped, and unknown fields
rejected (what ``kubectl apply --validate=strict`` reports instead of silently pruning them).
CEL rules are checked separately in ``test_cel_rules_are_kuberays``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from schema.crd import generate_crds, main, render, stale_files
from tests.helpers import conformance_dir

ROOT = Path(__file__).resolve().parents[3]
DEPLOYED = ROOT / "deploy" / "crds"
CHART_CRDS = ROOT / "deploy" / "helm" / "raybus" / "crds"
KUBERAY = conformance_dir() / "kuberay"
K8S_VERSION = "1.33.0"

CRDS = generate_crds()
BY_KIND = {crd["spec"]["names"]["kind"]: crd for crd in CRDS.values()}

# Samples the generated schema rejects, with the reason. None is expected: KubeRay's samples are all
# valid v1 objects, and an entry here means either a sample bug or a gap in schema/ray.
REJECTED_SAMPLES: dict[str, str] = {}

# Where our schema deliberately differs from KubeRay's (path suffix -> what differs).
INTENDED_DIFFERENCES = {
    # Defaults KubeRay applies in the operator, made visible in the stored object (docs/behaviour.md#4.1).
    ".headGroupSpec.ingressOptions.path default",
    ".headGroupSpec.ingressOptions.pathType default",
    # min/maxReplicas have CRD defaults, so "required" never fails after defaulting; ours omit it.
    ".workerGroupSpecs[] required",
    # raybus extensions (docs/differences.md#raycronjob).
    "raycronjobs.spec.concurrencyPolicy",
    "raycronjobs.spec.successfulJobsHistoryLimit",
    "raycronjobs.spec.failedJobsHistoryLimit",
}


def _ray_objects() -> list[Any]:
    params = []
    for path in sorted((KUBERAY / "samples").glob("*.yaml")):
        for index, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if isinstance(doc, dict) and str(doc.get("apiVersion", "")).startswith("ray.io/"):
                sample_id = f"{path.stem}#{index}-{doc['kind']}"
                reason = REJECTED_SAMPLES.get(sample_id)
                marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
                params.append(pytest.param(doc, id=sample_id, marks=marks))
    return params


def _schema(kind: str, version: str = "v1") -> dict[str, Any]:
    for v in BY_KIND[kind]["spec"]["versions"]:
        if v["name"] == version:
            schema: dict[str, Any] = v["schema"]["openAPIV3Schema"]
            return schema
    raise KeyError(version)


def _nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, prop in schema.get("properties", {}).items():
        yield from _nodes(prop, f"{path}.{name}")
    if "items" in schema:
        yield from _nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _nodes(schema["additionalProperties"], f"{path}{{}}")


def test_deployed_crds_are_up_to_date(tmp_path: Path) -> None:
    assert stale_files(DEPLOYED) == [], "run `raybus crds --out deploy/crds`"
    assert main(["--out", str(tmp_path)]) == 0
    generated = sorted(p.name for p in tmp_path.iterdir())
    assert generated == sorted([*CRDS, "kustomization.yaml"])
    for name in generated:
        assert (tmp_path / name).read_text() == (DEPLOYED / name).read_text()
    assert sorted(p.name for p in DEPLOYED.iterdir()) == generated
    assert main(["--out", str(tmp_path), "--check"]) == 0
    (tmp_path / "ray.io_rayjobs.yaml").write_text("stale")
    assert main(["--out", str(tmp_path), "--check"]) == 1


def test_the_charts_crds_are_the_deployed_ones(tmp_path: Path) -> None:
    """Helm installs ``crds/`` as it is: the same files as ``deploy/crds``, and nothing else."""
    assert stale_files(CHART_CRDS, chart=True) == [], "run `raybus crds --chart --out deploy/helm/raybus/crds`"
    assert sorted(p.name for p in CHART_CRDS.iterdir()) == sorted(CRDS)
    for name in CRDS:
        assert (CHART_CRDS / name).read_text() == (DEPLOYED / name).read_text()
    assert main(["--chart", "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(CRDS)
    assert main(["--chart", "--out", str(tmp_path), "--check"]) == 0
    (tmp_path / "ray.io_rayjobs.yaml").write_text("stale")
    assert main(["--chart", "--out", str(tmp_path), "--check"]) == 1


@pytest.mark.parametrize("name", sorted(CRDS))
def test_crd_is_a_valid_kubernetes_object(name: str) -> None:
    kubernetes_validate.validate(yaml.safe_load(render(CRDS[name])), K8S_VERSION, strict=True)


@pytest.mark.parametrize("name", sorted(CRDS))
def test_crd_shape(name: str) -> None:
    spec = CRDS[name]["spec"]
    assert spec["group"] == "ray.io"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["categories"] == ["all"]
    assert "shortNames" not in spec["names"]
    versions = {v["name"]: v for v in spec["versions"]}
    expected = {"v1"} if spec["names"]["kind"] == "RayCronJob" else {"v1", "v1alpha1"}
    assert set(versions) == expected
    assert [v["name"] for v in spec["versions"] if v["storage"]] == ["v1"]
    for version in versions.values():
        assert version["served"] is True
        assert version["subresources"] == {"status": {}}
        assert version["schema"] == versions["v1"]["schema"]


@pytest.mark.parametrize("name", sorted(CRDS))
def test_schema_is_structural(name: str) -> None:
    for path, node in _nodes(CRDS[name]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]):
        if node.get("x-kubernetes-int-or-string"):
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
            assert "type" not in node, path
            continue
        assert not {"anyOf", "oneOf", "allOf", "not"} & set(node), path
        assert node.get("type") in {"object", "array", "string", "integer", "number", "boolean"}, path
        if node.get("x-kubernetes-preserve-unknown-fields"):
            assert node["type"] == "object", path
            assert "properties" not in node, path
        if node["type"] == "array":
            assert "items" in node, path
        assert not ("properties" in node and "additionalProperties" in node), path
        if node.get("x-kubernetes-list-type") == "map":
            item = node["items"]
            for key in node["x-kubernetes-list-map-keys"]:
                assert key in item.get("required", []) or "default" in item["properties"][key], (path, key)
        for required in node.get("required", []):
            assert required in node["properties"], (path, required)


def test_printer_columns_follow_spec() -> None:
    def columns(kind: str) -> list[tuple[str, str, int]]:
        return [
            (c["name"], c["jsonPath"], c.get("priority", 0))
            for c in BY_KIND[kind]["spec"]["versions"][0]["additionalPrinterColumns"]
        ]

    age = ("age", ".metadata.creationTimestamp", 0)
    assert columns("RayCluster") == [
        ("desired workers", ".status.desiredWorkerReplicas", 0),
        ("available workers", ".status.availableWorkerReplicas", 0),
        ("cpus", ".status.desiredCPU", 0),
        ("memory", ".status.desiredMemory", 0),
        ("gpus", ".status.desiredGPU", 0),
        ("tpus", ".status.desiredTPU", 1),
        ("status", ".status.state", 0),
        age,
        ("head pod IP", ".status.head.podIP", 1),
        ("head service IP", ".status.head.serviceIP", 1),
    ]
    assert columns("RayJob") == [
        ("job status", ".status.jobStatus", 0),
        ("deployment status", ".status.jobDeploymentStatus", 0),
        ("ray cluster name", ".status.rayClusterName", 0),
        ("start time", ".status.startTime", 0),
        ("end time", ".status.endTime", 0),
        age,
    ]
    assert columns("RayService") == [
        ("service status", ".status.serviceStatus", 0),
        ("num serve endpoints", ".status.numServeEndpoints", 0),
    ]
    assert columns("RayCronJob") == [
        ("schedule", ".spec.schedule", 0),
        ("timezone", ".spec.timeZone", 0),
        ("last schedule", ".status.lastScheduleTime", 0),
        age,
        ("suspend", ".spec.suspend", 0),
    ]
    for crd in CRDS.values():
        for version in crd["spec"]["versions"]:
            for column in version["additionalPrinterColumns"]:
                if column["name"] == "age":
                    assert column["type"] == "date"


_COMPARED = (
    "type",
    "default",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "format",
    "nullable",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
)


def _differences(ours: dict[str, Any], theirs: dict[str, Any], path: str) -> Iterator[str]:
    if ours.get("x-kubernetes-preserve-unknown-fields"):
        # An embedded Kubernetes type: KubeRay spells out its full schema, we keep it whole.
        if theirs.get("type") != "object":
            yield f"{path} type"
        return
    for key in _COMPARED:
        if ours.get(key) != theirs.get(key):
            yield f"{path} {key}"
    if set(ours.get("enum", [])) != set(theirs.get("enum", [])):
        yield f"{path} enum"
    if set(ours.get("required", [])) != set(theirs.get("required", [])):
        yield f"{path} required"
    rules = [(r["rule"], r["message"]) for r in ours.get("x-kubernetes-validations", [])]
    if rules != [(r["rule"], r["message"]) for r in theirs.get("x-kubernetes-validations", [])]:
        yield f"{path} x-kubernetes-validations"
    ours_props, theirs_props = ours.get("properties", {}), theirs.get("properties", {})
    for name in sorted(set(ours_props) | set(theirs_props)):
        if name not in ours_props or name not in theirs_props:
            yield f"{path}.{name}"
        else:
            yield from _differences(ours_props[name], theirs_props[name], f"{path}.{name}")
    if "items" in ours or "items" in theirs:
        yield from _differences(ours.get("items", {}), theirs.get("items", {}), f"{path}[]")
    ours_map, theirs_map = ours.get("additionalProperties"), theirs.get("additionalProperties")
    if isinstance(ours_map, dict) or isinstance(theirs_map, dict):
        yield from _differences(ours_map or {}, theirs_map or {}, f"{path}{{}}")


@pytest.mark.parametrize("name", sorted(CRDS))
def test_schema_matches_kuberays(name: str) -> None:
    """Same fields, types, enums, defaults, required lists and CEL rules as KubeRay's v1 CRD."""
    # KubeRay's CRDs are large (full pod templates): the C loader keeps this test fast.
    theirs = yaml.load((KUBERAY / "crds" / name).read_text(), Loader=yaml.CSafeLoader)
    plural = name.removeprefix("ray.io_").removesuffix(".yaml")
    versions = {v["name"]: v for v in theirs["spec"]["versions"]}
    assert set(versions) == {v["name"] for v in CRDS[name]["spec"]["versions"]}
    found = set(
        _differences(
            CRDS[name]["spec"]["versions"][0]["schema"]["openAPIV3Schema"],
            versions["v1"]["schema"]["openAPIV3Schema"],
            plural,
        )
    )
    unexpected = {d for d in found if not any(d.endswith(i) for i in INTENDED_DIFFERENCES)}
    assert unexpected == set()


def _strip_extensions(schema: Any) -> Any:
    """OpenAPI-only keys out, unknown fields rejected wherever the schema lists the properties."""
    if isinstance(schema, list):
        return [_strip_extensions(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strip_extensions(v) for k, v in schema.items() if not k.startswith("x-kubernetes-") and k != "nullable"}
    if "properties" in schema and isinstance(schema["properties"], dict):
        out["properties"] = {k: _strip_extensions(v) for k, v in schema["properties"].items()}
        out["additionalProperties"] = False
    return out


def _apply_defaults(value: Any, schema: dict[str, Any]) -> Any:
    """What the API server does before validation: fill in ``default`` for absent properties."""
    if isinstance(value, dict) and "properties" in schema:
        out = dict(value)
        for name, prop in schema["properties"].items():
            if name not in out and "default" in prop:
                out[name] = copy.deepcopy(prop["default"])
            if name in out:
                out[name] = _apply_defaults(out[name], prop)
        return out
    if isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
        return {k: _apply_defaults(v, schema["additionalProperties"]) for k, v in value.items()}
    if isinstance(value, list) and "items" in schema:
        return [_apply_defaults(v, schema["items"]) for v in value]
    return value


@pytest.mark.parametrize("obj", _ray_objects())
def test_sample_is_accepted_by_generated_schema(obj: dict[str, Any]) -> None:
    schema = _schema(obj["kind"], obj["apiVersion"].split("/")[1])
    defaulted = _apply_defaults(obj, schema)
    jsonschema.Draft4Validator(_strip_extensions(schema)).validate(defaulted)


def test_defaults_are_applied_like_kuberays() -> None:
    cluster = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "spec": {"headGroupSpec": {"template": {}}, "workerGroupSpecs": [{"groupName": "g", "template": {}}]},
    }
    group = _apply_defaults(cluster, _schema("RayCluster"))["spec"]["workerGroupSpecs"][0]
    assert group == {
        "groupName": "g",
        "template": {},
        "replicas": 0,
        "minReplicas": 0,
        "maxReplicas": 2147483647,
        "priority": 0,
        "numOfHosts": 1,
    }


def test_invalid_objects_are_rejected() -> None:
    validator = jsonschema.Draft4Validator(_strip_extensions(_schema("RayJob")))
    bad_rule = {"spec": {"deletionStrategy": {"deletionRules": [{"policy": "DeleteAll", "condition": {}}]}}}
    assert not validator.is_valid(_apply_defaults(bad_rule, _schema("RayJob")))
    assert not validator.is_valid({"spec": {"preRunningDeadlineSeconds": 0}})
    assert not validator.is_valid({"spec": {"entrypoint": "x", "typo": 1}})
    cron = jsonschema.Draft4Validator(_strip_extensions(_schema("RayCronJob")))
    assert not cron.is_valid({"spec": {"schedule": "* * * * *", "jobTemplate": {}, "timeZone": ""}})
    assert not cron.is_valid({"spec": {"schedule": "* * * * *", "jobTemplate": {}, "concurrencyPolicy": "Never"}})
    assert cron.is_valid({"spec": {"schedule": "* * * * *", "jobTemplate": {}, "concurrencyPolicy": "Forbid"}})


def test_cel_rules_are_kuberays() -> None:
    """The CEL rules docs/behaviour.md#1 lists sit where KubeRay has them (compared in full above); spot-check paths."""
    job = _schema("RayJob")["properties"]["spec"]["properties"]
    strategy_rules = [r["rule"] for r in job["deletionStrategy"]["x-kubernetes-validations"]]
    assert "!((has(self.onSuccess) || has(self.onFailure)) && has(self.deletionRules))" in strategy_rules
    condition = job["deletionStrategy"]["properties"]["deletionRules"]["items"]["properties"]["condition"]
    assert len(condition["x-kubernetes-validations"]) == 2
    for kind, spec_field in (("RayCluster", None), ("RayJob", "rayClusterSpec"), ("RayService", "rayClusterConfig")):
        spec = _schema(kind)["properties"]["spec"]
        for target in [spec] + ([spec["properties"][spec_field]] if spec_field else []):
            managed_by = target["properties"]["managedBy"]["x-kubernetes-validations"]
            assert managed_by[0]["rule"] == "self == oldSelf"
