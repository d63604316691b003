"""What the loops of a compiled XLA:GPU program say about its recompute, from the kernel
times of :mod:`planner._src.xla.kernels`: each while loop's body time per trip
(:func:`loop_times`), a full-remat backward loop's recompute split over the JAX equations
it recomputes (:func:`recompute_shares`), those shares matched to a region's candidates
(:func:`match_shares`, :func:`region_recompute_seconds`: the trace stage's HLO recompute
prices), and the two anchors' loop times differenced (:func:`anchor_gaps`).

Nothing here touches JAX: the input is HLO text (``compiled.as_text()``) and a profile.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import defaultdict

from planner._src.xla import adapter, hlo, kernels

REMAT = "rematted_computation"


@dataclasses.dataclass(frozen=True, slots=True)
class LoopTime:
    """Kernel time of one while loop's body, per trip (``d2d``: its memcpys apart)."""

    body: str
    trips: int
    backward: bool  # the loop of a ``transpose(...)`` (JAX's backward pass)
    kernel_s: float  # per trip
    d2d_s: float  # per trip


def loop_times(module: hlo.Module | str, hw) -> list[LoopTime]:
    """Per while loop of the program, in text order: its body's kernel time per trip."""
    if isinstance(module, str):
        module = hlo.parse(module)
    ks = kernels.kernel_times(module, hw)
    out = []
    for ins in module.instructions:
        loop = hlo.while_loop(ins)
        if not loop:
            continue
        body, trips = loop
        mine = [k for k in ks if k.computation == body]
        out.append(
            LoopTime(
                body=body,
                trips=trips,
                backward="transpose(" in ins.op_name,
                kernel_s=sum(k.seconds for k in mine if k.kind != "d2d"),
                d2d_s=sum(k.seconds for k in mine if k.kind == "d2d"),
            )
        )
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class RecomputeShare:
    """One recomputed JAX equation's share of a backward loop's kernel time, per trip."""

    primitive: str  # the JAX primitive (last part of op_name), e.g. "reduce_max"
    shape: str  # its result's dims in the HLO (after XLA's layout bitcasts), e.g. "f32[8,16,4096]"
    seconds: float
    where: tuple[str, int] | None = None  # (file basename, line) of the user's code

    @property
    def dtype(self) -> str:
        return self.shape.split("[", 1)[0]

    @property
    def elements(self) -> int:
        return sum(int(math.prod(d)) for _, d in hlo.array_shapes(self.shape))


def recompute_shares(module: hlo.Module | str, hw, body: str) -> list[RecomputeShare]:
    """The recompute a full-remat program's backward loop body runs, per recomputed equation.

    A kernel of ``body`` whose instructions carry ``rematted_computation`` in their op_name
    recomputes forward values; its time per trip is split over those equations:

    * a recomputed *row reduction* (a ``reduce`` of the fusion) costs the passes it adds:
      the fusion's time less its time with that reduction's result read as a parameter (a
      saved value: the passes its cone made are gone) -- the softmax row max and sum that
      make full remat's backward softmax fusion read the f32 scores three times;
    * the rest of a kernel that computes nothing but recomputed values (a recomputed matmul,
      the recomputed probabilities) is split over its recomputed equations by the bytes of
      their results; a kernel that mixes backward and recomputed work keeps the rest (the
      backward pays it under any policy).

    This is what a planner candidate's ``t_v`` would be priced from (the equation's primitive
    and result dims identify it); the sum over a loop is at most the body's kernel time.
    """
    if isinstance(module, str):
        module = hlo.parse(module)
    comps = module.computations()
    shapes = {i.name: i.shape for i in module.instructions}
    out: list[RecomputeShare] = []
    for k in kernels.kernel_times(module, hw):
        if k.computation != body or k.kind == "d2d":
            continue
        ins = next(i for i in comps[body] if i.name == k.name)
        callee = kernels.called(ins)
        inner = comps.get(callee or "", []) if ins.opcode in ("fusion", "fusion-start") else []
        if not inner:  # a custom-call (cuBLAS): its own op_name says
            if REMAT in ins.op_name:
                out.append(RecomputeShare(ins.primitive, _dims(ins.shape), k.seconds, ins.where))
            continue
        rem = [i for i in inner if REMAT in i.op_name and i.opcode not in kernels.ELEMENTWISE_FREE]
        if not rem:
            continue
        operand_shapes = [shapes.get(o, "") for o in ins.operands]
        if ins.opcode == "fusion-start":
            operand_shapes = hlo.split_top(kernels.start_operands(ins)[1:-1])
        whole = k.seconds
        left = whole
        for r in rem:
            if r.opcode != "reduce" or not kernels.is_row_reduction(
                r, {i.name: i.shape for i in inner}
            ):
                continue
            without = _seconds_of(_as_parameter(inner, r.name), operand_shapes + [r.shape], hw)
            delta = max(0.0, whole - without)
            out.append(RecomputeShare(r.primitive, _dims(r.shape), delta, r.where))
            left -= delta
        pure = all(REMAT in i.op_name for i in inner if i.opcode not in kernels.ELEMENTWISE_FREE)
        if pure and left > 0:
            rest = [r for r in rem if r.opcode != "reduce"] or rem
            total = sum(kernels.shape_bytes(r.shape) for r in rest) or 1
            for r in rest:
                out.append(
                    RecomputeShare(
                        r.primitive,
                        _dims(r.shape),
                        left * kernels.shape_bytes(r.shape) / total,
                        r.where,
                    )
                )
    return out


def _dims(shape: str) -> str:
    """``"f32[8,16]"``; of a tuple (a cuBLAS call's), its first element: the rest is
    workspace."""
    if shape.startswith("("):
        shape = hlo.split_top(shape[1:-1])[0]
    return ", ".join(f"{t}[{','.join(map(str, d))}]" for t, d in hlo.array_shapes(shape))


def _as_parameter(body: list[hlo.Instruction], name: str) -> list[hlo.Instruction]:
    """The fused computation with instruction ``name`` replaced by a new last parameter."""
    n_params = sum(1 for i in body if i.opcode == "parameter")
    out = []
    for i in body:
        if i.name == name:
            i = dataclasses.replace(
                i, opcode="parameter", operands=(), operand_text=str(n_params), attrs=""
            )
        out.append(i)
    return out


def _seconds_of(body: list[hlo.Instruction], operand_shapes: list[str], hw) -> float:
    fc = kernels.fusion_cost(body, operand_shapes)
    compute = (fc.matmul_flops / hw.matmul_rate(fc.matmul_dtype) if fc.matmul_flops else 0.0) + (
        fc.vector_flops / hw.vector_flops_per_s
    )
    return max((fc.bytes_read + fc.bytes_written) / hw.hbm_bytes_per_s, compute)


@dataclasses.dataclass(frozen=True, slots=True)
class AnchorGap:
    """What the two anchors' HLO says one layer trip of a scanned region costs, per trip:
    the backward loop's kernel time under full remat less under save-everything (the
    recompute the device runs), and the forward loop's the other way round (the residual
    writes saving costs), each with its d2d memcpys apart."""

    trips: int
    recompute_s: float  # backward: full remat - save everything, kernels
    recompute_d2d_s: float
    residual_write_s: float  # forward: save everything - full remat, kernels
    residual_write_d2d_s: float


def anchor_gaps(remat: hlo.Module | str, saved: hlo.Module | str, hw) -> list[AnchorGap]:
    """Pair the forward and backward loops of the full-remat and save-everything anchors
    (in text order, by direction and trip count) and difference their kernel times."""
    a, b = loop_times(remat, hw), loop_times(saved, hw)
    out = []
    for back in (True,):
        ra = [x for x in a if x.backward == back]
        sb = [x for x in b if x.backward == back]
        fa = [x for x in a if not x.backward]
        fb = [x for x in b if not x.backward]
        for x, y in zip(ra, sb):
            if x.trips != y.trips:
                continue
            fx = next((f for f in fa if f.trips == x.trips), None)
            fy = next((f for f in fb if f.trips == x.trips), None)
            out.append(
                AnchorGap(
                    trips=x.trips,
                    recompute_s=x.kernel_s - y.kernel_s,
                    recompute_d2d_s=x.d2d_s - y.d2d_s,
                    residual_write_s=(fy.kernel_s - fx.kernel_s) if fx and fy else 0.0,
                    residual_write_d2d_s=(fy.d2d_s - fx.d2d_s) if fx and fy else 0.0,
                )
            )
    return out


_HLO_DTYPES = {
    "float32": "f32",
    "bfloat16": "bf16",
    "float16": "f16",
    "int32": "s32",
    "bool": "pred",
    "uint32": "u32",
    "int8": "s8",
    "float64": "f64",
}


def match_shares(shares: list[RecomputeShare], candidates) -> tuple[dict[int, float], float]:
    """Seconds per trip of each candidate (``types.Candidate``: by its ``index``) that the
    shares price, and the seconds no candidate took.

    A share belongs to the candidates of the same primitive, element type and element count
    (XLA's bitcasts change dims, not sizes), at the same source line where both sides know
    it; several such candidates split it evenly. A share with no such candidate, at the source
    line of a call JAX's policy decides as a whole (JAX 0.12.1's custom_jvp_call: a softmax's
    row max, exp, sum and divide), belongs to that call. Shares of equations that are not
    candidates (the intermediates of a gather, a scatter's index arithmetic) stay unmatched:
    the caller keeps its own price for those.
    """
    out: dict[int, float] = defaultdict(float)
    left = 0.0
    for s in shares:
        same = [
            c
            for c in candidates
            if c.primitive == s.primitive
            and _HLO_DTYPES.get(str(c.dtype), str(c.dtype)) == s.dtype
            and int(math.prod(c.shape)) == s.elements
        ]
        if s.where:
            here = [c for c in same if _file_line(str(c.source)) == s.where]
            same = here or same
        if not same and s.where:  # an equation inside a call the policy decides whole
            same = [
                c
                for c in candidates
                if c.primitive in adapter.OPAQUE_CALLS and _file_line(str(c.source)) == s.where
            ]
        if not same:
            left += s.seconds
            continue
        for c in same:
            out[c.index] += s.seconds / len(same)
    return dict(out), left


def _file_line(source: str) -> tuple[str, int] | None:
    """``(file basename, line)`` of a candidate's source, ``"/p/llama.py:131:24 (fn)"`` or
    ``"model.py:11"`` (the trace stage writes the first: with the column and function, which a
    plain suffix test against the HLO's file and line never matched)."""
    m = re.match(r"\s*(\S+?):(\d+)(?::\d+)?(?:\s|$)", source)
    return (m.group(1).rsplit("/", 1)[-1], int(m.group(2))) if m else None


def region_recompute_seconds(
    remat: hlo.Module | str, hw, trips: int, candidates
) -> tuple[dict[int, float], float]:
    """What the planner's cost stage would use as ``t_v`` for the candidates of one scanned
    region (``trips``: its multiplicity): the full-remat anchor's recompute shares
    (:func:`recompute_shares`) of every backward loop of that trip count, matched to the
    candidates (:func:`match_shares`); seconds per trip, and the seconds no candidate took.

    Compile the anchor with Triton GEMMs on (XLA:GPU's default on the device): with them off
    (compile_options.DEVICELESS_COMPILE_OPTIONS, right for the memory figures) the deviceless program
    is not the device's (measured: benchmarks/results/hlo-kernel-time-2026-12-05.md).
    """
    if isinstance(remat, str):
        remat = hlo.parse(remat)
    shares: list[RecomputeShare] = []
    for loop in loop_times(remat, hw):
        if loop.backward and loop.trips == trips:
            shares += recompute_shares(remat, hw, loop.body)
    return match_shares(shares, candidates)
