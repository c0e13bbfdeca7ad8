"""Go ``time.Duration`` parsing and printing, as KubeRay uses them for ``ray.io/initializing-timeout``.

Role: the annotation accepts a Go duration (``"30m"``, ``"1h30m"``, ``"1.5h"``) or an integer number of
seconds; KubeRay's messages print durations with Go's ``Duration.String`` (``"5m0s"``, ``"1h0m0s"``).

Invariants: pure; :func:`parse_go_duration` never raises (None for anything Go would reject) and
returns integer nanoseconds like Go; :func:`go_duration_string` is Go's formatting, byte for byte.

Not here: deciding whether a timeout passed (``rayservice.compute_status``).
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Final

_UNITS: Final = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,
    "\u03bcs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_PART: Final = re.compile(r"(\d*)(?:\.(\d*))?([a-z\u00b5\u03bc]+)")
_MAX_NS: Final = (1 << 63) - 1


def parse_go_duration(text: str) -> int | None:
    """Go's ``time.ParseDuration``: nanoseconds, or None when Go would return an error."""
    rest = text
    sign = 1
    if rest[:1] in ("-", "+"):
        sign = -1 if rest[0] == "-" else 1
        rest = rest[1:]
    if rest == "0":
        return 0
    if not rest:
        return None
    total = 0
    position = 0
    while position < len(rest):
        match = _PART.match(rest, position)
        if match is None:
            return None
        whole, fraction, unit = match.group(1), match.group(2), match.group(3)
        if not whole and not fraction:
            return None
        scale = _UNITS.get(unit)
        if scale is None:
            return None
        value = int(whole or "0") * scale
        if fraction:
            value += int(fraction) * scale // (10 ** len(fraction))
        total += value
        if total > _MAX_NS + (1 if sign < 0 else 0):
            return None
        position = match.end()
    return sign * total


def parse_timeout(text: str) -> int | None:
    """KubeRay's initializing-timeout value: a Go duration, else integer seconds; nanoseconds or None."""
    parsed = parse_go_duration(text)
    if parsed is not None:
        return parsed
    stripped = text[1:] if text[:1] in ("-", "+") else text
    if stripped.isdigit() and stripped.isascii():
        seconds = int(text)
        if -(1 << 63) <= seconds * 1_000_000_000 <= _MAX_NS:
            return seconds * 1_000_000_000
    return None


def _frac(value: int, precision: int) -> tuple[str, int]:
    """Go's fmtFrac: the fraction of ``value / 10**precision`` without trailing zeros (and no dot when 0)."""
    digits = ""
    printed = False
    for _ in range(precision):
        digit = value % 10
        printed = printed or digit != 0
        if printed:
            digits = str(digit) + digits
        value //= 10
    return ("." + digits if printed else ""), value


def go_duration_string(nanoseconds: int) -> str:
    """Go's ``Duration.String``: ``"0s"``, ``"1.5ms"``, ``"30s"``, ``"5m0s"``, ``"1h0m0s"``."""
    if nanoseconds == 0:
        return "0s"
    negative = nanoseconds < 0
    u = -nanoseconds if negative else nanoseconds
    if u < 1_000_000_000:
        if u < 1_000:
            text = f"{u}ns"
        elif u < 1_000_000:
            fraction, whole = _frac(u, 3)
            text = f"{whole}{fraction}\u00b5s"
        else:
            fraction, whole = _frac(u, 6)
            text = f"{whole}{fraction}ms"
    else:
        fraction, seconds = _frac(u, 9)
        text = f"{seconds % 60}{fraction}s"
        minutes = seconds // 60
        if minutes > 0:
            text = f"{minutes % 60}m{text}"
            hours = minutes // 60
            if hours > 0:
                text = f"{hours}h{text}"
    return "-" + text if negative else text


def to_nanoseconds(delta: timedelta) -> int:
    """A timedelta as integer nanoseconds (microsecond precision)."""
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000
