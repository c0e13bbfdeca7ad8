"""Operator configuration seen by ``reconcile``: KubeRay's feature gates, environment switches and
config-file defaults (docs/behaviour.md#9), as plain immutable data.

Parsing (flags, env, the config file) happens once in ``services.runtime.settings``; reconcile code only
reads these structs, so the same inputs always give the same decision.
"""

from __future__ import annotations

from typing import Any

import msgspec

RAYBUS_VERSION = "raybus-0.1.0"


_GATE_NAMES = {
    "ray_cluster_status_conditions": "RayClusterStatusConditions",
    "ray_job_deletion_policy": "RayJobDeletionPolicy",
    "ray_multi_host_indexing": "RayMultiHostIndexing",
    "ray_service_incremental_upgrade": "RayServiceIncrementalUpgrade",
    "ray_cron_job": "RayCronJob",
    "sidecar_submitter_restart": "SidecarSubmitterRestart",
    "ray_cluster_network_policy": "RayClusterNetworkPolicy",
    "gcs_fault_tolerance_embedded_storage": "GCSFaultToleranceEmbeddedStorage",
    "ray_cluster_mtls": "RayClusterMTLS",
    "ray_cluster_history_server": "RayClusterHistoryServer",
    "kubernetes_was": "KubernetesWAS",
}


class FeatureGates(msgspec.Struct, frozen=True, kw_only=True, rename=_GATE_NAMES):
    """KubeRay's feature gates with KubeRay's defaults (docs/behaviour.md#9); encoded with KubeRay's gate names."""

    ray_cluster_status_conditions: bool = True
    ray_job_deletion_policy: bool = True
    ray_multi_host_indexing: bool = True
    ray_service_incremental_upgrade: bool = True
    ray_cron_job: bool = False
    sidecar_submitter_restart: bool = False
    ray_cluster_network_policy: bool = False
    gcs_fault_tolerance_embedded_storage: bool = False
    ray_cluster_mtls: bool = False
    ray_cluster_history_server: bool = False
    kubernetes_was: bool = False


class OperatorSwitches(msgspec.Struct, frozen=True, kw_only=True):
    """KubeRay's operator environment switches (docs/behaviour.md#9), with KubeRay's defaults."""

    enable_init_container_injection: bool = True
    enable_probes_injection: bool = True
    enable_ray_head_cluster_ip_service: bool = False
    cluster_domain: str = "cluster.local"
    raycluster_default_requeue_seconds: float = 300.0
    enable_gcs_ft_redis_cleanup: bool = True
    enable_zero_downtime: bool = True
    delete_rayjob_cr_after_job_finishes: bool = False
    enable_deterministic_head_pod_name: bool = False
    enable_login_shell: bool = False
    enable_random_pod_delete: bool = False
    rayjob_deployment_status_transition_grace_period_seconds: float = 300.0
    rayjob_status_check_timeout_seconds: float = 300.0


class PodDefaults(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Config-file defaults applied to every Ray pod (KubeRay's ``Configuration``)."""

    default_container_envs: tuple[dict[str, Any], ...] = ()
    default_pod_labels: dict[str, str] = {}
    default_pod_annotations: dict[str, str] = {}
    head_sidecar_containers: tuple[dict[str, Any], ...] = ()
    worker_sidecar_containers: tuple[dict[str, Any], ...] = ()


class OperatorConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Everything operator-level that a decision depends on."""

    gates: FeatureGates = FeatureGates()
    switches: OperatorSwitches = OperatorSwitches()
    pod_defaults: PodDefaults = PodDefaults()
    version: str = RAYBUS_VERSION
