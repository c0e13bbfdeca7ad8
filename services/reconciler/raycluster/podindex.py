"""One pass over the snapshot's pods: who is head, worker, in which group, running, ready, terminating.

Role: the pod facts that ``podplan`` (what to create/delete), ``status`` (counts and conditions) and
``gcsft`` need, read once per reconcile (the no-op path of a 100-worker cluster must stay cheap).

Invariants: only pods labelled ``ray.io/cluster=<c>`` are indexed (KubeRay lists by that label); lists
are in name order (the snapshot's stable order); malformed pods (missing fields, wrong types) are read
as "unknown" values, never raise.

Not here: decisions (``podplan``), ``shouldDeletePod``'s reason texts (``events``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from services.reconciler.raycluster import names


class PodInfo(msgspec.Struct, frozen=True, kw_only=True):
    """The facts of one pod."""

    name: str
    uid: str
    node_type: str
    group: str
    phase: str
    ready: str
    """Status of the PodReady condition ("" when the pod has none)."""
    terminating: bool
    replica_name: str
    replica_index: str
    obj: dict[str, Any]


class PodIndex(msgspec.Struct, frozen=True, kw_only=True):
    """The cluster's pods, sorted by name, with handy partitions."""

    pods: tuple[PodInfo, ...]
    heads: tuple[PodInfo, ...]
    workers: tuple[PodInfo, ...]
    by_group: dict[str, tuple[PodInfo, ...]]


def _ready_status(status: dict[str, Any]) -> str:
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        return ""
    for condition in conditions:
        if isinstance(condition, dict) and condition.get("type") == "Ready":
            value = condition.get("status")
            return value if isinstance(value, str) else ""
    return ""


def index_pods(cluster: str, pods: list[dict[str, Any]]) -> PodIndex:
    """Index the pods of ``cluster`` (``pods`` in name order, as ``Snapshot.of_kind`` returns them)."""
    infos: list[PodInfo] = []
    heads: list[PodInfo] = []
    workers: list[PodInfo] = []
    by_group: dict[str, list[PodInfo]] = {}
    for pod in pods:
        meta = pod.get("metadata")
        if not isinstance(meta, dict):
            continue
        labels = meta.get("labels")
        if not isinstance(labels, dict) or labels.get(names.LABEL_CLUSTER) != cluster:
            continue
        status = pod.get("status")
        if not isinstance(status, dict):
            status = {}
        phase = status.get("phase")
        info = PodInfo(
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            node_type=str(labels.get(names.LABEL_NODE_TYPE, "")),
            group=str(labels.get(names.LABEL_GROUP, "")),
            phase=phase if isinstance(phase, str) else "",
            ready=_ready_status(status),
            terminating=bool(meta.get("deletionTimestamp")),
            replica_name=str(labels.get(names.LABEL_REPLICA_NAME, "")),
            replica_index=str(labels.get(names.LABEL_REPLICA_INDEX, "")),
            obj=pod,
        )
        infos.append(info)
        if info.node_type == names.NODE_HEAD:
            heads.append(info)
        elif info.node_type == names.NODE_WORKER:
            workers.append(info)
            by_group.setdefault(info.group, []).append(info)
    return PodIndex(
        pods=tuple(infos),
        heads=tuple(heads),
        workers=tuple(workers),
        by_group={g: tuple(p) for g, p in by_group.items()},
    )


def should_delete(info: PodInfo) -> str:
    """KubeRay's shouldDeletePod: the reason to delete ``info``'s pod, or "" to keep it.

    Failed/Succeeded pods are deleted; a Running pod whose Ray container terminated is deleted only with
    ``restartPolicy: Never`` (otherwise the kubelet restarts the container).
    """
    if info.phase in ("Failed", "Succeeded"):
        return (
            f"The {info.node_type} Pod {info.name} status is {info.phase} which is a terminal state. "
            "KubeRay will delete the Pod and create new Pods in the next reconciliation if necessary."
        )
    if info.phase != "Running":
        return ""
    spec = info.obj.get("spec")
    if not isinstance(spec, dict) or spec.get("restartPolicy") != "Never":
        return ""
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers or not isinstance(containers[0], dict):
        return ""
    ray_name = containers[0].get("name")
    statuses = (info.obj.get("status") or {}).get("containerStatuses")
    if not isinstance(statuses, list):
        return ""
    for container_status in statuses:
        if not isinstance(container_status, dict) or container_status.get("name") != ray_name:
            continue
        state = container_status.get("state")
        if isinstance(state, dict) and state.get("terminated") is not None:
            return (
                f"The Pod status of the {info.node_type} Pod {info.name} is Running, but the Ray container is "
                "terminated and the restart policy is Never. KubeRay will delete the Pod and create new Pods "
                "in the next reconciliation if necessary."
            )
    return ""


def all_running_and_ready(pods: tuple[PodInfo, ...]) -> bool:
    """KubeRay's CheckAllPodsRunning: at least one pod, all Running, no PodReady condition not True."""
    if not pods:
        return False
    return all(p.phase == "Running" and p.ready in ("", "True") for p in pods)
