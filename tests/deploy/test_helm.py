"""The Helm chart ``deploy/helm/raybus``: ``helm lint``; across a matrix of values every rendered object is
valid for Kubernetes 1.33 and each value does what it promises; values.schema.json and the templates
refuse bad values naming the field; and the defaults (and the single-namespace and development values)
render what the kustomize trees of ``deploy/`` do, up to the differences ``tests/deploy/normalise.py``
lists.
"""

from __future__ import annotations

import json
import shutil
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import msgspec
import pytest
import yaml

from schema.config import FeatureGates
from schema.crd import generate_crds
from services.edge.permissions import RULES_BY_ROLE
from services.runtime.settings import ROLE_COMMANDS
from tests.deploy.chart_values import DEV, MATRIX
from tests.deploy.normalise import differences, normalise
from tests.deploy.render import (
    CHART,
    DEPLOY,
    NAMESPACE,
    ROOT,
    ChartError,
    container,
    find_in,
    helm,
    render,
    render_chart,
)

K8S_VERSION = "1.33.0"
SERVICES = ("raybus-watch", "raybus-applier", "raybus-prober", "raybus-reconciler", "raybus-status")
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "Job"}
CLUSTER_SCOPED = {"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}
NOT_IN_KUBERNETES = {"ServiceMonitor", "Certificate"}
"""Kinds of other projects' CRDs (Prometheus Operator, cert-manager): checked by their fields below."""


def _render(case: str) -> tuple[dict[str, Any], ...]:
    return render_chart(MATRIX[case])


def _workloads(objects: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] in WORKLOAD_KINDS]


def _args(objects: tuple[dict[str, Any], ...], kind: str, name: str) -> list[str]:
    args: list[str] = find_in(objects, kind, name)["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def _env(objects: tuple[dict[str, Any], ...], name: str) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = find_in(objects, "Deployment", name)["spec"]["template"]["spec"]["containers"][0]["env"]
    return env


def _lint(values: dict[str, Any]) -> tuple[int, str]:
    result = helm("lint", str(CHART), "--strict", "--namespace", NAMESPACE, "--values", "-", stdin=json.dumps(values))
    return result.returncode, result.stdout + result.stderr


@pytest.mark.parametrize("case", MATRIX)
def test_lint(case: str) -> None:
    code, output = _lint(MATRIX[case])
    assert code == 0, output
    assert "0 chart(s) failed" in output


@pytest.mark.parametrize("case", MATRIX)
def test_every_object_is_valid(case: str) -> None:
    ray_schemas = {
        crd["spec"]["names"]["kind"]: crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for crd in generate_crds().values()
    }
    for obj in _render(case):
        if obj["apiVersion"].startswith("ray.io/"):
            jsonschema.Draft4Validator(ray_schemas[obj["kind"]]).validate(obj)
        elif obj["kind"] not in NOT_IN_KUBERNETES:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


@pytest.mark.parametrize("case", MATRIX)
def test_objects_live_in_the_release_namespace(case: str) -> None:
    role_namespaces = set(MATRIX[case].get("watchNamespace", [])) or {NAMESPACE}
    for obj in _render(case):
        if obj["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in obj["metadata"], obj["metadata"]["name"]
        elif obj["kind"] in {"Role", "RoleBinding"} and obj["metadata"]["name"] != "raybus-watch-lease":
            assert obj["metadata"]["namespace"] in role_namespaces, obj["metadata"]["name"]
        else:
            assert obj["metadata"]["namespace"] == NAMESPACE, (obj["kind"], obj["metadata"]["name"])
    crds = sorted(o["metadata"]["name"] for o in _render(case) if o["kind"] == "CustomResourceDefinition")
    assert crds == ["rayclusters.ray.io", "raycronjobs.ray.io", "rayjobs.ray.io", "rayservices.ray.io"]


@pytest.mark.parametrize("case", MATRIX)
def test_no_secret_or_namespace_is_rendered(case: str) -> None:
    """Secrets come from the platform team (docs/helm.md); the namespace is the release's, made before."""
    assert [o["metadata"]["name"] for o in _render(case) if o["kind"] in {"Secret", "Namespace"}] == []


@pytest.mark.parametrize("case", MATRIX)
def test_pods_are_restricted_and_selected_by_their_own_network_policy(case: str) -> None:
    objects = _render(case)
    selectors = [o["spec"]["podSelector"].get("matchLabels") for o in objects if o["kind"] == "NetworkPolicy"]
    for workload in _workloads(objects):
        name = workload["metadata"]["name"]
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for item in pod["containers"]:
            assert item["securityContext"]["allowPrivilegeEscalation"] is False, name
            assert item["securityContext"]["readOnlyRootFilesystem"] is True, name
            assert item["securityContext"]["capabilities"] == {"drop": ["ALL"]}, name
            assert {"cpu", "memory"} <= set(item["resources"]["limits"]), name
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert any(s and s.items() <= labels.items() for s in selectors), name
    assert {"default-deny", "allow-dns"} <= {o["metadata"]["name"] for o in objects if o["kind"] == "NetworkPolicy"}


@pytest.mark.parametrize("case", MATRIX)
def test_selectors_and_pod_labels_carry_no_chart_version(case: str) -> None:
    """Selectors cannot change after install, and a pod label that names the chart would roll every pod
    on every chart upgrade: both hold the component's labels only."""
    selector_labels = {"app.kubernetes.io/name", "app.kubernetes.io/component"}
    for obj in _render(case):
        spec = obj.get("spec", {})
        if obj["kind"] == "Service":
            assert set(spec["selector"]) <= selector_labels, obj["metadata"]["name"]
        if obj["kind"] in {"Deployment", "StatefulSet", "PodDisruptionBudget", "ServiceMonitor", "NetworkPolicy"}:
            match = spec.get("selector", spec.get("podSelector")).get("matchLabels", {})
            assert set(match) <= selector_labels, obj["metadata"]["name"]
        if obj["kind"] in WORKLOAD_KINDS:
            labels = spec["template"]["metadata"]["labels"]
            assert set(labels) == {"app.kubernetes.io/name", "app.kubernetes.io/component", "app.kubernetes.io/part-of"}


# What each value promises.


def _compare(values: dict[str, Any], tree: str) -> list[str]:
    return differences(normalise(render(tree)), normalise(render_chart(values)))


def test_defaults_render_the_kustomize_base() -> None:
    assert _compare({}, "base") == []


def test_single_namespace_install_renders_the_single_namespace_overlay() -> None:
    assert _compare(MATRIX["single-namespace"], "overlays/single-namespace") == []


def test_development_values_render_the_dev_overlay() -> None:
    assert _compare(DEV, "overlays/dev") == []


def test_the_comparison_sees_a_difference() -> None:
    """A change of one value shows as that object's path, so the equalities above are not vacuous."""
    found = _compare({"applier": {"replicas": 3}}, "base")
    assert found == ["differs: ('Deployment', 'raybus-system', 'raybus-applier'): .spec.replicas: 2 != 3"]


def _rules(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]
    }


def _namespaced(objects: tuple[dict[str, Any], ...], kind: str, name: str, namespace: str) -> dict[str, Any]:
    [found] = [
        o
        for o in objects
        if (o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")) == (kind, name, namespace)
    ]
    return found


def test_watch_namespaces_get_each_roles_rules_as_roles_there() -> None:
    objects = _render("watch-namespaces")
    cluster_roles = sorted(o["metadata"]["name"] for o in objects if o["kind"] == "ClusterRole")
    assert cluster_roles == ["raybus-status"]
    for role, component in ROLE_COMMANDS.items():
        name = f"raybus-{component}"
        for namespace in ("team-a", "team-b"):
            granted = _namespaced(objects, "Role", name, namespace)
            assert _rules(granted) == set(RULES_BY_ROLE[role])
            binding = _namespaced(objects, "RoleBinding", name, namespace)
            assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}
            assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]
    lease = find_in(objects, "Role", "raybus-watch-lease")
    assert lease["metadata"]["namespace"] == NAMESPACE
    assert "--watch-namespace=team-a,team-b" in _args(objects, "Deployment", "raybus-watch")
    for name in ("raybus-applier", "raybus-prober"):
        assert not [a for a in _args(objects, "Deployment", name) if a.startswith("--watch-namespace")]


@pytest.mark.parametrize("case", ["external-nats", "external-nats-plain"])
def test_external_nats_replaces_the_bundled_servers(case: str) -> None:
    objects = _render(case)
    nats = MATRIX[case]["nats"]
    assert not [
        o for o in objects if o.get("metadata", {}).get("labels", {}).get("app.kubernetes.io/component") == "nats"
    ]
    assert not [o for o in objects if o["kind"] in {"StatefulSet", "ConfigMap", "PersistentVolumeClaim"}]
    ports = {4443} if case == "external-nats" else {4222}
    for workload in _workloads(objects):
        item = workload["spec"]["template"]["spec"]["containers"][0]
        assert f"--nats-url={nats['external']['url']}" in item["args"]
        env = {e["name"]: e for e in item["env"]}
        assert (
            env["RAYBUS_NATS_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == nats["auth"]["secretName"]
            if "auth" in nats
            else True
        )
        volumes = {v["name"] for v in workload["spec"]["template"]["spec"]["volumes"]}
        assert ("nats-ca" in volumes) is nats.get("tls", {}).get("enabled", True)
        assert ("RAYBUS_NATS_TLS_CA" in env) is nats.get("tls", {}).get("enabled", True)
    assert f"--stream-replicas={nats['streamReplicas']}" in _args(objects, "Job", "raybus-nats-topology")
    for policy in (o for o in objects if o["kind"] == "NetworkPolicy" and o["metadata"]["name"].startswith("raybus-")):
        egress = policy["spec"].get("egress", [])
        nats_pods = {"app.kubernetes.io/name": "raybus", "app.kubernetes.io/component": "nats"}
        to = [peer.get("podSelector", {}).get("matchLabels") for rule in egress for peer in rule.get("to", [])]
        assert nats_pods not in to, policy["metadata"]["name"]
        assert any({p["port"] for p in rule["ports"]} == ports and "to" not in rule for rule in egress)


def test_replicas_and_partitions() -> None:
    objects = _render("replicas")
    values = MATRIX["replicas"]
    for component in ("watch", "applier", "prober", "reconciler", "status"):
        name = f"raybus-{component}"
        replicas = values[component]["replicas"]
        assert find_in(objects, "Deployment", name)["spec"]["replicas"] == replicas
        pdbs = [o for o in objects if o["kind"] == "PodDisruptionBudget" and o["metadata"]["name"] == name]
        assert len(pdbs) == (1 if replicas > 1 else 0), name
        assert "--partitions=32" in _args(objects, "Deployment", name)
    assert not [o for o in objects if o["kind"] == "HorizontalPodAutoscaler"]
    assert "--partitions=32" in _args(objects, "Job", "raybus-nats-topology")
    assert "--stream-replicas=3" in _args(objects, "Job", "raybus-nats-topology")
    assert find_in(objects, "StatefulSet", "raybus-nats")["spec"]["replicas"] == 5
    conf = find_in(objects, "ConfigMap", "raybus-nats-config")["data"]["nats.conf"]
    routes = [line.strip() for line in conf.splitlines() if "raybus-nats-headless:6222" in line]
    assert routes == [f"nats://raybus-nats-{i}.raybus-nats-headless:6222" for i in range(5)]


def test_one_nats_server_has_no_cluster_and_one_stream_replica() -> None:
    objects = _render("dev")
    assert "cluster {" not in find_in(objects, "ConfigMap", "raybus-nats-config")["data"]["nats.conf"]
    assert "--stream-replicas=1" in _args(objects, "Job", "raybus-nats-topology")
    assert not [o for o in objects if o["kind"] in {"PodDisruptionBudget", "HorizontalPodAutoscaler"}]


def test_a_change_of_the_nats_config_rolls_the_servers() -> None:
    before = find_in(render_chart({}), "StatefulSet", "raybus-nats")["spec"]["template"]["metadata"]["annotations"]
    after = find_in(render_chart({"nats": {"jetstream": {"maxMemoryStore": "512M"}}}), "StatefulSet", "raybus-nats")
    assert (
        after["spec"]["template"]["metadata"]["annotations"]["checksum/nats-config"] != before["checksum/nats-config"]
    )


def test_a_new_chart_version_alone_rolls_no_pod(tmp_path: Path) -> None:
    """Helm's chart label is on the objects only: pod templates, selectors and the Job's name stay."""
    copy = shutil.copytree(DEPLOY, tmp_path / "deploy", symlinks=True) / "helm" / "raybus"
    chart = yaml.safe_load((copy / "Chart.yaml").read_text())
    (copy / "Chart.yaml").write_text(yaml.safe_dump({**chart, "version": "99.0.0"}))
    before, after = render_chart({}), render_chart({}, chart=copy)
    assert {o["metadata"]["labels"]["helm.sh/chart"] for o in after if o["kind"] != "CustomResourceDefinition"} == {
        "raybus-99.0.0"
    }
    templates = {
        (o["kind"], o["metadata"]["name"]): o["spec"]["template"] for o in before if o["kind"] in WORKLOAD_KINDS
    }
    assert templates == {
        (o["kind"], o["metadata"]["name"]): o["spec"]["template"] for o in after if o["kind"] in WORKLOAD_KINDS
    }


def test_the_packaged_chart_is_the_chart(tmp_path: Path) -> None:
    """``helm package`` keeps what the links point at (``files/nats-auth.conf``) and leaves UPGRADE_FROM out."""
    packaged = helm("package", str(CHART), "--destination", str(tmp_path))
    assert packaged.returncode == 0, packaged.stderr
    [archive] = tmp_path.glob("raybus-*.tgz")
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    assert "raybus/files/nats-auth.conf" in names
    assert "raybus/UPGRADE_FROM" not in names
    assert render_chart({}, chart=archive) == render_chart({})


def test_the_chart_runs_this_version_of_raybus() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert chart["appVersion"] == project["version"]


def test_a_change_of_what_the_topology_job_runs_renames_it() -> None:
    """A Job's pod template is immutable: a new one (a new name) runs the topology again after an upgrade."""
    names = {
        find_in(render_chart(values), "Job", "raybus-nats-topology")["metadata"]["name"]
        for values in ({}, {"image": {"tag": "0.2.0"}}, {"partitions": 32}, {"nats": {"replicas": 1}})
    }
    assert len(names) == 4
    same = find_in(render_chart({"watch": {"replicas": 5}}), "Job", "raybus-nats-topology")["metadata"]["name"]
    assert same in names


def test_service_monitor_scrapes_every_services_metrics() -> None:
    objects = _render("service-monitor")
    monitor = find_in(objects, "ServiceMonitor", "raybus")
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    match = monitor["spec"]["selector"]
    [expression] = match["matchExpressions"]
    selected = {
        o["metadata"]["name"]
        for o in objects
        if o["kind"] == "Service"
        and match["matchLabels"].items() <= o["metadata"]["labels"].items()
        and o["metadata"]["labels"].get(expression["key"]) in expression["values"]
    }
    with_metrics = {
        o["metadata"]["name"]
        for o in objects
        if o["kind"] == "Service" and "metrics" in {p["name"] for p in o["spec"]["ports"]}
    }
    assert selected == with_metrics == {f"{name}-metrics" for name in SERVICES[:-1]} | {"raybus-status"}
    assert not [o for o in render_chart({}) if o["kind"] == "ServiceMonitor"]


def test_cert_manager_writes_the_secret_the_servers_read() -> None:
    objects = _render("cert-manager")
    certificate = find_in(objects, "Certificate", "raybus-nats")["spec"]
    assert certificate["secretName"] == "raybus-nats-tls"
    assert {"raybus-nats", f"raybus-nats.{NAMESPACE}.svc"} <= set(certificate["dnsNames"])
    assert certificate["issuerRef"] == {"name": "raybus-ca", "kind": "Issuer", "group": "cert-manager.io"}
    volumes = {
        v["name"]: v for v in find_in(objects, "StatefulSet", "raybus-nats")["spec"]["template"]["spec"]["volumes"]
    }
    assert volumes["tls"]["secret"]["secretName"] == certificate["secretName"]
    assert not [o for o in render_chart({}) if o["kind"] == "Certificate"]


def test_tls_off_connects_in_plain_text() -> None:
    objects = _render("tls-off")
    assert "tls {" not in find_in(objects, "ConfigMap", "raybus-nats-config")["data"]["nats.conf"]
    for workload in _workloads(objects):
        pod = workload["spec"]["template"]["spec"]
        assert not [v for v in pod["volumes"] if v["name"] in {"nats-ca", "tls"}], workload["metadata"]["name"]
        item = pod["containers"][0]
        if workload["kind"] != "StatefulSet":
            assert "--nats-url=nats://raybus-nats:4222" in item["args"]
            assert "RAYBUS_NATS_TLS_CA" not in {e["name"] for e in item["env"]}


def test_operator_values_reach_every_pod() -> None:
    objects = _render("operator")
    values = MATRIX["operator"]
    for workload in _workloads(objects):
        name = workload["metadata"]["name"]
        pod = workload["spec"]["template"]["spec"]
        assert pod["imagePullSecrets"] == [{"name": "registry-login"}], name
        assert pod["tolerations"] == values["tolerations"], name
        expected = {"pool": "db-access"} if name == "raybus-status" else {"pool": "system"}
        assert pod["nodeSelector"] == expected, name
        if workload["kind"] != "StatefulSet":
            item = pod["containers"][0]
            assert item["image"] == "registry.example/raybus:0.2.0", name
            assert item["imagePullPolicy"] == "Always", name
            assert "--log-level=DEBUG" in item["args"], name
    applier = _args(objects, "Deployment", "raybus-applier")
    assert applier[-2:] == ["--qps=0", "--burst=400"]
    assert not [a for a in _args(objects, "Deployment", "raybus-watch") if a.startswith(("--qps", "--burst"))]
    assert {"name": "RAYBUS_RESULT_BATCHES", "value": "true"} in _env(objects, "raybus-applier")
    assert all(e["name"] != "RAYBUS_RESULT_BATCHES" for e in _env(_render("defaults"), "raybus-applier"))
    gates = [a for a in _args(objects, "Deployment", "raybus-reconciler") if a.startswith("--feature-gates")]
    assert gates == ["--feature-gates=RayCronJob=true,RayClusterStatusConditions=false"]
    for name in SERVICES[:-2]:
        assert not [a for a in _args(objects, "Deployment", name) if a.startswith("--feature-gates")]


def test_nats_go_memory_limit_follows_its_memory_limit() -> None:
    for limit, expected in (("2Gi", "1843MiB"), ("4Gi", "3686MiB"), ("1500Mi", "1350MiB")):
        nats = container(
            find_in(render_chart({"nats": {"resources": {"limits": {"memory": limit}}}}), "StatefulSet", "raybus-nats"),
            "nats",
        )
        assert {e["name"]: e.get("value") for e in nats["env"]}["GOMEMLIMIT"] == expected


def test_feature_gate_names_are_raybus_own() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    names = schema["properties"]["featureGates"]["items"]["properties"]["name"]["enum"]
    assert sorted(names) == sorted(f.encode_name for f in msgspec.structs.fields(FeatureGates))


def test_values_yaml_is_what_the_schema_accepts() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator(schema).validate(yaml.safe_load((CHART / "values.yaml").read_text()))


# Values refused, and the words that tell the user which.

REFUSED = {
    "pull policy": ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
    "no replicas": ({"watch": {"replicas": 0}}, "/watch/replicas"),
    "replicas as text": ({"nats": {"replicas": "three"}}, "/nats/replicas"),
    "unknown gate": ({"featureGates": [{"name": "RayTeleport", "enabled": True}]}, "/featureGates/0/name"),
    "log level": ({"logLevel": "LOUD"}, "/logLevel"),
    "misspelt value": ({"replica": 2}, "replica"),
    "nats memory in G": ({"nats": {"resources": {"limits": {"memory": "2G"}}}}, "/nats/resources/limits/memory"),
    "zero partitions": ({"partitions": 0}, "/partitions"),
    "http url": (
        {"nats": {"enabled": False, "external": {"url": "http://nats.example"}, "streamReplicas": 1}},
        "/nats/external/url",
    ),
    "namespace name": ({"watchNamespace": ["Team_A"]}, "/watchNamespace/0"),
    "external without url": ({"nats": {"enabled": False, "streamReplicas": 1}}, "/nats/external/url"),
    "external without stream replicas": (
        {"nats": {"enabled": False, "external": {"url": "tls://n:4222"}}},
        "streamReplicas",
    ),
    "both namespace options": ({"singleNamespaceInstall": True, "watchNamespace": ["a"]}, "/watchNamespace"),
    "issuer missing": ({"nats": {"tls": {"certManager": {"enabled": True}}}}, "/nats/tls/certManager/issuerRef/name"),
}
"""Refused by values.schema.json: by ``helm install``, ``upgrade``, ``template`` and ``lint`` alike."""


@pytest.mark.parametrize("case", REFUSED)
def test_bad_values_are_refused_naming_the_field(case: str) -> None:
    values, field = REFUSED[case]
    assert isinstance(values, dict)
    with pytest.raises(ChartError) as refused:
        render_chart(values)
    assert "values don't meet the specifications of the schema" in str(refused.value)
    assert field in str(refused.value)
    code, output = _lint(values)
    assert code != 0
    assert field in output


TEMPLATE_REFUSED = {
    "autoscaler bounds": (
        {"reconciler": {"autoscaling": {"minReplicas": 5, "maxReplicas": 2}}},
        "reconciler.autoscaling.minReplicas must not be above reconciler.autoscaling.maxReplicas",
    ),
    "external without url": (
        {"nats": {"enabled": False, "streamReplicas": 1}},
        "nats.external.url is required when nats.enabled is false",
    ),
    "external without stream replicas": (
        {"nats": {"enabled": False, "external": {"url": "tls://n:4222"}}},
        "nats.streamReplicas is required with an external NATS",
    ),
    "both namespace options": (
        {"singleNamespaceInstall": True, "watchNamespace": ["a"]},
        "set singleNamespaceInstall (watch the release's namespace) or watchNamespace",
    ),
    "issuer missing": (
        {"nats": {"tls": {"certManager": {"enabled": True}}}},
        "nats.tls.certManager.issuerRef.name names the cert-manager Issuer or ClusterIssuer",
    ),
}
"""Refused by the templates' own checks: what a schema cannot say, and the schema's cross-field rules again
for those who install with ``--skip-schema-validation``."""


@pytest.mark.parametrize("case", TEMPLATE_REFUSED)
def test_the_templates_refuse_what_would_not_work(case: str) -> None:
    values, message = TEMPLATE_REFUSED[case]
    args = ("template", "raybus", str(CHART), "--namespace", NAMESPACE, "--skip-schema-validation", "--values", "-")
    result = helm(*args, stdin=json.dumps(values))
    assert result.returncode != 0
    assert message in result.stderr
