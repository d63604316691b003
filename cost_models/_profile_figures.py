"""The figures a hardware profile holds: each one's key, unit, meaning and physical range,
the keys their citations are filed under, and the check of a value against its range; and
ProfileError, which every problem with a profile raises.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass

from ._units import BANDWIDTH, BYTES, FLOP_RATE, TIME, Kind, format_quantity


class ProfileError(ValueError):
    """A hardware profile that cannot be used: unknown name, bad JSON, bad or missing figure."""


# What each link kind means. The kind is informational for reports, except "none", which says the
# device has no host memory to offload to (both bandwidths must then be zero).
LINK_KINDS: Mapping[str, str] = {
    "pcie4": "PCIe Gen4 x16 between the GPU and the host CPU",
    "pcie5": "PCIe Gen5 x16 between the GPU and the host CPU",
    "nvlink-c2c": "NVLink chip-to-chip between a Grace CPU and the GPU",
    "host-memory": "no physical link: device memory is host DRAM (JAX CPU); a copy is a memcpy",
    "none": "no host memory to offload to",
}
PLATFORMS: tuple[str, ...] = ("gpu", "cpu", "tpu")

# Matrix-unit dtype classes a profile may list. "bf16" and "fp32" are required; a missing class
# falls back to the bf16 rate (see HardwareProfile.matmul_rate).
MATMUL_DTYPES: tuple[str, ...] = ("bf16", "fp16", "tf32", "fp32", "fp8")
_REQUIRED_MATMUL_DTYPES: tuple[str, ...] = ("bf16", "fp32")
# Names a caller may pass to matmul_rate (numpy/JAX dtype names and common short names).
_DTYPE_ALIASES: Mapping[str, str] = {
    "bfloat16": "bf16",
    "bf16": "bf16",
    "float16": "fp16",
    "fp16": "fp16",
    "half": "fp16",
    "float32": "fp32",
    "fp32": "fp32",
    "tf32": "tf32",
    "tensorfloat32": "tf32",
    "fp8": "fp8",
}

_SOURCE_HINT = "<datasheet URL and what it says, or the measurement file>"


@dataclass(frozen=True, slots=True, kw_only=True)
class _Figure:
    """One numeric field of a profile: its JSON key, its kind of quantity and what it means."""

    key: str
    kind: Kind | None  # None: a plain number (a fraction or a count), written without a unit
    what: str
    integer: bool = False
    upper: float = math.inf  # inclusive upper bound (1 for fractions)
    positive: bool = False  # must be > 0, not just >= 0
    # The physical range a nonzero value must lie in (inclusive): a figure outside it is a
    # typo in its unit or exponent, and would reach the solver as a model it cannot solve.
    lower: float = 0.0

    @property
    def example(self) -> str:
        if self.kind is not None:
            return repr(self.kind.example)
        return "2" if self.integer else "0.4"


_FIGURES: tuple[_Figure, ...] = (
    _Figure(
        key="hbm_bytes",
        kind=BYTES,
        what="HBM capacity per device",
        positive=True,
        lower=1e6,
        upper=1e14,
    ),
    _Figure(
        key="hbm_bytes_per_s",
        kind=BANDWIDTH,
        what="HBM bandwidth",
        positive=True,
        lower=1e6,
        upper=1e15,
    ),
    _Figure(
        key="vector_flops_per_s",
        kind=FLOP_RATE,
        what="non-matrix fp32 rate (elementwise and reductions)",
        positive=True,
        lower=1e6,
        upper=1e18,
    ),
    _Figure(
        key="ici_bytes_per_s",
        kind=BANDWIDTH,
        what="device-to-device bandwidth per direction, used for collectives",
        positive=True,
        lower=1e6,
        upper=1e15,
    ),
    _Figure(
        key="overlap_efficiency",
        kind=None,
        what="fraction of a host copy that hides behind concurrent compute, 0 to 1",
        upper=1.0,
    ),
    _Figure(key="kernel_launch_s", kind=TIME, what="fixed time per launched kernel", upper=1.0),
    _Figure(
        key="loop_copy_bytes_per_s",
        kind=BANDWIDTH,
        what="bytes per second XLA's device-to-device copies move when a loop slices its "
        "stacked operands (a scan's weights, its stacked residuals and gradients); 0: half "
        "the HBM bandwidth (each byte read once and written once)",
        upper=1e15,
    ),
    _Figure(
        key="allocator_headroom",
        kind=None,
        what="fraction of the budget the planner leaves free for the device allocator "
        "(fragmentation beyond the compiled program's bytes), 0 to 0.5",
        upper=0.5,
    ),
)
# Figures a profile file may leave out (files written before the figure existed), with the
# value used then and why.
_OPTIONAL: dict[str, tuple[float, str]] = {
    "allocator_headroom": (0.0, "no headroom (the planner fills the budget to the byte)"),
    "loop_copy_bytes_per_s": (
        0.0,
        "not measured: half the HBM bandwidth (each copied byte read once and written once)",
    ),
}
_LINK_FIGURES: tuple[_Figure, ...] = (
    _Figure(
        key="d2h_bytes_per_s",
        kind=BANDWIDTH,
        what="device-to-host bandwidth per direction",
        lower=1e6,
        upper=1e15,
    ),
    _Figure(
        key="h2d_bytes_per_s",
        kind=BANDWIDTH,
        what="host-to-device bandwidth per direction",
        lower=1e6,
        upper=1e15,
    ),
    _Figure(key="latency_s", kind=TIME, what="fixed time per transfer", upper=1.0),
    # Informational (the report's and the reader's; the cost model's copy streams come from
    # the measured overlap efficiency): at least 1 on a device with a host link (0 only for
    # link kind 'none'), at most 64.
    _Figure(key="copy_engines", kind=None, what="DMA copy engines", integer=True, upper=64),
    _Figure(
        key="host_pinned_bytes",
        kind=BYTES,
        what="pinned host memory usable for offload",
        upper=1e15,
    ),
)
_MATMUL_FIGURE = _Figure(
    key="matmul_flops_per_s",
    kind=FLOP_RATE,
    what="dense matrix-unit rate",
    positive=True,
    lower=1e6,
    upper=1e18,
)


def _check_value(figure: _Figure, value: object, field: str, profile: str) -> None:
    """Raise ProfileError unless `value` is a finite number in the figure's range."""
    problem = None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        problem = f"is {value!r}, not a number"
    elif figure.integer and value != int(value):
        problem = f"is {value!r}, not a whole number"
    elif not math.isfinite(value):
        problem = f"is {value!r}; it must be finite"
    elif value < 0:
        problem = f"is {value!r}; it cannot be negative"
    elif figure.positive and value == 0:
        problem = "is 0; the cost model divides by it, so it must be positive"
    elif value and not figure.lower <= value <= figure.upper and figure.kind is not None:
        unit = next(u for u, scale in figure.kind.scales.items() if scale == 1)
        problem = (
            f"is {value:.3g} {unit}, outside the physical range "
            f"{format_quantity(figure.lower, figure.kind)} to "
            f"{format_quantity(figure.upper, figure.kind)}: a typo in its unit or exponent? "
            "(Such a figure would reach the solver as times it cannot model)"
        )
    elif value > figure.upper:
        problem = f"is {value!r}; it must be at most {figure.upper:g}"
    if problem is not None:
        raise ProfileError(
            f"profile {profile!r}: field {field!r} ({figure.what}) {problem}. "
            f"A valid value looks like {figure.example}."
        )


# The optional per-direction hiding models of a link (LinkProfile.d2h_hiding / h2d_hiding).
_HIDING_KEYS: tuple[str, ...] = ("d2h_hiding", "h2d_hiding")
# Optional link fields of several GPUs (cost_models/_sharing.py): the per-GPU rates by GPUs
# copying at once, and how much collective time hides no host copy.
_SHARED_KEY = "shared"
_CONTENTION_FIGURE = _Figure(
    key="collective_contention",
    kind=None,
    what="fraction of a step's collective time during which host copies make no progress "
    "(0: collectives hide host copies like compute does; 1: they hide none), 0 to 1",
    upper=1.0,
)

ATTENTION_DIRECTIONS: tuple[str, ...] = ("fwd", "bwd")


def _figure_keys(rates: Mapping[str, float]) -> list[str]:
    return (
        [f.key for f in _FIGURES]
        + [f"matmul_flops_per_s.{dtype}" for dtype in rates]
        + [f"link.{f.key}" for f in _LINK_FIGURES]
    )


def _figure_values(fields: Mapping[str, object]) -> dict[str, object]:
    """Every figure in `fields` (a profile's field values by name) under its source key."""
    link = fields["link"]
    values = {f.key: fields[f.key] for f in _FIGURES}
    values.update(
        {f"matmul_flops_per_s.{d}": r for d, r in dict(fields["matmul_flops_per_s"]).items()}
    )  # type: ignore[call-overload]
    values.update({f"link.{f.key}": getattr(link, f.key) for f in _LINK_FIGURES})
    values.update(
        {
            f"attention_flops_per_s.{d}": tuple(sorted(dict(table).items()))
            for d, table in dict(fields.get("attention_flops_per_s", ()) or ()).items()
        }
    )
    values.update(
        {f"link.{k}": getattr(link, k) for k in _HIDING_KEYS if getattr(link, k) is not None}
    )
    if link.shared is not None:
        values["link.shared"] = link.shared.rows
    if link.collective_contention:
        values["link.collective_contention"] = link.collective_contention
    return values
