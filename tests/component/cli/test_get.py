"""``raybus get`` against kubesim through the official client: KubeRay's columns, namespaces, wide, JSON,
finding ``raybus up``'s kubeconfig, and one clear line when the API server is not there."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from services.cli.get import main, parser, run
from services.runtime.endpoints import write_endpoints
from tests.fixtures.kubesim import KubeSimHandle
from tests.fixtures.nats import free_port

CREATED = "2030-01-01T00:00:00Z"
NOW = datetime(2030, 1, 1, tzinfo=UTC)


def get(argv: Sequence[str], *, env: dict[str, str] | None = None, now: datetime = NOW) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(parser().parse_args(list(argv)), env=env or {}, out=out, err=err, now=now)
    return code, out.getvalue(), err.getvalue()


def create(kube: KubeSimHandle, namespace: str, plural: str, kind: str, name: str, spec: dict[str, Any]) -> None:
    api = client.CustomObjectsApi(kube.api_client)
    body = {"apiVersion": "ray.io/v1", "kind": kind, "metadata": {"name": name, "namespace": namespace}, "spec": spec}
    api.create_namespaced_custom_object("ray.io", "v1", namespace, plural, body)


def set_status(kube: KubeSimHandle, namespace: str, plural: str, name: str, status: dict[str, Any]) -> datetime:
    """Write the object's status; returns its creation time."""
    api = client.CustomObjectsApi(kube.api_client)
    obj: Any = api.get_namespaced_custom_object("ray.io", "v1", namespace, plural, name)
    obj["status"] = status
    api.replace_namespaced_custom_object_status("ray.io", "v1", namespace, plural, name, obj)
    return datetime.fromisoformat(obj["metadata"]["creationTimestamp"])


def lines(text: str) -> list[list[str]]:
    return [re.split(r"\s{2,}", line.strip()) for line in text.splitlines()]


RAYCLUSTER_SPEC = {
    "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [{"name": "ray-head", "image": "r"}]}}}
}


def test_rayclusters_have_the_kubectl_plugins_columns(kubesim_server: KubeSimHandle, kubesim_namespace: str) -> None:
    ns = kubesim_namespace
    create(kubesim_server, ns, "rayclusters", "RayCluster", "rc", RAYCLUSTER_SPEC)
    created = set_status(
        kubesim_server,
        ns,
        "rayclusters",
        "rc",
        {
            "state": "ready",
            "desiredWorkerReplicas": 2,
            "availableWorkerReplicas": 1,
            "desiredCPU": "3",
            "desiredGPU": "0",
            "desiredTPU": "0",
            "desiredMemory": "6Gi",
            "head": {"podIP": "10.0.0.7", "serviceIP": "10.96.0.9"},
            "conditions": [
                {
                    "type": "HeadPodReady",
                    "status": "True",
                    "reason": "HeadPodRunningAndReady",
                    "message": "",
                    "lastTransitionTime": CREATED,
                },
                {
                    "type": "RayClusterProvisioned",
                    "status": "True",
                    "reason": "AllPodRunningAndReadyFirstTime",
                    "message": "",
                    "lastTransitionTime": CREATED,
                },
            ],
        },
    )
    code, out, err = get(
        ["rayclusters", "-n", ns, "--kubeconfig", str(kubesim_server.kubeconfig)], now=created + timedelta(seconds=303)
    )
    assert code == 0, err
    header, row = lines(out)
    assert header == [
        "NAME", "NAMESPACE", "DESIRED WORKERS", "AVAILABLE WORKERS", "CPUS", "GPUS", "TPUS", "MEMORY", "CONDITION",
        "STATUS", "AGE",
    ]  # fmt: skip
    assert [c.strip() for c in row] == [
        "rc",
        ns,
        "2",
        "1",
        "3",
        "0",
        "0",
        "6Gi",
        "RayClusterProvisioned",
        "ready",
        "5m3s",
    ]
    code, wide, _ = get(["cluster", "-n", ns, "-o", "wide", "--kubeconfig", str(kubesim_server.kubeconfig)])
    assert code == 0
    assert lines(wide)[0][-2:] == ["HEAD POD IP", "HEAD SERVICE IP"]
    assert lines(wide)[1][-2:] == ["10.0.0.7", "10.96.0.9"]


def test_rayjobs_rayservices_and_raycronjobs(kubesim_server: KubeSimHandle, kubesim_namespace: str) -> None:
    ns = kubesim_namespace
    kubeconfig = str(kubesim_server.kubeconfig)
    create(kubesim_server, ns, "rayjobs", "RayJob", "job", {"entrypoint": "python x.py"})
    set_status(
        kubesim_server,
        ns,
        "rayjobs",
        "job",
        {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete", "rayClusterName": "job-abcde",
         "startTime": CREATED, "endTime": CREATED, "jobId": "job-xyz"},
    )  # fmt: skip
    code, out, _ = get(["rayjobs", "-n", ns, "-o", "wide", "--kubeconfig", kubeconfig])
    assert code == 0
    header, row = lines(out)
    assert header[:8] == [
        "NAME", "NAMESPACE", "JOB STATUS", "DEPLOYMENT STATUS", "RAY CLUSTER NAME", "START TIME", "END TIME", "AGE"
    ]  # fmt: skip
    assert row[:5] == ["job", ns, "SUCCEEDED", "Complete", "job-abcde"]
    assert "job-xyz" in out

    create(kubesim_server, ns, "rayservices", "RayService", "svc", {"rayClusterConfig": RAYCLUSTER_SPEC})
    set_status(
        kubesim_server,
        ns,
        "rayservices",
        "svc",
        {"serviceStatus": "Running", "numServeEndpoints": 2,
         "activeServiceStatus": {"rayClusterName": "svc-old", "trafficRoutedPercent": 70},
         "pendingServiceStatus": {"rayClusterName": "svc-new", "trafficRoutedPercent": 30}},
    )  # fmt: skip
    code, out, _ = get(["rayservices", "-n", ns, "-o", "wide", "--kubeconfig", kubeconfig])
    header, row = lines(out)
    assert header[:7] == [
        "NAME", "NAMESPACE", "SERVICE STATUS", "NUM SERVE ENDPOINTS", "ACTIVE CLUSTER", "PENDING CLUSTER", "AGE"
    ]  # fmt: skip
    assert row[:6] == ["svc", ns, "Running", "2", "svc-old", "svc-new"]
    assert "70%/30%" in out

    create(
        kubesim_server,
        ns,
        "raycronjobs",
        "RayCronJob",
        "cron",
        {"schedule": "*/5 * * * *", "jobTemplate": {"entrypoint": "python x.py"}},
    )
    code, out, _ = get(["raycronjobs", "-n", ns, "--kubeconfig", kubeconfig])
    assert code == 0
    assert lines(out)[0] == ["NAME", "NAMESPACE", "SCHEDULE", "TIMEZONE", "LAST SCHEDULE", "AGE", "SUSPEND"]
    assert "*/5 * * * *" in out


def test_all_namespaces_json_and_the_stack_kubeconfig(
    kubesim_server: KubeSimHandle, kubesim_namespace: str, tmp_path: Path
) -> None:
    ns = kubesim_namespace
    create(kubesim_server, ns, "rayclusters", "RayCluster", "a", RAYCLUSTER_SPEC)
    create(kubesim_server, ns, "rayclusters", "RayCluster", "b", RAYCLUSTER_SPEC)
    write_endpoints(tmp_path, {"kubeconfig": str(kubesim_server.kubeconfig)})
    code, out, err = get(["rayclusters", "-A", "-o", "json"], env={"RAYBUS_STATE_DIR": str(tmp_path)})
    assert code == 0, err
    document = json.loads(out)
    assert document["kind"] == "List"
    mine = [o["metadata"]["name"] for o in document["items"] if o["metadata"]["namespace"] == ns]
    assert mine == ["a", "b"]
    code, out, err = get(["rayjobs", "-n", ns, "--state-dir", str(tmp_path)])
    assert code == 0 and out == ""
    assert err == f"No resources found in {ns} namespace.\n"


def test_an_unknown_kind_or_no_server_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{free_port()}"}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    code, _, err = get(["pods", "--kubeconfig", str(kubeconfig)])
    assert code == 2 and err.startswith('raybus get: the server doesn\'t have a resource type "pods"')
    assert main(["rayjobs", "--kubeconfig", str(kubeconfig)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("raybus get: cannot reach the Kubernetes API at http://127.0.0.1:")
    code, _, err = get(["rayjobs", "--kubeconfig", str(tmp_path / "missing")])
    assert code == 2 and err.startswith("raybus get: no usable kubeconfig")
