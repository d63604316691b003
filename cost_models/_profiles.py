"""The hardware profile records, HardwareProfile and its LinkProfile: the figures the cost
model divides by, each with its citation; their validation, the rates they answer, and their
round trip through the profile file format (cost_models/_profile_format.py).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

from ._hiding import HidingModel
from ._profile_figures import (
    _CONTENTION_FIGURE,
    _DTYPE_ALIASES,
    _FIGURES,
    _HIDING_KEYS,
    _LINK_FIGURES,
    _MATMUL_FIGURE,
    _OPTIONAL,
    _REQUIRED_MATMUL_DTYPES,
    _SHARED_KEY,
    _SOURCE_HINT,
    ATTENTION_DIRECTIONS,
    LINK_KINDS,
    MATMUL_DTYPES,
    PLATFORMS,
    ProfileError,
    _check_value,
    _Figure,
    _figure_keys,
    _figure_values,
)
from ._profile_format import (
    _check_keys,
    _expect_mapping,
    _parse_attention,
    _parse_figure,
    _parse_hiding,
    _parse_shared,
)
from ._sharing import LinkSharing
from ._units import BANDWIDTH, FLOP_RATE, format_quantity


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
    # Several GPUs (cost_models/_sharing.py): per-GPU rates by GPUs copying at once (None:
    # no figures, every count gets the 1-GPU rates); how many copy at once in this profile
    # (HardwareProfile.for_devices sets it, and d2h/h2d_bytes_per_s to that row's rates);
    # the share of collective time that hides no host copy (an assumption until measured).
    shared: LinkSharing | None = None
    copying_gpus: int = 1
    collective_contention: float = 0.0

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
        _check_value(
            _CONTENTION_FIGURE, self.collective_contention, "link.collective_contention", self.kind
        )
        if not (isinstance(self.copying_gpus, int) and self.copying_gpus >= 1):
            raise ProfileError(
                f"link.copying_gpus is {self.copying_gpus!r}: the GPUs copying over their host "
                "links at once, a whole number >= 1 (HardwareProfile.for_devices sets it)."
            )
        if self.shared is not None:
            want = (
                self.shared.per_gpu("d2h", self.copying_gpus),
                self.shared.per_gpu("h2d", self.copying_gpus),
            )
            if any(abs(a - b) > 1e-9 * b for a, b in zip(bandwidths, want)):
                raise ProfileError(
                    f"link.shared's row for {self.copying_gpus} GPU(s) copying at once gives "
                    f"d2h/h2d {want} B/s, but the link's d2h_bytes_per_s/h2d_bytes_per_s are "
                    f"{bandwidths}. Its 1-GPU row is one GPU copying alone: write the same "
                    "rates there as in d2h_bytes_per_s and h2d_bytes_per_s."
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
            + (["link.shared"] if self.link.shared is not None else [])
            + (["link.collective_contention"] if self.link.collective_contention else [])
        )
        missing = sorted(set(keys) - set(dict(self.sources)))
        if missing:
            raise ProfileError(
                f"profile {self.name!r}: no source for {missing}. Every figure needs a citation, "
                f"e.g. sources={{'{missing[0]}': '{_SOURCE_HINT}'}}."
            )

    def for_devices(self, n: int) -> HardwareProfile:
        """This profile as each of ``n`` devices sees it when all of them copy over their host
        links at once (a step sharded over ``n`` devices offloads on every one): the link's
        d2h/h2d rates from ``link.shared`` (cost_models/_sharing.py), their sources saying
        so. Itself where ``n`` is 1 or the profile has no ``link.shared`` figures."""
        link = self.link
        if link.shared is None or n == link.copying_gpus or (n <= 1 and link.copying_gpus == 1):
            return self
        n = max(1, int(n))
        shared_src = dict(self.sources)["link.shared"]
        rates = {d: link.shared.per_gpu(d, n) for d in ("d2h", "h2d")}
        sources = {
            f"link.{d}_bytes_per_s": f"link.shared at {n} GPU(s) copying at once "
            f"({format_quantity(r, BANDWIDTH)} per GPU): {shared_src}"
            for d, r in rates.items()
        }
        new_link = dataclasses.replace(
            link, d2h_bytes_per_s=rates["d2h"], h2d_bytes_per_s=rates["h2d"], copying_gpus=n
        )
        merged = dict(self.sources) | sources
        return dataclasses.replace(self, link=new_link, sources=merged)  # type: ignore[arg-type]

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
        if self.link.shared is not None:
            link[_SHARED_KEY] = {
                "value": self.link.shared.to_json(),
                "source": sources["link.shared"],
            }
        if self.link.copying_gpus != 1:
            link["copying_gpus"] = self.link.copying_gpus
        if "link.collective_contention" in sources:
            link[_CONTENTION_FIGURE.key] = entry(
                _CONTENTION_FIGURE, self.link.collective_contention, "link.collective_contention"
            )
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
            optional=(*_HIDING_KEYS, _SHARED_KEY, "copying_gpus", _CONTENTION_FIGURE.key),
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
        if _SHARED_KEY in link_json:
            link_values[_SHARED_KEY] = _parse_shared(link_json[_SHARED_KEY], where, sources)
        if "copying_gpus" in link_json:
            link_values["copying_gpus"] = link_json["copying_gpus"]
        if _CONTENTION_FIGURE.key in link_json:
            key = f"link.{_CONTENTION_FIGURE.key}"
            link_values[_CONTENTION_FIGURE.key] = _parse_figure(
                _CONTENTION_FIGURE, link_json[_CONTENTION_FIGURE.key], key, where, sources
            )
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
