"""One pass over the snapshot's pods: who is head, worker, in which group, running, ready, terminating.

Role: the pod facts that ``reconcile_pods`` (what to create/delete), ``status`` (counts and conditions) and
``gcsft`` need, read once per reconcile (the no-op path of a 100-worker cluster must stay cheap).

Invariants: only pods labelled ``ray.io/cluster=<c>`` are counted (KubeRay lists by that label); lists
are in name order (the snapshot's stable order); malformed pods (missing fields, wrong types) are read
as "unknown" values, never raise.

Not here: decisions (``reconcile_pods``), ``shouldDeletePod``'s reason texts (``events``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from schema.ray import conventions


class PodInfo(msgspec.Struct, frozen=True, kw_only=True):
    """The facts of one pod."""

    name: str
    node_type: str
    group: str
    phase: str
    ready: str
    """Status of the PodReady condition ("" when the pod has none)."""
    terminating: bool
    restart_never: bool
    """``spec.restartPolicy == Never`` (what ``should_delete`` needs for a Running pod)."""
    obj: dict[str, Any]

    # Read on demand: only the create/delete paths need these, never the no-op path.
    @property
    def uid(self) -> str:
        """metadata.uid."""
        return _text(self.obj["metadata"].get("uid"))

    @property
    def replica_name(self) -> str:
        """The ``ray.io/worker-group-replica-name`` label ("" when absent)."""
        return _text(self.obj["metadata"]["labels"].get(conventions.LABEL_REPLICA_NAME))

    @property
    def replica_index(self) -> str:
        """The ``ray.io/worker-group-replica-index`` label ("" when absent)."""
        return _text(self.obj["metadata"]["labels"].get(conventions.LABEL_REPLICA_INDEX))


class PodCensus(msgspec.Struct, frozen=True, kw_only=True):
    """The cluster's pods, sorted by name, with handy partitions."""

    pods: tuple[PodInfo, ...]
    heads: tuple[PodInfo, ...]
    workers: tuple[PodInfo, ...]
    by_group: dict[str, tuple[PodInfo, ...]]
    ready_workers: int
    """Workers Running with PodReady=True."""
    available_workers: int
    """Workers Running."""
    all_running_and_ready: bool
    """KubeRay's CheckAllPodsRunning over every pod of the cluster (False when there are none)."""


def _text(value: object) -> str:
    """A label/field value as a string ("" when absent)."""
    if isinstance(value, str):
        return value
    return "" if value is None else str(value)


def take_census(cluster: str, pods: list[dict[str, Any]]) -> PodCensus:
    """The census of the pods of ``cluster`` (``pods`` in name order, as ``Snapshot.of_kind`` returns them).

    This runs on every reconcile (the no-op path of a 100-pod cluster), so the common case is plain
    dict lookups; values of an unexpected type take a slow path that turns them into strings.
    """
    infos: list[PodInfo] = []
    heads: list[PodInfo] = []
    workers: list[PodInfo] = []
    by_group: dict[str, list[PodInfo]] = {}
    # Hoisted: module attribute lookups per pod are a measurable share of this loop.
    k_cluster, k_type, k_group = conventions.LABEL_CLUSTER, conventions.LABEL_NODE_TYPE, conventions.LABEL_GROUP
    head, worker = conventions.NODE_HEAD, conventions.NODE_WORKER
    ready_workers = available_workers = 0
    all_ok = True
    text, dict_type, list_type, info_type = str, dict, list, PodInfo
    for pod in pods:
        try:
            meta = pod["metadata"]
            labels = meta["labels"]
            if labels.get(k_cluster) != cluster:
                continue
            status: Any = pod.get("status")
            name = meta.get("name", "")
            terminating = bool(meta.get("deletionTimestamp"))
            pod_spec: Any = pod.get("spec")
            restart_never = pod_spec.__class__ is dict_type and pod_spec.get("restartPolicy") == "Never"
        except (KeyError, TypeError, AttributeError):
            continue
        node_type = labels.get(k_type, "")
        group = labels.get(k_group, "")
        if status.__class__ is not dict_type:
            status = {}
        phase = status.get("phase", "")
        ready = ""
        conditions = status.get("conditions")
        if conditions.__class__ is list_type:
            for condition in conditions:
                if condition.__class__ is dict_type and condition.get("type") == "Ready":
                    value = condition.get("status")
                    ready = value if value.__class__ is text else ""
                    break
        if not (
            name.__class__ is text
            and node_type.__class__ is text
            and group.__class__ is text
            and phase.__class__ is text
        ):
            name, node_type, group, phase = _text(name), _text(node_type), _text(group), _text(phase)
        info = info_type(
            name=name,
            node_type=node_type,
            group=group,
            phase=phase,
            ready=ready,
            terminating=terminating,
            restart_never=restart_never,
            obj=pod,
        )
        infos.append(info)
        running = phase == "Running"
        if not running or (ready != "" and ready != "True"):
            all_ok = False
        if node_type == head:
            heads.append(info)
        elif node_type == worker:
            workers.append(info)
            if running:
                available_workers += 1
                if ready == "True":
                    ready_workers += 1
            if group in by_group:
                by_group[group].append(info)
            else:
                by_group[group] = [info]
    return PodCensus(
        pods=tuple(infos),
        heads=tuple(heads),
        workers=tuple(workers),
        by_group={g: tuple(p) for g, p in by_group.items()},
        ready_workers=ready_workers,
        available_workers=available_workers,
        all_running_and_ready=all_ok and bool(infos),
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
    if info.phase != "Running" or not info.restart_never:
        return ""
    containers = info.obj["spec"].get("containers")
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


def may_need_deletion(info: PodInfo) -> bool:
    """A cheap pre-check of :func:`should_delete` (terminal phase, or Running with restartPolicy Never)."""
    return info.phase == "Failed" or info.phase == "Succeeded" or (info.restart_never and info.phase == "Running")
