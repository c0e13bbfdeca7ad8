"""The RayService rows of the prober: Serve applications per cluster and the head pods' Serve proxy health.

Role: the watcher's side of the rules in ``schema.probes`` (targets and significance live there, shared
with reconcile); this module adds how a ``/-/healthz`` answer becomes observation data.

Invariants: observations are never deleted when a target goes away: replay rebuilds snapshots from the
published inputs, and a deletion would be an input nobody published.

Not here: polling and publishing (``prober``), URLs and tokens (``dashboard``).
"""

from __future__ import annotations

from typing import Any, Final

from schema.probes import (
    SERVE_HEALTH_KINDS,
    SERVE_KINDS,
    ProbeTarget,
    serve_health_significant,
    serve_health_targets,
    serve_significant,
    serve_targets,
)
from services.watcher.dashboard import DashboardAnswer
from services.watcher.prober import PROBES, ProbeKind


def health_data(target: ProbeTarget, answer: DashboardAnswer) -> dict[str, Any]:
    """The ``obs-servehealth`` data of a ``/-/healthz`` answer."""
    healthy = 200 <= answer.status <= 299 and answer.data.strip() == b"success"
    return {"healthy": healthy, "http_status": answer.status, "pod_uid": target.pod.uid if target.pod else ""}


SERVE_PROBES: Final[tuple[ProbeKind, ...]] = (
    ProbeKind(name="serve", targets=serve_targets, significant=serve_significant, kinds=SERVE_KINDS),
    ProbeKind(
        name="servehealth",
        targets=serve_health_targets,
        significant=serve_health_significant,
        kinds=SERVE_HEALTH_KINDS,
        observe=health_data,
    ),
)

WATCHER_PROBES: Final[tuple[ProbeKind, ...]] = (*PROBES, *SERVE_PROBES)
"""Every probe kind the watcher runs: RayJob's and RayService's."""
