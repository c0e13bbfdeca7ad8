"""Kubernetes resource Quantities: parse, add, multiply, round up and print canonically.

Role: the arithmetic KubeRay does with ``resource.Quantity`` (``--num-cpus`` from a CPU limit, the
``desired*`` status fields, the shared-memory size), reproduced exactly enough that the printed values
match what the Go operator writes (``1500m``, ``6Gi``, ``80G``).

Invariants: values are exact integers of nano-units (Go rounds to nano units at parse time, and so do
we), which keeps the arithmetic exact and cheap; a sum keeps the *format* (binary/decimal/exponent) of
its first non-zero term, as Go's ``Quantity.Add`` does; printing follows ``CanonicalizeBytes`` (binary
values below 1024 or not integral print as decimal SI).

Not here: the strict validation of quantity syntax for the API server (a malformed quantity raises
:class:`ValueError`, which the validator turns into a spec error).
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Final, Literal

import msgspec

QuantityFormat = Literal["BinarySI", "DecimalSI", "DecimalExponent", ""]

_PATTERN: Final = re.compile(r"^([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$")
_BINARY: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL: Final = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIX: Final = {exp: suffix for suffix, exp in _DECIMAL.items()}
_BINARY_SUFFIX: Final = {0: "", 1: "Ki", 2: "Mi", 3: "Gi", 4: "Ti", 5: "Pi", 6: "Ei"}
NANO: Final = 10**9
_INT: Final = re.compile(r"^[0-9]+$")


class Quantity(msgspec.Struct, frozen=True):
    """An exact quantity (in nano-units) and the format it prints in."""

    nanos: int
    format: QuantityFormat = ""

    @property
    def value(self) -> Fraction:
        """The amount as an exact fraction."""
        return Fraction(self.nanos, NANO)

    def is_zero(self) -> bool:
        """True when the amount is zero."""
        return self.nanos == 0

    def ceil(self) -> int:
        """The amount rounded up to an integer (Go's ``Quantity.Value()``)."""
        return -(-self.nanos // NANO)

    def as_float(self) -> float:
        """The amount as a float (Go's ``AsApproximateFloat64``)."""
        return self.nanos / NANO

    def add(self, other: Quantity) -> Quantity:
        """The sum; the format is ours unless we are zero (Go's ``Add``)."""
        fmt = other.format if self.nanos == 0 else self.format
        return Quantity(self.nanos + other.nanos, fmt)

    def mul(self, factor: int) -> Quantity:
        """The amount times an integer, in our format."""
        return Quantity(self.nanos * factor, self.format)

    def __str__(self) -> str:
        return format_quantity(self)


ZERO: Final = Quantity(0, "")


def parse_quantity(raw: object) -> Quantity:
    """Parse a quantity as the API server stores it (a string, or a bare int in JSON).

    Raises:
        ValueError: not a quantity.
    """
    if isinstance(raw, bool):
        raise ValueError(f"quantities must match the regular expression: {raw!r}")
    if isinstance(raw, int):
        return Quantity(raw * NANO, "DecimalSI")
    if isinstance(raw, float):
        return Quantity(_round_nano(Fraction(raw)), "DecimalSI")
    if not isinstance(raw, str):
        raise ValueError(f"quantities must match the regular expression: {raw!r}")
    if _INT.match(raw):
        return Quantity(int(raw) * NANO, "DecimalSI")
    match = _PATTERN.match(raw.strip())
    if match is None:
        raise ValueError(f"quantities must match the regular expression '{_PATTERN.pattern}': {raw!r}")
    sign, number, suffix = match.group(1), match.group(2), match.group(3) or ""
    fmt: QuantityFormat
    if suffix in _BINARY:
        scale: Fraction | int = 2 ** _BINARY[suffix] * NANO
        fmt = "BinarySI"
    elif suffix in _DECIMAL:
        exponent = _DECIMAL[suffix] + 9
        scale = 10**exponent if exponent >= 0 else Fraction(1, 10**-exponent)
        fmt = "DecimalSI"
    else:
        exponent = int(suffix[1:]) + 9
        scale = 10**exponent if exponent >= 0 else Fraction(1, 10**-exponent)
        fmt = "DecimalExponent"
    if number.isdigit() and isinstance(scale, int):
        nanos = int(number) * scale  # the common case ("2", "500m", "5Gi"): integer arithmetic only
    else:
        nanos = _round_nano(Fraction(number) * scale / NANO)
    return Quantity(-nanos if sign == "-" else nanos, fmt)


def try_parse_quantity(raw: object) -> Quantity | None:
    """:func:`parse_quantity`, or None when ``raw`` is not a quantity."""
    try:
        return parse_quantity(raw)
    except ValueError:
        return None


def is_quantity(raw: object) -> bool:
    """True when ``raw`` parses as a quantity (cheaper than :func:`try_parse_quantity`)."""
    if isinstance(raw, bool):
        return False
    if isinstance(raw, int | float):
        return True
    return isinstance(raw, str) and _PATTERN.match(raw.strip()) is not None


def _round_nano(value: Fraction) -> int:
    # Go keeps at most nano precision and rounds away from zero.
    scaled = value * NANO
    if scaled.denominator == 1:
        return int(scaled)
    return -(-scaled.numerator // scaled.denominator) if scaled > 0 else scaled.numerator // scaled.denominator


def _decimal_parts(nanos: int) -> tuple[int, int]:
    """``nanos * 1e-9`` as ``mantissa * 10**exponent`` with a mantissa free of trailing zeros."""
    mantissa, scale = nanos, -9
    while mantissa != 0 and mantissa % 10 == 0:
        mantissa //= 10
        scale += 1
    return mantissa, scale


def format_quantity(quantity: Quantity) -> str:
    """Print a quantity canonically (Go's ``Quantity.String()``)."""
    nanos = quantity.nanos
    if nanos == 0:
        return "0"
    fmt = quantity.format
    if fmt == "BinarySI" and (-1024 * NANO < nanos < 1024 * NANO or nanos % NANO != 0):
        fmt = "DecimalSI"
    if fmt == "BinarySI":
        amount = nanos // NANO
        exponent = 0
        while amount % 1024 == 0 and exponent < 6:
            amount //= 1024
            exponent += 1
        return f"{amount}{_BINARY_SUFFIX[exponent]}"
    mantissa, exponent = _decimal_parts(nanos)
    shift = exponent % 3
    mantissa *= 10**shift
    exponent -= shift
    if fmt == "DecimalExponent" or fmt == "":
        return f"{mantissa}" if exponent == 0 else f"{mantissa}e{exponent}"
    if exponent > 18:
        mantissa *= 10 ** (exponent - 18)
        exponent = 18
    if exponent < -9:
        return f"{mantissa}e{exponent}"
    return f"{mantissa}{_DECIMAL_SUFFIX[exponent]}"
