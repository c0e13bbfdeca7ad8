"""The RayCluster side of a RayJob: the cluster it creates, the ``<rj>-head-svc`` Service, and how to
reach the cluster's dashboard (URL for ``status.dashboardURL``, DashboardRef for dashboard commands).

Role: builders and lookups over the snapshot's ``RayCluster``, ``Service`` and ``Pod`` entries.

Invariants: pure; the cluster body is KubeRay's ``constructRayClusterForRayJob`` (labels, annotations,
owner, a verbatim copy of ``spec.rayClusterSpec``, plus the SidecarMode submitter); every lookup
tolerates malformed entries (treated as absent).

Not here: the RayCluster's own objects (pods, its head Service): the RayCluster controller builds
those, and :func:`rayjob_head_service` reuses its head-Service builder.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from schema.config import OperatorConfig
from schema.decision import Snapshot
from schema.objects import service_port
from schema.probes import head_service_name
from schema.ray import conventions
from schema.ray.conventions import API_VERSION, PORT_DASHBOARD, check_label
from schema.ray.rayjob import SIDECAR_MODE, RayJobSpec
from services.reconciler.common.owners import owner_reference_to
from services.reconciler.raycluster.model import view_of
from services.reconciler.raycluster.services import head_service
from services.reconciler.rayjob.names import head_service_name_for_rayjob
from services.reconciler.rayjob.submitter import sidecar_container


def mapping(value: object) -> Mapping[str, Any]:
    """``value`` if it is a mapping, else an empty one (untrusted JSON)."""
    return value if isinstance(value, Mapping) else {}


def text(value: object) -> str:
    """``value`` if it is a string, else ""."""
    return value if isinstance(value, str) else ""


def build_cluster(
    rayjob: Mapping[str, Any],
    spec: RayJobSpec,
    *,
    cluster_name: str,
    job_id: str,
    dashboard_url: str,
    config: OperatorConfig,
) -> dict[str, Any]:
    """The RayCluster a RayJob creates (docs/behaviour.md#5.2 Initializing step 5).

    Raises:
        SubmitterError: SidecarMode and the submitter container cannot be built.
    """
    metadata = mapping(rayjob.get("metadata"))
    name = text(metadata.get("name"))
    labels = {k: v for k, v in mapping(metadata.get("labels")).items() if isinstance(v, str)}
    labels[conventions.LABEL_ORIGIN_NAME] = name
    labels[conventions.LABEL_ORIGIN_CRD] = "RayJob"
    labels[conventions.LABEL_JOB_SUBMISSION_MODE] = spec.submission_mode
    annotations = {k: v for k, v in mapping(metadata.get("annotations")).items() if isinstance(v, str)}
    if spec.submission_mode == SIDECAR_MODE:
        annotations[conventions.ANN_DISABLE_HEAD_RESTART] = "true"
    cluster_spec: dict[str, Any] = copy.deepcopy(dict(mapping(mapping(rayjob.get("spec")).get("rayClusterSpec"))))
    if spec.submission_mode == SIDECAR_MODE:
        container = sidecar_container(
            spec,
            job_id=job_id,
            dashboard_url=dashboard_url,
            cluster_name=cluster_name,
            cluster_spec=cluster_spec,
            config=config,
        )
        pod_spec = cluster_spec.setdefault("headGroupSpec", {}).setdefault("template", {}).setdefault("spec", {})
        containers = pod_spec.get("containers")
        pod_spec["containers"] = [*containers, container] if isinstance(containers, list) else [container]
        pod_spec["restartPolicy"] = "Never"
    body: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "RayCluster",
        "metadata": {
            "name": cluster_name,
            "namespace": text(metadata.get("namespace")),
            "labels": labels,
            "ownerReferences": [owner_reference_to(rayjob, "RayJob")],
        },
        "spec": cluster_spec,
    }
    if annotations:
        body["metadata"]["annotations"] = annotations
    return body


def dashboard_url(
    snapshot: Snapshot, *, namespace: str, cluster_name: str, cluster: Mapping[str, Any], config: OperatorConfig
) -> str | None:
    """KubeRay's ``FetchHeadServiceURL``: ``<svc>.<ns>.svc.<domain>:<dashboard port>``; None until the head
    Service (with a port named ``dashboard``) is in the snapshot."""
    service_name = head_service_name(cluster_name, cluster)
    return dashboard_url_of(
        snapshot.get("Service", service_name), service_name=service_name, namespace=namespace, config=config
    )


def dashboard_url_of(
    service: Mapping[str, Any] | None, *, service_name: str, namespace: str, config: OperatorConfig
) -> str | None:
    """The dashboard URL the head Service ``service_name`` gives, None without a port named ``dashboard``."""
    port = service_port(service, PORT_DASHBOARD)
    if port is None:
        return None
    return f"{service_name}.{namespace}.svc.{config.switches.cluster_domain}:{port}"


def rayjob_head_service(
    rayjob: Mapping[str, Any], spec: RayJobSpec, *, cluster_name: str, config: OperatorConfig
) -> dict[str, Any] | None:
    """``<rj>-head-svc`` (KubeRay's ``BuildHeadServiceForRayJob``): the RayCluster controller's head
    Service for the job's cluster, renamed and re-labelled for the RayJob, owned by the RayJob.

    Returns None in clusterSelector mode (no rayClusterSpec: KubeRay builds no such Service).
    """
    if spec.ray_cluster_spec is None:
        return None
    metadata = mapping(rayjob.get("metadata"))
    name, namespace = text(metadata.get("name")), text(metadata.get("namespace"))
    view = view_of(spec.ray_cluster_spec, name=cluster_name, namespace=namespace)
    service = head_service(
        view, config, name=head_service_name_for_rayjob(name), owner_reference=owner_reference_to(rayjob, "RayJob")
    )
    service["metadata"]["namespace"] = namespace
    service["metadata"]["labels"] = {
        conventions.LABEL_ORIGIN_NAME: name,
        conventions.LABEL_ORIGIN_CRD: "RayJob",
        conventions.LABEL_NODE_TYPE: "head",
        conventions.LABEL_IDENTIFIER: check_label(f"{name}-head"),
    }
    return service


def head_pod(snapshot: Snapshot, cluster_name: str) -> dict[str, Any] | None:
    """The cluster's head pod among the snapshot's ``Pod`` entries (first by name), or None."""
    for pod in snapshot.of_kind("Pod"):
        labels = mapping(mapping(pod.get("metadata")).get("labels"))
        if labels.get(conventions.LABEL_CLUSTER) == cluster_name and labels.get(conventions.LABEL_NODE_TYPE) == "head":
            return pod
    return None


def being_deleted(obj: Mapping[str, Any] | None) -> bool:
    """The object carries a deletionTimestamp."""
    return bool(mapping(mapping(obj).get("metadata")).get("deletionTimestamp"))
