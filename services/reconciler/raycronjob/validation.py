"""RayCronJob validation (docs/behaviour.md#8, RayCronJob): name, schedule, time zone and the job template.

Role: ``validate_raycronjob`` returns KubeRay's message for the first failing rule, or the decoded
spec when everything passes; the jobTemplate goes through the RayJob validator unchanged.

Invariants: never raises; the order is KubeRay's (name, ``TZ`` in the schedule, schedule parse, time
zone, job template).

Not here: what the reconcile pass does with a failure (an ``InvalidRayCronJobSpec`` Warning event).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec

from schema.config import OperatorConfig
from schema.ray.raycronjob import RayCronJobSpec
from services.reconciler.raycronjob.schedule import ScheduleError, load_zone, parse_schedule
from services.reconciler.rayjob.validation import validate_rayjob_spec

MAX_RAYCRONJOB_NAME_LENGTH: Final = 36
"""47 (RayJob) minus 11, the length of ``-<floor(unix/60)>`` for the child RayJob's name."""


def validate_raycronjob(obj: Mapping[str, Any], *, config: OperatorConfig) -> tuple[RayCronJobSpec | None, str | None]:
    """Validate a RayCronJob object (``ValidateRayCronJobSpec``).

    Returns:
        ``(spec, None)`` when valid, else ``(None, message)`` with KubeRay's message.
    """
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    name = metadata.get("name")
    if isinstance(name, str) and len(name) > MAX_RAYCRONJOB_NAME_LENGTH:
        return None, f"RayCronJob name should be no more than {MAX_RAYCRONJOB_NAME_LENGTH} characters"
    raw = obj.get("spec")
    if not isinstance(raw, Mapping):
        return None, "invalid RayCronJob spec: spec must be an object"
    schedule = raw.get("schedule")
    if not isinstance(schedule, str):
        return None, "invalid cron schedule: the schedule must be a string"
    if "TZ" in schedule:
        return None, "cannot use TZ or CRON_TZ in schedule, use timeZone field instead"
    try:
        parse_schedule(schedule)
    except ScheduleError as exc:
        return None, f"invalid cron schedule: {exc}"
    if "timeZone" in raw and raw["timeZone"] is not None:
        zone = raw["timeZone"]
        if zone == "":
            return None, (
                "timeZone must not be empty string, omit the field to use the local time zone of the "
                "KubeRay operator"
            )
        if not isinstance(zone, str):
            return None, "invalid time zone: the time zone must be a string"
        try:
            load_zone(zone)
        except ScheduleError as exc:
            return None, f"invalid time zone: {exc}"
    try:
        spec = msgspec.convert(raw, RayCronJobSpec, strict=False)
    except (msgspec.ValidationError, TypeError, ValueError, OverflowError, RecursionError) as exc:
        if "$.jobTemplate" in str(exc):
            return None, f"invalid RayJob template: The RayJob spec is invalid: {exc}"
        return None, f"invalid RayCronJob spec: {exc}"
    raw_template = raw.get("jobTemplate")
    template_error = validate_rayjob_spec(
        spec.job_template,
        raw_spec=raw_template if isinstance(raw_template, Mapping) else {},
        annotations={},
        config=config,
    )
    if template_error is not None:
        return None, f"invalid RayJob template: {template_error}"
    return spec, None
