"""Custom-resource metrics the status service derives from the transitions it persists.

Role: KubeRay's operator metrics whose meaning lives in the history rather than in one reconcile, with
KubeRay's names where the meaning matches (SPEC §9), exported on the status service's ``/metrics``:

- ``kuberay_service_info{name, namespace, uid}`` = 1 for every RayService that exists (created and not
  deleted): seeded from the database at start (:meth:`ResourceMetrics.load`), then kept up to date from
  the watcher's lifecycle facts;
- ``raybus_rayservice_upgrade_duration_seconds{name, namespace}`` (histogram): from the moment a pending
  cluster is prepared to replace the active one to its promotion (the RayService view's
  ``last_upgrade_seconds``), one sample per completed upgrade.

Invariants: only transitions this database inserted for the first time are observed
(``PersistStats.inserted``), so a redelivered result never counts twice; every status replica reports
what it persisted (sum histograms across replicas; the info gauge is the same on each once it has
loaded). Per-kind rules are small functions keyed by kind, so other kinds' metrics are one more entry.

Not here: persisting (``store``), the folds (``projection``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Final

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from services.runtime.metrics import meter as runtime_meter
from services.status.kinds import LIFECYCLE_CREATED, LIFECYCLE_DELETED, LIFECYCLE_FIELD
from services.status.projection import RayServiceState
from services.status.store import InsertedTransition, PersistStats, StatusStore

log = logging.getLogger(__name__)

PAGE: Final = 500
"""Resources read per query when seeding the live RayServices."""


class ResourceMetrics:
    """The instruments, and the in-memory state the observable ones report."""

    def __init__(self, meter: Meter | None = None) -> None:
        m = meter or runtime_meter(__name__)
        self._services: dict[str, dict[str, str]] = {}
        """Live RayServices: uid → labels."""
        self._gone: set[str] = set()
        """Deleted RayService uids (a late fact of one never brings it back)."""
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
        self._rules: dict[str, Callable[[InsertedTransition, PersistStats], None]] = {
            "RayService": self._rayservice,
        }

    @property
    def live_rayservices(self) -> dict[str, dict[str, str]]:
        """The RayServices ``kuberay_service_info`` reports (uid → labels)."""
        return dict(self._services)

    async def load(self, store: StatusStore) -> None:
        """Seed the live RayServices from the history (the service's start)."""
        after = 0
        while True:
            page = await store.list_resources(kind="RayService", limit=PAGE, after=after)
            for record in page:
                row = record.resource
                if row.deleted_at is None:
                    self._services[row.uid] = {"name": row.name, "namespace": row.namespace, "uid": row.uid}
                else:
                    self._gone.add(row.uid)
            if len(page) < PAGE:
                break
            after = page[-1].resource.id
        log.info("metrics: %d live RayService(s)", len(self._services))

    def observe(self, stats: PersistStats) -> None:
        """Account for one persisted batch."""
        for inserted in sorted(stats.inserted, key=lambda t: (t.fact.at, t.fact.seq)):
            rule = self._rules.get(inserted.kind)
            if rule is not None:
                rule(inserted, stats)

    def _rayservice(self, inserted: InsertedTransition, stats: PersistStats) -> None:
        fact, uid = inserted.fact, inserted.uid
        if fact.field == LIFECYCLE_FIELD and fact.to_value == LIFECYCLE_DELETED:
            self._gone.add(uid)
            self._services.pop(uid, None)
        elif uid not in self._gone and (fact.field != LIFECYCLE_FIELD or fact.to_value == LIFECYCLE_CREATED):
            self._services[uid] = {"name": inserted.name, "namespace": inserted.namespace, "uid": uid}
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

    def _service_info(self, _: CallbackOptions) -> Iterable[Observation]:
        for labels in list(self._services.values()):
            yield Observation(1, labels)
