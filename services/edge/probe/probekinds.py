"""The prober's table of probe kinds: the RayJob's job status, and the RayService's Serve applications per
cluster and head pods' Serve proxy health.

Role: the watcher's side of the rules in ``schema.probes`` (targets and significance live there, shared
with reconcile); this module says which projected kinds each rule reads and how a dashboard answer
becomes observation data.

Invariants: observations are never deleted when a target goes away: replay rebuilds snapshots from the
published inputs, and a deletion would be an input nobody published.

Not here: polling and publishing (``prober``), URLs and tokens (``dashboard``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from schema.bounds import TooComplex
from schema.probes import (
    RAYJOB_KINDS,
    SERVE_HEALTH_KINDS,
    SERVE_KINDS,
    ProbeTarget,
    job_significant,
    rayjob_targets,
    serve_health_significant,
    serve_health_targets,
    serve_significant,
    serve_targets,
)
from services.edge.dashboard import DashboardAnswer


def answer_data(answer: DashboardAnswer) -> dict[str, Any]:
    """The observation data of a dashboard answer."""
    if 200 <= answer.status <= 299:
        try:
            decoded = answer.json_or_error()
        except TooComplex as exc:
            return {"http_status": answer.status, "error": f"the dashboard's answer is refused: {exc}"}
        except msgspec.DecodeError:
            decoded = None
        if decoded is not None:
            return decoded
        return {"http_status": answer.status, "error": "the dashboard's answer is not a JSON object"}
    if answer.status == 0:
        return {"http_status": 0, "error": answer.error[:500]}
    text = answer.data[:500].decode("utf-8", "replace") if answer.data else ""
    return {"http_status": answer.status, "error": text or f"HTTP {answer.status}"}


def dashboard_data(_target: ProbeTarget, answer: DashboardAnswer) -> dict[str, Any]:
    """The default :attr:`ProbeKind.observe`: the JSON body, or the error (:func:`answer_data`)."""
    return answer_data(answer)


def health_data(target: ProbeTarget, answer: DashboardAnswer) -> dict[str, Any]:
    """The ``obs-servehealth`` data of a ``/-/healthz`` answer."""
    healthy = 200 <= answer.status <= 299 and answer.data.strip() == b"success"
    return {"healthy": healthy, "http_status": answer.status, "pod_uid": target.pod.uid if target.pod else ""}


@dataclass(frozen=True, kw_only=True)
class ProbeKind:
    """A family of probes: the projected kinds its rule reads, how targets are found (a rule of
    ``schema.probes``), how an answer becomes observation data and which fields of that data matter."""

    name: str
    targets: Callable[[Mapping[str, list[dict[str, Any]]]], Iterable[ProbeTarget]]
    significant: Callable[[dict[str, Any]], Any]
    kinds: tuple[str, ...]
    observe: Callable[[ProbeTarget, DashboardAnswer], dict[str, Any]] = dashboard_data


PROBE_KINDS: Final[tuple[ProbeKind, ...]] = (
    ProbeKind(name="rayjob", targets=rayjob_targets, significant=job_significant, kinds=RAYJOB_KINDS),
    ProbeKind(name="serve", targets=serve_targets, significant=serve_significant, kinds=SERVE_KINDS),
    ProbeKind(
        name="servehealth",
        targets=serve_health_targets,
        significant=serve_health_significant,
        kinds=SERVE_HEALTH_KINDS,
        observe=health_data,
    ),
)
"""Every probe kind the watcher runs."""
