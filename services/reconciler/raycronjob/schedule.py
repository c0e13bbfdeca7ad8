"""Cron schedules of a RayCronJob: parse (robfig ``ParseStandard`` semantics) and compute ticks.

Role: the only module that touches ``croniter``. A schedule is the standard 5-field form or one of the
``@yearly``-style descriptors, evaluated in an IANA time zone (``zoneinfo``).

Invariants: pure (no clock): "next tick after t" is a function of the expression, the zone and t;
returned instants are UTC with whole seconds; nothing here raises past :func:`parse_schedule`.

Not here: when to tick (``raycronjob.reconcile``).

Rejected alternatives: a hand-written cron parser (croniter is maintained and handles DST); the
``@every <duration>`` descriptor of robfig/cron, which croniter lacks and which would need a Go
duration parser (raybus reports it as an unparsable schedule). Error texts are robfig's where raybus
checks the same thing itself (empty spec, field count, unknown descriptor); a field croniter rejects is
reported as ``failed to parse the schedule: <spec>`` rather than robfig's per-field detail (``end of
range (61) above maximum (59): 61``), which only a hand-written parser could reproduce.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, tzinfo
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec
from croniter import croniter  # type: ignore[import-untyped]  # no stubs published

from schema.times import as_utc

DESCRIPTORS: Final = frozenset({"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"})
"""robfig/cron's predefined schedules that croniter also knows."""


class ScheduleError(ValueError):
    """The schedule or the time zone cannot be used."""


class CronSchedule(msgspec.Struct, frozen=True, kw_only=True):
    """A parsed schedule: the expression and the zone its fields are read in."""

    expression: str
    zone: str = "UTC"


def load_zone(name: str | None) -> tzinfo:
    """The IANA zone ``name`` (None = the operator's local zone, which raybus fixes to UTC).

    Raises:
        ScheduleError: unknown or malformed zone name.
    """
    if name is None:
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise ScheduleError(f"unknown time zone {name}") from exc


def parse_schedule(expression: str, time_zone: str | None = None) -> CronSchedule:
    """Parse a standard cron expression (5 fields or a descriptor) in ``time_zone``.

    Raises:
        ScheduleError: the expression is not a standard schedule, or the zone is unknown.
    """
    load_zone(time_zone)
    text = expression.strip()
    if not text:
        raise ScheduleError("empty spec string")
    if text.startswith("@"):
        if text.lower() not in DESCRIPTORS:
            raise ScheduleError(f"unrecognized descriptor: {text}")
        text = text.lower()
    else:
        fields = text.split()
        if len(fields) != 5:
            # robfig/cron formats the fields as a Go []string: "[* * * *]"
            raise ScheduleError(f"expected exactly 5 fields, found {len(fields)}: [{' '.join(fields)}]")
        text = " ".join(fields)
    try:
        valid = croniter.is_valid(text)
    except Exception as exc:  # croniter raises assorted types on odd input
        raise ScheduleError(str(exc)) from exc
    if not valid:
        raise ScheduleError(f"failed to parse the schedule: {text}")
    return CronSchedule(expression=text, zone=time_zone or "UTC")


def next_tick(schedule: CronSchedule, after: datetime) -> datetime | None:
    """The first tick strictly after ``after`` (UTC, whole seconds); None when there is none.

    A schedule that can never fire (``0 0 30 2 *``) has no next tick.
    """
    zone = load_zone(None if schedule.zone == "UTC" else schedule.zone)
    # robfig/cron starts from the next whole second; croniter is strictly-after on a whole second.
    start = as_utc(after).replace(microsecond=0)
    try:
        found = croniter(schedule.expression, start.astimezone(zone)).get_next(datetime)
    except Exception:  # croniter gives up on impossible dates (CroniterBadDateError) or overflows
        return None
    if not isinstance(found, datetime):
        return None
    result = as_utc(found).replace(microsecond=0)
    return result if result > start else None


def latest_tick(schedule: CronSchedule, at_or_before: datetime) -> datetime | None:
    """The last tick at or before ``at_or_before`` (UTC, whole seconds); None when there is none."""
    zone = load_zone(None if schedule.zone == "UTC" else schedule.zone)
    # croniter's get_prev is strictly-before: start one second later so a tick at the instant counts.
    start = as_utc(at_or_before).replace(microsecond=0) + timedelta(seconds=1)
    try:
        found = croniter(schedule.expression, start.astimezone(zone)).get_prev(datetime)
    except Exception:  # as in next_tick
        return None
    if not isinstance(found, datetime):
        return None
    result = as_utc(found).replace(microsecond=0)
    return result if result < start else None
