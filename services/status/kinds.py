"""The custom-resource kinds as the status API and ``raybus history`` name them.

Each kind has a plural path alias (``/v1/rayjobs``) and a *status field*: the transition field whose
latest value is the resource's one-word status (what ``?status=`` filters on). RayCronJob has no state
machine of its own (only ``lastScheduleTime``), so its status is its lifecycle (``created`` /
``deleted``); each tick is a ``schedule`` transition naming the RayJob it created, which is how the
API links a run to that RayJob's history. Pure data; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from schema.keys import KeyKind

LIFECYCLE_FIELD: Final = "lifecycle"
"""Transition field of the watcher's lifecycle facts (``verb="observe"`` results)."""
LIFECYCLE_CREATED: Final = "created"
LIFECYCLE_DELETED: Final = "deleted"
SCHEDULE_FIELD: Final = "schedule"
"""Transition field of a RayCronJob's scheduled runs (``from``/``to``: previous/new ``lastScheduleTime``)."""
RUN_RAYJOB_ATTRIBUTE: Final = "rayJobName"
"""Attribute of a ``schedule`` transition naming the RayJob created for the tick."""


@dataclass(frozen=True)
class KindInfo:
    """How one kind appears in the API."""

    kind: KeyKind
    plural: str
    status_field: str


KINDS: Final[tuple[KindInfo, ...]] = (
    KindInfo(kind="RayJob", plural="rayjobs", status_field="jobDeploymentStatus"),
    KindInfo(kind="RayService", plural="rayservices", status_field="serviceStatus"),
    KindInfo(kind="RayCluster", plural="rayclusters", status_field="state"),
    KindInfo(kind="RayCronJob", plural="raycronjobs", status_field=LIFECYCLE_FIELD),
)

_BY_NAME: Final[dict[str, KindInfo]] = {name: info for info in KINDS for name in (info.kind.lower(), info.plural)}


def parse_kind(text: str) -> KindInfo | None:
    """The kind named ``text`` (``RayJob``, ``rayjob`` or ``rayjobs``), or None when unknown."""
    return _BY_NAME.get(text.lower())


def kind_info(kind: KeyKind) -> KindInfo:
    """The API description of ``kind``."""
    return _BY_NAME[kind.lower()]
