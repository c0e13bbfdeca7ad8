"""The RayClusters of a RayService: finding them, building one (docs/behaviour.md#6.3), the spec-hash tests of
``shouldUpdateCluster`` / ``shouldPrepareNewCluster``, the in-place update, and their head pods.

Role: builders and lookups over the snapshot's ``RayCluster`` and ``Pod`` entries.

Invariants:
- Pure; every lookup tolerates malformed entries (treated as absent).
- The cluster body is KubeRay's ``constructRayClusterForRayService``: the RayService's labels plus the
  origin labels, its annotations plus the spec hash, the number of worker groups and the operator
  version, a verbatim copy of ``rayClusterConfig`` (worker ``replicas`` cleared for an incremental
  pending cluster), owned by the RayService. The RayCluster controller derives the RayService
  specifics of the pods (serve env, serve readiness probe, ``ray.io/serve`` labels) from the origin
  labels.
- An in-place update replaces spec, labels and annotations (keeping ``spec.suspend`` and raybus's own
  ``raybus.io/serve-config-hash``) with one guarded JSON patch.

Not here: when to create or update (``reconcile``), Services (``kube_services``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schema.config import OperatorConfig
from schema.decision import Snapshot
from schema.objects import integer, mapping, string_map, text
from schema.ray import conventions
from services.reconciler.common.owners import owner_reference_to
from services.reconciler.rayservice import names
from services.reconciler.rayservice.model import ServiceModel, goal_hash


def labels_of(obj: Mapping[str, Any] | None) -> dict[str, str]:
    """An object's labels (non-string values dropped)."""
    return string_map(mapping(mapping(obj).get("metadata")).get("labels"))


def annotations_of(obj: Mapping[str, Any] | None) -> dict[str, str]:
    """An object's annotations (non-string values dropped)."""
    return string_map(mapping(mapping(obj).get("metadata")).get("annotations"))


def name_of(obj: Mapping[str, Any] | None) -> str:
    """``metadata.name``."""
    return text(mapping(mapping(obj).get("metadata")).get("name"))


def being_deleted(obj: Mapping[str, Any] | None) -> bool:
    """The object carries a deletionTimestamp."""
    return bool(mapping(mapping(obj).get("metadata")).get("deletionTimestamp"))


def originated_clusters(snapshot: Snapshot, rayservice: str) -> list[dict[str, Any]]:
    """RayClusters labelled as created by this RayService (KubeRay's association list), by name."""
    found = []
    for cluster in snapshot.of_kind("RayCluster"):
        labels = labels_of(cluster)
        if (
            labels.get(conventions.LABEL_ORIGIN_NAME) == rayservice
            and labels.get(conventions.LABEL_ORIGIN_CRD) == names.ORIGIN_CRD
        ):
            found.append(cluster)
    return found


def worker_group_count(cluster_config: Mapping[str, Any]) -> int:
    """Number of worker groups in a RayClusterSpec."""
    groups = cluster_config.get("workerGroupSpecs")
    return len(groups) if isinstance(groups, list) else 0


def build_cluster(
    model: ServiceModel,
    rayservice: Mapping[str, Any],
    *,
    name: str,
    clear_replicas: bool,
    config: OperatorConfig,
    keep_annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The RayCluster a RayService creates (docs/behaviour.md#6.3)."""
    cluster_config = model.cluster_config
    labels = dict(model.labels)
    labels[conventions.LABEL_ORIGIN_NAME] = model.name
    labels[conventions.LABEL_ORIGIN_CRD] = names.ORIGIN_CRD
    annotations = dict(model.annotations)
    for key in names.RAYBUS_ANNOTATIONS:
        annotations.pop(key, None)
    annotations[conventions.ANN_SPEC_HASH] = goal_hash(cluster_config)
    annotations[conventions.ANN_NUM_WORKER_GROUPS] = str(worker_group_count(cluster_config))
    annotations[conventions.ANN_KUBERAY_VERSION] = config.version
    for key, value in (keep_annotations or {}).items():
        annotations[key] = value
    if clear_replicas:
        for group in cluster_config.get("workerGroupSpecs") or []:
            if isinstance(group, dict):
                group.pop("replicas", None)
    return {
        "apiVersion": conventions.API_VERSION,
        "kind": "RayCluster",
        "metadata": {
            "name": name,
            "namespace": model.namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference_to(rayservice, "RayService")],
        },
        "spec": cluster_config,
    }


def hash_equal(model: ServiceModel, cluster: Mapping[str, Any], *, partial: bool) -> bool:
    """KubeRay's ``isClusterSpecHashEqual``; ``partial`` compares only the cluster's recorded number of
    worker groups (true when only groups were appended). An unreadable group count counts as equal,
    as in KubeRay (such a cluster is updated in place)."""
    annotations = annotations_of(cluster)
    cluster_hash = annotations.get(conventions.ANN_SPEC_HASH, "")
    config = mapping(model.raw_spec.get("rayClusterConfig"))
    if not partial:
        return cluster_hash == goal_hash(config)
    count = integer(annotations.get(conventions.ANN_NUM_WORKER_GROUPS, ""))
    if count is None or count < 0:
        return True
    goal = goal_hash(config, groups=count) if worker_group_count(config) >= count else ""
    return cluster_hash == goal


def should_update(
    model: ServiceModel, cluster: Mapping[str, Any] | None, *, active: bool, upgrading: bool, config: OperatorConfig
) -> bool:
    """KubeRay's ``shouldUpdateCluster`` (docs/behaviour.md#6.1 step 9)."""
    if cluster is None:
        return False
    if active:
        if upgrading:
            return False
        if annotations_of(cluster).get(conventions.ANN_KUBERAY_VERSION, "") != config.version:
            return True
    if hash_equal(model, cluster, partial=False):
        return False
    return hash_equal(model, cluster, partial=True)


def in_place_update(
    model: ServiceModel,
    rayservice: Mapping[str, Any],
    *,
    cluster: Mapping[str, Any],
    clear_replicas: bool,
    config: OperatorConfig,
) -> list[dict[str, Any]]:
    """The JSON patch replacing a cluster's spec, labels and annotations with the goal's."""
    existing = annotations_of(cluster)
    keep = (
        {names.ANN_SERVE_CONFIG_HASH: existing[names.ANN_SERVE_CONFIG_HASH]}
        if (names.ANN_SERVE_CONFIG_HASH in existing)
        else {}
    )
    goal = build_cluster(
        model, rayservice, name=name_of(cluster), clear_replicas=clear_replicas, config=config, keep_annotations=keep
    )
    spec: dict[str, Any] = goal["spec"]
    current_spec = mapping(cluster.get("spec"))
    if "suspend" in current_spec:
        spec["suspend"] = current_spec["suspend"]
    else:
        spec.pop("suspend", None)
    return [
        {"op": "add", "path": "/spec", "value": spec},
        {"op": "add", "path": "/metadata/labels", "value": goal["metadata"]["labels"]},
        {"op": "add", "path": "/metadata/annotations", "value": goal["metadata"]["annotations"]},
    ]


def head_pod(snapshot: Snapshot, cluster_name: str) -> dict[str, Any] | None:
    """The cluster's head pod (label ``ray.io/node-type=head``; a live one first, then by name)."""
    pods = [
        pod
        for pod in snapshot.of_kind("Pod")
        if labels_of(pod).get(conventions.LABEL_CLUSTER) == cluster_name
        and labels_of(pod).get(conventions.LABEL_NODE_TYPE) == "head"
    ]
    live = [pod for pod in pods if not being_deleted(pod)]
    chosen = live or pods
    return chosen[0] if chosen else None


def _condition_true(conditions: object, type_: str) -> bool:
    if not isinstance(conditions, list):
        return False
    return any(isinstance(c, Mapping) and c.get("type") == type_ and c.get("status") == "True" for c in conditions)


def head_ready(snapshot: Snapshot, cluster: Mapping[str, Any], *, config: OperatorConfig) -> bool:
    """``reconcileServe``'s gate: the cluster's HeadPodReady condition (gate RayClusterStatusConditions),
    else the head pod Running and Ready."""
    if config.gates.ray_cluster_status_conditions:
        return _condition_true(mapping(cluster.get("status")).get("conditions"), "HeadPodReady")
    pod = head_pod(snapshot, name_of(cluster))
    status = mapping(mapping(pod).get("status"))
    return status.get("phase") == "Running" and _condition_true(status.get("conditions"), "Ready")
