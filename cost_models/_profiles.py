"""Hardware profiles: the figures the cost model divides by, each with its citation.

Profiles are JSON files (shipped ones in `cost_models/profiles/`). Every figure is written as

    "hbm_bytes_per_s": {"value": "4.8 TB/s", "source": "<datasheet URL and what it says>"}

with its unit spelled out, so a reader can check it against the source and a typo in a unit is an
error rather than a silent factor of a thousand.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.resources
import json
import math
import numbers
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ._hiding import HidingError, HidingModel
from ._units import (
    BANDWIDTH,
    BYTES,
    FLOP_RATE,
    TIME,
    Kind,
    UnitError,
    format_quantity,
    parse_quantity,
)


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


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkProfile:
    """The link between a device and its host memory, used for offloaded activations."""

    kind: str
    d2h_bytes_per_s: float
    h2d_bytes_per_s: float
    latency_s: float
    copy_engines: int
    host_pinned_bytes: float
    # Per direction, the calibrated hiding model of one layer trip's copies (cost_models
    # ._hiding, fitted to a copy-heavy sweep: cost_models.hiding_from_sweep). None: not
    # calibrated; the cost model then uses the profile's overlap_efficiency as eta, with no
    # capacity limit and no floor (profiles written before the field existed).
    d2h_hiding: HidingModel | None = None
    h2d_hiding: HidingModel | None = None

    def hiding(self, direction: str, overlap_efficiency: float) -> HidingModel:
        """The hiding model of ``direction`` ("d2h" or "h2d"), or ``overlap_efficiency`` as
        its eta where the profile has none."""
        got = self.d2h_hiding if direction == "d2h" else self.h2d_hiding
        return got if got is not None else HidingModel(eta=overlap_efficiency, form="eta")

    def __post_init__(self) -> None:
        if self.kind not in LINK_KINDS:
            raise ProfileError(
                f"link kind {self.kind!r} is unknown. Use one of: "
                + "; ".join(f"{k!r} ({v})" for k, v in LINK_KINDS.items())
            )
        for figure in _LINK_FIGURES:
            _check_value(figure, getattr(self, figure.key), f"link.{figure.key}", self.kind)
        bandwidths = (self.d2h_bytes_per_s, self.h2d_bytes_per_s)
        if self.kind == "none" and any(bandwidths):
            raise ProfileError(
                "link kind 'none' means there is no host memory to offload to, but its "
                f"bandwidths are {bandwidths}. Set both to '0 GB/s' or name the link kind."
            )
        if self.kind != "none" and self.copy_engines < 1:
            raise ProfileError(
                f"link kind {self.kind!r}: field 'link.copy_engines' (DMA copy engines) is "
                f"{self.copy_engines!r}; a device with a host link copies with at least one "
                "engine. Write the GPU's count (H100/H200: 3; nvidia-smi -q shows it), or use "
                "link kind 'none' for a device without host memory."
            )
        if self.kind != "none" and not all(bandwidths):
            raise ProfileError(
                f"link kind {self.kind!r} has a zero bandwidth {bandwidths}; a transfer over it "
                "would take forever. Give both directions (e.g. '50.4 GB/s'), or use kind 'none'."
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class HardwareProfile:
    """Figures of one device (per GPU, not per node) that turn FLOPs and bytes into seconds.

    `matmul_flops_per_s` and `sources` may be given as mappings; they are stored as sorted tuples of
    pairs so that a profile is hashable. `sources` maps each figure ("hbm_bytes",
    "matmul_flops_per_s.bf16", "link.d2h_bytes_per_s", ...) to its citation; every figure needs one.
    """

    name: str
    platform: str
    hbm_bytes: float
    hbm_bytes_per_s: float
    matmul_flops_per_s: tuple[tuple[str, float], ...]
    vector_flops_per_s: float
    ici_bytes_per_s: float
    link: LinkProfile
    overlap_efficiency: float
    kernel_launch_s: float
    allocator_headroom: float
    sources: tuple[tuple[str, str], ...]
    description: str = ""
    # Optional: fused attention (cuDNN flash attention) in bf16/fp16, per direction ("fwd",
    # "bwd"), FLOP/s at measured key lengths, ((length, rate), ...) sorted by length. Absent,
    # attention runs at the dense bf16 matmul rate. See `attention_rate`.
    attention_flops_per_s: tuple[tuple[str, tuple[tuple[int, float], ...]], ...] = ()
    # Optional: see `loop_copy_rate` (0: not measured).
    loop_copy_bytes_per_s: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "matmul_flops_per_s", tuple(sorted(dict(self.matmul_flops_per_s).items()))
        )
        object.__setattr__(
            self,
            "attention_flops_per_s",
            tuple(
                sorted(
                    (str(d), tuple(sorted((int(n), float(r)) for n, r in dict(table).items())))
                    for d, table in dict(self.attention_flops_per_s).items()
                )
            ),
        )
        for d, table in self.attention_flops_per_s:
            if d not in ATTENTION_DIRECTIONS or not table:
                raise ProfileError(
                    f"profile {self.name!r}: attention_flops_per_s needs directions "
                    f"{ATTENTION_DIRECTIONS}, each with at least one (key length, rate); got "
                    f"{d!r}: {table!r}."
                )
            for n, rate in table:
                if n < 1:
                    raise ProfileError(
                        f"profile {self.name!r}: attention_flops_per_s.{d} has key length {n}; "
                        "lengths are positive token counts, like {'4096': '477 TFLOP/s'}."
                    )
                _check_value(_MATMUL_FIGURE, rate, f"attention_flops_per_s.{d}", self.name)
        object.__setattr__(self, "sources", tuple(sorted(dict(self.sources).items())))
        if self.platform not in PLATFORMS:
            raise ProfileError(
                f"profile {self.name!r}: platform {self.platform!r} is unknown; use one of "
                f"{PLATFORMS}."
            )
        for figure in _FIGURES:
            _check_value(figure, getattr(self, figure.key), figure.key, self.name)
        rates = dict(self.matmul_flops_per_s)
        for dtype, rate in rates.items():
            if dtype not in MATMUL_DTYPES:
                raise ProfileError(
                    f"profile {self.name!r}: matmul_flops_per_s has unknown dtype class {dtype!r}. "
                    f"Use {MATMUL_DTYPES}."
                )
            _check_value(_MATMUL_FIGURE, rate, f"matmul_flops_per_s.{dtype}", self.name)
        missing_rates = [d for d in _REQUIRED_MATMUL_DTYPES if d not in rates]
        if missing_rates:
            raise ProfileError(
                f"profile {self.name!r}: matmul_flops_per_s needs {missing_rates}; other dtypes "
                "fall back to bf16. Example: "
                "{'bf16': {'value': '989 TFLOP/s', 'source': '<where the figure comes from>'}}."
            )
        if not isinstance(self.link, LinkProfile):
            raise ProfileError(
                f"profile {self.name!r}: link must be a LinkProfile, got {self.link!r}."
            )
        keys = (
            _figure_keys(rates)
            + [f"link.{k}" for k in _HIDING_KEYS if getattr(self.link, k) is not None]
            + [f"attention_flops_per_s.{d}" for d, _ in self.attention_flops_per_s]
        )
        missing = sorted(set(keys) - set(dict(self.sources)))
        if missing:
            raise ProfileError(
                f"profile {self.name!r}: no source for {missing}. Every figure needs a citation, "
                f"e.g. sources={{'{missing[0]}': '{_SOURCE_HINT}'}}."
            )

    def matmul_rate(self, dtype_name: object = "bfloat16") -> float:
        """Dense matrix-unit FLOP/s for operands of `dtype_name`.

        Accepts JAX/numpy dtypes or names ("bfloat16", "bf16", "float16", "float32", "tf32",
        "float8_e4m3fn", ...). Any float8 variant maps to "fp8". A dtype the profile does not list
        (an unknown float dtype, integers, a class the profile omits) falls back to the bf16 rate.
        "float32" means true fp32; pass "tf32" for matmuls XLA runs in TF32.
        """
        name = str(getattr(dtype_name, "name", dtype_name)).lower()
        key = "fp8" if name.startswith("float8") else _DTYPE_ALIASES.get(name, "bf16")
        rates = dict(self.matmul_flops_per_s)
        return rates.get(key, rates["bf16"])

    def loop_copy_rate(self) -> float:
        """Bytes per second of the device-to-device copies XLA makes to slice a loop's stacked
        operands (``planner._src.xla.hlo.loop_slice_copy_bytes``): the measured figure, or half
        the HBM bandwidth where the profile has none (each byte read once, written once)."""
        return self.loop_copy_bytes_per_s or self.hbm_bytes_per_s / 2

    def attention_rate(self, direction: str, length: int, dtype_name: object = "bfloat16") -> float:
        """FLOP/s of a fused attention kernel (`direction` "fwd" or "bwd") over keys of `length`.

        From the profile's measured table for bf16/fp16 operands: linear in log2(length)
        between the measured lengths, the nearest one's rate outside them (a flash-attention
        kernel's efficiency grows with the work per query tile, then levels off). Without a
        table for `direction`, or for other dtypes (fp8), the dense matmul rate of the dtype.
        """
        name = str(getattr(dtype_name, "name", dtype_name)).lower()
        table = dict(self.attention_flops_per_s).get(direction)
        if not table or _DTYPE_ALIASES.get(name) not in ("bf16", "fp16"):
            return self.matmul_rate(dtype_name)
        if length <= table[0][0]:
            return table[0][1]
        if length >= table[-1][0]:
            return table[-1][1]
        for (n0, r0), (n1, r1) in zip(table, table[1:], strict=False):
            if n0 <= length <= n1:
                w = (math.log2(length) - math.log2(n0)) / (math.log2(n1) - math.log2(n0))
                return r0 + w * (r1 - r0)
        raise AssertionError("unreachable: the table is sorted")  # pragma: no cover

    def source(self, field: str) -> str:
        """The citation of `field` ("hbm_bytes", "matmul_flops_per_s.bf16", "link.latency_s")."""
        sources = dict(self.sources)
        if field not in sources:
            raise ProfileError(
                f"profile {self.name!r} has no figure {field!r}; figures: {sorted(sources)}."
            )
        return sources[field]

    def replace(self, **changes: object) -> HardwareProfile:
        """A copy with `changes` applied and validated.

        A changed figure's citation becomes "set with HardwareProfile.replace (no citation given)"
        unless `sources=` (merged over the existing ones) cites it.
        """
        fields = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - fields)
        if unknown:
            raise ProfileError(f"HardwareProfile has no field {unknown}; fields: {sorted(fields)}.")
        new_sources = dict(changes.pop("sources", {}))  # type: ignore[call-overload]
        current = {name: getattr(self, name) for name in fields}
        old_values = _figure_values(current)
        new_values = _figure_values({**current, **changes})
        sources = {k: v for k, v in self.sources if k in new_values}
        for key, value in new_values.items():
            if old_values.get(key) != value:
                sources[key] = "set with HardwareProfile.replace (no citation given)"
        sources.update(new_sources)
        return dataclasses.replace(self, **changes, sources=sources)  # type: ignore[arg-type]

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict in the profile file format; `from_json` reads it back exactly."""
        sources = dict(self.sources)

        def entry(figure: _Figure, value: float, key: str) -> dict[str, object]:
            written: object
            if figure.kind is not None:
                written = format_quantity(value, figure.kind)
            else:
                written = int(value) if figure.integer else float(value)
            return {"value": written, "source": sources[key]}

        out: dict[str, object] = {
            "name": self.name,
            "platform": self.platform,
            "description": self.description,
        }
        for figure in _FIGURES:
            out[figure.key] = entry(figure, getattr(self, figure.key), figure.key)
        out["matmul_flops_per_s"] = {
            dtype: entry(_MATMUL_FIGURE, rate, f"matmul_flops_per_s.{dtype}")
            for dtype, rate in self.matmul_flops_per_s
        }
        if self.attention_flops_per_s:
            out["attention_flops_per_s"] = {
                d: {
                    "value": {str(n): format_quantity(r, FLOP_RATE) for n, r in table},
                    "source": sources[f"attention_flops_per_s.{d}"],
                }
                for d, table in self.attention_flops_per_s
            }
        link: dict[str, object] = {"kind": self.link.kind}
        for figure in _LINK_FIGURES:
            link[figure.key] = entry(figure, getattr(self.link, figure.key), f"link.{figure.key}")
        for key in _HIDING_KEYS:
            model = getattr(self.link, key)
            if model is not None:
                link[key] = {"value": model.to_json(), "source": sources[f"link.{key}"]}
        out["link"] = link
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, object], *, where: str = "<dict>") -> HardwareProfile:
        """Parse the profile file format; `where` (a file name) starts every error message."""
        sources: dict[str, str] = {}
        top = _expect_mapping(d, where, "the profile")
        _check_keys(
            top,
            where,
            "the profile",
            required=(
                "name",
                "platform",
                "matmul_flops_per_s",
                "link",
                *(f.key for f in _FIGURES if f.key not in _OPTIONAL),
            ),
            optional=("description", "attention_flops_per_s", *_OPTIONAL),
        )
        values = {
            figure.key: _parse_figure(figure, top[figure.key], figure.key, where, sources)
            for figure in _FIGURES
            if figure.key in top
        }
        for key, (value, why) in _OPTIONAL.items():  # profile files older than the figure
            if key not in top:
                values[key] = value
                sources[key] = f"not in {where}: {why}"
        rates_json = _expect_mapping(top["matmul_flops_per_s"], where, "matmul_flops_per_s")
        _check_keys(
            rates_json,
            where,
            "matmul_flops_per_s",
            required=_REQUIRED_MATMUL_DTYPES,
            optional=tuple(d for d in MATMUL_DTYPES if d not in _REQUIRED_MATMUL_DTYPES),
        )
        rates = {
            dtype: _parse_figure(_MATMUL_FIGURE, raw, f"matmul_flops_per_s.{dtype}", where, sources)
            for dtype, raw in rates_json.items()
        }
        attention = {}
        if "attention_flops_per_s" in top:
            attention = _parse_attention(top["attention_flops_per_s"], where, sources)
        link_json = _expect_mapping(top["link"], where, "link")
        _check_keys(
            link_json,
            where,
            "link",
            required=("kind", *(f.key for f in _LINK_FIGURES)),
            optional=_HIDING_KEYS,
        )
        link_values = {
            figure.key: _parse_figure(
                figure, link_json[figure.key], f"link.{figure.key}", where, sources
            )
            for figure in _LINK_FIGURES
        }
        for key in _HIDING_KEYS:  # optional: profiles older than the field fall back to eta
            if key in link_json:
                link_values[key] = _parse_hiding(link_json[key], f"link.{key}", where, sources)
        try:
            link = LinkProfile(kind=str(link_json["kind"]), **link_values)  # type: ignore[arg-type]
            return cls(
                name=str(top["name"]),
                platform=str(top["platform"]),
                description=str(top.get("description", "")),
                matmul_flops_per_s=rates,  # type: ignore[arg-type]
                attention_flops_per_s=attention,  # type: ignore[arg-type]
                link=link,
                sources=sources,  # type: ignore[arg-type]
                **values,  # type: ignore[arg-type]
            )
        except ProfileError as err:
            raise ProfileError(f"{where}: {err}") from None


# The optional per-direction hiding models of a link (LinkProfile.d2h_hiding / h2d_hiding).
_HIDING_KEYS: tuple[str, ...] = ("d2h_hiding", "h2d_hiding")


def _parse_hiding(raw: object, field: str, where: str, sources: dict[str, str]) -> HidingModel:
    """{"value": {"eta", "capacity", "floor", "form"}, "source": ...}; the source recorded."""
    form = (
        '{"value": {"eta": 0.24, "capacity": "2.66 ms", "floor": 0.0, "form": "eta+capacity"}, '
        f'"source": "{_SOURCE_HINT}"}}'
    )
    if not isinstance(raw, Mapping) or set(raw) != {"value", "source"}:
        raise ProfileError(
            f"{where}: field {field!r} (a calibrated hiding model) must be an object with "
            f"exactly a value and its source, like {form}; got {raw!r:.80}."
        )
    source = raw["source"]
    if not isinstance(source, str) or not source.strip():
        raise ProfileError(
            f"{where}: field {field!r} has an empty source. Every figure needs a citation: {form}."
        )
    try:
        model = HidingModel.from_json(raw["value"], f"{where}: field {field!r}")
    except HidingError as err:
        raise ProfileError(str(err)) from None
    sources[field] = source
    return model


ATTENTION_DIRECTIONS: tuple[str, ...] = ("fwd", "bwd")


def _parse_attention(
    raw: object, where: str, sources: dict[str, str]
) -> dict[str, dict[int, float]]:
    """{"fwd": {"value": {"4096": "477 TFLOP/s", ...}, "source": ...}, "bwd": {...}}."""
    form = (
        '{"fwd": {"value": {"4096": "477 TFLOP/s", "16384": "546 TFLOP/s"}, '
        f'"source": "{_SOURCE_HINT}"}}, "bwd": {{...}}}}'
    )
    top = _expect_mapping(raw, where, "attention_flops_per_s")
    _check_keys(top, where, "attention_flops_per_s", required=(), optional=ATTENTION_DIRECTIONS)
    out: dict[str, dict[int, float]] = {}
    for d, entry in top.items():
        field = f"attention_flops_per_s.{d}"
        if not isinstance(entry, Mapping) or set(entry) != {"value", "source"}:
            raise ProfileError(
                f"{where}: field {field!r} must be an object with exactly a value (rates by key "
                f"length) and its source, like {form}; got {entry!r:.80}."
            )
        table = _expect_mapping(entry["value"], where, field)
        if not table:
            raise ProfileError(f"{where}: field {field!r} has no rates; write it like {form}.")
        rates: dict[int, float] = {}
        for length, rate in table.items():
            try:
                n = int(length)
                rates[n] = parse_quantity(rate, FLOP_RATE)
            except (UnitError, ValueError) as err:
                raise ProfileError(
                    f"{where}: field {field!r}, key length {length!r}: {err}. Write it like {form}."
                ) from None
        source = entry["source"]
        if not isinstance(source, str) or not source.strip():
            raise ProfileError(
                f"{where}: field {field!r} has an empty source. Every figure needs a citation."
            )
        sources[field] = source
        out[str(d)] = rates
    return out


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
    return values


def _expect_mapping(value: object, where: str, what: str) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise ProfileError(
            f"{where}: {what} must be a JSON object, got {type(value).__name__} {value!r:.60}. "
            "Compare with a shipped profile, e.g. cost_models/profiles/h100-sxm.json."
        )
    return value


def _check_keys(
    obj: Mapping[str, object],
    where: str,
    what: str,
    *,
    required: tuple[str, ...],
    optional: tuple[str, ...] = (),
) -> None:
    known = required + optional
    for key in obj:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ProfileError(
                f"{where}: unknown field {key!r} in {what}.{hint} Known fields: {', '.join(known)}."
            )
    for key in required:
        if key not in obj:
            figure = next((f for f in _FIGURES + _LINK_FIGURES if f.key == key), None)
            if figure is not None:
                how = (
                    f'Add it as "{key}": {{"value": {figure.example}, "source": "{_SOURCE_HINT}"}}.'
                )
            elif what == "matmul_flops_per_s":
                how = f'Add it as "{key}": {{"value": "989 TFLOP/s", "source": "{_SOURCE_HINT}"}}.'
            else:
                how = "Compare with a shipped profile, e.g. cost_models/profiles/h100-sxm.json."
            raise ProfileError(f"{where}: missing field {key!r} in {what}. {how}")


def _parse_figure(
    figure: _Figure, raw: object, field: str, where: str, sources: dict[str, str]
) -> float:
    """Parse {"value": ..., "source": ...}; record the source; raise ProfileError that teaches."""
    form = f'{{"value": {figure.example}, "source": "{_SOURCE_HINT}"}}'
    if not isinstance(raw, Mapping) or set(raw) != {"value", "source"}:
        raise ProfileError(
            f"{where}: field {field!r} ({figure.what}) must be an object with exactly a value and "
            f"its source, like {form}; got {raw!r:.80}."
        )
    source = raw["source"]
    if not isinstance(source, str) or not source.strip():
        raise ProfileError(
            f"{where}: field {field!r} has an empty source. Every figure needs a citation: {form}."
        )
    value = raw["value"]
    try:
        if figure.kind is not None:
            parsed = parse_quantity(value, figure.kind)
        elif isinstance(value, str | int | float) and not isinstance(value, bool):
            parsed = float(value)
        else:
            raise UnitError(f"{value!r} is not a number")
    except (UnitError, ValueError) as err:
        raise ProfileError(
            f"{where}: field {field!r} ({figure.what}): {err}. Write it like {figure.example}."
        ) from None
    if parsed < 0:
        raise ProfileError(
            f"{where}: field {field!r} ({figure.what}) is negative ({value!r}). "
            f"Write it like {figure.example}."
        )
    sources[field] = source
    return int(parsed) if figure.integer and parsed == int(parsed) else parsed


def _profiles_dir() -> importlib.resources.abc.Traversable:
    return importlib.resources.files(__package__) / "profiles"


def list_profiles() -> tuple[str, ...]:
    """Names of the profiles shipped in cost_models/profiles/, sorted."""
    return tuple(
        sorted(
            p.name.removesuffix(".json")
            for p in _profiles_dir().iterdir()
            if p.name.endswith(".json")
        )
    )


def _load_file(path: Path, display: str) -> HardwareProfile:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ProfileError(
            f"{display}: cannot read the profile file ({err.strerror}). Pass the path of an "
            f"existing JSON file, or a shipped profile name: {', '.join(list_profiles())}."
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ProfileError(
            f"{display}: not valid JSON ({err.msg} at line {err.lineno} column {err.colno}). "
            "Compare with a shipped profile, e.g. cost_models/profiles/h100-sxm.json."
        ) from None
    return HardwareProfile.from_json(data, where=display)


def load_profile(name_or_path: str | os.PathLike[str] | HardwareProfile) -> HardwareProfile:
    """A profile by shipped name ("h200"), by path to a JSON file, or passed through as is."""
    if isinstance(name_or_path, HardwareProfile):
        return name_or_path
    if isinstance(name_or_path, str) and name_or_path in list_profiles():
        shipped = _profiles_dir() / f"{name_or_path}.json"
        with importlib.resources.as_file(shipped) as path:
            return _load_file(Path(path), f"{name_or_path}.json")
    if isinstance(name_or_path, os.PathLike) or (
        isinstance(name_or_path, str)
        and (
            name_or_path.endswith(".json") or os.sep in name_or_path or Path(name_or_path).is_file()
        )
    ):
        return _load_file(Path(name_or_path), os.fspath(name_or_path))
    if not isinstance(name_or_path, str):
        raise ProfileError(
            f"hardware must be a profile name, a path or a HardwareProfile, got "
            f"{type(name_or_path).__name__}."
        )
    names = list_profiles()
    close = difflib.get_close_matches(name_or_path, names, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ProfileError(
        f"unknown hardware profile {name_or_path!r}.{hint} Shipped profiles: {', '.join(names)}. "
        "Pass one of these names, the path of a profile JSON file, or a HardwareProfile (for "
        "example the one cost_models.calibrate() measures on the live device)."
    )
