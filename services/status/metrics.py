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

Invariants: only transitions this database inserted for the first time are observed
(``PersistStats.inserted``), so a redelivered result never counts twice; every status replica reports
what it persisted (sum histograms across replicas; the info gauges are the same on each once it has
loaded). Per-kind rules are small functions keyed by kind, so other kinds' metrics are one more entry.
Observable gauges report this instance's state: without an explicit meter each instance gets its own
instrumentation scope (OpenTelemetry would keep the callbacks of the first instrument of a name and
ignore a restarted service's), and :meth:`ResourceMetrics.close` empties it when the service stops.

Not here: persisting (``store``), the folds (``projection``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from schema.keys import KeyKind
from services.runtime.metrics import meter as runtime_meter
from services.status.kinds import LIFECYCLE_CREATED, LIFECYCLE_DELETED, LIFECYCLE_FIELD
from services.status.projection import RayServiceState
from services.status.store import InsertedTransition, PersistStats, ResourceRecord, StatusStore

log = logging.getLogger(__name__)

PAGE: Final = 500
"""Resources read per query when seeding the live resources."""
JOB_STATUS_FIELD: Final = "jobDeploymentStatus"
JOB_TERMINAL: Final = frozenset({"Complete", "Failed"})
JOB_ENDS: Final = JOB_TERMINAL | {"Retrying"}
"""Where an attempt ends (KubeRay's ``emitRayJobExecutionDuration``)."""


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
        self._rules: dict[str, Callable[[InsertedTransition, PersistStats], None]] = {
            "RayService": self._rayservice,
            "RayJob": self._rayjob,
        }

    @property
    def live_rayservices(self) -> dict[str, dict[str, str]]:
        """The RayServices ``kuberay_service_info`` reports (uid → labels)."""
        return dict(self._services)

    @property
    def live_rayjobs(self) -> dict[str, str]:
        """The RayJobs ``kuberay_job_info`` reports: uid → deployment status."""
        return {uid: job.status for uid, job in self._jobs.items()}

    async def load(self, store: StatusStore) -> None:
        """Seed the live resources from the history (the service's start)."""
        async for record in _resources(store, "RayService"):
            row = record.resource
            if row.deleted_at is None:
                self._services[row.uid] = _labels(row.name, row.namespace, row.uid)
            else:
                self._gone.add(row.uid)
        failures = await store.count_transitions(kind="RayJob", field=JOB_STATUS_FIELD, to_value="Failed")
        async for record in _resources(store, "RayJob"):
            row = record.resource
            if row.deleted_at is not None:
                self._gone.add(row.uid)
                continue
            self._jobs[row.uid] = _Job(
                labels=_labels(row.name, row.namespace, row.uid),
                status=row.status,
                started_at=record.rayjob.started_at if record.rayjob is not None else None,
                failures=failures.get(row.uid, 0),
            )
        log.info("metrics: %d live RayService(s), %d live RayJob(s)", len(self._services), len(self._jobs))

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

    def _rayservice(self, inserted: InsertedTransition, stats: PersistStats) -> None:
        fact, uid = inserted.fact, inserted.uid
        if fact.field == LIFECYCLE_FIELD and fact.to_value == LIFECYCLE_DELETED:
            self._gone.add(uid)
            self._services.pop(uid, None)
        elif uid not in self._gone and (fact.field != LIFECYCLE_FIELD or fact.to_value == LIFECYCLE_CREATED):
            self._services[uid] = _labels(inserted.name, inserted.namespace, uid)
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
