"""Bare Ray head Pods (no operator): a head Pod, its dashboard Service and optionally its token Secret,
created in a kubesim whose kubelet runs simulated or real heads, and the URL of a head port through
kubesim's service proxy."""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from tests.fixtures.kubesim import KubeSimHandle

RAY_IMAGE = "rayproject/ray:2.60.0"
HEAD_PORTS = {"gcs-server": 6379, "dashboard": 8265, "dashboard-agent": 52365, "serve": 8000, "client": 10001}


@dataclass(frozen=True)
class Head:
    """One head Pod and its Service in a kubesim."""

    kube: KubeSimHandle
    namespace: str
    cluster: str

    @property
    def service(self) -> str:
        return f"{self.cluster}-head-svc"

    def url(self, port: str, path: str) -> str:
        """``path`` on a named port of the head's Service, through kubesim's service proxy."""
        return f"{self.kube.url}/api/v1/namespaces/{self.namespace}/services/{self.service}:{port}/proxy{path}"


def create_head(
    kube: KubeSimHandle, namespace: str, cluster: str, *, token: str | None = None, env: dict[str, str] | None = None
) -> Head:
    """Create a head Pod (token auth when ``token``), its Service and Secret; return once the Pod is Ready."""
    core = client.CoreV1Api(kube.api_client)
    container_env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in (env or {}).items()]
    if token is not None:
        data = {"auth_token": base64.b64encode(token.encode()).decode()}
        core.create_namespaced_secret(namespace, {"metadata": {"name": cluster}, "data": data})  # type: ignore[arg-type]
        container_env += [
            {"name": "RAY_AUTH_MODE", "value": "token"},
            {"name": "RAY_AUTH_TOKEN", "valueFrom": {"secretKeyRef": {"name": cluster, "key": "auth_token"}}},
        ]
    labels = {"ray.io/cluster": cluster, "ray.io/node-type": "head"}
    ports = [{"name": name, "containerPort": port} for name, port in HEAD_PORTS.items()]
    pod = {
        "metadata": {"name": f"{cluster}-head", "labels": labels},
        "spec": {"containers": [{"name": "ray-head", "image": RAY_IMAGE, "env": container_env, "ports": ports}]},
    }
    core.create_namespaced_pod(namespace, pod)  # type: ignore[arg-type]
    service_ports = [{"name": name, "port": port, "targetPort": port} for name, port in HEAD_PORTS.items()]
    service = {"metadata": {"name": f"{cluster}-head-svc"}, "spec": {"selector": labels, "ports": service_ports}}
    core.create_namespaced_service(namespace, service)  # type: ignore[arg-type]
    wait_ready(core, namespace, f"{cluster}-head")
    return Head(kube, namespace, cluster)


def wait_ready(core: client.CoreV1Api, namespace: str, name: str, timeout: float = 300) -> None:
    """Wait (polling the API) until a Pod is Ready."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pod = core.read_namespaced_pod(name, namespace)
        conditions = pod.status.conditions if pod.status is not None else None
        if any(c.type == "Ready" and c.status == "True" for c in conditions or []):
            return
        time.sleep(0.2)
    raise AssertionError(f"pod {namespace}/{name} never became Ready")
