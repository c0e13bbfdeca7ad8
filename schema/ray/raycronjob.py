"""RayCronJob (ray.io/v1): RayJobs created on a cron schedule (docs/behaviour.md#1.7, #7), plus raybus's
extensions (concurrencyPolicy, history limits: docs/differences.md#raycronjob).

Role: the typed view of a RayCronJob.

Invariants: KubeRay's fields keep KubeRay's meaning. The extensions default to KubeRay's behaviour:
``concurrencyPolicy: Allow`` (a new RayJob at every tick, whatever is still running) and no history
limits (None = keep every finished RayJob), so a KubeRay manifest behaves the same under raybus.

Not here: schedule parsing and the tick logic (``services/reconciler/raycronjob``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import Meta

from schema.ray.common import Int32, RayStruct, Time, crd_default
from schema.ray.conventions import API_VERSION
from schema.ray.rayjob import RayJobSpec

ConcurrencyPolicy = Literal["Allow", "Forbid", "Replace"]


class RayCronJobSpec(RayStruct, frozen=True, kw_only=True):
    """A schedule and the RayJob to create at each tick."""

    job_template: RayJobSpec
    schedule: Annotated[str, Meta(description="Cron schedule, e.g. '*/5 * * * *'.")]
    time_zone: Annotated[str, Meta(min_length=1, description="IANA time zone of the schedule.")] | None = None
    suspend: bool | None = None
    concurrency_policy: Annotated[
        ConcurrencyPolicy,
        crd_default("Allow"),
        Meta(
            description=(
                "raybus extension, as in Kubernetes CronJob. Allow: start a RayJob at every tick (missed "
                "ticks are caught up one by one); Forbid: start none while one is still running (the most "
                "recent due tick starts once it finishes); Replace: delete the running one and start the new "
                "one. Forbid and Replace start only the most recent of several missed ticks."
            )
        ),
    ] = "Allow"
    successful_jobs_history_limit: (
        Annotated[
            Int32,
            Meta(ge=0, description="raybus extension: finished successful RayJobs to keep (unset = all)."),
        ]
        | None
    ) = None
    failed_jobs_history_limit: (
        Annotated[
            Int32,
            Meta(ge=0, description="raybus extension: failed RayJobs to keep (unset = all)."),
        ]
        | None
    ) = None


class RayCronJobStatus(RayStruct, frozen=True, kw_only=True):
    """When the schedule last fired."""

    last_schedule_time: Time | None = None


class RayCronJob(RayStruct, frozen=True, kw_only=True, omit_defaults=False):
    """RayJobs created on a cron schedule (ray.io/v1).

    In Python, ``apiVersion``, ``kind``, ``metadata`` and ``status`` are always encoded.
    """

    api_version: str = API_VERSION
    kind: str = "RayCronJob"
    metadata: dict[str, Any] = {}
    spec: RayCronJobSpec
    status: RayCronJobStatus = RayCronJobStatus()
