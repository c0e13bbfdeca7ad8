"""The columns of ``raybus get``: the KubeRay kubectl plugin's and the CRDs' printer columns, as text.

RayCluster has the columns of ``kubectl ray get cluster`` (KubeRay's ``printClusters`` in
kubectl-plugin/pkg/cmd/get/get_cluster.go, with ``RelevantRayClusterCondition``'s precedence); the other
kinds have their CRD's printer columns with the namespace beside the name as the plugin shows it, plus
what a user of the plugin reads from ``kubectl describe``: a RayService's active and pending clusters.
``-o wide`` adds the columns kubectl shows at priority 1 and a few more. Pure functions; no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from schema.times import parse_time

Obj = dict[str, Any]

_CONDITION_PRECEDENCE: Final = (
    "RayClusterProvisioned",
    "HeadPodReady",
    "RayClusterReplicaFailure",
    "RayClusterSuspended",
    "RayClusterSuspending",
)


def human_duration(seconds: float) -> str:
    """Apimachinery's ``duration.HumanDuration``, the ages kubectl prints (``45s``, ``5m3s``, ``2d4h``)."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def age(timestamp: object, now: datetime) -> str:
    """A ``date`` column: the age of an RFC 3339 timestamp, ``<unknown>`` without one."""
    if not isinstance(timestamp, str) or not timestamp:
        return "<unknown>"
    then = parse_time(timestamp)
    if then is None:
        return "<invalid>"
    return human_duration((now - then).total_seconds())


def _get(obj: Obj, path: str) -> Any:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def _text(value: Any, default: str = "") -> str:
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def relevant_condition(obj: Obj) -> str:
    """The plugin's CONDITION: the first true condition in KubeRay's order of precedence."""
    conditions = _get(obj, "status.conditions") or []
    true = {c.get("type") for c in conditions if isinstance(c, dict) and c.get("status") == "True"}
    return next((kind for kind in _CONDITION_PRECEDENCE if kind in true), "")


def _traffic(obj: Obj) -> str:
    active = _get(obj, "status.activeServiceStatus.trafficRoutedPercent")
    pending = _get(obj, "status.pendingServiceStatus.trafficRoutedPercent")
    if active is None and pending is None:
        return ""
    return f"{_text(active, '0')}%/{_text(pending, '0')}%"


Cell = Callable[[Obj, datetime], str]


def _field(path: str, default: str = "") -> Cell:
    return lambda obj, _now: _text(_get(obj, path), default)


def _age_of(path: str) -> Cell:
    return lambda obj, now: age(_get(obj, path), now)


@dataclass(frozen=True)
class Column:
    """A column: its header, how a row's cell is rendered, and whether only ``-o wide`` shows it."""

    header: str
    cell: Cell
    wide: bool = False


_NAME: Final = Column("NAME", _field("metadata.name"))
_NAMESPACE: Final = Column("NAMESPACE", _field("metadata.namespace"))
_AGE: Final = Column("AGE", _age_of("metadata.creationTimestamp"))

COLUMNS: Final[dict[str, tuple[Column, ...]]] = {
    "RayCluster": (
        _NAME,
        _NAMESPACE,
        Column("DESIRED WORKERS", _field("status.desiredWorkerReplicas", "0")),
        Column("AVAILABLE WORKERS", _field("status.availableWorkerReplicas", "0")),
        Column("CPUS", _field("status.desiredCPU", "0")),
        Column("GPUS", _field("status.desiredGPU", "0")),
        Column("TPUS", _field("status.desiredTPU", "0")),
        Column("MEMORY", _field("status.desiredMemory", "0")),
        Column("CONDITION", lambda obj, _now: relevant_condition(obj)),
        Column("STATUS", _field("status.state")),
        _AGE,
        Column("HEAD POD IP", _field("status.head.podIP"), wide=True),
        Column("HEAD SERVICE IP", _field("status.head.serviceIP"), wide=True),
    ),
    "RayJob": (
        _NAME,
        _NAMESPACE,
        Column("JOB STATUS", _field("status.jobStatus")),
        Column("DEPLOYMENT STATUS", _field("status.jobDeploymentStatus")),
        Column("RAY CLUSTER NAME", _field("status.rayClusterName")),
        Column("START TIME", _field("status.startTime")),
        Column("END TIME", _field("status.endTime")),
        _AGE,
        Column("JOB ID", _field("status.jobId"), wide=True),
        Column("SUBMISSION MODE", _field("spec.submissionMode", "K8sJobMode"), wide=True),
        Column("SUCCEEDED", _field("status.succeeded"), wide=True),
        Column("FAILED", _field("status.failed"), wide=True),
    ),
    "RayService": (
        _NAME,
        _NAMESPACE,
        Column("SERVICE STATUS", _field("status.serviceStatus")),
        Column("NUM SERVE ENDPOINTS", _field("status.numServeEndpoints")),
        Column("ACTIVE CLUSTER", _field("status.activeServiceStatus.rayClusterName")),
        Column("PENDING CLUSTER", _field("status.pendingServiceStatus.rayClusterName")),
        _AGE,
        Column("TRAFFIC ACTIVE/PENDING", lambda obj, _now: _traffic(obj), wide=True),
        Column("UPGRADE STRATEGY", _field("spec.upgradeStrategy.type"), wide=True),
    ),
    "RayCronJob": (
        _NAME,
        _NAMESPACE,
        Column("SCHEDULE", _field("spec.schedule")),
        Column("TIMEZONE", _field("spec.timeZone")),
        Column("LAST SCHEDULE", lambda obj, now: age(_get(obj, "status.lastScheduleTime"), now)),
        _AGE,
        Column("SUSPEND", _field("spec.suspend", "false")),
    ),
}


def render_table(kind: str, objects: Sequence[Obj], *, now: datetime, wide: bool = False) -> str:
    """kubectl's aligned table of ``objects`` (three spaces between columns), headers first."""
    columns = [c for c in COLUMNS[kind] if wide or not c.wide]
    rows = [[c.header for c in columns]]
    rows += [[c.cell(obj, now) for c in columns] for obj in objects]
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    return "\n".join("   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)
