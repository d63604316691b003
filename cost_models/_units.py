"""Quantities written with units ("141 GB", "4.8 TB/s", "989 TFLOP/s", "2 us").

Profiles are data that people edit by hand, so every figure carries its unit and is parsed here.
Parsing and formatting go through `decimal.Decimal`, so a value written by `format_quantity` reads
back as exactly the same float (profiles round-trip through JSON bit for bit).
"""

from __future__ import annotations

import decimal
import math
import re
from dataclasses import dataclass

# Decimal (SI) byte prefixes, as vendor datasheets use them, and binary (IEC) ones, as
# `jax.Array.nbytes` / GiB budgets use them. 1 KB = 10**3 B, 1 KiB = 2**10 B (IEC 80000-13).
_BYTE_SCALES: dict[str, int] = {
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "PB": 10**15,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
}
# SI prefixes for floating-point operations per second; "FLOP/s" is the unit vendor datasheets
# spell as "FLOPS".
_FLOP_SCALES: dict[str, int] = {
    "FLOP/s": 1,
    "KFLOP/s": 10**3,
    "MFLOP/s": 10**6,
    "GFLOP/s": 10**9,
    "TFLOP/s": 10**12,
    "PFLOP/s": 10**15,
}
# Seconds and their SI submultiples; "us" is the ASCII spelling of "µs".
_TIME_SCALES: dict[str, decimal.Decimal] = {
    "s": decimal.Decimal(1),
    "ms": decimal.Decimal("1e-3"),
    "us": decimal.Decimal("1e-6"),
    "µs": decimal.Decimal("1e-6"),
    "ns": decimal.Decimal("1e-9"),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Kind:
    """What a field measures: its accepted units, the unit list shown in errors, and an example."""

    name: str
    scales: dict[str, decimal.Decimal]
    example: str
    # Units `format_quantity` writes, largest first (decimal prefixes only, so they read like
    # datasheets).
    write_units: tuple[str, ...]


def _dec(scales: dict[str, int] | dict[str, decimal.Decimal]) -> dict[str, decimal.Decimal]:
    return {unit: decimal.Decimal(scale) for unit, scale in scales.items()}


BYTES = Kind(
    name="a size in bytes",
    scales=_dec(_BYTE_SCALES),
    example="141 GB",
    write_units=("PB", "TB", "GB", "MB", "KB", "B"),
)
BANDWIDTH = Kind(
    name="a bandwidth in bytes per second",
    scales={f"{unit}/s": scale for unit, scale in _dec(_BYTE_SCALES).items()},
    example="4.8 TB/s",
    write_units=("PB/s", "TB/s", "GB/s", "MB/s", "KB/s", "B/s"),
)
FLOP_RATE = Kind(
    name="a rate in floating-point operations per second",
    scales=_dec(_FLOP_SCALES),
    example="989 TFLOP/s",
    write_units=("PFLOP/s", "TFLOP/s", "GFLOP/s", "MFLOP/s", "KFLOP/s", "FLOP/s"),
)
TIME = Kind(
    name="a time",
    scales=_TIME_SCALES,
    example="2 us",
    write_units=("s", "ms", "us", "ns"),
)

_QUANTITY = re.compile(
    r"^\s*(?P<number>[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?)\s*(?P<unit>\S*)\s*$"
)


class UnitError(ValueError):
    """A quantity string that is not a non-negative number followed by a unit of the right kind."""


def parse_quantity(text: object, kind: Kind) -> float:
    """Parse `text` ("4.8 TB/s") as a quantity of `kind`; raise UnitError saying what is wrong."""
    if not isinstance(text, str):
        raise UnitError(
            f"{text!r} is a bare {type(text).__name__}, but the unit must be written out: "
            f"this field is {kind.name}"
        )
    match = _QUANTITY.match(text)
    if match is None:
        raise UnitError(f"{text!r} is not a number followed by a unit; this field is {kind.name}")
    unit = match["unit"]
    if not unit:
        raise UnitError(f"{text!r} has no unit; this field is {kind.name}")
    if unit not in kind.scales:
        raise UnitError(
            f"{text!r} has unit {unit!r}, but this field is {kind.name} "
            f"(units: {', '.join(kind.scales)})"
        )
    number = decimal.Decimal(match["number"])
    if number < 0:
        raise UnitError(f"{text!r} is negative; {kind.name} cannot be")
    return float(number * kind.scales[unit])


def format_quantity(value: float, kind: Kind) -> str:
    """Write `value` with the largest unit of `kind` that keeps the number >= 1 ("50.4 GB/s")."""
    if not math.isfinite(value) or value < 0:
        raise UnitError(f"cannot write {value!r} as {kind.name}: it must be finite and >= 0")
    exact = decimal.Decimal(repr(float(value)))
    unit = next((u for u in kind.write_units if exact >= kind.scales[u]), kind.write_units[-1])
    return f"{(exact / kind.scales[unit]).normalize():f} {unit}"
