"""The RayService rows of the prober: Serve applications per cluster and the head pods' Serve proxy health.

Role: the watcher's side of the contract ``services.reconciler.rayservice.probes`` documents (the
watcher may not import the reconciler, so the rules are restated here over the projection's objects):

- ``serve`` → entry ``obs-serve``/``<cluster>``: ``GET /api/serve/applications/?api_type=declarative`` on
  the cluster's dashboard (its head Service, the Service's ``dashboard`` port, else the head container's,
  else 8265; the auth Secret of a token-auth cluster). Data: the body, or ``{"http_status", "error"}``.
  Significant: each application's status and message and each deployment's status and message.
- ``servehealth`` → entry ``obs-servehealth``/``<head pod>``: ``GET /-/healthz`` on the head pod's Serve
  port (the container port named ``serve``, else the cluster template's, else 8000), direct or through
  the pod proxy. Data: ``{"healthy": 2xx and body "success", "http_status": N, "pod_uid": uid}``.
  Significant: healthy and the pod uid.

Targets: every RayService not being deleted, not Suspending/Suspended and not timed out
(InitializingTimeout), for its active and pending clusters (``status.activeServiceStatus`` /
``pendingServiceStatus.rayClusterName``, not being deleted): the Serve probe once the cluster's
``HeadPodReady`` condition is True, the health probe once its head pod has an IP (never with
``excludeHeadPodFromServeSvc``).

Invariants: pure functions of the projected objects; they never raise on malformed objects (untrusted
data is read leniently and skipped). Observations are never deleted when a target goes away: replay
rebuilds snapshots from the published inputs, and a deletion would be an input nobody published.

Not here: polling and publishing (``prober``), URLs and tokens (``dashboard``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from schema.decision import OBS_SERVE, OBS_SERVE_HEALTH
from schema.keys import ReconcileKey
from schema.messages import DashboardRef
from services.watcher.dashboard import DashboardAnswer, PodEndpoint
from services.watcher.prober import DEFAULT_DASHBOARD_PORT, PROBES, ProbeKind, ProbeTarget, check_name

SERVE_APPLICATIONS_PATH: Final = "/api/serve/applications/?api_type=declarative"
HEALTHZ_PATH: Final = "/-/healthz"
DEFAULT_SERVE_PORT: Final = 8000
_ROLES: Final = ("activeServiceStatus", "pendingServiceStatus")

Objects = Mapping[str, list[dict[str, Any]]]


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(obj.get("metadata"))


def _deleting(obj: Mapping[str, Any]) -> bool:
    return bool(_metadata(obj).get("deletionTimestamp"))


def _true(conditions: object, type_: str) -> bool:
    return isinstance(conditions, list) and any(
        isinstance(c, Mapping) and c.get("type") == type_ and c.get("status") == "True" for c in conditions
    )


def _by_name(objects: Objects, kind: str) -> dict[tuple[str, str], dict[str, Any]]:
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for obj in objects.get(kind, ()):
        metadata = _metadata(obj)
        namespace, name = _text(metadata.get("namespace")), _text(metadata.get("name"))
        if namespace and name:
            found[(namespace, name)] = obj
    return found


@dataclass(frozen=True, kw_only=True)
class ServingCluster:
    """An active or pending cluster of a live RayService."""

    key: ReconcileKey
    name: str
    cluster: Mapping[str, Any]
    exclude_head: bool


def serving_clusters(objects: Objects) -> list[ServingCluster]:
    """The active and pending clusters of every RayService that is to be probed (see the module header)."""
    clusters = _by_name(objects, "RayCluster")
    found: list[ServingCluster] = []
    for service in objects.get("RayService", ()):
        metadata = _metadata(service)
        namespace, name = _text(metadata.get("namespace")), _text(metadata.get("name"))
        if not namespace or not name or _deleting(service):
            continue
        status = _mapping(service.get("status"))
        conditions = status.get("conditions")
        if _true(conditions, "Suspending") or _true(conditions, "Suspended"):
            continue
        if isinstance(conditions, list) and any(
            isinstance(c, Mapping) and c.get("reason") == "InitializingTimeout" for c in conditions
        ):
            continue
        exclude = _mapping(service.get("spec")).get("excludeHeadPodFromServeSvc") is True
        key = ReconcileKey(kind="RayService", namespace=namespace, name=name)
        for role in _ROLES:
            cluster_name = _text(_mapping(status.get(role)).get("rayClusterName"))
            cluster = clusters.get((namespace, cluster_name)) if cluster_name else None
            if cluster is None or _deleting(cluster):
                continue
            found.append(ServingCluster(key=key, name=cluster_name, cluster=cluster, exclude_head=exclude))
    return found


def _head_container(cluster: Mapping[str, Any]) -> Mapping[str, Any]:
    template = _mapping(_mapping(_mapping(cluster.get("spec")).get("headGroupSpec")).get("template"))
    containers = _mapping(template.get("spec")).get("containers")
    if isinstance(containers, list) and containers:
        return _mapping(containers[0])
    return {}


def _container_port(container: Mapping[str, Any], name: str) -> int | None:
    ports = container.get("ports")
    for port in ports if isinstance(ports, list) else ():
        number = _mapping(port).get("containerPort")
        if _mapping(port).get("name") == name and isinstance(number, int) and not isinstance(number, bool):
            return number
    return None


def dashboard_of(
    cluster_name: str, cluster: Mapping[str, Any], *, namespace: str, services: Mapping[tuple[str, str], Any]
) -> DashboardRef:
    """Where a cluster's dashboard is (as reconcile's ``dashboard_ref`` computes it)."""
    spec = _mapping(cluster.get("spec"))
    head_service = _mapping(_mapping(spec.get("headGroupSpec")).get("headService"))
    service_name = _text(_metadata(head_service).get("name")) or f"{cluster_name}-head-svc"
    port: int | None = None
    ports = _mapping(_mapping(services.get((namespace, service_name))).get("spec")).get("ports")
    for entry in ports if isinstance(ports, list) else ():
        number = _mapping(entry).get("port")
        if _mapping(entry).get("name") == "dashboard" and isinstance(number, int) and not isinstance(number, bool):
            port = number
            break
    if port is None:
        port = _container_port(_head_container(cluster), "dashboard") or DEFAULT_DASHBOARD_PORT
    auth = _mapping(spec.get("authOptions"))
    secret = ""
    if auth.get("mode") == "token":
        secret = _text(auth.get("secretName")) or check_name(cluster_name)
    return DashboardRef(namespace=namespace, service=service_name, port=port, cluster=cluster_name, auth_secret=secret)


def serve_targets(objects: Objects) -> list[ProbeTarget]:
    """Serve application probes: one per serving cluster whose HeadPodReady condition is True."""
    services = _by_name(objects, "Service")
    targets: list[ProbeTarget] = []
    for serving in serving_clusters(objects):
        if not _true(_mapping(serving.cluster.get("status")).get("conditions"), "HeadPodReady"):
            continue
        namespace = serving.key.namespace
        targets.append(
            ProbeTarget(
                key=serving.key,
                source="serve",
                entry_kind=OBS_SERVE,
                entry_name=serving.name,
                path=SERVE_APPLICATIONS_PATH,
                dashboard=dashboard_of(serving.name, serving.cluster, namespace=namespace, services=services),
            )
        )
    return targets


def _head_pods(objects: Objects, wanted: set[tuple[str, str]]) -> dict[tuple[str, str], dict[str, Any]]:
    """The head pod of each wanted ``(namespace, cluster)`` (a live one first)."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for pod in objects.get("Pod", ()):
        metadata = _metadata(pod)
        labels = _mapping(metadata.get("labels"))
        ref = (_text(metadata.get("namespace")), _text(labels.get("ray.io/cluster")))
        if ref not in wanted or labels.get("ray.io/node-type") != "head":
            continue
        if ref not in found or (_deleting(found[ref]) and not _deleting(pod)):
            found[ref] = pod
    return found


def health_targets(objects: Objects) -> list[ProbeTarget]:
    """Serve proxy health probes: the head pod (with an IP) of each serving cluster."""
    serving = [s for s in serving_clusters(objects) if not s.exclude_head]
    pods = _head_pods(objects, {(s.key.namespace, s.name) for s in serving})
    targets: list[ProbeTarget] = []
    for cluster in serving:
        pod = pods.get((cluster.key.namespace, cluster.name))
        if pod is None:
            continue
        metadata = _metadata(pod)
        pod_ip = _text(_mapping(pod.get("status")).get("podIP"))
        if not pod_ip:
            continue
        containers = _mapping(pod.get("spec")).get("containers")
        first = _mapping(containers[0]) if isinstance(containers, list) and containers else {}
        port = (
            _container_port(first, "serve") or _container_port(_head_container(cluster.cluster), "serve")
        ) or DEFAULT_SERVE_PORT
        name = _text(metadata.get("name"))
        targets.append(
            ProbeTarget(
                key=cluster.key,
                source="servehealth",
                entry_kind=OBS_SERVE_HEALTH,
                entry_name=name,
                path=HEALTHZ_PATH,
                pod=PodEndpoint(
                    namespace=cluster.key.namespace, name=name, uid=_text(metadata.get("uid")), ip=pod_ip, port=port
                ),
            )
        )
    return targets


def serve_significant(data: dict[str, Any]) -> Any:
    """What a change of Serve applications means: each app's and deployment's status and message."""
    if "applications" not in data and "http_status" in data:
        return ("error", data.get("http_status"), data.get("error"))
    apps = []
    for name, raw in sorted(_mapping(data.get("applications")).items()):
        app = _mapping(raw)
        deployments = sorted(
            (str(d), _text(_mapping(v).get("status")), _text(_mapping(v).get("message")))
            for d, v in _mapping(app.get("deployments")).items()
        )
        apps.append((str(name), _text(app.get("status")), _text(app.get("message")), deployments))
    return ("apps", apps)


def health_data(target: ProbeTarget, answer: DashboardAnswer) -> dict[str, Any]:
    """The ``obs-servehealth`` data of a ``/-/healthz`` answer."""
    healthy = 200 <= answer.status <= 299 and answer.data.strip() == b"success"
    return {"healthy": healthy, "http_status": answer.status, "pod_uid": target.pod.uid if target.pod else ""}


def health_significant(data: dict[str, Any]) -> Any:
    """What a change of proxy health means: healthy or not, and of which pod incarnation."""
    return (data.get("healthy") is True, data.get("pod_uid"))


SERVE_PROBES: Final[tuple[ProbeKind, ...]] = (
    ProbeKind(
        name="serve",
        targets=serve_targets,
        significant=serve_significant,
        kinds=("RayService", "RayCluster", "Service"),
    ),
    ProbeKind(
        name="servehealth",
        targets=health_targets,
        significant=health_significant,
        kinds=("RayService", "RayCluster", "Pod"),
        observe=health_data,
    ),
)

WATCHER_PROBES: Final[tuple[ProbeKind, ...]] = (*PROBES, *SERVE_PROBES)
"""Every probe kind the watcher runs: RayJob's and RayService's."""
