"""What the watcher's dashboard prober must poll for RayServices (the contract reconcile relies on).

Role: reconcile never polls; it reads two observation kinds the prober projects under the RayService's
key and publishes (as an ``Observation``) **only when the significant answer changed**:

- ``obs-serve``, entry name = RayCluster name: ``GET /api/serve/applications/?api_type=declarative``
  on the cluster's dashboard (the DashboardRef below: the cluster's head Service and dashboard port,
  its auth Secret). Data: the JSON body on 200 (significant: each application's ``status`` and
  ``message`` and each deployment's ``status`` and ``message``); else
  ``{"http_status": N, "error": "<text>"}`` (``N`` = 0 when unreachable).
- ``obs-servehealth``, entry name = head pod name: ``GET http://<headPodIP>:<servePort>/-/healthz``
  (direct, or through the API server's pod proxy). Data:
  ``{"healthy": <2xx and body "success">, "http_status": N, "pod_uid": <the head pod's uid>}``; the
  uid lets reconcile ignore an answer about an earlier pod of the same name.

Targets (:func:`probe_targets`): for every RayService not being deleted, not Suspending/Suspended and
not in the terminal InitializingTimeout state, its active and pending clusters
(``status.activeServiceStatus.rayClusterName``, ``status.pendingServiceStatus.rayClusterName``):
the Serve probe once the cluster's ``HeadPodReady`` condition is True, the health probe once its head
pod has an IP (skipped with ``excludeHeadPodFromServeSvc``). The prober stops polling a target as soon
as it leaves this set (watch events tell it) and may delete its observation then.

Invariants: pure; :func:`probe_targets` never raises and returns nothing for anything not pollable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from schema.decision import OBS_SERVE, OBS_SERVE_HEALTH, Snapshot
from schema.keys import ReconcileKey
from schema.messages import DashboardRef
from services.reconciler.rayjob.cluster import dashboard_ref
from services.reconciler.rayservice.clusters import being_deleted, head_pod, name_of, serve_port
from services.reconciler.rayservice.model import mapping, text

SERVE_APPLICATIONS_PATH = "/api/serve/applications/?api_type=declarative"
HEALTHZ_PATH = "/-/healthz"


class ServeProbe(msgspec.Struct, frozen=True, kw_only=True):
    """Poll a cluster's Serve applications; the answer goes to ``obs-serve``/``<cluster>``."""

    key: ReconcileKey
    cluster: str
    dashboard: DashboardRef
    path: str = SERVE_APPLICATIONS_PATH
    entry_kind: str = OBS_SERVE


class HealthProbe(msgspec.Struct, frozen=True, kw_only=True):
    """Poll a head pod's Serve proxy; the answer goes to ``obs-servehealth``/``<pod>``."""

    key: ReconcileKey
    cluster: str
    namespace: str
    pod: str
    pod_uid: str
    pod_ip: str
    port: int
    path: str = HEALTHZ_PATH
    entry_kind: str = OBS_SERVE_HEALTH


def _true(conditions: object, type_: str) -> bool:
    return isinstance(conditions, list) and any(
        isinstance(c, Mapping) and c.get("type") == type_ and c.get("status") == "True" for c in conditions
    )


def probe_targets(snapshot: Snapshot) -> tuple[list[ServeProbe], list[HealthProbe]]:
    """The probes a RayService key needs now (from its own snapshot)."""
    rayservice = snapshot.owner()
    if rayservice is None or being_deleted(rayservice):
        return [], []
    status = mapping(rayservice.get("status"))
    conditions = status.get("conditions")
    if _true(conditions, "Suspending") or _true(conditions, "Suspended"):
        return [], []
    for condition in conditions if isinstance(conditions, list) else []:
        if isinstance(condition, Mapping) and condition.get("reason") == "InitializingTimeout":
            return [], []
    exclude = mapping(rayservice.get("spec")).get("excludeHeadPodFromServeSvc") is True
    namespace = snapshot.key.namespace
    serve: list[ServeProbe] = []
    health: list[HealthProbe] = []
    for role in ("activeServiceStatus", "pendingServiceStatus"):
        name = text(mapping(status.get(role)).get("rayClusterName"))
        cluster = snapshot.get("RayCluster", name) if name else None
        if cluster is None or being_deleted(cluster):
            continue
        if _true(mapping(cluster.get("status")).get("conditions"), "HeadPodReady"):
            dashboard = dashboard_ref(snapshot, namespace=namespace, cluster_name=name, cluster=cluster)
            serve.append(ServeProbe(key=snapshot.key, cluster=name, dashboard=dashboard))
        pod = head_pod(snapshot, name)
        pod_ip = text(mapping(mapping(pod).get("status")).get("podIP"))
        if exclude or pod is None or not pod_ip:
            continue
        health.append(
            HealthProbe(
                key=snapshot.key,
                cluster=name,
                namespace=namespace,
                pod=name_of(pod),
                pod_uid=text(mapping(pod.get("metadata")).get("uid")),
                pod_ip=pod_ip,
                port=_pod_serve_port(pod, cluster),
            )
        )
    return serve, health


def _pod_serve_port(pod: Mapping[str, Any], cluster: Mapping[str, Any]) -> int:
    """The head pod's Ray container port named ``serve`` (else the cluster template's, else 8000)."""
    containers = mapping(pod.get("spec")).get("containers")
    if isinstance(containers, list) and containers and isinstance(containers[0], Mapping):
        for port in containers[0].get("ports") or []:
            if isinstance(port, Mapping) and port.get("name") == "serve" and isinstance(port.get("containerPort"), int):
                return int(port["containerPort"])
    return serve_port(cluster)
