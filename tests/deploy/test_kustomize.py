"""``deploy/``: every kustomize tree renders, every object is valid for Kubernetes 1.33, and the
manifests keep their promises (replicas, HA, probes, restricted pods, Secrets, NetworkPolicies).
"""

from __future__ import annotations

from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from schema.crd import generate_crds
from services.edge.rbac_manifests import component_name
from services.runtime.settings import ROLE_COMMANDS, WATCHER_ROLES, WatcherRole
from tests.deploy.render import TREES, container, find, render

K8S_VERSION = "1.33.0"
SERVICES = {
    **{component_name(role): (ROLE_COMMANDS[role], "watcher") for role in WATCHER_ROLES},
    "raybus-reconciler": ("reconciler", "reconciler"),
    "raybus-status": ("status", "status"),
}
"""Deployment → the command it runs (its container's name too) and its NATS user: each edge role has a
command of its own; the three share the user ``watcher``."""
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "Job"}


def _workloads(tree: str) -> list[dict[str, Any]]:
    return [o for o in render(tree) if o["kind"] in WORKLOAD_KINDS]


@pytest.mark.parametrize("tree", TREES)
def test_every_object_is_valid(tree: str) -> None:
    ray_schemas = {
        crd["spec"]["names"]["kind"]: crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for crd in generate_crds().values()
    }
    for obj in render(tree):
        if obj["apiVersion"].startswith("ray.io/"):
            # Custom resources: kubernetes-validate has no schema for them; ours does.
            jsonschema.Draft4Validator(ray_schemas[obj["kind"]]).validate(obj)
        else:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


@pytest.mark.parametrize("tree", TREES)
def test_namespaced_objects_live_in_raybus_system(tree: str) -> None:
    cluster_scoped = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}
    for obj in render(tree):
        if obj["kind"] not in cluster_scoped:
            assert obj["metadata"]["namespace"] == "raybus-system", obj["metadata"]["name"]
    crds = sorted(o["metadata"]["name"] for o in render(tree) if o["kind"] == "CustomResourceDefinition")
    assert crds == ["rayclusters.ray.io", "raycronjobs.ray.io", "rayjobs.ray.io", "rayservices.ray.io"]


@pytest.mark.parametrize("tree", TREES)
def test_no_secret_is_rendered(tree: str) -> None:
    """Secrets are created by the platform team (deploy/README.md); git holds none."""
    assert [o["metadata"]["name"] for o in render(tree) if o["kind"] == "Secret"] == []


@pytest.mark.parametrize("tree", TREES)
def test_pods_are_restricted(tree: str) -> None:
    for workload in _workloads(tree):
        pod = workload["spec"]["template"]["spec"]
        name = workload["metadata"]["name"]
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["runAsUser"] == 65532, name
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for item in pod["containers"] + pod.get("initContainers", []):
            context = item["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, name
            assert context["readOnlyRootFilesystem"] is True, name
            assert context["capabilities"] == {"drop": ["ALL"]}, name
            assert {"cpu", "memory"} <= set(item["resources"]["requests"]), name
            assert {"cpu", "memory"} <= set(item["resources"]["limits"]), name


@pytest.mark.parametrize("tree", TREES)
@pytest.mark.parametrize(("name", "service", "user"), [(name, *run) for name, run in SERVICES.items()])
def test_service_container(tree: str, name: str, service: str, user: str) -> None:
    deployment = find(tree, "Deployment", name)
    item = container(deployment, service)
    assert item["image"] == "ghcr.io/raybus/raybus:0.1.0"
    assert item["args"][0] == service
    assert "--nats-url=tls://raybus-nats:4222" in item["args"]
    assert "--no-ensure-topology" in item["args"]
    ports = {p["name"]: p["containerPort"] for p in item["ports"]}
    assert ports["health"] == 8081
    assert ports["metrics"] == 9090
    assert item["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert item["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    env = {e["name"]: e for e in item["env"]}
    assert env["RAYBUS_NATS_USER"]["value"] == user
    assert env["RAYBUS_NATS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "raybus-nats-users", "key": user}
    if service == "status":
        assert env["RAYBUS_DB_URL"]["valueFrom"]["secretKeyRef"] == {"name": "raybus-database", "key": "url"}
    else:
        assert "RAYBUS_DB_URL" not in env


def test_base_is_highly_available() -> None:
    for name in SERVICES:
        assert find("base", "Deployment", name)["spec"]["replicas"] == 2
        assert find("base", "PodDisruptionBudget", name)["spec"]["minAvailable"] == 1
    hpa = find("base", "HorizontalPodAutoscaler", "raybus-reconciler")["spec"]
    assert hpa["scaleTargetRef"]["name"] == "raybus-reconciler"
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (2, 10)
    assert hpa["metrics"][0]["resource"]["name"] == "cpu"
    nats = find("base", "StatefulSet", "raybus-nats")["spec"]
    assert nats["replicas"] == 3
    assert nats["serviceName"] == "raybus-nats-headless"
    assert nats["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    assert find("base", "PodDisruptionBudget", "raybus-nats")["spec"]["maxUnavailable"] == 1
    assert find("base", "Service", "raybus-nats-headless")["spec"]["clusterIP"] == "None"
    assert "--stream-replicas=3" in container(find("base", "Job", "raybus-nats-topology"), "topology")["args"]


def test_nats_image_has_message_schedules() -> None:
    image = container(find("base", "StatefulSet", "raybus-nats"), "nats")["image"]
    name, _, tag = image.partition(":")
    assert name == "nats"
    major, minor = (int(part) for part in tag.split("-")[0].split(".")[:2])
    assert (major, minor) >= (2, 12)


@pytest.mark.parametrize("tree", TREES)
def test_nats_go_memory_limit_is_nine_tenths_of_its_container_limit(tree: str) -> None:
    nats = container(find(tree, "StatefulSet", "raybus-nats"), "nats")
    env = {item["name"]: item.get("value") for item in nats["env"]}
    limit = nats["resources"]["limits"]["memory"]
    assert limit.endswith("Gi") and env["GOMEMLIMIT"].endswith("MiB")
    assert int(env["GOMEMLIMIT"].removesuffix("MiB")) == int(int(limit.removesuffix("Gi")) * 1024 * 0.9)


def test_nats_config_is_mounted_and_cluster_routes_match_replicas() -> None:
    statefulset = find("base", "StatefulSet", "raybus-nats")
    config = find("base", "ConfigMap", "raybus-nats-config")
    volumes = {v["name"]: v for v in statefulset["spec"]["template"]["spec"]["volumes"]}
    assert volumes["config"]["configMap"]["name"] == config["metadata"]["name"]
    routes = [line for line in config["data"]["nats.conf"].splitlines() if "raybus-nats-headless:6222" in line]
    assert [r.strip() for r in routes] == [
        f"nats://raybus-nats-{i}.raybus-nats-headless:6222" for i in range(statefulset["spec"]["replicas"])
    ]


def test_dev_overlay_is_small() -> None:
    for name in SERVICES:
        assert find("overlays/dev", "Deployment", name)["spec"]["replicas"] == 1
    assert find("overlays/dev", "StatefulSet", "raybus-nats")["spec"]["replicas"] == 1
    kinds = {o["kind"] for o in render("overlays/dev")}
    assert not kinds & {"HorizontalPodAutoscaler", "PodDisruptionBudget"}
    assert "--stream-replicas=1" in container(find("overlays/dev", "Job", "raybus-nats-topology"), "topology")["args"]
    data = find("overlays/dev", "ConfigMap", "raybus-nats-config")["data"]
    assert set(data) == {"nats.conf", "auth.conf"}
    assert data["auth.conf"] == find("base", "ConfigMap", "raybus-nats-config")["data"]["auth.conf"]


def test_single_namespace_overlay_watches_its_namespace() -> None:
    watch = container(find("overlays/single-namespace", "Deployment", component_name("watch")), ROLE_COMMANDS["watch"])
    assert "--watch-namespace=$(POD_NAMESPACE)" in watch["args"]
    env = {e["name"]: e for e in watch["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


def _policy(tree: str, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = find(tree, "NetworkPolicy", name)["spec"]
    assert set(spec["policyTypes"]) == {"Ingress", "Egress"} or name == "allow-dns"
    return spec


def _egress_ports(spec: dict[str, Any]) -> set[int]:
    return {port["port"] for rule in spec.get("egress", []) for port in rule.get("ports", [])}


def _to_nats(rule: dict[str, Any]) -> bool:
    selectors = [peer.get("podSelector", {}).get("matchLabels", {}) for peer in rule.get("to", [])]
    return selectors == [{"app.kubernetes.io/name": "raybus", "app.kubernetes.io/component": "nats"}]


def _ingress_from(spec: dict[str, Any]) -> dict[int, str]:
    """Port → the namespace label its ingress rule requires, for the rules that admit by namespace label."""
    return {
        port["port"]: label
        for rule in spec["ingress"]
        for peer in rule.get("from", [])
        for label, value in peer.get("namespaceSelector", {}).get("matchLabels", {}).items()
        if value == "true"
        for port in rule["ports"]
    }


@pytest.mark.parametrize("tree", TREES)
def test_network_policies(tree: str) -> None:
    deny = _policy(tree, "default-deny")
    assert deny["podSelector"] == {}
    assert "ingress" not in deny
    assert "egress" not in deny
    dns = _policy(tree, "allow-dns")
    assert _egress_ports(dns) == {53}

    reconciler = _policy(tree, "raybus-reconciler")
    assert len(reconciler["egress"]) == 1
    assert _to_nats(reconciler["egress"][0])
    assert _egress_ports(reconciler) == {4222}

    status = _policy(tree, "raybus-status")
    assert _egress_ports(status) == {4222, 5432, 443, 6443}
    assert _ingress_from(status) == {8090: "raybus.io/status-access", 9090: "raybus.io/metrics-access"}

    # The watch side reaches NATS and the API server only; the applier and the prober also the Ray ports they call.
    ray_pods = [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"ray.io/is-ray-node": "yes"}}}]
    ray_ports: dict[WatcherRole, set[int]] = {"watch": set(), "apply": {8265}, "probe": {8265, 8000}}
    for role, ports in ray_ports.items():
        policy = _policy(tree, component_name(role))
        assert _egress_ports(policy) == {4222, 443, 6443} | ports, role
        to_ray = [{p["port"] for p in rule["ports"]} for rule in policy["egress"] if rule.get("to") == ray_pods]
        assert to_ray == ([ports] if ports else []), role

    nats = _policy(tree, "raybus-nats")
    client_rule = next(r for r in nats["ingress"] if r["ports"] == [{"protocol": "TCP", "port": 4222}])
    assert client_rule["from"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/part-of": "raybus"}}}]
    assert _egress_ports(nats) == {6222}
    assert _ingress_from(nats)[8222] == "raybus.io/metrics-access"

    # Every pod is selected by a policy of its own besides the default deny.
    selected = [p["spec"]["podSelector"].get("matchLabels") for p in render(tree) if p["kind"] == "NetworkPolicy"]
    for workload in _workloads(tree):
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert any(s and s.items() <= labels.items() for s in selected), workload["metadata"]["name"]
        assert labels["app.kubernetes.io/part-of"] == "raybus"
