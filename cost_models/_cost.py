"""An additive roofline cost per jaxpr equation, and the registry of per-primitive rules.

Modelled on jax/experimental/roofline (`RooflineResult` + `register_roofline`), keyed by primitive
*name* so that rules survive JAX renaming or re-creating primitive objects between versions.
Shapes are per device: an aval sharded over Explicit mesh axes is divided by those axis sizes, and
inside shard_map the avals are already per device.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
import types
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._profiles import HardwareProfile
from ._transfer import transfer_seconds

try:  # the public home of the jaxpr types
    from jax.extend.core import ClosedJaxpr, Jaxpr
except ImportError:  # pragma: no cover - guard for JAX versions that move them again
    from jax.core import ClosedJaxpr, Jaxpr  # type: ignore[no-redef,attr-defined]

try:
    from jax.sharding import AxisType

    _EXPLICIT = AxisType.Explicit
except ImportError:  # pragma: no cover - JAX without sharding in types: avals are global
    _EXPLICIT = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Cost:
    """Work of one equation (or a sum of them) on one device, before dividing by hardware rates.

    All figures are unfused estimates: each equation reads its inputs from and writes its outputs to
    HBM, as XLA would without fusion (jax/experimental/roofline calls these `unfused_*`).
    """

    matmul_flops: float = 0.0  # dot_general, conv and attention FLOPs (2 per multiply-add)
    vector_flops: float = 0.0  # elementwise and reduction FLOPs, transcendentals included
    hbm_bytes: float = 0.0  # bytes read plus bytes written in HBM
    collective_bytes: float = 0.0  # bytes each device sends over the device-to-device link
    d2h_bytes: float = 0.0  # bytes copied device -> host (offload) by device_put in the program
    h2d_bytes: float = 0.0  # bytes copied host -> device (reload)
    kernel_launches: float = 0.0  # kernels XLA would launch (fusible elementwise/layout ops: 0)
    # The part of matmul_flops done inside fused attention kernels (cuDNN flash attention), as
    # (direction "fwd" | "bwd", key/value length, FLOPs) entries: such a kernel runs at the
    # profile's measured attention rate for its direction and length, not the dense matmul rate.
    attention: tuple[tuple[str, int, float], ...] = ()
    unknown_primitives: tuple[str, ...] = ()  # primitives that had no rule (fallback used)
    notes: tuple[str, ...] = ()  # assumptions made on the way (unknown trip counts, axis sizes)

    @staticmethod
    def zeros() -> Cost:
        return Cost()

    def __add__(self, other: Cost) -> Cost:
        if not isinstance(other, Cost):
            return NotImplemented
        return Cost(
            **{name: getattr(self, name) + getattr(other, name) for name in _NUMERIC},
            attention=_merge_attention(self.attention, other.attention, sum),
            unknown_primitives=tuple(sorted({*self.unknown_primitives, *other.unknown_primitives})),
            notes=tuple(dict.fromkeys(self.notes + other.notes)),
        )

    def scale(self, k: float) -> Cost:
        """This cost `k` times over (a scan body run `k` times); names and notes are kept."""
        if not k >= 0:
            raise ValueError(f"Cost.scale needs k >= 0 (a repeat count), got {k!r}.")
        return dataclasses.replace(
            self,
            **{name: getattr(self, name) * k for name in _NUMERIC},
            attention=tuple((d, n, f * k) for d, n, f in self.attention),
        )

    def elementwise_max(self, other: Cost) -> Cost:
        """The larger of each figure: an upper bound for 'one of these runs' (cond branches)."""
        return Cost(
            **{name: max(getattr(self, name), getattr(other, name)) for name in _NUMERIC},
            attention=_merge_attention(self.attention, other.attention, max),
            unknown_primitives=tuple(sorted({*self.unknown_primitives, *other.unknown_primitives})),
            notes=tuple(dict.fromkeys(self.notes + other.notes)),
        )

    def breakdown(self, hw: HardwareProfile, dtype: str = "bfloat16") -> dict[str, float]:
        """Seconds per term of `seconds`: compute, memory, collectives, host_link, launch, total."""
        attention_flops = sum(f for _, _, f in self.attention)
        attention_s = sum(f / hw.attention_rate(d, n, dtype) for d, n, f in self.attention)
        parts = {
            "compute": (self.matmul_flops - attention_flops) / hw.matmul_rate(dtype)
            + attention_s
            + self.vector_flops / hw.vector_flops_per_s,
            "memory": self.hbm_bytes / hw.hbm_bytes_per_s,
            "collectives": self.collective_bytes / hw.ici_bytes_per_s,
            "host_link": _link_seconds(self.d2h_bytes, hw, "d2h")
            + _link_seconds(self.h2d_bytes, hw, "h2d"),
            "launch": self.kernel_launches * hw.kernel_launch_s,
        }
        parts["total"] = (
            max(parts["compute"], parts["memory"])
            + parts["collectives"]
            + parts["host_link"]
            + parts["launch"]
        )
        return parts

    def seconds(self, hw: HardwareProfile, dtype: str = "bfloat16") -> float:
        """Predicted time on `hw`, matmuls at the rate of `dtype`:

            max(matmul_flops / matmul_rate(dtype)                 # attention's part at
                + vector_flops / vector_flops_per_s,               # attention_rate instead
                hbm_bytes / hbm_bytes_per_s)                      # roofline: compute or memory
            + collective_bytes / ici_bytes_per_s                  # collectives, not overlapped
            + d2h_bytes / link.d2h + h2d_bytes / link.h2d         # host copies, not overlapped
            + kernel_launches * kernel_launch_s                   # fixed cost per kernel

        Matrix and vector work add because they share the SMs' issue slots; compute and memory take
        the max because they overlap within a kernel. Collectives and host copies are serial here:
        how much of a copy hides behind compute is the planner's call (`exposed_seconds`).
        """
        return self.breakdown(hw, dtype)["total"]


_NUMERIC: tuple[str, ...] = tuple(
    f.name
    for f in dataclasses.fields(Cost)
    if f.name not in ("attention", "unknown_primitives", "notes")
)


def _merge_attention(
    a: tuple[tuple[str, int, float], ...],
    b: tuple[tuple[str, int, float], ...],
    combine: Callable[[list[float]], float],
) -> tuple[tuple[str, int, float], ...]:
    """Attention entries of two costs, one per (direction, length), FLOPs combined."""
    if not b:
        return a
    if not a:
        return b
    keyed: dict[tuple[str, int], list[float]] = {}
    for d, n, f in a + b:
        keyed.setdefault((d, n), []).append(f)
    return tuple((d, n, combine(fs)) for (d, n), fs in sorted(keyed.items()))


def _link_seconds(nbytes: float, hw: HardwareProfile, direction: str) -> float:
    """Bandwidth time of `nbytes` over the host link (`transfer_seconds` less its latency)."""
    if nbytes == 0:
        return 0.0
    return transfer_seconds(nbytes, hw, direction) - hw.link.latency_s


# --------------------------------------------------------------------------------------------
# Registry

Rule = Callable[[Any], Cost]
_RULES: dict[str, Rule] = {}
# Primitives XLA fuses into the kernels around them (elementwise arithmetic, casts, layout
# changes, reductions): the one table of fusibility. Registered with their rules; such a rule
# launches no kernel of its own (tests/test_cost_models.py, the registry's contract test).
_FUSIBLE: set[str] = set()


def register_rule(
    primitive_name: str, *, replace: bool = False, fusible: bool = False
) -> Callable[[Rule], Rule]:
    """Decorator: `fn(eqn) -> Cost` becomes the rule for primitives named `primitive_name`.

    `eqn` is a JaxprEqn or anything with `.primitive.name`, `.params`, `.invars` and `.outvars`
    (whose items have `.aval`). Registering a name twice is an error unless `replace=True`.
    `fusible`: XLA fuses the primitive into its neighbours (see `fusible_primitives`).
    """

    def decorate(fn: Rule) -> Rule:
        if primitive_name in _RULES and not replace:
            raise ValueError(
                f"a cost rule for {primitive_name!r} is already registered "
                f"({_RULES[primitive_name].__module__}.{_RULES[primitive_name].__qualname__}). "
                "Pass replace=True to register_rule to override it."
            )
        _RULES[primitive_name] = fn
        if fusible:
            _FUSIBLE.add(primitive_name)
        else:
            _FUSIBLE.discard(primitive_name)
        return fn

    return decorate


def fusible_primitives() -> frozenset[str]:
    """Names of the primitives registered as fusible: XLA's fusion passes merge them into the
    kernels that produce or read their values, so their values need not touch HBM."""
    return frozenset(_FUSIBLE)


def registered_primitives() -> tuple[str, ...]:
    """Names of the primitives that have a cost rule, sorted."""
    return tuple(sorted(_RULES))


# Sizes of named mesh axes, for collectives whose params carry only the axis names. Set by
# `jaxpr_cost(axis_sizes=...)` and extended by the shard_map / pmap rules for their bodies.
_AXIS_SIZES: contextvars.ContextVar[Mapping[str, int]] = contextvars.ContextVar(
    "cost_models_axis_sizes", default=types.MappingProxyType({})
)


@contextlib.contextmanager
def axis_sizes_in(sizes: Mapping[str, int]) -> Iterator[None]:
    """Within this block, collectives over these named axes use these sizes."""
    token = _AXIS_SIZES.set({**_AXIS_SIZES.get(), **sizes})
    try:
        yield
    finally:
        _AXIS_SIZES.reset(token)


def known_axis_sizes() -> Mapping[str, int]:
    return _AXIS_SIZES.get()


def eqn_cost(eqn: Any, *, axis_sizes: Mapping[str, int] | None = None) -> Cost:
    """Cost of one equation through its rule, or the fallback rule if its primitive has none.

    `axis_sizes` gives sizes of named axes for collectives outside any shard_map in `eqn`.
    """
    with axis_sizes_in(axis_sizes or {}):
        rule = _RULES.get(eqn.primitive.name, fallback_rule)
        return rule(eqn)


def jaxpr_cost(jaxpr: Any, *, axis_sizes: Mapping[str, int] | None = None) -> Cost:
    """Sum of `eqn_cost` over the equations of a Jaxpr or ClosedJaxpr."""
    inner = jaxpr.jaxpr if isinstance(jaxpr, ClosedJaxpr) else jaxpr
    if not isinstance(inner, Jaxpr):
        raise TypeError(
            f"jaxpr_cost takes a Jaxpr or ClosedJaxpr, got {type(jaxpr).__name__}. "
            "Make one with jax.make_jaxpr(f)(*args)."
        )
    with axis_sizes_in(axis_sizes or {}):
        total = Cost()
        for eqn in inner.eqns:
            total = total + eqn_cost(eqn)
        return total


def sub_jaxprs(params: Mapping[str, Any]) -> list[Any]:
    """Every Jaxpr / ClosedJaxpr among `params` values, looking one level into tuples."""
    found = []
    for value in params.values():
        for item in value if isinstance(value, tuple | list) else (value,):
            if isinstance(item, Jaxpr | ClosedJaxpr):
                found.append(item)
    return found


def fallback_rule(eqn: Any) -> Cost:
    """Rule for primitives without one.

    With sub-jaxprs (an unknown call-like primitive): their costs, each counted once. Otherwise:
    bytes of inputs plus outputs, zero FLOPs, one kernel. Either way the primitive is listed in
    `unknown_primitives` so the report can say which costs are guesses.
    """
    name = eqn.primitive.name
    inner = sub_jaxprs(eqn.params)
    if inner:
        body = Cost()
        for sub in inner:
            body = body + jaxpr_cost(sub)
        return body + Cost(
            unknown_primitives=(name,),
            notes=(f"{name}: no cost rule; its {len(inner)} sub-jaxpr(s) counted once each",),
        )
    return Cost(
        hbm_bytes=in_bytes(eqn) + out_bytes(eqn),
        kernel_launches=1,
        unknown_primitives=(name,),
    )


# --------------------------------------------------------------------------------------------
# Shapes and bytes of avals, per device


def local_shape(aval: Any) -> tuple[int, ...]:
    """Per-device shape: dimensions sharded over Explicit mesh axes are divided by their sizes."""
    shape = tuple(int(d) for d in getattr(aval, "shape", ()))
    sharding = getattr(aval, "sharding", None)
    spec = getattr(sharding, "spec", None)
    mesh = getattr(sharding, "mesh", None)
    if _EXPLICIT is None or spec is None or mesh is None:
        return shape
    sizes = dict(mesh.shape)
    types = dict(zip(mesh.axis_names, getattr(mesh, "axis_types", ()), strict=False))
    explicit = {name for name, kind in types.items() if kind == _EXPLICIT}
    local = list(shape)
    for dim, entry in enumerate(tuple(spec)[: len(shape)]):
        names = entry if isinstance(entry, tuple) else (entry,)
        parts = math.prod(sizes[n] for n in names if n in explicit)
        local[dim] = -(-local[dim] // parts)  # ceil: uneven shards are padded
    return tuple(local)


def aval_size(aval: Any) -> int:
    """Elements per device."""
    return math.prod(local_shape(aval))


def aval_bytes(aval: Any) -> float:
    """Bytes per device of an aval (0 for tokens and other non-array avals)."""
    dtype = getattr(aval, "dtype", None)
    if dtype is None:
        return 0.0
    itemsize = getattr(dtype, "itemsize", None)  # extended dtypes (PRNG keys) define it too
    if itemsize is None:
        itemsize = np.dtype(dtype).itemsize
    return float(aval_size(aval) * itemsize)


def in_bytes(eqn: Any) -> float:
    return sum(aval_bytes(v.aval) for v in eqn.invars)


def out_bytes(eqn: Any) -> float:
    return sum(aval_bytes(v.aval) for v in eqn.outvars)
