"""RayCluster (ray.io/v1): spec, status and the option structs nested in them (docs/behaviour.md#1.1, #1.2).

Role: the typed view of a RayCluster that reconcile code reads and writes. The same
:class:`RayClusterSpec` is embedded in RayJob (``rayClusterSpec``) and RayService (``rayClusterConfig``).

Invariants: field names, enums and CRD defaults follow KubeRay's v1 API; pointer fields of the Go API
are ``X | None = None``; embedded Kubernetes objects stay free-form dicts (see ``schema.ray.common``).

Not here: validation beyond what the CRD enforces (docs/behaviour.md#8 lives in the reconciler), defaulting done by
the operator rather than by the API server (autoscaler resources, rocksdb storage size, ...).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from schema.ray.common import (
    MAX_INT32,
    ConditionList,
    EnvFromSource,
    EnvVar,
    EnvVarSource,
    IngressTLS,
    Int32,
    Int64,
    ManagedBy,
    NetworkPolicyEgressRule,
    NetworkPolicyIngressRule,
    PodTemplateSpec,
    Quantity,
    RayStruct,
    ResourceRequirements,
    SecurityContext,
    Service,
    StringMap,
    Time,
    VolumeMount,
    crd_default,
)
from schema.ray.conventions import API_VERSION

UpscalingMode = Literal["Default", "Aggressive", "Conservative"]
AutoscalerVersion = Literal["v1", "v2"]
GcsStorageBackend = Literal["redis", "rocksdb"]
GcsStorageDeletionPolicy = Literal["DeleteWithCluster", "Retain"]
AuthMode = Literal["disabled", "token"]
UpgradeStrategyType = Literal["Recreate", "None"]
NetworkPolicyMode = Literal["DenyAll", "DenyAllIngress", "DenyAllEgress"]
PathType = Literal["Exact", "Prefix", "ImplementationSpecific"]

RayStartParams = Annotated[
    StringMap, Meta(description="Flags of `ray start` (without the leading dashes), e.g. num-cpus: '1'.")
]
RayResources = Annotated[
    StringMap,
    Meta(description="Ray logical resources of the group (Quantities); they override rayStartParams."),
]
RayLabels = Annotated[StringMap, Meta(description="Ray node labels; also added to the pods' labels.")]


class IngressOptions(RayStruct, frozen=True, kw_only=True):
    """The head Ingress created when ``enableIngress`` is true."""

    host: str | None = None
    path: Annotated[str, crd_default("/"), Meta(description="Path of the Ingress rule.")] = "/"
    path_type: Annotated[PathType, crd_default("Prefix")] = "Prefix"
    tls: tuple[IngressTLS, ...] | None = None


class HeadGroupSpec(RayStruct, frozen=True, kw_only=True):
    """The head pod of a RayCluster."""

    template: Annotated[PodTemplateSpec, Meta(description="Pod template of the head; containers[0] runs Ray.")]
    head_service: Annotated[
        Service | None, Meta(description="A full Service used as the base of the head Service.")
    ] = None
    enable_ingress: bool | None = None
    ingress_options: IngressOptions | None = None
    resources: RayResources | None = None
    labels: RayLabels | None = None
    ray_start_params: RayStartParams | None = None
    service_type: Annotated[str, Meta(description="Type of the head Service (ClusterIP, NodePort, ...).")] = ""


class ScaleStrategy(RayStruct, frozen=True, kw_only=True):
    """Pods the autoscaler wants gone."""

    workers_to_delete: tuple[str, ...] | None = None


class WorkerGroupSpec(RayStruct, frozen=True, kw_only=True):
    """One group of identical worker pods."""

    group_name: str
    template: Annotated[PodTemplateSpec, Meta(description="Pod template of the group; containers[0] runs Ray.")]
    suspend: Annotated[bool | None, Meta(description="Internal: delete every pod of the group.")] = None
    replicas: Annotated[Int32, crd_default(0)] = 0
    min_replicas: Annotated[Int32, crd_default(0)] = 0
    max_replicas: Annotated[Int32, crd_default(MAX_INT32)] = MAX_INT32
    idle_timeout_seconds: Int32 | None = None
    priority: Annotated[Int32, crd_default(0), Meta(description="Autoscaler v2 priority (Ray >= 2.56).")] = 0
    resources: RayResources | None = None
    labels: RayLabels | None = None
    ray_start_params: RayStartParams | None = None
    scale_strategy: ScaleStrategy | None = None
    num_of_hosts: Annotated[Int32, crd_default(1), Meta(description="Pods per replica (multi-host groups).")] = 1


class AutoscalerOptions(RayStruct, frozen=True, kw_only=True):
    """Overrides for the in-tree autoscaler sidecar."""

    resources: ResourceRequirements | None = None
    image: str | None = None
    image_pull_policy: str | None = None
    security_context: SecurityContext | None = None
    idle_timeout_seconds: Int32 | None = None
    upscaling_mode: UpscalingMode | None = None
    version: AutoscalerVersion | None = None
    env: tuple[EnvVar, ...] | None = None
    env_from: tuple[EnvFromSource, ...] | None = None
    volume_mounts: tuple[VolumeMount, ...] | None = None
    command: tuple[str, ...] | None = None
    args: tuple[str, ...] | None = None


class RedisCredential(RayStruct, frozen=True, kw_only=True):
    """A Redis username or password: a literal value or a reference (EnvVarSource)."""

    value: str | None = None
    value_from: EnvVarSource | None = None


class GcsStorageOptions(RayStruct, frozen=True, kw_only=True):
    """Storage of the rocksdb GCS backend (operator defaults: 1Gi, ReadWriteOnce, DeleteWithCluster)."""

    claim_name: Annotated[str | None, Meta(description="Bring-your-own PVC; the operator creates none.")] = None
    size: Quantity | None = None
    storage_class_name: str | None = None
    access_modes: tuple[str, ...] | None = None
    sub_path: str | None = None
    deletion_policy: GcsStorageDeletionPolicy | None = None


class GcsFaultToleranceOptions(RayStruct, frozen=True, kw_only=True):
    """GCS fault tolerance: an external Redis (default) or embedded rocksdb on a PVC."""

    backend: Annotated[
        GcsStorageBackend | None,
        Meta(
            extra_json_schema={
                "x-kubernetes-validations": [
                    {"rule": "self == oldSelf", "message": "gcsFaultToleranceOptions.backend is immutable"}
                ]
            }
        ),
    ] = None
    redis_username: RedisCredential | None = None
    redis_password: RedisCredential | None = None
    external_storage_namespace: str = ""
    redis_address: str = ""
    storage: GcsStorageOptions | None = None


class AuthOptions(RayStruct, frozen=True, kw_only=True):
    """Ray token authentication (enabled only when mode is ``token``)."""

    mode: AuthMode | None = None
    secret_name: Annotated[str | None, Meta(description="Secret with data key auth_token.")] = None
    enable_k8s_token_auth: bool | None = msgspec.field(default=None, name="enableK8sTokenAuth")


class RayClusterUpgradeStrategy(RayStruct, frozen=True, kw_only=True):
    """What a spec change does to running pods (nil type = None)."""

    type: UpgradeStrategyType | None = None


class NetworkPolicyRules(RayStruct, frozen=True, kw_only=True):
    """Extra ingress/egress rules added to a generated NetworkPolicy."""

    ingress_rules: tuple[NetworkPolicyIngressRule, ...] | None = None
    egress_rules: tuple[NetworkPolicyEgressRule, ...] | None = None


class WorkerGroupNetworkPolicy(RayStruct, frozen=True, kw_only=True):
    """Rules for one worker group's NetworkPolicy (overrides ``worker``)."""

    group_name: str
    ingress_rules: tuple[NetworkPolicyIngressRule, ...] | None = None
    egress_rules: tuple[NetworkPolicyEgressRule, ...] | None = None


class NetworkPolicyOptions(RayStruct, frozen=True, kw_only=True):
    """NetworkPolicies generated for the cluster (gate RayClusterNetworkPolicy)."""

    mode: Annotated[NetworkPolicyMode, crd_default("DenyAll")] = "DenyAll"
    head: NetworkPolicyRules | None = None
    worker: NetworkPolicyRules | None = None
    worker_groups: Annotated[
        tuple[WorkerGroupNetworkPolicy, ...] | None,
        Meta(extra_json_schema={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["groupName"]}),
    ] = None


class TLSOptions(RayStruct, frozen=True, kw_only=True):
    """mTLS between Ray nodes through cert-manager (gate RayClusterMTLS)."""

    enabled: bool | None = None


class CollectorOptions(RayStruct, frozen=True, kw_only=True):
    """The history-server collector sidecar."""

    image: str | None = None
    image_pull_policy: str | None = None
    resources: ResourceRequirements | None = None
    env: tuple[EnvVar, ...] | None = None


class HistoryServerOptions(RayStruct, frozen=True, kw_only=True):
    """History-server integration (gate RayClusterHistoryServer)."""

    collector_options: CollectorOptions | None = None


class RayClusterSpec(RayStruct, frozen=True, kw_only=True):
    """The desired state of a Ray cluster: one head group and any number of worker groups."""

    head_group_spec: HeadGroupSpec
    worker_group_specs: tuple[WorkerGroupSpec, ...] | None = None
    ray_version: Annotated[str, Meta(description="Ray version of the images, used for feature checks.")] = ""
    enable_in_tree_autoscaling: bool | None = None
    autoscaler_options: AutoscalerOptions | None = None
    head_service_annotations: StringMap | None = None
    suspend: bool | None = None
    managed_by: ManagedBy | None = None
    gcs_fault_tolerance_options: GcsFaultToleranceOptions | None = None
    auth_options: AuthOptions | None = None
    upgrade_strategy: RayClusterUpgradeStrategy | None = None
    network_policy: NetworkPolicyOptions | None = None
    tls_options: TLSOptions | None = None
    history_server_options: HistoryServerOptions | None = None


class HeadInfo(RayStruct, frozen=True, kw_only=True):
    """Where the head runs and how it is reached."""

    pod_ip: str = msgspec.field(default="", name="podIP")
    pod_name: str = ""
    service_ip: Annotated[str, Meta(description="ClusterIP of the head Service (the pod IP if headless).")] = (
        msgspec.field(default="", name="serviceIP")
    )
    service_name: str = ""


class RayClusterStatus(RayStruct, frozen=True, kw_only=True):
    """What the operator observed; written through the status subresource."""

    state: Annotated[str, Meta(description="Deprecated: ready, suspended (sticky once ready).")] = ""
    desired_cpu: Quantity | None = msgspec.field(default=None, name="desiredCPU")
    desired_memory: Quantity | None = None
    desired_gpu: Quantity | None = msgspec.field(default=None, name="desiredGPU")
    desired_tpu: Quantity | None = msgspec.field(default=None, name="desiredTPU")
    last_update_time: Annotated[Time | None, Meta(extra_json_schema={"nullable": True})] = None
    state_transition_times: Annotated[
        dict[str, Time] | None, Meta(description="When each state was entered (RFC3339).")
    ] = None
    endpoints: Annotated[StringMap | None, Meta(description="Head Service port name -> port.")] = None
    head: HeadInfo | None = None
    reason: str = ""
    conditions: ConditionList | None = None
    ready_worker_replicas: Int32 = 0
    available_worker_replicas: Int32 = 0
    desired_worker_replicas: Int32 = 0
    min_worker_replicas: Int32 = 0
    max_worker_replicas: Int32 = 0
    observed_generation: Int64 = 0


class RayCluster(RayStruct, frozen=True, kw_only=True, omit_defaults=False):
    """A Ray cluster: a head pod and groups of worker pods, managed as one unit (ray.io/v1).

    In Python, ``apiVersion``, ``kind``, ``metadata`` and ``status`` are always encoded.
    """

    api_version: str = API_VERSION
    kind: str = "RayCluster"
    metadata: dict[str, Any] = {}
    spec: RayClusterSpec
    status: RayClusterStatus = RayClusterStatus()
