"""The prober contract: what the watcher's dashboard prober polls for which reconcile key, where the
answer goes, and which part of an answer counts as a change.

Role: reconcile never polls. It reads observation entries the prober projects under its key, and the
prober publishes one (as an ``Observation``) only when the significant part of the answer changed.
Both sides use this module, so the rules exist once: the watcher computes its targets with
:func:`probe_targets` over every projected object, reconcile (and its tests) with
:func:`snapshot_targets` over one key's snapshot, and the two agree by construction. Commands that call
a dashboard (submit, stop, Serve config) address it with the same :func:`dashboard_ref`.

The rules (docs/architecture.md#prober):

- **RayJob** → entry ``obs-rayjob``/``<status.jobId>``: ``GET /api/jobs/<jobId>`` on the dashboard of
  the RayCluster ``status.rayClusterName``, while ``status.jobDeploymentStatus`` is ``Running``, the
  RayJob is not being deleted and its RayCluster is known (before that, the address and auth Secret are
  not: a poll could only report a wrong failure). Data: the JSON body on 2xx, else
  ``{"http_status": N, "error": "..."}`` (``N`` = 0 when unreachable). Significant: status, message,
  start and end time (or the error).
- **RayService**, for its active and pending clusters (``status.activeServiceStatus`` /
  ``pendingServiceStatus.rayClusterName``, not being deleted), unless the RayService is being deleted,
  Suspending/Suspended or timed out (a condition with reason ``InitializingTimeout``):

  - ``obs-serve``/``<cluster>``: ``GET /api/serve/applications/?api_type=declarative`` on the cluster's
    dashboard once its ``HeadPodReady`` condition is True. Significant: each application's and each
    deployment's status and message (or the error).
  - ``obs-servehealth``/``<head pod>``: ``GET /-/healthz`` on the head pod's Serve port once the pod has
    an IP (never with ``excludeHeadPodFromServeSvc``). Data:
    ``{"healthy": 2xx and body "success", "http_status": N, "pod_uid": uid}``; the uid lets reconcile
    ignore an answer about an earlier pod of the same name. Significant: healthy and the uid.

- **RayCluster**, **RayCronJob**: nothing is polled.

A cluster's dashboard (:func:`dashboard_ref`): its head Service (``headGroupSpec.headService``'s name,
else ``<c>-head-svc``), the port named ``dashboard`` on that Service, else on the head container, else
8265; the auth Secret of a token-auth cluster (``authOptions.secretName``, else CheckName(``<c>``)).

Invariants: pure functions of plain objects; they never raise on malformed objects (untrusted data is
read leniently and skipped).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import msgspec

from schema.decision import OBS_RAY_JOB, OBS_SERVE, OBS_SERVE_HEALTH, Snapshot
from schema.keys import KeyKind, ReconcileKey
from schema.messages import DashboardRef
from schema.objects import (
    being_deleted,
    condition_true,
    container_port,
    first_container,
    head_container,
    labels_of,
    mapping,
    name_of,
    namespace_of,
    service_port,
    text,
)
from schema.ray import conventions
from schema.ray.rayjob import JOB_DEPLOYMENT_RUNNING

SOURCE_RAYJOB: Final = "rayjob"
SOURCE_SERVE: Final = "serve"
SOURCE_SERVE_HEALTH: Final = "servehealth"
SERVE_APPLICATIONS_PATH: Final = "/api/serve/applications/?api_type=declarative"
HEALTHZ_PATH: Final = "/-/healthz"

RAYJOB_KINDS: Final = ("RayJob", "RayCluster", "Service")
SERVE_KINDS: Final = ("RayService", "RayCluster", "Service")
SERVE_HEALTH_KINDS: Final = ("RayService", "RayCluster", "Pod")
"""The kinds each rule reads, so the watcher hands it only those."""
PROBED_KEYS: Final[tuple[KeyKind, ...]] = ("RayJob", "RayService")
"""The reconcile keys whose dashboards are probed. Every object a rule reads of one is stored under its
key too (the key rules: a cluster made for it or selected by it, that cluster's Services and Pods), so a
prober needs no other key's entries."""

_ROLES: Final = ("activeServiceStatus", "pendingServiceStatus")

Objects = Mapping[str, Iterable[Mapping[str, Any]]]
"""Objects by kind (the watcher's projection, or one snapshot's entries)."""


class PodEndpoint(msgspec.Struct, frozen=True, kw_only=True):
    """A port of one pod (the Ray head's Serve proxy), and which incarnation of the pod it is."""

    namespace: str
    name: str
    uid: str
    ip: str
    port: int


class ProbeTarget(msgspec.Struct, frozen=True, kw_only=True):
    """One thing to poll: a dashboard path (or a pod's port and path), and where its observation goes."""

    key: ReconcileKey
    source: str
    entry_kind: str
    entry_name: str
    path: str
    dashboard: DashboardRef | None = None
    pod: PodEndpoint | None = None
    """When set, the request goes to this pod's port instead of a dashboard."""


def job_path(job_id: str) -> str:
    """The dashboard path of one Ray job."""
    return f"/api/jobs/{job_id}"


def head_service_name(cluster_name: str, cluster: Mapping[str, Any] | None) -> str:
    """The cluster's head Service: ``headGroupSpec.headService.metadata.name`` or ``<c>-head-svc``."""
    head_service = mapping(mapping(mapping(mapping(cluster).get("spec")).get("headGroupSpec")).get("headService"))
    return name_of(head_service) or f"{cluster_name}-head-svc"


def token_auth_secret(cluster_name: str, cluster_spec: Mapping[str, Any]) -> str:
    """The auth Secret of a token-auth cluster (``authOptions.secretName`` or CheckName(<c>)); "" if off."""
    auth = mapping(cluster_spec.get("authOptions"))
    if auth.get("mode") != "token":
        return ""
    return text(auth.get("secretName")) or conventions.check_name(cluster_name)


def dashboard_ref(
    *, namespace: str, cluster_name: str, cluster: Mapping[str, Any] | None, head_service: Mapping[str, Any] | None
) -> DashboardRef:
    """How to reach a cluster's dashboard.

    Args:
        namespace: the cluster's namespace.
        cluster_name: the RayCluster's name.
        cluster: the RayCluster (None when unknown: defaults apply).
        head_service: the Service named :func:`head_service_name`, when known.
    """
    cluster_spec = mapping(mapping(cluster).get("spec"))
    port = (
        service_port(head_service, conventions.PORT_DASHBOARD)
        or container_port(head_container(cluster_spec), conventions.PORT_DASHBOARD)
        or conventions.DEFAULT_DASHBOARD_PORT
    )
    return DashboardRef(
        namespace=namespace,
        service=head_service_name(cluster_name, cluster),
        port=port,
        cluster=cluster_name,
        auth_secret=token_auth_secret(cluster_name, cluster_spec),
    )


def snapshot_dashboard(snapshot: Snapshot, *, cluster_name: str, cluster: Mapping[str, Any] | None) -> DashboardRef:
    """:func:`dashboard_ref` of a cluster in the key's namespace, its head Service read from the snapshot."""
    service = snapshot.get("Service", head_service_name(cluster_name, cluster))
    return dashboard_ref(
        namespace=snapshot.key.namespace, cluster_name=cluster_name, cluster=cluster, head_service=service
    )


def serve_port(cluster: Mapping[str, Any] | None) -> int:
    """The head container's port named ``serve`` (KubeRay's ``GetServePort``), default 8000."""
    found = container_port(head_container(mapping(mapping(cluster).get("spec"))), conventions.PORT_SERVE)
    return found or conventions.DEFAULT_SERVE_PORT


class _Index:
    """The objects of the kinds a rule reads: each kind's list, by (namespace, name), and head pods by
    (namespace, cluster), each built the first time a rule asks. A round runs over everything the watch
    side holds (40,000 Pods at 10,000 clusters): a kind no rule asks about is not walked, and no lookup
    walks a whole kind."""

    def __init__(self, objects: Objects, kinds: Iterable[str]) -> None:
        self._source = objects
        self._kinds = frozenset(kinds)
        self._lists: dict[str, list[Mapping[str, Any]]] = {}
        self._by_name: dict[str, dict[tuple[str, str], Mapping[str, Any]]] = {}
        self._heads: dict[tuple[str, str], list[Mapping[str, Any]]] | None = None

    def of_kind(self, kind: str) -> list[Mapping[str, Any]]:
        """Every object of ``kind``, one of the rule's kinds.

        Raises:
            KeyError: the rule did not declare ``kind``.
        """
        found = self._lists.get(kind)
        if found is None:
            if kind not in self._kinds:
                raise KeyError(kind)
            found = self._lists[kind] = [obj for obj in self._source.get(kind, ()) if isinstance(obj, Mapping)]
        return found

    def get(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        by_name = self._by_name.get(kind)
        if by_name is None:
            by_name = self._by_name[kind] = {}
            for obj in self.of_kind(kind):
                by_name.setdefault((namespace_of(obj), name_of(obj)), obj)
        return by_name.get((namespace, name))

    def dashboard(self, namespace: str, cluster_name: str, cluster: Mapping[str, Any] | None) -> DashboardRef:
        service = self.get("Service", namespace, head_service_name(cluster_name, cluster))
        return dashboard_ref(namespace=namespace, cluster_name=cluster_name, cluster=cluster, head_service=service)

    def head_pod(self, namespace: str, cluster_name: str) -> Mapping[str, Any] | None:
        """The cluster's head pod: a live one first, then by name."""
        if self._heads is None:
            self._heads = {}
            for pod in self.of_kind("Pod"):
                labels = labels_of(pod)
                cluster = labels.get(conventions.LABEL_CLUSTER)
                if isinstance(cluster, str) and labels.get(conventions.LABEL_NODE_TYPE) == conventions.NODE_HEAD:
                    self._heads.setdefault((namespace_of(pod), cluster), []).append(pod)
        pods = self._heads.get((namespace, cluster_name), ())
        return min(pods, key=lambda pod: (being_deleted(pod), name_of(pod)), default=None)


def rayjob_targets(objects: Objects) -> list[ProbeTarget]:
    """The RayJob rule: ``/api/jobs/<jobId>`` of every Running RayJob not being deleted, once its cluster is known."""
    index = _Index(objects, RAYJOB_KINDS)
    targets: list[ProbeTarget] = []
    for rayjob in index.of_kind("RayJob"):
        status = mapping(rayjob.get("status"))
        namespace, name = namespace_of(rayjob), name_of(rayjob)
        job_id, cluster_name = text(status.get("jobId")), text(status.get("rayClusterName"))
        if status.get("jobDeploymentStatus") != JOB_DEPLOYMENT_RUNNING or being_deleted(rayjob):
            continue
        if not namespace or not name or not job_id or not cluster_name:
            continue
        cluster = index.get("RayCluster", namespace, cluster_name)
        if cluster is None:
            continue  # its dashboard address and auth Secret are not known yet
        targets.append(
            ProbeTarget(
                key=ReconcileKey(kind="RayJob", namespace=namespace, name=name),
                source=SOURCE_RAYJOB,
                entry_kind=OBS_RAY_JOB,
                entry_name=job_id,
                path=job_path(job_id),
                dashboard=index.dashboard(namespace, cluster_name, cluster),
            )
        )
    return targets


def _serving_clusters(index: _Index) -> list[tuple[ReconcileKey, bool, str, Mapping[str, Any]]]:
    """(key, excludeHeadPodFromServeSvc, cluster name, cluster) of every RayService to be probed."""
    found: list[tuple[ReconcileKey, bool, str, Mapping[str, Any]]] = []
    for rayservice in index.of_kind("RayService"):
        namespace, name = namespace_of(rayservice), name_of(rayservice)
        status = mapping(rayservice.get("status"))
        conditions = status.get("conditions")
        if not namespace or not name or being_deleted(rayservice):
            continue
        if condition_true(conditions, "Suspending") or condition_true(conditions, "Suspended"):
            continue
        if isinstance(conditions, list) and any(mapping(c).get("reason") == "InitializingTimeout" for c in conditions):
            continue
        exclude = mapping(rayservice.get("spec")).get("excludeHeadPodFromServeSvc") is True
        key = ReconcileKey(kind="RayService", namespace=namespace, name=name)
        for role in _ROLES:
            cluster_name = text(mapping(status.get(role)).get("rayClusterName"))
            cluster = index.get("RayCluster", namespace, cluster_name) if cluster_name else None
            if cluster is not None and not being_deleted(cluster):
                found.append((key, exclude, cluster_name, cluster))
    return found


def serve_targets(objects: Objects) -> list[ProbeTarget]:
    """The Serve applications rule: one per serving cluster whose HeadPodReady condition is True."""
    index = _Index(objects, SERVE_KINDS)
    return [
        ProbeTarget(
            key=key,
            source=SOURCE_SERVE,
            entry_kind=OBS_SERVE,
            entry_name=cluster_name,
            path=SERVE_APPLICATIONS_PATH,
            dashboard=index.dashboard(key.namespace, cluster_name, cluster),
        )
        for key, _, cluster_name, cluster in _serving_clusters(index)
        if condition_true(mapping(cluster.get("status")).get("conditions"), "HeadPodReady")
    ]


def serve_health_targets(objects: Objects) -> list[ProbeTarget]:
    """The Serve proxy health rule: the head pod (with an IP) of each serving cluster."""
    index = _Index(objects, SERVE_HEALTH_KINDS)
    targets: list[ProbeTarget] = []
    for key, exclude, cluster_name, cluster in _serving_clusters(index):
        pod = index.head_pod(key.namespace, cluster_name)
        pod_ip = text(mapping(mapping(pod).get("status")).get("podIP"))
        if exclude or pod is None or not pod_ip:
            continue
        port = container_port(first_container(mapping(pod.get("spec"))), conventions.PORT_SERVE) or serve_port(cluster)
        pod_name = name_of(pod)
        uid = text(mapping(pod.get("metadata")).get("uid"))
        targets.append(
            ProbeTarget(
                key=key,
                source=SOURCE_SERVE_HEALTH,
                entry_kind=OBS_SERVE_HEALTH,
                entry_name=pod_name,
                path=HEALTHZ_PATH,
                pod=PodEndpoint(namespace=key.namespace, name=pod_name, uid=uid, ip=pod_ip, port=port),
            )
        )
    return targets


def probe_targets(objects: Objects) -> list[ProbeTarget]:
    """Every target of every rule."""
    return [*rayjob_targets(objects), *serve_targets(objects), *serve_health_targets(objects)]


def snapshot_targets(snapshot: Snapshot) -> list[ProbeTarget]:
    """The targets of one key, from its own snapshot (what the prober polls for it)."""
    kinds = {*RAYJOB_KINDS, *SERVE_KINDS, *SERVE_HEALTH_KINDS}
    objects = {kind: snapshot.of_kind(kind) for kind in kinds}
    return [target for target in probe_targets(objects) if target.key == snapshot.key]


def job_known(data: Mapping[str, Any]) -> bool:
    """Whether an ``obs-rayjob`` entry shows the dashboard knows the job (it answered with the job, not an
    error such as 404 before the job is submitted)."""
    return "status" in data


def job_significant(data: Mapping[str, Any]) -> Any:
    """What a change of a Ray job means: status, message and times (or the error seen)."""
    if "http_status" in data and "status" not in data:
        return ("error", data.get("http_status"), data.get("error"))
    return (data.get("status"), data.get("message"), data.get("start_time"), data.get("end_time"))


def serve_significant(data: Mapping[str, Any]) -> Any:
    """What a change of Serve applications means: each app's and deployment's status and message."""
    if "applications" not in data and "http_status" in data:
        return ("error", data.get("http_status"), data.get("error"))
    apps = []
    for name, raw in sorted(mapping(data.get("applications")).items()):
        app = mapping(raw)
        deployments = sorted(
            (str(d), text(mapping(v).get("status")), text(mapping(v).get("message")))
            for d, v in mapping(app.get("deployments")).items()
        )
        apps.append((str(name), text(app.get("status")), text(app.get("message")), deployments))
    return ("apps", apps)


def serve_health_significant(data: Mapping[str, Any]) -> Any:
    """What a change of proxy health means: healthy or not, and of which pod incarnation."""
    return (data.get("healthy") is True, data.get("pod_uid"))
