"""A minimal single-process RayCluster operator on Kopf: the peer the benches compare raybus with.

Per RayCluster: a head Service, a head Pod and ``replicas`` worker Pods of the first worker group (fixed
names, so a create that already happened is a 409 and nothing more), and a status with the count of
running workers and ``state: ready`` once every Pod runs. No Events, no validation, no deletion logic
beyond owner references. Pods are known from a Kopf index fed by one Pod watch (no list per change); the
status is derived from it on every Pod event and again on every RayCluster event.

Run (its own virtualenv: ``pip install -r bench/peer/requirements.txt``):
``KUBECONFIG=... kopf run --standalone --all-namespaces bench/peer/operator.py``.
"""

from __future__ import annotations

from typing import Any

import kopf
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

CLUSTER = "ray.io/cluster"
api: client.ApiClient | None = None


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    global api
    config.load_kube_config()
    api = client.ApiClient()
    settings.posting.enabled = False
    settings.batching.batch_window = 0.01  # Kopf's default 0.1 s would be most of a change's latency
    settings.persistence.finalizer = "peer.raybus.bench/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="peer.raybus.bench")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="peer.raybus.bench")


@kopf.index("pods", labels={CLUSTER: kopf.PRESENT})
def pods(namespace: str, name: str, labels: dict[str, str], status: dict[str, Any], **_: Any) -> Any:
    return {(namespace, labels[CLUSTER]): (name, status.get("phase"))}


def _create(create: Any, namespace: str, body: dict[str, Any]) -> None:
    try:
        create(namespace, body)
    except ApiException as exc:
        if exc.status != 409:
            raise


def _pod(cluster: dict[str, Any], name: str, kind: str, template: dict[str, Any]) -> dict[str, Any]:
    labels = {CLUSTER: cluster["metadata"]["name"], "ray.io/node-type": kind}
    body = {"metadata": {"name": name, "labels": labels}, "spec": template.get("spec", {})}
    kopf.adopt(body, owner=cluster)
    return body


@kopf.on.resume("ray.io", "v1", "rayclusters")
@kopf.on.create("ray.io", "v1", "rayclusters")
@kopf.on.update("ray.io", "v1", "rayclusters", field="spec")
def reconcile(body: kopf.Body, name: str, namespace: str, spec: kopf.Spec, pods: kopf.Index, **_: Any) -> None:
    core = client.CoreV1Api(api)
    cluster = dict(body)
    have = {pod_name for pod_name, _ in pods.get((namespace, name), [])}
    selector = {CLUSTER: name, "ray.io/node-type": "head"}
    service = {"metadata": {"name": f"{name}-head-svc"}, "spec": {"selector": selector, "ports": [{"port": 6379}]}}
    kopf.adopt(service, owner=cluster)
    if not have:
        _create(core.create_namespaced_service, namespace, service)
    wanted = {f"{name}-head": _pod(cluster, f"{name}-head", "head", spec["headGroupSpec"]["template"])}
    group = spec.get("workerGroupSpecs", [{}])[0]
    for i in range(int(group.get("replicas", 0))):
        wanted[f"{name}-worker-{i}"] = _pod(cluster, f"{name}-worker-{i}", "worker", group["template"])
    for pod_name, pod_body in wanted.items():
        if pod_name not in have:
            _create(core.create_namespaced_pod, namespace, pod_body)


@kopf.index("ray.io", "v1", "rayclusters")
def clusters(namespace: str, name: str, spec: kopf.Spec, status: kopf.Status, **_: Any) -> Any:
    desired = int(spec.get("workerGroupSpecs", [{}])[0].get("replicas", 0))
    return {(namespace, name): (desired, dict(status))}


@kopf.on.event("pods", labels={CLUSTER: kopf.PRESENT})
def count(labels: dict[str, str], namespace: str, pods: kopf.Index, clusters: kopf.Index, **_: Any) -> None:
    _write_status(namespace, labels[CLUSTER], pods, clusters)


@kopf.on.event("ray.io", "v1", "rayclusters")
def recount(name: str, namespace: str, pods: kopf.Index, clusters: kopf.Index, **_: Any) -> None:
    # Kopf runs the Pod handlers of one cluster side by side in threads, so a count made from an older
    # view of the Pods can land after a newer one; the status write's own event puts it right.
    _write_status(namespace, name, pods, clusters)


def _write_status(namespace: str, name: str, pods: kopf.Index, clusters: kopf.Index) -> None:
    for desired, current in clusters.get((namespace, name), []):
        running = [pod_name for pod_name, phase in pods.get((namespace, name), []) if phase == "Running"]
        ready = sum(1 for pod_name in running if "-worker-" in pod_name)
        status = {"readyWorkerReplicas": ready, "desiredWorkerReplicas": desired}
        status["state"] = "ready" if ready >= desired and f"{name}-head" in running else "pending"
        if {k: current.get(k) for k in status} != status:
            custom = client.CustomObjectsApi(api)
            custom.patch_namespaced_custom_object_status(
                "ray.io", "v1", namespace, "rayclusters", name, {"status": status}
            )
