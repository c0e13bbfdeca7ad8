"""Timestamps as Kubernetes writes them (RFC 3339), and the arithmetic deadlines need: the one time module.

Role: parse and format RFC3339 (``YYYY-MM-DDTHH:MM:SSZ``, whole seconds, UTC) without a clock; every
"now" is an argument.

Invariants: every datetime returned is timezone-aware UTC; parsing never raises (a malformed
timestamp is ``None``, and the caller decides what a missing time means).

Not here: reading the clock (forbidden in reconcile code; a service's clock is an argument), cron
arithmetic (``raycronjob.schedule``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


def as_utc(moment: datetime) -> datetime:
    """``moment`` in UTC; a naive datetime is taken to be UTC already."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def format_time(moment: datetime) -> str:
    """RFC3339 with whole seconds in UTC, as metav1.Time serialises: ``2024-01-02T03:04:05Z``."""
    return as_utc(moment).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_time_ms(moment: datetime) -> str:
    """RFC3339 with milliseconds in UTC, for people reading logs and reports: ``2024-01-02T03:04:05.678Z``."""
    return as_utc(moment).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def format_time_exact(moment: datetime) -> str:
    """RFC3339 in UTC with every microsecond (a JetStream ``start_time``): ``2024-01-02T03:04:05.678901Z``."""
    return as_utc(moment).isoformat(timespec="microseconds").replace("+00:00", "Z")


def truncate(moment: datetime) -> datetime:
    """``moment`` in UTC without its sub-second part (what survives a round trip through the API)."""
    return as_utc(moment).replace(microsecond=0)


def parse_time(value: object) -> datetime | None:
    """Parse an RFC3339 timestamp (any fraction of a second, ``Z`` or an offset); None when ``value`` is
    not one. A time without an offset is taken to be UTC."""
    if not isinstance(value, str) or not value:
        return None
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        return as_utc(datetime.fromisoformat(text))
    except (ValueError, OverflowError):  # OverflowError: an offset that moves it past year 1 or 9999
        return None


def from_epoch_millis(value: object) -> datetime | None:
    """A Ray dashboard time (epoch milliseconds) as UTC; None for 0, missing or malformed values."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    try:
        return datetime.fromtimestamp(value / 1000.0, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


def after_seconds(moment: datetime, seconds: float) -> datetime | None:
    """``moment + seconds``, or None when the sum leaves datetime's range."""
    try:
        return moment + timedelta(seconds=seconds)
    except OverflowError:
        return None


def go_time_string(moment: datetime) -> str:
    """A time as Go's ``%v`` prints a metav1.Time in UTC (``2006-01-02 15:04:05 +0000 UTC``)."""
    return as_utc(moment).strftime("%Y-%m-%d %H:%M:%S +0000 UTC")


def earliest(*moments: datetime | None) -> datetime | None:
    """The earliest of the given instants, ignoring None."""
    present = [m for m in moments if m is not None]
    return min(present) if present else None
