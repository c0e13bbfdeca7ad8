"""RayService (ray.io/v1): Ray Serve applications on a RayCluster with zero-downtime upgrades
(docs/behaviour.md#1.5, #1.6).

Role: the typed view of a RayService. Note the naming inherited from KubeRay: the object's ``status``
is :class:`RayServiceStatuses`, and :class:`RayServiceStatus` is the status of *one* cluster (active
or pending) inside it.

Invariants: ``upgradeStrategy.type`` and the Serve status strings have no CRD enum in KubeRay, so they
are plain strings here (an unknown value is reported by validation, not by a decode failure).

Not here: the serve-config diffing and traffic migration (``services/reconciler/rayservice``).
"""

from __future__ import annotations

from typing import Annotated, Any, Final

from msgspec import Meta

from schema.ray.common import (
    ConditionList,
    Int32,
    Int64,
    ManagedBy,
    RayStruct,
    Service,
    Time,
    crd_default,
)
from schema.ray.conventions import API_VERSION
from schema.ray.raycluster import RayClusterSpec, RayClusterStatus

NEW_CLUSTER: Final = "NewCluster"
NEW_CLUSTER_WITH_INCREMENTAL_UPGRADE: Final = "NewClusterWithIncrementalUpgrade"
NO_UPGRADE: Final = "None"
UPGRADE_TYPES: Final = (NEW_CLUSTER, NEW_CLUSTER_WITH_INCREMENTAL_UPGRADE, NO_UPGRADE)


class ClusterUpgradeOptions(RayStruct, frozen=True, kw_only=True):
    """Incremental upgrade: how fast traffic moves to the new cluster (through Gateway API)."""

    max_surge_percent: Annotated[Int32, crd_default(100)] = 100
    step_size_percent: Int32
    interval_seconds: Int32
    gateway_class_name: str


class RayServiceUpgradeStrategy(RayStruct, frozen=True, kw_only=True):
    """How a RayClusterSpec change is rolled out."""

    type: Annotated[str | None, Meta(description="NewCluster, NewClusterWithIncrementalUpgrade or None.")] = None
    cluster_upgrade_options: ClusterUpgradeOptions | None = None


class RayServiceSpec(RayStruct, frozen=True, kw_only=True):
    """The desired Serve applications and the cluster template they run on."""

    ray_cluster_config: RayClusterSpec
    serve_config_v2: Annotated[str, Meta(description="Ray Serve multi-application config (YAML).")] = ""
    ray_cluster_deletion_delay_seconds: (
        Annotated[Int32, Meta(ge=0, description="Delay before a replaced cluster is deleted (operator default 60).")]
        | None
    ) = None
    serve_service: Annotated[Service | None, Meta(description="Base of the serve Service.")] = None
    upgrade_strategy: RayServiceUpgradeStrategy | None = None
    exclude_head_pod_from_serve_svc: bool = False
    suspend: bool = False
    managed_by: ManagedBy | None = None
    service_unhealthy_second_threshold: Annotated[Int32 | None, Meta(description="Deprecated; ignored.")] = None
    deployment_unhealthy_second_threshold: Annotated[Int32 | None, Meta(description="Deprecated; ignored.")] = None


class ServeDeploymentStatus(RayStruct, frozen=True, kw_only=True):
    """One Serve deployment: UPDATING, HEALTHY or UNHEALTHY."""

    status: str = ""
    message: str = ""


class AppStatus(RayStruct, frozen=True, kw_only=True):
    """One Serve application: NOT_STARTED, DEPLOYING, RUNNING, DEPLOY_FAILED, DELETING or UNHEALTHY."""

    status: str = ""
    message: str = ""
    serve_deployment_statuses: dict[str, ServeDeploymentStatus] | None = None


class RayServiceStatus(RayStruct, frozen=True, kw_only=True):
    """The state of one cluster of the service (the active or the pending one)."""

    application_statuses: dict[str, AppStatus] | None = None
    target_capacity: Int32 | None = None
    traffic_routed_percent: Int32 | None = None
    last_traffic_migrated_time: Time | None = None
    ray_cluster_name: str = ""
    ray_cluster_status: RayClusterStatus | None = None


class RayServiceStatuses(RayStruct, frozen=True, kw_only=True):
    """The status of a RayService object."""

    conditions: ConditionList | None = None
    last_update_time: Time | None = None
    service_status: Annotated[str, Meta(description="Running or empty; same meaning as the Ready condition.")] = ""
    active_service_status: RayServiceStatus | None = None
    pending_service_status: RayServiceStatus | None = None
    num_serve_endpoints: Int32 = 0
    observed_generation: Int64 = 0


class RayService(RayStruct, frozen=True, kw_only=True, omit_defaults=False):
    """Ray Serve applications on a RayCluster, upgraded without downtime (ray.io/v1).

    In Python, ``apiVersion``, ``kind``, ``metadata`` and ``status`` are always encoded.
    """

    api_version: str = API_VERSION
    kind: str = "RayService"
    metadata: dict[str, Any] = {}
    spec: RayServiceSpec
    status: RayServiceStatuses = RayServiceStatuses()
