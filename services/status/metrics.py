"""Custom-resource metrics the status service derives from the transitions it persists.

Role: KubeRay's operator metrics whose meaning lives in the history rather than in one reconcile, with
KubeRay's names and labels where the meaning matches (docs/behaviour.md#9), exported on the status service's
``/metrics``. Live resources (created and not deleted) are seeded from the database at start
(:meth:`ResourceMetrics.load`), then kept up to date from the watcher's lifecycle facts and the
confirmed transitions:

- ``kuberay_service_info{name, namespace, uid}`` = 1 for every live RayService;
- ``raybus_rayservice_upgrade_duration_seconds{name, namespace}`` (histogram): from the moment a pending
  cluster is prepared to replace the active one to its promotion (the RayService view's
  ``last_upgrade_seconds``), one sample per completed upgrade;
- ``kuberay_job_info{name, namespace, uid}`` = 1 and ``kuberay_job_deployment_status{name, namespace,
  uid, deployment_status}`` = 1 for every live RayJob (its current ``jobDeploymentStatus``; "" is New);
- ``kuberay_job_execution_duration_seconds{name, namespace, uid, job_deployment_status, retry_count}``
  (gauge): when a status write takes a RayJob from a non-terminal state to Complete, Failed or Retrying
  (Running → Failed → Retrying in one write counts as Retrying, as in KubeRay, which compares the status
  before and after a pass), the seconds since that attempt went Initializing; ``retry_count`` is the
  number of failed attempts before it. Its series go when the RayJob is deleted, as in KubeRay.
- ``kuberay_cluster_info{name, namespace, uid, owner_kind}`` = 1 for every live RayCluster; ``owner_kind``
  is ``RayJob`` or ``RayService`` when such a resource named it as its cluster (a RayJob's
  ``rayClusterName``, a RayService's pending or active cluster), else ``None``, as KubeRay's
  ``ray.io/originated-from-crd`` label says;
- ``kuberay_cluster_condition_provisioned{name, namespace, uid, condition}`` = 1 for every live RayCluster,
  ``condition`` "true" when its ``RayClusterProvisioned`` condition is True, else "false";
- ``kuberay_cluster_provisioned_duration_seconds{name, namespace, uid}`` (gauge): when
  ``RayClusterProvisioned`` goes from False (or unset) to True, the seconds since the RayCluster's
  creation; gone with the RayCluster, as KubeRay's ``DeleteRayClusterMetrics``.

Invariants: only transitions this database inserted for the first time are observed
(``PersistStats.inserted``), so a redelivered result never counts twice; every status replica reports
what it persisted (sum histograms across replicas; the info gauges are the same on each once it has
loaded). Per-kind rules are small functions keyed by kind, so other kinds' metrics are one more entry.
Observable gauges report this instance's state: without an explicit meter each instance gets its own
instrumentation scope (OpenTelemetry would keep the callbacks of the first instrument of a name and
ignore a restarted service's), and :meth:`ResourceMetrics.close` empties it when the service stops.

Not here: persisting (``store``), the folds (``transition_folds``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

import msgspec
from opentelemetry.metrics import CallbackOptions, Meter, Observation

from schema.keys import KeyKind
from services.runtime.metrics import meter as runtime_meter
from services.status.kinds import LIFECYCLE_CREATED, LIFECYCLE_DELETED, LIFECYCLE_FIELD
from services.status.store import InsertedTransition, PersistStats, ResourceRecord, StatusStore
from services.status.transition_folds import FieldMark, RayServiceState

log = logging.getLogger(__name__)

PAGE: Final = 500
"""Resources read per query when seeding the live resources."""
JOB_STATUS_FIELD: Final = "jobDeploymentStatus"
JOB_TERMINAL: Final = frozenset({"Complete", "Failed"})
JOB_ENDS: Final = JOB_TERMINAL | {"Retrying"}
"""Where an attempt ends (KubeRay's ``emitRayJobExecutionDuration``)."""
PROVISIONED_FIELD: Final = "condition/RayClusterProvisioned"
SERVICE_CLUSTER_FIELDS: Final = frozenset({"pendingCluster", "activeCluster"})
"""RayService transition fields whose new value is a RayCluster it owns."""


@dataclass
class _Job:
    """What the RayJob gauges need of one live RayJob."""

    labels: dict[str, str]
    status: str = ""
    started_at: datetime | None = None
    """When the current attempt went Initializing."""
    failures: int = 0
    """Failed attempts so far (KubeRay's ``status.failed``)."""
    durations: dict[tuple[str, int], float] = field(default_factory=dict)
    """Execution duration by (job_deployment_status, retry_count)."""


@dataclass
class _Cluster:
    """What the RayCluster gauges need of one live RayCluster."""

    labels: dict[str, str]
    created_at: datetime | None = None
    provisioned: bool = False
    provisioned_seconds: float | None = None


def _labels(name: str, namespace: str, uid: str) -> dict[str, str]:
    return {"name": name, "namespace": namespace, "uid": uid}


class ResourceMetrics:
    """The instruments, and the in-memory state the observable ones report."""

    def __init__(self, meter: Meter | None = None) -> None:
        m = meter or runtime_meter(__name__, version=f"instance-{id(self):x}")
        self._services: dict[str, dict[str, str]] = {}
        """Live RayServices: uid → labels."""
        self._jobs: dict[str, _Job] = {}
        """Live RayJobs by uid."""
        self._clusters: dict[str, _Cluster] = {}
        """Live RayClusters by uid."""
        self._owners: dict[tuple[str, str], str] = {}
        """(namespace, RayCluster name) → the kind that named it as its cluster."""
        self._gone: set[str] = set()
        """Deleted uids (a late fact of one never brings it back)."""
        m.create_observable_gauge(
            "kuberay_service_info",
            callbacks=[self._service_info],
            description="Metadata information about RayService custom resources",
        )
        self._upgrade_seconds = m.create_histogram(
            "raybus_rayservice_upgrade_duration_seconds",
            unit="s",
            description="RayService upgrades: from preparing a new cluster to promoting it",
        )
        m.create_observable_gauge(
            "kuberay_job_info",
            callbacks=[self._job_info],
            description="Metadata information about RayJob custom resources",
        )
        m.create_observable_gauge(
            "kuberay_job_deployment_status",
            callbacks=[self._job_deployment_status],
            description="The RayJob's current deployment status",
        )
        m.create_observable_gauge(
            "kuberay_job_execution_duration_seconds",
            callbacks=[self._job_execution_durations],
            unit="s",
            description="Duration from when the RayJob CR's JobDeploymentStatus transitions from Initializing to "
            "either the Retrying state or a terminal state, such as Complete or Failed",
        )
        m.create_observable_gauge(
            "kuberay_cluster_info",
            callbacks=[self._cluster_info],
            description="Metadata information about RayCluster custom resources",
        )
        m.create_observable_gauge(
            "kuberay_cluster_condition_provisioned",
            callbacks=[self._cluster_provisioned],
            description="Indicates whether the RayCluster is provisioned",
        )
        m.create_observable_gauge(
            "kuberay_cluster_provisioned_duration_seconds",
            callbacks=[self._cluster_provisioned_seconds],
            unit="s",
            description="The time, in seconds, when a RayCluster's `RayClusterProvisioned` status transitions from "
            "false (or unset) to true",
        )
        self._rules: dict[str, Callable[[InsertedTransition, PersistStats], None]] = {
            "RayService": self._rayservice,
            "RayJob": self._rayjob,
            "RayCluster": self._raycluster,
        }

    @property
    def live_rayservices(self) -> dict[str, dict[str, str]]:
        """The RayServices ``kuberay_service_info`` reports (uid → labels)."""
        return dict(self._services)

    @property
    def live_rayjobs(self) -> dict[str, str]:
        """The RayJobs ``kuberay_job_info`` reports: uid → deployment status."""
        return {uid: job.status for uid, job in self._jobs.items()}

    @property
    def live_rayclusters(self) -> dict[str, str]:
        """The RayClusters ``kuberay_cluster_info`` reports: uid → owner kind."""
        return {uid: self._owner_kind(c) for uid, c in self._clusters.items()}

    async def load(self, store: StatusStore) -> None:
        """Seed the live resources from the history (the service's start)."""
        async for record in _resources(store, "RayService"):
            row = record.resource
            if row.deleted_at is None:
                self._services[row.uid] = _labels(row.name, row.namespace, row.uid)
                view = record.rayservice
                for cluster in (view.active_cluster, view.pending_cluster) if view is not None else ():
                    if cluster:
                        self._owners[(row.namespace, cluster)] = "RayService"
            else:
                self._gone.add(row.uid)
        async for record in _resources(store, "RayCluster"):
            row = record.resource
            if row.deleted_at is not None:
                self._gone.add(row.uid)
                continue
            marks = msgspec.convert(row.fields, dict[str, FieldMark])
            provisioned = marks.get(PROVISIONED_FIELD)
            is_provisioned = provisioned is not None and provisioned.value == "True"
            self._clusters[row.uid] = _Cluster(
                labels=_labels(row.name, row.namespace, row.uid),
                created_at=row.first_seen,
                provisioned=is_provisioned,
                provisioned_seconds=(provisioned.at - row.first_seen).total_seconds()
                if provisioned is not None and is_provisioned
                else None,
            )
        failures = await store.count_transitions(kind="RayJob", field=JOB_STATUS_FIELD, to_value="Failed")
        async for record in _resources(store, "RayJob"):
            row = record.resource
            if row.deleted_at is not None:
                self._gone.add(row.uid)
                continue
            if record.rayjob is not None and record.rayjob.cluster_name:
                self._owners[(row.namespace, record.rayjob.cluster_name)] = "RayJob"
            self._jobs[row.uid] = _Job(
                labels=_labels(row.name, row.namespace, row.uid),
                status=row.status,
                started_at=record.rayjob.started_at if record.rayjob is not None else None,
                failures=failures.get(row.uid, 0),
            )
        log.info(
            "metrics: %d live RayService(s), %d live RayJob(s), %d live RayCluster(s)",
            len(self._services),
            len(self._jobs),
            len(self._clusters),
        )

    def observe(self, stats: PersistStats) -> None:
        """Account for one persisted batch."""
        for inserted in sorted(stats.inserted, key=lambda t: (t.fact.at, t.fact.seq)):
            rule = self._rules.get(inserted.kind)
            if rule is not None:
                rule(inserted, stats)

    def close(self) -> None:
        """Report nothing any more (the service stopped; its instruments outlive it in the process)."""
        self._services.clear()
        self._jobs.clear()
        self._clusters.clear()

    def _rayservice(self, inserted: InsertedTransition, stats: PersistStats) -> None:
        fact, uid = inserted.fact, inserted.uid
        if fact.field == LIFECYCLE_FIELD and fact.to_value == LIFECYCLE_DELETED:
            self._gone.add(uid)
            self._services.pop(uid, None)
        elif uid not in self._gone and (fact.field != LIFECYCLE_FIELD or fact.to_value == LIFECYCLE_CREATED):
            self._services[uid] = _labels(inserted.name, inserted.namespace, uid)
        if fact.field in SERVICE_CLUSTER_FIELDS and fact.to_value:
            self._owners[(inserted.namespace, fact.to_value)] = "RayService"
        if fact.field == "activeCluster" and fact.from_value and fact.to_value:
            view = stats.views.get(uid)
            # The view holds the latest upgrade; an earlier one in the same batch goes unsampled.
            if (
                isinstance(view, RayServiceState)
                and view.upgraded_at == fact.at
                and view.last_upgrade_seconds is not None
            ):
                labels = {"name": inserted.name, "namespace": inserted.namespace}
                self._upgrade_seconds.record(view.last_upgrade_seconds, labels)

    def _rayjob(self, inserted: InsertedTransition, stats: PersistStats) -> None:
        fact, uid = inserted.fact, inserted.uid
        if fact.field == LIFECYCLE_FIELD and fact.to_value == LIFECYCLE_DELETED:
            self._gone.add(uid)
            self._jobs.pop(uid, None)  # with its duration series, as KubeRay's DeleteRayJobMetrics
            return
        if uid in self._gone:
            return
        if cluster := fact.attributes.get("rayClusterName"):
            self._owners[(inserted.namespace, cluster)] = "RayJob"
        job = self._jobs.setdefault(uid, _Job(labels=_labels(inserted.name, inserted.namespace, uid)))
        if fact.field != JOB_STATUS_FIELD:
            return
        if fact.to_value == "Initializing":
            job.started_at = fact.at
        # the status after the write: Retrying when the write that failed the attempt also retried it
        after = (
            "Retrying" if fact.to_value == "Failed" and _retried_in_the_same_write(inserted, stats) else fact.to_value
        )
        if fact.from_value not in JOB_TERMINAL and fact.to_value in JOB_ENDS and job.started_at is not None:
            job.durations[(after, job.failures)] = (fact.at - job.started_at).total_seconds()
        if fact.to_value == "Failed":
            job.failures += 1
        job.status = after

    def _raycluster(self, inserted: InsertedTransition, _: PersistStats) -> None:
        fact, uid = inserted.fact, inserted.uid
        if fact.field == LIFECYCLE_FIELD and fact.to_value == LIFECYCLE_DELETED:
            self._gone.add(uid)
            self._clusters.pop(uid, None)  # with its duration series, as KubeRay's DeleteRayClusterMetrics
            self._owners.pop((inserted.namespace, inserted.name), None)
            return
        if uid in self._gone:
            return
        cluster = self._clusters.setdefault(uid, _Cluster(labels=_labels(inserted.name, inserted.namespace, uid)))
        if fact.field == LIFECYCLE_FIELD and fact.to_value == LIFECYCLE_CREATED:
            cluster.created_at = fact.at
        elif fact.field == PROVISIONED_FIELD:
            provisioned = fact.to_value == "True"
            if provisioned and not cluster.provisioned and cluster.created_at is not None:
                cluster.provisioned_seconds = (fact.at - cluster.created_at).total_seconds()
            cluster.provisioned = provisioned

    def _owner_kind(self, cluster: _Cluster) -> str:
        return self._owners.get((cluster.labels["namespace"], cluster.labels["name"]), "None")

    def _cluster_info(self, _: CallbackOptions) -> Iterable[Observation]:
        for cluster in list(self._clusters.values()):
            yield Observation(1, {**cluster.labels, "owner_kind": self._owner_kind(cluster)})

    def _cluster_provisioned(self, _: CallbackOptions) -> Iterable[Observation]:
        for cluster in list(self._clusters.values()):
            yield Observation(1, {**cluster.labels, "condition": "true" if cluster.provisioned else "false"})

    def _cluster_provisioned_seconds(self, _: CallbackOptions) -> Iterable[Observation]:
        for cluster in list(self._clusters.values()):
            if cluster.provisioned_seconds is not None:
                yield Observation(cluster.provisioned_seconds, cluster.labels)

    def _service_info(self, _: CallbackOptions) -> Iterable[Observation]:
        for labels in list(self._services.values()):
            yield Observation(1, labels)

    def _job_info(self, _: CallbackOptions) -> Iterable[Observation]:
        for job in list(self._jobs.values()):
            yield Observation(1, job.labels)

    def _job_deployment_status(self, _: CallbackOptions) -> Iterable[Observation]:
        for job in list(self._jobs.values()):
            yield Observation(1, {**job.labels, "deployment_status": job.status})

    def _job_execution_durations(self, _: CallbackOptions) -> Iterable[Observation]:
        for job in list(self._jobs.values()):
            for (end, retries), seconds in list(job.durations.items()):
                yield Observation(seconds, {**job.labels, "job_deployment_status": end, "retry_count": str(retries)})


def _retried_in_the_same_write(inserted: InsertedTransition, stats: PersistStats) -> bool:
    """The status write that failed this attempt also moved it on to Retrying (same result message)."""
    fact = inserted.fact
    return any(
        other.uid == inserted.uid
        and other.fact.seq == fact.seq
        and other.fact.field == JOB_STATUS_FIELD
        and (other.fact.from_value, other.fact.to_value) == ("Failed", "Retrying")
        for other in stats.inserted
    )


async def _resources(store: StatusStore, kind: KeyKind) -> AsyncIterator[ResourceRecord]:
    """Every resource of ``kind`` in the history, page by page."""
    after = 0
    while True:
        page = await store.list_resources(kind=kind, limit=PAGE, after=after)
        for record in page:
            yield record
        if len(page) < PAGE:
            return
        after = page[-1].resource.id
