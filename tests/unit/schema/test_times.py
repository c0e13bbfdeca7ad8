"""The one time module: RFC 3339 in and out, never raising on bad input."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from schema.times import format_time, format_time_exact, format_time_ms, parse_time

MOMENT = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def test_the_three_formats() -> None:
    assert format_time(MOMENT) == "2026-01-02T03:04:05Z"
    assert format_time_ms(MOMENT) == "2026-01-02T03:04:05.678Z"
    assert format_time_exact(MOMENT) == "2026-01-02T03:04:05.678901Z"
    east = MOMENT.astimezone(timezone(timedelta(hours=2)))
    assert format_time_exact(east) == format_time_exact(MOMENT)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-01-02T03:04:05Z", MOMENT.replace(microsecond=0)),
        ("2026-01-02T03:04:05.678901Z", MOMENT),
        ("2026-01-02T05:04:05.678901+02:00", MOMENT),
        ("2026-01-02T03:04:05.678901123Z", MOMENT),  # JetStream's nanoseconds
        ("2026-01-02T03:04:05", MOMENT.replace(microsecond=0)),  # no offset: UTC
    ],
)
def test_parse(text: str, expected: datetime) -> None:
    assert parse_time(text) == expected


@pytest.mark.parametrize("value", ["", "yesterday", "2026-13-01T00:00:00Z", "0001-01-01T00:00:00+01:00", None, 17])
def test_what_is_not_a_time_is_none(value: object) -> None:
    assert parse_time(value) is None
