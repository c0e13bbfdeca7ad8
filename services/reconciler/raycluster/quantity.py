"""Kubernetes resource Quantities: parse, add, multiply, round up and print canonically.

Role: the arithmetic KubeRay does with ``resource.Quantity`` (``--num-cpus`` from a CPU limit, the
``desired*`` status fields, the shared-memory size), reproduced exactly enough that the printed values
match what the Go operator writes (``1500m``, ``6Gi``, ``80G``).

Invariants: values are exact :class:`fractions.Fraction`s (Go rounds to nano units at parse time, and so
do we); a sum keeps the *format* (binary/decimal/exponent) of its first non-zero term, as Go's
``Quantity.Add`` does; printing follows ``CanonicalizeBytes`` (binary values below 1024 or not integral
print as decimal SI).

Not here: the strict validation of quantity syntax for the API server (a malformed quantity raises
:class:`ValueError`, which the validator turns into a spec error).
"""

from __future__ import annotations

import math
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
_NANO: Final = Fraction(1, 10**9)


class Quantity(msgspec.Struct, frozen=True):
    """An exact quantity and the format it prints in."""

    value: Fraction
    format: QuantityFormat = ""

    def is_zero(self) -> bool:
        """True when the amount is zero."""
        return self.value == 0

    def ceil(self) -> int:
        """The amount rounded up to an integer (Go's ``Quantity.Value()``)."""
        return math.ceil(self.value)

    def add(self, other: Quantity) -> Quantity:
        """The sum; the format is ours unless we are zero (Go's ``Add``)."""
        fmt = other.format if self.value == 0 else self.format
        return Quantity(self.value + other.value, fmt)

    def mul(self, factor: int) -> Quantity:
        """The amount times an integer, in our format."""
        return Quantity(self.value * factor, self.format)

    def __str__(self) -> str:
        return format_quantity(self)


ZERO: Final = Quantity(Fraction(0), "")


def parse_quantity(raw: object) -> Quantity:
    """Parse a quantity as the API server stores it (a string, or a bare int in JSON).

    Raises:
        ValueError: not a quantity.
    """
    if isinstance(raw, bool):
        raise ValueError(f"quantities must match the regular expression: {raw!r}")
    if isinstance(raw, int):
        return Quantity(Fraction(raw), "DecimalSI")
    if isinstance(raw, float):
        return Quantity(_round_nano(Fraction(raw)), "DecimalSI")
    if not isinstance(raw, str):
        raise ValueError(f"quantities must match the regular expression: {raw!r}")
    match = _PATTERN.match(raw.strip())
    if match is None:
        raise ValueError(f"quantities must match the regular expression '{_PATTERN.pattern}': {raw!r}")
    sign, number, suffix = match.group(1), match.group(2), match.group(3) or ""
    value = Fraction(number)
    fmt: QuantityFormat
    if suffix in _BINARY:
        value *= 2 ** _BINARY[suffix]
        fmt = "BinarySI"
    elif suffix in _DECIMAL:
        value *= Fraction(10) ** _DECIMAL[suffix]
        fmt = "DecimalSI"
    else:
        value *= Fraction(10) ** int(suffix[1:])
        fmt = "DecimalExponent"
    if sign == "-":
        value = -value
    return Quantity(_round_nano(value), fmt)


def try_parse_quantity(raw: object) -> Quantity | None:
    """:func:`parse_quantity`, or None when ``raw`` is not a quantity."""
    try:
        return parse_quantity(raw)
    except ValueError:
        return None


def _round_nano(value: Fraction) -> Fraction:
    # Go keeps at most nano precision and rounds away from zero.
    if (value / _NANO).denominator == 1:
        return value
    scaled = value / _NANO
    rounded = math.ceil(scaled) if scaled > 0 else math.floor(scaled)
    return rounded * _NANO


def _decimal_parts(value: Fraction) -> tuple[int, int]:
    """``value`` as ``mantissa * 10**exponent`` with an integer mantissa free of trailing zeros."""
    scale = 0
    while value.denominator != 1:
        value *= 10
        scale -= 1
    mantissa = int(value)
    while mantissa != 0 and mantissa % 10 == 0:
        mantissa //= 10
        scale += 1
    return mantissa, scale


def format_quantity(quantity: Quantity) -> str:
    """Print a quantity canonically (Go's ``Quantity.String()``)."""
    value = quantity.value
    if value == 0:
        return "0"
    fmt = quantity.format
    if fmt == "BinarySI" and (-1024 < value < 1024 or value.denominator != 1):
        fmt = "DecimalSI"
    if fmt == "BinarySI":
        amount = int(value)
        exponent = 0
        while amount % 1024 == 0 and exponent < 6:
            amount //= 1024
            exponent += 1
        return f"{amount}{_BINARY_SUFFIX[exponent]}"
    mantissa, exponent = _decimal_parts(value)
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


def sum_quantities(quantities: list[Quantity]) -> Quantity:
    """Sum in order (the first non-zero term decides the format)."""
    total = ZERO
    for quantity in quantities:
        total = total.add(quantity)
    return total
