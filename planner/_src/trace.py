"""Stage 1, trace: find the checkpointed regions of a train step and every tensor in them
that the backward pass could keep.

``trace_step(step_fn, args)`` traces the step once with the planner in control of every
checkpoint region's policy (see ``xla.adapter.controlled_policies``), then replays JAX's own
residual selection on each region body to list its candidates: each equation the forward
pass runs inside the region, with its bytes, dtype, producer, ``checkpoint_name``, source
line, policy signature, and multiplicity (how many times the region runs per step: the
product of the trip counts of the scans around it, summed over identical regions).

It also compiles the step once with every region fully rematerialized (JAX's default
``nothing_saveable``), the *anchor*: the compiler's memory figures for the smallest-residual
program, which the cost stage uses for the bytes that do not depend on the policy.

Sharded steps (SPMD over a ``jax.sharding.Mesh``): every byte figure here is *per device*.
The jaxpr's avals are global, so the candidates' and region inputs' per-device sizes come
from the partitioned HLO of the two anchor compiles (planner/shard.py matches each equation
to its instructions by primitive and source line). ``Candidate.shard_divisor`` is global
elements / per-device elements and ``Candidate.shard_source`` says where it came from:
``hlo`` (matched), ``hlo (reshaped)`` (matched an instruction XLA reshaped: the element
ratio), ``hlo (ambiguous)`` (several matches disagreed; the smallest divisor, most bytes,
is kept), ``sharding-constraint`` (the equation is a with_sharding_constraint:
its sharding's shard shape), ``input-sharding`` (not in the HLO, e.g. checkpoint_name: the
divisor of an operand with as many elements), ``reader-sharding`` (the same, from a value
that reads it: e.g. a region's input activation whose first reader is a checkpoint_name;
or a broadcast of literals, from a bigger value it feeds whose divisor divides its size), ``same-shape``
(a broadcast of a literal XLA fused away, like an attention mask: the divisor of another
value of the same shape), ``unsharded (conservative)`` (nothing known:
global bytes, which never under-counts memory) or ``single device`` (one partition: exact).
The anchors' memory_analysis() is per device already, so the cost stage's fixed bytes stay
consistent with these per-device candidate bytes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

import cost_models as cm
from cost_models._cost import aval_size  # per-device elements, as cost_models counts them
from planner._src import policies, shard
from planner._src.errors import (
    NoCheckpointRegionError,
    PlannerError,
    PlanWarning,
    TraceError,
    UnsupportedError,
)
from planner._src.types import Candidate, Region, RegionInput, Trace
from planner._src.xla import adapter, deviceless, hlo, recompute_shares
from planner._src.xla import compile as xla_compile
from planner._src.xla.fingerprint import jaxpr_fingerprint

# ----------------------------------------------------------------------------- helpers

_nbytes = adapter.nbytes  # typed PRNG keys included (their dtype carries its itemsize)


def _hlo_dtype(dtype) -> str | None:
    """XLA's name for a numpy/JAX dtype (float32 -> f32, int32 -> s32, bool -> pred,
    bfloat16 -> bf16, float8_e4m3fn -> f8e4m3fn, int4 -> s4); None if unknown."""
    try:
        name = np.dtype(dtype).name
    except TypeError:  # an extended dtype (typed PRNG keys): no XLA name known here
        return None
    if name == "bool":
        return "pred"
    if name == "bfloat16":
        return "bf16"
    for prefix, short in (("float8_", "f8"), ("float6_", "f6"), ("float4_", "f4")):
        if name.startswith(prefix):
            return short + name[len(prefix) :]
    m = re.fullmatch(r"(float|int|uint|complex)(\d+)", name)
    if m:
        return {"float": "f", "int": "s", "uint": "u", "complex": "c"}[m.group(1)] + m.group(2)
    return None


def compiled_loop_stacks(hlo_text: str) -> Counter:
    """What the compiled loops stack (hlo.loop_stacks) of a program's text."""
    return hlo.loop_stacks(hlo.parse(hlo_text))


def _stacks_of_trip_count(stacks: Counter, trips: int) -> Counter | None:
    """``(dtype, elements per trip) -> count`` of the stacks with ``trips`` slices; None when
    no loop carries any (a fully unrolled or one-trip scan, or a scan nested in another):
    then nothing can be said about what XLA drops."""
    out = Counter({(d, n): c for (d, lead, n), c in stacks.items() if lead == trips})
    return out or None


# A residual matches a compiled stack of the same dtype this close in size: XLA may stack a
# slice of it, e.g. the [E*C, d] rows a capacity dispatch reads of its [E*C + 1, d] buffer.
_STACK_SLACK = 0.1


def residuals_xla_drops(avals: Sequence[Any], stacks: Counter) -> set[int]:
    """Indices of the per-trip residuals (``avals``) that no compiled loop stack holds.

    A multiset match: exact (dtype, size) pairs first, then the rest, largest first, each to
    the closest unused stack of its dtype within ``_STACK_SLACK``. What stays unmatched was
    dropped by XLA: JAX's backward jaxpr reads it only in code XLA finds dead (JAX's scatter
    JVP for non-unique indices keeps the scattered ids for masks of a zero tangent: on the
    MoE example gigabytes per layer that the compiled program does not stack, and counting
    them puts the model's peak well above the compiled one).
    Conservative where unsure: any stack of about the right size counts as holding it, and
    a residual of a dtype without a known XLA name is kept. ``stacks``: ``(dtype, elements
    per trip) -> count`` for the region's trip count (_stacks_of_trip_count).
    """
    pool = Counter(stacks)
    keys = [(_hlo_dtype(a.dtype), int(math.prod(a.shape))) for a in avals]
    left = []
    for i, k in enumerate(keys):
        if k[0] is None:  # a dtype this reader does not know: assume XLA keeps it
            continue
        if pool[k] > 0:
            pool[k] -= 1
        else:
            left.append(i)
    dropped = set()
    for i in sorted(left, key=lambda i: -keys[i][1]):
        dtype, n = keys[i]
        near = [
            k
            for k, c in pool.items()
            if c > 0 and k[0] == dtype and n > 0 and abs(k[1] - n) <= _STACK_SLACK * n
        ]
        if near:
            pool[min(near, key=lambda k: abs(k[1] - n))] -= 1
        else:
            dropped.add(i)
    return dropped


@dataclasses.dataclass(frozen=True, slots=True)
class _Backward:
    """Where a region's backward remat equation sits in one traced program."""

    site: adapter.Site  # its first place, in walk order
    executions: int  # per step: the trip counts of the scans around it multiplied, summed
    # over its places


def _backward_sites(jaxpr) -> dict[int, _Backward]:
    """Per region id, its backward remat equation in ``jaxpr`` (one walk of the program; the
    stages below read a region's loop structure from its site)."""
    out: dict[int, _Backward] = {}
    for site in adapter.walk(jaxpr):
        if adapter.is_differentiated_remat(site.eqn):
            pol = site.eqn.params["policy"]
            if isinstance(pol, adapter.RegionPolicy):
                rid = pol.region_id
                first = out[rid].site if rid in out else site
                before = out[rid].executions if rid in out else 0
                out[rid] = _Backward(first, before + site.mult)
    return out


def _region_structure_key(jaxpr) -> str:
    # Two call sites with the same body text are the same region for the planner
    # (an unrolled Python loop over identical layers binds one region per layer).
    return str(jaxpr)


def _in_trip(site: adapter.Site) -> tuple[int, bool]:
    """(Region.in_trip, whether at the innermost scan) for the region whose backward remat
    equation is at ``site``: the trips of the loops whose one trip runs both the region's
    forward and backward pass, else (1, False).

    ``jax.grad`` inside ``lax.scan`` (gradient accumulation over microbatches) puts the
    region's forward equations and its backward remat equation in one scan body: the remat's
    residual operands are made inside that body, where a layer scan's backward body receives
    them as loop inputs (the forward scan's stacks). Followed outwards: a layer scan nested in
    an accumulation scan receives them as inputs of its backward scan, and those are made
    inside the accumulation scan's body (its forward layer scan's stacks): the residuals of
    one microbatch are held within that outer trip."""
    outer = [v for v in site.eqn.invars if adapter.is_var(v)]
    for level in reversed(range(len(site.scans))):
        scan, parent = site.scans[level]
        body = adapter.open_jaxpr(scan.params["jaxpr"])
        pos = {v: i for i, v in enumerate(body.invars)}
        # A layer scan's backward scan reads what its forward scan stacked: outputs of
        # another scan beside it. Inside it, values made in the body are recomputed
        # there (k layers per trip: the first sub-layer's forward for the second's
        # backward; weight slices), not a forward pass of the same trip.
        siblings = {
            v
            for e in parent.eqns
            if e is not scan and e.primitive.name == "scan"
            for v in e.outvars
        }
        backward = any(adapter.is_var(v) and v in siblings for v in scan.invars)
        if not backward and any(v not in pos for v in outer):
            trips = math.prod(int(e.params["length"]) for e, _ in site.scans[: level + 1])
            return trips, level == len(site.scans) - 1
        # Follow the loop inputs among them to the jaxpr that holds this scan.
        outer = [
            scan.invars[pos[v]] for v in outer if v in pos and adapter.is_var(scan.invars[pos[v]])
        ]
    return 1, False


def _loop_form(site: adapter.Site) -> tuple[bool, int, int]:
    """(in a layer scan, the largest ``unroll`` of the scans around it, Region.in_trip) for
    the region whose backward remat equation is at ``site``: a region whose forward and
    backward share a trip of its innermost scan is not in a layer scan (nothing is stacked
    across trips: its residuals live within it)."""
    unroll = max((int(e.params.get("unroll", 1) or 1) for e, _ in site.scans), default=1)
    trips, innermost = _in_trip(site)
    return (bool(site.scans) and not innermost), unroll, trips


def _region_source(site: adapter.Site | None, br) -> str:
    """The user's line for region ``br`` (backward remat equation at ``site``): where its
    ``jax.checkpoint`` was bound, else (a bind below library frames only: Flax's ``nn.scan``
    traces the remat'd body inside the loop it builds, with no frame of the user's on the
    stack) the line of the innermost scan around it, else the body's first line of the
    user's; "" if none."""
    if br.source:
        return br.source
    for scan, _ in reversed(site.scans if site is not None else ()):
        if where := adapter.eqn_source(scan):
            return where
    return next((w for e in br.jaxpr.eqns if (w := adapter.eqn_source(e))), "")


def _observe_residual_sources(site: adapter.Site | None, n_res: int | None = None) -> list[str]:
    """Where the traced program keeps each residual of the region whose backward remat
    equation is at ``site``: per residual, one of ``const`` (a loop constant of the backward
    scan: hoisted out of the loop, stored once), ``stacked`` (an array a forward scan stacks,
    one slice per trip), ``forwarded`` (an array the program had anyway, such as the scanned
    weights), or ``unscanned`` (no scan around); [] without a site.

    JAX's scan partial evaluation hoists loop-invariant residuals and forwards residuals that
    are loop inputs (``_scan_partial_eval`` in jax/_src/lax/control_flow/loops.py); the
    backward remat equation's first ``n_res`` operands are the residuals, in replay order.
    """
    if site is None:
        return []
    e = site.eqn
    operands = e.invars if n_res is None else e.invars[:n_res]
    if not site.scans:
        return ["unscanned"] * len(operands)
    scan, parent = site.scans[-1]
    body = adapter.open_jaxpr(scan.params["jaxpr"])
    pos = {v: i for i, v in enumerate(body.invars)}
    nc = adapter.scan_layout(scan)[0]
    scan_outs = {v for pe in parent.eqns if pe.primitive.name == "scan" for v in pe.outvars}
    out = []
    for v in operands:
        i = pos.get(v) if adapter.is_var(v) else None
        if i is None:
            out.append("stacked")  # made inside the loop body: per trip
        elif i < nc:
            out.append("const")
        else:
            outer = scan.invars[i]
            out.append("stacked" if adapter.is_var(outer) and outer in scan_outs else "forwarded")
    return out


def _constraint_divisor(eqn) -> int | None:
    """Shard divisor of a ``with_sharding_constraint`` output, from its own sharding."""
    sharding = eqn.params.get("sharding")
    if eqn.params.get("unconstrained_dims"):  # the partitioner picks those: not known here
        return None
    shape = tuple(getattr(eqn.outvars[0].aval, "shape", ()))
    try:
        local = tuple(sharding.shard_shape(shape))
    except Exception:  # unconstrained dims, abstract meshes: leave it to the other rules
        return None
    return shard.dims_divisor(shape, local)


def _per_device(
    cands: list[Candidate],
    eqns: Sequence[Any],
    inputs: tuple[RegionInput, ...],
    in_vars,
    index: shard.HloIndex | None,
):
    """Candidates and region inputs with per-device bytes (module docstring, planner/shard.py);
    ``eqns[i]`` is candidate ``i``'s equation.

    ``in_vars`` are the region's primal input variables, in ``inputs`` order. First what the
    partitioned program says (each equation's matched instructions; a region input: the
    operands its readers' instructions read); then, for what is still unknown, a divisor
    passes between values of the same number of elements, forward from an operand
    (``input-sharding``: checkpoint_name, elementwise ops are partitioned like their operand)
    and backward from a reader (``reader-sharding``: the layer input of a region, read first
    by a checkpoint_name, is partitioned like what reads it), until nothing changes; the
    rest keeps its global bytes (``unsharded (conservative)``)."""
    if index is None or index.num_partitions <= 1:
        return (
            [dataclasses.replace(c, global_nbytes=c.nbytes) for c in cands],
            tuple(dataclasses.replace(i, global_nbytes=i.nbytes) for i in inputs),
        )
    in_pos = {v: k for k, v in enumerate(in_vars)}
    key_count: dict[tuple, int] = {}
    for c in cands:
        key = (c.primitive, adapter.eqn_where(eqns[c.index]))
        key_count[key] = key_count.get(key, 0) + 1
    input_divs: dict[int, set[int]] = {}
    matches = []
    for c in cands:
        e = eqns[c.index]
        where = adapter.eqn_where(e)
        in_shapes = tuple(tuple(getattr(v.aval, "shape", ())) for v in e.invars)
        m = shard.match_equation(
            index,
            c.primitive,
            where,
            c.shape,
            in_shapes,
            e.params,
            sharers=key_count[(c.primitive, where)],
        )
        matches.append(m)
        for k, v in enumerate(e.invars):
            if adapter.is_var(v) and v in in_pos and m.operand_divisors[k]:
                input_divs.setdefault(in_pos[v], set()).add(m.operand_divisors[k])
    # (divisor, source) per candidate and per region input; None: not known yet.
    found: list[tuple[int, str] | None] = []
    for c, m in zip(cands, matches):
        if c.primitive == "sharding_constraint" and _constraint_divisor(eqns[c.index]):
            found.append((_constraint_divisor(eqns[c.index]), "sharding-constraint"))
        elif m.divisor is not None:
            found.append(
                (
                    m.divisor,
                    "hlo (ambiguous)" if m.ambiguous else "hlo (reshaped)" if m.reshaped else "hlo",
                )
            )
        else:
            found.append(None)
    # A region input's divisor: the smallest its readers' partitioned operands show.
    in_found: dict[int, tuple[int, str] | None] = {
        i.index: (min(input_divs[i.index]), "hlo") if i.index in input_divs else None
        for i in inputs
    }
    size = lambda v: math.prod(getattr(v.aval, "shape", ()))
    readers: dict[Any, list[int]] = {}
    for j, c in enumerate(cands):
        for v in eqns[c.index].invars:
            if adapter.is_var(v):
                readers.setdefault(v, []).append(j)

    def div_of(v):  # the known divisor of a value: a candidate's output or a region input
        if v in in_pos:
            f = in_found.get(in_pos[v])
            return f[0] if f else None
        return None

    producer = {v: j for j, c in enumerate(cands) for v in eqns[c.index].outvars}
    var_div = lambda v: (
        div_of(v)
        if v in in_pos
        else (found[producer[v]][0] if v in producer and found[producer[v]] else None)
    )

    def propagate():
        changed = True
        while changed:
            changed = False
            for j, c in enumerate(cands):  # forward: from an operand of the same size
                if found[j] is None and eqns[c.index].outvars:
                    n = size(eqns[c.index].outvars[0])
                    ds = [
                        var_div(v)
                        for v in eqns[c.index].invars
                        if adapter.is_var(v) and size(v) == n and var_div(v)
                    ]
                    if ds:
                        found[j], changed = (min(ds), "input-sharding"), True
            for j in reversed(range(len(cands))):  # backward: from a reader of the same size
                c = cands[j]
                if found[j] is None and eqns[c.index].outvars:
                    v = eqns[c.index].outvars[0]
                    ds = [
                        found[r][0]
                        for r in readers.get(v, ())
                        if found[r] and eqns[r].outvars and size(eqns[r].outvars[0]) == size(v)
                    ]
                    if ds:
                        found[j], changed = (min(ds), "reader-sharding"), True
            for v, k in in_pos.items():
                if in_found.get(k) is None:
                    ds = [
                        found[r][0]
                        for r in readers.get(v, ())
                        if found[r] and eqns[r].outvars and size(eqns[r].outvars[0]) == size(v)
                    ]
                    if ds:
                        in_found[k], changed = (min(ds), "reader-sharding"), True

    propagate()
    # Still unknown, typically broadcasts of literals that XLA fuses away (attention masks,
    # zeros): a value of the same shape with a known divisor (``same-shape``), else, for a
    # broadcast of literals, the smallest divisor of a reader that divides its size
    # (``reader-sharding``: XLA builds such a constant inside the fusion that reads it, at
    # that fusion's partitioning), then propagate again. Other values stay conservative (a
    # broadcast mask (S, S) feeding a (B, H, S, S) value sharded over B and H is replicated).
    by_shape: dict[tuple, list[int]] = {}
    for j, c in enumerate(cands):
        if found[j]:
            by_shape.setdefault(tuple(c.shape), []).append(found[j][0])
    for j, c in enumerate(cands):
        if found[j] is None and eqns[c.index].outvars and c.shape:
            if tuple(c.shape) in by_shape:
                found[j] = (min(by_shape[tuple(c.shape)]), "same-shape")
                continue
            constant = not any(adapter.is_var(v) for v in eqns[c.index].invars)
            n = size(eqns[c.index].outvars[0])
            ds = [
                found[r][0]
                for r in readers.get(eqns[c.index].outvars[0], ())
                if found[r] and n % found[r][0] == 0
            ]
            if constant and ds:  # a constant XLA builds inside each reader's fusion
                found[j] = (min(ds), "reader-sharding")
    propagate()
    fallback = (1, "unsharded (conservative)")
    new_inputs = []
    for i in inputs:
        d, src = in_found.get(i.index) or fallback
        new_inputs.append(
            dataclasses.replace(
                i,
                global_nbytes=i.nbytes,
                shard_divisor=d,
                nbytes=-(-i.nbytes // d),
                shard_source=src,
            )
        )
    out = []
    for c, m, f in zip(cands, matches, found):
        d, src = f or fallback
        out.append(
            dataclasses.replace(
                c,
                global_nbytes=c.nbytes,
                nbytes=sum(
                    -(-_nbytes(eqns[c.index].outvars[k].aval) // d)
                    for k in (
                        range(len(eqns[c.index].outvars))
                        if c.live_outputs is None
                        else c.live_outputs
                    )
                ),
                shard_divisor=d,
                shard_source=src,
                flop_divisor=m.flop_divisor or d,
                collective_bytes=m.collective_bytes,
                collectives=m.collectives,
            )
        )
    return out, tuple(new_inputs)


def can_be_needed(cands: Sequence[Candidate]) -> set[int]:
    """Indices of the candidates the backward pass can ever need: those it reads and,
    transitively, their inputs (which a recompute would read). Used while the trace stage
    builds candidates; later stages read it off the liveness graph."""
    possible = {c.index for c in cands if c.needed}
    for c in reversed(cands):
        if c.index in possible:
            possible.update(c.inputs)
    return possible


def _reading(cands: Sequence[Candidate], eqns: Sequence[Any], needed_vars) -> list[Candidate]:
    """``cands`` with ``needed``, ``live_outputs`` and ``nbytes`` for a backward pass that
    reads ``needed_vars``."""
    cands = [
        dataclasses.replace(
            c, needed=any(v in needed_vars for v in eqns[c.index].outvars if adapter.is_var(v))
        )
        for c in cands
    ]
    # Outputs that can be residuals: read by the backward pass, or by an equation that may
    # be recomputed for it (can_be_needed); the rest are never kept and weigh nothing.
    possible = can_be_needed(cands)
    read = {
        v for c in cands if c.index in possible for v in eqns[c.index].invars if adapter.is_var(v)
    }
    out = []
    for c in cands:
        outs = eqns[c.index].outvars
        live = tuple(
            k for k, v in enumerate(outs) if adapter.is_var(v) and (v in needed_vars or v in read)
        ) or (tuple(range(len(outs))) if c.effectful else ())
        out.append(
            dataclasses.replace(
                c, live_outputs=live, nbytes=sum(_nbytes(outs[k].aval) for k in live)
            )
        )
    return out


def _inner_signatures(eqn) -> frozenset[str]:
    """The policy signatures of the first-order equations inside a higher-order equation
    (a cond's branches, a loop's body), which the policy decides when JAX splits it."""
    out = set()
    for sub, _ in adapter.subjaxprs(eqn):
        for site in adapter.walk(sub):
            e = site.eqn
            if adapter.decidable(e):
                out.add(adapter.signature_key(e.primitive, *[v.aval for v in e.invars], **e.params))
    return frozenset(out)


SUM_DEPTH = 32  # fusible equations between a residual and the reduction that reads it


def _backward_reads(replay) -> tuple[set, set, set]:
    """``(by_kernel, by_fusion, by_reduction)``: the residuals (vars of the forward jaxpr) the
    backward pass reads with a non-fusible equation (or returns), and those it reads with a
    fusible one, directly or through views; and those a reduction of the backward pass reads
    directly or through fusible equations (a product summed for a gradient). XLA must
    materialize the first; the second and third matter outside ``lax.scan`` (cost.py, the
    twice-held term: XLA:CPU of jaxlib 0.10.2 runs a reduction and the elementwise chain
    that feeds it as one library kernel, which reads the residual's copy)."""
    staged = replay.staged_jaxpr
    to_known = dict(zip(staged.invars[: len(replay.residuals)], replay.residuals))
    readers: dict[Any, list] = {}
    for e in staged.eqns:
        for v in e.invars:
            if adapter.is_var(v):
                readers.setdefault(v, []).append(e)
    outs = {v for v in staged.outvars if adapter.is_var(v)}
    views = {"name", "reshape", "squeeze", "expand_dims", "copy", "copy_p"}

    def read(v, kernel: bool, depth=0) -> bool:
        if v in outs or depth > 32:
            return kernel
        for e in readers.get(v, ()):
            name = e.primitive.name
            if name in views:
                if any(read(o, kernel, depth + 1) for o in e.outvars if adapter.is_var(o)):
                    return True
            elif (name not in cm.FUSIBLE) == kernel:
                return True
        return False

    reductions = {"reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "argmax", "argmin"}
    # The fewest fusible equations from each value to an operand of a reduction, for every
    # value at once: the equations are in dependency order, so one backward pass sees every
    # reader's outputs first. A residual counts when that is at most SUM_DEPTH. (This was a
    # depth-first search from each residual that memoized what it found under the depth
    # bound: a value first reached deep, where the bound cut the search, kept False for a
    # residual reaching it shallow, and the answer depended on the residuals' order;
    # tests/test_trace.py, test_residuals_read_by_a_reduction_do_not_depend_on_visit_order.)
    to_reduction: dict[Any, float] = {}
    for e in reversed(staged.eqns):
        name = e.primitive.name
        if name in reductions:
            d = 0.0
        elif name in cm.FUSIBLE:
            d = 1 + min(
                (to_reduction.get(o, math.inf) for o in e.outvars if adapter.is_var(o)),
                default=math.inf,
            )
        else:
            continue
        for v in e.invars:
            if adapter.is_var(v) and d < to_reduction.get(v, math.inf):
                to_reduction[v] = d

    def summed(v) -> bool:
        return to_reduction.get(v, math.inf) <= SUM_DEPTH

    by_kernel = {known for staged_v, known in to_known.items() if read(staged_v, True)}
    by_fusion = {known for staged_v, known in to_known.items() if read(staged_v, False)}
    by_reduction = {known for staged_v, known in to_known.items() if summed(staged_v)}
    return by_kernel, by_fusion, by_reduction


@dataclasses.dataclass(frozen=True, slots=True)
class _Analysed:
    """One region body's candidates, inputs and work (shared by identical call sites)."""

    candidates: tuple[Candidate, ...]
    inputs: tuple[RegionInput, ...]
    backward_work: cm.Work
    traced: tuple[Candidate, ...] | None
    inner_signatures: frozenset[str]  # decided inside higher-order equations (see graph.py)


def _candidates(
    region: adapter.BoundRegion,
    step_site: adapter.Site | None,
    anchor_site: adapter.Site | None,
    index: shard.HloIndex | None = None,
    loop_stacks: Counter | None = None,
) -> _Analysed:
    """The candidates of one region (module docstring), whose backward remat equation is at
    ``step_site`` in the traced step and at ``anchor_site`` in the full-remat anchor's trace.
    ``loop_stacks``: for a region in a
    scan of a single-device step, what the compiled everything-saveable program's loops
    stack (compiled_loop_stacks): a per-trip residual XLA drops there is not counted as read
    by the backward pass (residuals_xla_drops)."""
    jvp, n_primal, n_hoisted = adapter.region_jvp(region)
    replay = adapter.replay_partial_eval(jvp, n_primal, adapter.everything_saveable)
    needed_vars = set(replay.residuals)
    hoisted = set(jvp.invars[:n_hoisted])  # constants of the region in the real program
    # Loop invariance: observed for the residuals of the everything-saveable trace, then
    # spread backwards (what an invariant value reads is invariant) and forwards (what
    # reads only invariant values is invariant).
    real_res = [v for v in replay.residuals if v not in hoisted]
    observed = _observe_residual_sources(step_site, len(real_res))
    invariant = {v for v, src in zip(real_res, observed) if src == "const"} | hoisted
    eqns = list(replay.known_eqns)
    for eqn in reversed(eqns):
        if any(adapter.is_var(v) and v in invariant for v in eqn.outvars):
            invariant.update(v for v in eqn.invars if adapter.is_var(v))
    for eqn in eqns:
        ins = [v for v in eqn.invars if adapter.is_var(v)]
        if all(v in invariant for v in ins) and (ins or not eqn.effects):
            invariant.update(v for v in eqn.outvars if adapter.is_var(v))
    if loop_stacks is not None:
        # Residuals made in the loop body, stacked per trip (not loop constants, and not
        # the loop's own inputs, which the program stacks anyway).
        kinds = dict(zip(real_res, observed)) if observed else {}
        per_trip = [
            v
            for v in real_res
            if v not in invariant
            and hasattr(v.aval, "shape")
            and kinds.get(v, "stacked") == "stacked"
        ]
        dead_vars = {
            per_trip[i] for i in residuals_xla_drops([v.aval for v in per_trip], loop_stacks)
        }
    else:
        dead_vars = set()

    user_policy = region.user_policy
    producer: dict[Any, int] = {}
    cands: list[Candidate] = []
    inner: set[str] = set()
    for i, eqn in enumerate(eqns):
        outs = [v for v in eqn.outvars if adapter.is_var(v)]
        first = outs[0].aval if outs else None
        in_vars = [v for v in eqn.invars if adapter.is_var(v)]
        ins = tuple(sorted({producer[v] for v in in_vars if v in producer}))
        avals = [v.aval for v in eqn.invars]
        decidable = adapter.decidable(eqn)
        if not decidable and not eqn.effects:
            inner |= _inner_signatures(eqn)
        user = (
            adapter.decision_text(user_policy(eqn.primitive, *avals, **eqn.params))
            if user_policy is not None and decidable
            else "remat"
        )
        cands.append(
            Candidate(
                index=i,
                signature=adapter.signature_key(eqn.primitive, *avals, **eqn.params),
                primitive=eqn.primitive.name,
                name=eqn.params.get("name") if eqn.primitive is adapter.name_p else None,
                shape=tuple(getattr(first, "shape", ())),
                dtype=adapter.dtype_name(first) if first is not None else "",
                nbytes=sum(_nbytes(v.aval) for v in outs),
                # the user's line; JAX's own functions (jnp.where, jax.nn.silu): the call's
                source=adapter.eqn_source(eqn) or adapter.call_source(eqn),
                jax_label=adapter.residual_label(eqn) if outs else "",
                inputs=ins,
                n_outputs=len(eqn.outvars),
                needed=False,  # set by _reading below
                effectful=bool(eqn.effects),
                decidable=decidable,
                loop_invariant=bool(outs) and all(v in invariant for v in outs),
                local_elements=int(aval_size(first)) if first is not None else 0,
                stock=(
                    policies.decide_all(eqn.primitive, avals, eqn.params)
                    if decidable
                    else tuple((n, "remat") for n in policies.STOCK)
                ),
                user_decision=user,
            )
        )
        for v in outs:
            producer[v] = i
    cands = _reading(cands, eqns, needed_vars - dead_vars)
    kernel_read, fusion_read, reduction_read = _backward_reads(replay)
    cands = [
        dataclasses.replace(
            c,
            read_by_kernel=any(
                adapter.is_var(v) and v in kernel_read for v in eqns[c.index].outvars
            ),
            read_by_fusion=any(
                adapter.is_var(v) and v in fusion_read for v in eqns[c.index].outvars
            ),
            read_by_reduction=any(
                adapter.is_var(v) and v in reduction_read for v in eqns[c.index].outvars
            ),
        )
        for c in cands
    ]
    # Forward work, fusion-aware: values the backward pass reads are materialized; the rest of
    # a fusible chain stays in registers (cost_models._fusion).
    escaping = [v for c in cands if c.needed for v in eqns[c.index].outvars if adapter.is_var(v)]
    works = cm.eqns_work(eqns, escaping).kernels
    # The same forward with no residual kept (full remat): what it writes only for the
    # backward pass is the difference (cost.py: T0 leaves it out, M_v adds it for a kept v).
    own_outs = [v for v in replay.primal_outvars if adapter.is_var(v)]
    bare = cm.eqns_work(eqns, own_outs).kernels
    cands = [
        dataclasses.replace(
            c,
            work=cm.Work(kernels=(k,)),
            residual_write_bytes=max(0.0, k[1].hbm_bytes - b[1].hbm_bytes),
        )
        for c, k, b in zip(cands, works, bare)
    ]
    # Region inputs: under full remat every input the backward pass reads is a residual;
    # the anchor program shows which of them a scan stacks per trip (the layer's input
    # activation) and which it had anyway (weights, loop constants).
    # The backward remat equation reads [*residuals, *inputs it uses] (remat_partial_eval).
    full = adapter.replay_partial_eval(jvp, n_primal, lambda *_, **__: adapter.Recompute)
    src = _observe_residual_sources(anchor_site)
    n_real_res = sum(1 for v in full.residuals if v not in hoisted)
    used_idx = [k for k, u in enumerate(full.staged_inputs_used) if u and k >= n_hoisted]
    in_src = dict(zip(used_idx, src[n_real_res:]))
    inputs = tuple(
        RegionInput(
            index=k,
            nbytes=_nbytes(v.aval),
            stacked=in_src.get(k) in ("stacked", "unscanned"),
            needed=k < len(replay.staged_inputs_used) and replay.staged_inputs_used[k],
        )
        for k, v in enumerate(jvp.invars[:n_primal])
    )
    in_pos = {v: k for k, v in enumerate(jvp.invars[:n_primal])}
    cands = [
        dataclasses.replace(
            c,
            input_reads=tuple(
                sorted(
                    {in_pos[v] for v in eqns[c.index].invars if adapter.is_var(v) and v in in_pos}
                )
            ),
        )
        for c in cands
    ]
    cands, inputs = _per_device(cands, eqns, inputs, jvp.invars[:n_primal], index)
    # The traced program's view (JAX stacks what its backward jaxpr reads, dead or not), for
    # the verify stage. Residuals are matched only on one device (trace_step), where the
    # per-device bytes _reading recomputes are the global ones.
    traced = tuple(_reading(cands, eqns, needed_vars)) if dead_vars else None
    staged = replay.staged_jaxpr
    backward = cm.eqns_work(staged.eqns, [])
    return _Analysed(
        candidates=tuple(cands),
        inputs=inputs,
        backward_work=backward,
        traced=traced,
        inner_signatures=frozenset(inner),
    )


def _policy_text(policy) -> str:
    """How the report names the policy the user's code passed: a dataclass policy's repr, a
    closure by the function that made it (``save_only_these_names`` on JAX 0.12, whose
    policies are closures; JAX 0.10 returns a ``SaveOnlyTheseNames`` object)."""
    if policy is None:
        return "nothing_saveable (default)"
    if dataclasses.is_dataclass(policy):
        return repr(policy)
    name = getattr(policy, "__qualname__", None) or type(policy).__name__
    return name.split(".<locals>.")[0]


def merge_regions(sites: Sequence[Region]) -> tuple[Region, ...]:
    """Identical regions (same body) at several call sites merged into one: multiplicities
    and call sites summed, one decision per class for all of them (group None)."""
    merged: dict[str, Region] = {}
    for r in sites:
        key = r.body or f"site{r.id}"
        if key in merged:
            m = merged[key]
            merged[key] = dataclasses.replace(
                m,
                hlo_recompute_s=_merged_prices(m, r),
                multiplicity=m.multiplicity + r.multiplicity,
                scan_unroll=max(m.scan_unroll, r.scan_unroll),
                in_trip=min(m.in_trip, r.in_trip),  # fewer trips: more held at once
                call_sites=m.call_sites + r.call_sites,
                bind_ids=m.bind_ids + r.bind_ids,
            )
        else:
            merged[key] = dataclasses.replace(r, id=len(merged), group=None)
    return tuple(merged.values())


def _merged_prices(m: Region, r: Region) -> tuple[float | None, ...] | None:
    """HLO recompute prices of two merged call sites (one body, per trip): their mean
    weighted by trips; None unless both were priced (the cost stage then uses the library's
    for the merged region: one price for all its trips)."""
    a, b = m.hlo_recompute_s, r.hlo_recompute_s
    if a is None or b is None or len(a) != len(b):
        return None
    wa, wb = m.multiplicity, r.multiplicity
    return tuple(
        None if x is None or y is None else (wa * x + wb * y) / (wa + wb) for x, y in zip(a, b)
    )


def merge_call_sites(trace: Trace) -> Trace:
    """``trace`` with its per-call-site regions merged (what ``trace_step`` returns by default)."""
    if all(r.group is None for r in trace.regions):
        return trace
    return dataclasses.replace(trace, regions=merge_regions(trace.regions))


def site_key(br: adapter.BoundRegion) -> str:
    """Where the user's code can give a call site its own policy: the source line that bound
    it and, when the code passed a policy of its own, that policy object's identity. Every
    layer of a Python loop over one ``jax.checkpoint``-ed function binds from one line with
    one policy, so they share a key: the user's code gives them one policy."""
    pol = br.user_policy
    return br.source + ("" if pol is None else f"|policy@{id(pol):x}")


def trace_step(
    step_fn: Callable,
    args: Sequence[Any],
    *,
    split_call_sites: bool = False,
    backend: str | None = None,
    compiler: str = "",
    hardware=None,
    workers: int = 1,
) -> Trace:
    """Trace ``step_fn(*args)`` and list the candidates of every checkpointed region.

    By default identical regions at several call sites are merged into one region (one
    decision per class for all). With ``split_call_sites=True`` every call site stays its own
    region with its own ``group`` (layer groups: per-group decisions, one policy per call site).

    ``hardware`` (a cost_models profile of a GPU), on an XLA:GPU backend (deviceless or this
    GPU): the scanned regions' recompute is priced kernel by kernel from the full-remat
    anchor's compiled HLO (``Region.hlo_recompute_s``, :func:`hlo_recompute_prices`); on a
    deviceless target that is one more compile of the anchor, with XLA:GPU's default Triton
    GEMMs (target.PRICING_COMPILE_OPTIONS). None, or any other backend: no such pricing and
    no extra compile.

    ``workers``: how many of the stage's compiles (the two anchors, the pricing compile, the
    compiler probes) run at once (target.at_once; 1: one after the other). ``Trace.timings``
    says where the stage's time went.
    """
    t_start = time.perf_counter()
    timings: list[tuple[str, float]] = []
    try:
        traced, bound = adapter.trace_step_with(
            step_fn, args, lambda rid, r: adapter.everything_saveable
        )
        step_jaxpr = traced.jaxpr
    except PlannerError:  # already says what, why and how (the adapter's TraceError)
        raise
    except Exception as e:  # the user's code failed to trace: say so, keep the cause
        raise TraceError(
            f"Tracing the train step failed with {type(e).__name__}: {e}\n"
            "Why: the planner traces step_fn(*example_args) with jax.jit(...).trace; the step "
            "must be traceable by jax.jit with these arguments.\n"
            "Fix: check that `jax.jit(step_fn).lower(*example_args)` works on its own, and "
            "pass arrays or jax.ShapeDtypeStruct with the shapes the step expects."
        ) from e

    _refuse_nested(bound)
    backward = _backward_sites(step_jaxpr)
    differentiated = {rid: b.executions for rid, b in backward.items()}
    # What XLA runs: a backward pass the step's outputs do not need is deleted whole (a step
    # that forgets `return` compiled to 0 bytes and was planned as if it ran), and a region
    # under a scan of length 0 never runs (its working set made the fixed bytes negative).
    live = _backward_sites(adapter.live_jaxpr(step_jaxpr)) if differentiated else {}
    mult = {rid: n for rid, n in differentiated.items() if n > 0}
    if not bound or not differentiated:
        why = (
            "it binds no jax.checkpoint / jax.remat region"
            if not bound
            else f"its {len(bound)} checkpoint region(s) are never differentiated "
            "(no gradient flows through them)"
        )
        raise NoCheckpointRegionError(
            f"The train step has nothing to plan: {why}.\n"
            "Why: the planner chooses what the backward pass keeps from inside "
            "jax.checkpoint regions; other activations are kept by JAX's autodiff as they are.\n"
            "Fix: wrap each repeated layer in jax.checkpoint (or flax.linen.remat / nnx.remat "
            "/ eqx.filter_checkpoint), e.g. `layer = jax.checkpoint(layer)` before "
            "`jax.lax.scan`, and take the gradient inside the step (jax.grad / "
            "jax.value_and_grad)."
        )
    if not live:
        n_out = len(adapter.open_jaxpr(step_jaxpr).outvars)
        returns = (
            "returns nothing (None: is a `return` missing?)"
            if n_out == 0
            else f"returns {n_out} value(s), none of which depends on the gradient"
        )
        raise NoCheckpointRegionError(
            f"The train step has nothing to plan: it {returns}, so the backward pass through "
            f"its {len(differentiated)} checkpoint region(s) is dead code.\n"
            "Why: XLA deletes computations whose results the step does not return; the "
            "compiled step keeps no residuals at all, and its memory figure would say nothing "
            "about the training step you will run.\n"
            "Fix: return what training needs from the step, e.g. `return new_state, loss` "
            "(the updated parameters and optimizer state, or the gradients). A step that "
            "updates a Flax NNX model in place (@nnx.jit, optimizer.update) returns its "
            "updates only through nnx.jit, which the planner cannot see: return "
            "nnx.state((model, optimizer)) too, or use the split/merge form "
            "(graphdef, state = nnx.split((model, optimizer)); merge inside a jax.jit step)."
        )
    if not mult:
        raise NoCheckpointRegionError(
            f"The train step has nothing to plan: its {len(differentiated)} checkpoint "
            "region(s) run 0 times per step (a jax.lax.scan over a stack of 0 layers?).\n"
            "Why: a region under a loop of length 0 keeps no residuals; there is no memory to "
            "trade for recompute.\n"
            "Fix: build the model with at least one layer (check the leading dimension of "
            "the stacked layer parameters the scan runs over)."
        )

    timings.append(("trace the step", time.perf_counter() - t_start))

    # The anchor: every region fully rematerialized, compiled. Region ids follow bind order,
    # so the anchor trace's ids match this trace's. The second anchor is the
    # everything-saveable program traced above: compiled as is. Both are lowered here (the
    # planner's policies are bound per thread) and compiled at once with the compiles that
    # do not need them (target.at_once).
    from jax.ad_checkpoint import checkpoint_policies as cp

    t = time.perf_counter()
    anchor_jaxpr, anchor_lowered, _ = xla_compile.lower_with(
        step_fn,
        args,
        lambda rid, r: cp.nothing_saveable,
        which="the second trace (the full-remat anchor, after a first trace that worked)",
    )
    saved_lowered = xla_compile.lower(traced)
    timings.append(("lower the two anchors", time.perf_counter() - t))
    in_scan = {
        br.region_id: _loop_form(backward[br.region_id].site)[0]
        for br in bound
        if br.region_id in mult
    }
    # Deviceless, the scanned regions' recompute is priced from a second compile of the
    # full-remat anchor with Triton GEMMs on (a live GPU's anchor is the device's program).
    pricing = (
        xla_compile.pricing_compile_options()
        if _prices_hlo(hardware, backend) and any(in_scan.values())
        else None
    )
    # Regions outside lax.scan: two facts of the compiler, probed once per compiler and JAX.
    outside = not all(in_scan.values())
    name = compiler or backend or ""

    def full_remat():
        c = xla_compile.compile_lowered(anchor_lowered)
        # Again in the same job, not at once: two compiles of one lowered program at once
        # would share its MLIR module between threads. Single device only: a partitioned
        # program's HLO shapes are per device, the candidates' global, so its prices would
        # match nothing by size.
        if pricing is None or hlo.num_partitions(c.as_text() or "") != 1:
            return c, None
        return c, xla_compile.compile_lowered(anchor_lowered, pricing)

    full = "compile the full-remat anchor" + (
        "" if pricing is None else " (twice: then with Triton GEMMs on, for recompute prices)"
    )
    saved = "compile the save-everything anchor"
    jobs: dict[str, Callable[[], Any]] = {
        full: full_remat,
        saved: lambda: xla_compile.compile_lowered(saved_lowered),
    }
    if outside:
        jobs["compiler probe: twice-held re-reads"] = lambda: holds_rereads_twice(name)
        jobs["compiler probe: hoisted recompute"] = lambda: hoists_recompute(name)
    t = time.perf_counter()
    done = dict(zip(jobs, xla_compile.at_once(list(jobs.values()), workers), strict=True))
    wall = time.perf_counter() - t
    timings += [(what, s) for what, (_, s) in done.items()]
    if workers > 1 and len(jobs) > 1:
        timings.append((f"the {len(jobs)} jobs above, {min(workers, len(jobs))} at once", wall))
    t = time.perf_counter()
    compiled, compiled_pricing = done[full][0]
    anchor_text = compiled.as_text() or ""
    anchor = xla_compile.compiled_figures(
        compiled, anchor_jaxpr, anchor_text, backend=backend, compiler=compiler
    )
    compiled_saved = done[saved][0]
    saved_text = compiled_saved.as_text() or ""
    anchor_saved = xla_compile.compiled_figures(
        compiled_saved, step_jaxpr, saved_text, backend=backend, compiler=compiler
    )
    # Sharded steps: the partitioned programs give per-device sizes (planner/shard.py). The
    # everything-saveable compile runs every forward equation; the full-remat one adds the
    # recompute's instructions.
    index = shard.parse_hlo([saved_text, anchor_text])

    # One region per differentiated call site, in bind order (a scan's trips are one call
    # site, multiplicity = trip count). Identical bodies share one candidate analysis.
    # What the compiled everything-saveable program's loops really stack (single device:
    # a partitioned program's shapes are per device, the jaxpr's global).
    stacks = compiled_loop_stacks(saved_text) if index.num_partitions == 1 else None
    anchor_sites = _backward_sites(anchor_jaxpr)
    sites: list[Region] = []
    analysed: dict[tuple, _Analysed] = {}
    for br in bound:
        if br.region_id not in mult:
            continue
        in_scan, unroll, in_trip = _loop_form(backward[br.region_id].site)
        # Only a scan with one layer per loop trip stacks [trips, ...] residuals that can be
        # matched (scan(unroll=u) stacks [trips/u, u, ...]).
        trip_stacks = (
            _stacks_of_trip_count(stacks, mult[br.region_id])
            if stacks is not None and in_scan and unroll == 1
            else None
        )
        key = (_region_structure_key(br.jaxpr), in_scan, trip_stacks is not None)
        cache_key = key + (id(br.user_policy),)  # the user's own decisions are per policy
        if cache_key not in analysed:
            analysed[cache_key] = _candidates(
                br,
                backward[br.region_id].site,
                anchor_sites[br.region_id].site if br.region_id in anchor_sites else None,
                index,
                trip_stacks,
            )
        a = analysed[cache_key]
        sites.append(
            Region(
                id=len(sites),
                source=_region_source(backward[br.region_id].site, br),
                multiplicity=mult[br.region_id],
                call_sites=1,
                candidates=a.candidates,
                user_policy=_policy_text(br.user_policy),
                prevent_cse=bool(br.prevent_cse) if isinstance(br.prevent_cse, bool) else True,
                in_scan=in_scan,
                scan_unroll=unroll,
                in_trip=in_trip,
                backward_work=a.backward_work,
                traced_candidates=a.traced,
                inputs=a.inputs,
                group=len(sites),
                bind_ids=(br.region_id,),
                site_key=site_key(br),
                inner_signatures=a.inner_signatures,
                body=hashlib.sha256(repr(key).encode()).hexdigest()[:16],
            )
        )
    priced_with = priced_from = ""
    # (Single device only: a partitioned program's HLO shapes are per device, the
    # candidates' global, so its shares would match nothing by size.)
    if (
        _prices_hlo(hardware, backend)
        and index.num_partitions == 1
        and any(r.in_scan for r in sites)
    ):
        text = anchor_text if compiled_pricing is None else (compiled_pricing.as_text() or "")
        prices = hlo_recompute_prices(text, hardware, sites)
        if any(p is not None for p in prices):
            sites = [dataclasses.replace(r, hlo_recompute_s=p) for r, p in zip(sites, prices)]
            priced_with = hardware.name
            priced_from = (compiler or backend or "XLA:GPU") + (
                "" if compiled_pricing is None else ", Triton GEMMs on"
            )
    regions = tuple(sites) if split_call_sites else merge_regions(sites)
    arg_bytes = sum(_shard_nbytes(x) for x in jax.tree.leaves(args))
    twice = bool(outside and done["compiler probe: twice-held re-reads"][0])
    hoists = bool(outside and done["compiler probe: hoisted recompute"][0])
    timings.append(("candidates, HLO matching and prices", time.perf_counter() - t))
    return Trace(
        regions=regions,
        anchor=anchor,
        argument_bytes=arg_bytes,
        backend=backend or jax.default_backend(),
        fingerprint=jaxpr_fingerprint(step_jaxpr),
        undifferentiated_regions=sum(1 for br in bound if br.region_id not in mult),
        anchor_saved=anchor_saved,
        num_partitions=index.num_partitions,
        step_work=cm.work_of(step_jaxpr),
        jax_version=jax.__version__,
        float_dtypes=adapter.float_dtypes(step_jaxpr),
        draws_random=adapter.draws_random(step_jaxpr),
        holds_rereads_twice=twice,
        hoists_recompute=hoists,
        hlo_priced_with=priced_with,
        hlo_priced_from=priced_from,
        timings=tuple(timings),
    )


def _recomputed_in_full_remat(cands: Sequence[Candidate]) -> set[int]:
    """The candidates full remat recomputes: those the backward pass reads and, transitively,
    the candidates they read (inputs come earlier in the forward order)."""
    out = {c.index for c in cands if c.needed}
    for c in reversed(cands):
        if c.index in out:
            out.update(c.inputs)
    return out


def _prices_hlo(hardware, backend: str | None) -> bool:
    return (
        hardware is not None
        and getattr(hardware, "platform", "") == "gpu"
        and (backend or jax.default_backend()) in xla_compile.XLA_GPU_BACKENDS
    )


def hlo_recompute_prices(
    text: str, hardware, sites: Sequence[Region]
) -> list[tuple[float | None, ...] | None]:
    """Per call-site region, its candidates' recompute seconds per trip from the full-remat
    anchor's compiled HLO ``text`` (recompute_shares.region_recompute_seconds), None per candidate no
    share went to; None for a region that cannot be priced so:

    * outside lax.scan, or under a scan with unroll > 1: no loop body that is one trip of it;
    * a backward loop of its trip count is not in the HLO, or several are and the regions of
      that trip count are not one body (which loop is whose is not known): the shares of k
      loops of one body are divided by k (each site gets one loop's worth per trip).
    """
    module = hlo.parse(text)
    loops = Counter(lp.trips for lp in recompute_shares.loop_times(module, hardware) if lp.backward)
    out: list[tuple[float | None, ...] | None] = []
    for r in sites:
        n = r.multiplicity
        same = [x for x in sites if x.in_scan and x.multiplicity == n]
        if not r.in_scan or r.scan_unroll != 1 or not loops[n]:
            out.append(None)
            continue
        if loops[n] > 1 and len({x.body for x in same}) > 1:
            out.append(None)
            continue
        # Only what full remat recomputes can take a share: what the backward pass reads and
        # what that is computed from (graph.py's possibly_needed). Another candidate of the
        # same primitive and size (a layer's last matmul, which no backward reads) took a
        # third of the Llama example's attention projections' shares before.
        recomputed = _recomputed_in_full_remat(r.candidates)
        got, _left = recompute_shares.region_recompute_seconds(
            module, hardware, n, [c for c in r.candidates if c.index in recomputed]
        )
        k = loops[n]
        out.append(tuple(got[c.index] / k if c.index in got else None for c in r.candidates))
    return out


_TWICE: dict[tuple[str, str], bool] = {}


def holds_rereads_twice(compiler: str) -> bool:
    """Whether the compiler in scope holds a kept value twice outside lax.scan when the
    backward pass reads it with a kernel and with a fusion (cost.py, ``D_r``): JAX keeps the
    residual as ``reduce_precision(v)``; XLA of jaxlib 0.10.2 (XLA:CPU) duplicates that copy
    into the backward fusion that recomputes from it, which then reads ``v``'s own buffer,
    while the copy stays for the matmul: both live from the forward to the backward pass.
    XLA of jaxlib 0.12.0.1 fuses the copy into ``v``'s producer and holds one buffer.

    A probe, compiled once per compiler and JAX: four checkpointed layers in a Python loop,
    ``tanh(x @ w1) @ w2``, keeping nothing (N), tanh's output only, its derivative recomputed
    from it (A), and every value but the matmuls' (C: no fusion re-reads a kept value). True
    when A's temporary bytes exceed N's by more than half of C's excess (activations
    [4096, 1024] f32, 16.8 MB each): True for JAX 0.10.2's XLA:CPU; False for 0.12.0.1's
    XLA:CPU and for the H200's deviceless XLA (jaxlib 0.11.2, the probe's arguments placed on
    the target). A probe that cannot compile, or whose C does not exceed N by
    one tensor (no reading), answers False with a PlanWarning: verify then measures what the
    model misses."""
    key = (compiler, jax.__version__)
    if key in _TWICE:
        return _TWICE[key]
    try:
        _TWICE[key] = _probe_rereads_twice()
    except Exception as e:  # noqa: BLE001  (an optional refinement of the model)
        import warnings

        warnings.warn(
            PlanWarning(
                f"The compiler probe for twice-held residuals did not compile ({e!s:.200}).\n"
                "Why: it decides whether this compiler holds a kept value twice outside "
                "lax.scan (cost.py, D_r); without it the memory model assumes it does not.\n"
                "Fix: nothing to do: the verify stage's compile measures what the model misses; "
                "report this with your JAX version if plans need several fit rounds."
            ),
            stacklevel=2,
        )
        _TWICE[key] = False
    return _TWICE[key]


# The probes' program: checkpointed layers ``tanh(x @ w1) @ w2`` in a Python loop, with
# activations much larger than weights, so that the peaks are the residuals' (on the H200's
# compiler, 256 x 512 activations under 4 MiB weights gave no reading).
_PROBE_N, _PROBE_D = 4096, 256
_PROBE_TENSOR = _PROBE_N * 4 * _PROBE_D * 4  # one tanh output, f32


def _probe_temp_bytes(policy, layers: int = 4) -> int:
    """Temporary bytes of the probe program's gradient, ``layers`` layers under ``policy``,
    compiled by the compiler in scope (deviceless: the arguments on the target's device)."""
    import jax.numpy as jnp

    n, d = _PROBE_N, _PROBE_D

    def layer(w, x):
        return jnp.tanh(x @ w[0]) @ w[1]

    def loss(ws, x):
        for w in ws:
            x = jax.checkpoint(layer, policy=policy)(w, x)
        return jnp.sum(x)

    w = (
        jax.ShapeDtypeStruct((d, 4 * d), jnp.float32),
        jax.ShapeDtypeStruct((4 * d, d), jnp.float32),
    )
    args = ([w] * layers, jax.ShapeDtypeStruct((n, d), jnp.float32))
    target = deviceless.active_target()
    if target is not None:  # a deviceless compile: the arguments on the target's device
        args = deviceless.args_for(target, args)
    traced = jax.jit(jax.grad(loss)).trace(*args)
    compiled = xla_compile.compile_lowered(
        xla_compile.lower(traced), xla_compile.probe_compile_options()
    )
    return int(compiled.memory_analysis().temp_size_in_bytes)


def _nothing_saveable(*_, **__) -> bool:
    return False


def _probe_only_tanh(prim, *_, **__) -> bool:
    """The probe's policy A: tanh's output kept, its derivative recomputed from it."""
    return prim.name == "tanh"


def _probe_all_but_dots(prim, *_, **__) -> bool:
    """The probe's policy C: every value kept but the matmuls' outputs."""
    return prim.name != "dot_general"


def rereads_twice_rule(a: int, c: int, nothing: int) -> bool:
    """:func:`holds_rereads_twice`'s answer from the probe's temporary bytes under policies
    A, C and N (raises ValueError when C does not exceed N by one tensor: no reading)."""
    if c - nothing < _PROBE_TENSOR:
        raise ValueError(f"no reading: keeping every value added {c - nothing} bytes")
    return a - nothing > (c - nothing) / 2


def hoists_rule(two: int, four: int) -> bool:
    """:func:`hoists_recompute`'s answer from the probe's temporary bytes with 2 and 4 layers
    under full remat: two more layers hold two more layer inputs in any case ([4096, 256]: a
    quarter of an activation each), and two more activations when the compiler hoists."""
    return four - two > _PROBE_TENSOR + 2 * _PROBE_N * _PROBE_D * 4


def _probe_rereads_twice() -> bool:
    """The probe of :func:`holds_rereads_twice`, on the compiler in scope."""
    return rereads_twice_rule(
        _probe_temp_bytes(_probe_only_tanh),
        _probe_temp_bytes(_probe_all_but_dots),
        _probe_temp_bytes(_nothing_saveable),
    )


_HOISTS: dict[tuple[str, str], bool] = {}


def hoists_recompute(compiler: str) -> bool:
    """Whether the compiler in scope runs the recompute of a checkpointed region outside
    lax.scan in the *forward* pass and holds what it recomputes until the backward pass reads
    it (cost.py, ``E_r``): JAX puts an ``optimization_barrier`` on the recompute's operands
    together with the incoming cotangent, so that it waits for the backward pass; XLA:CPU of
    jaxlib 0.10.2 drops the barrier before it schedules, and its scheduler then computes each
    layer's "recomputed" values next to their forward twins (in tests/zoo/gpt2_loop.py's
    full-remat program every rematted fusion of layer l sits beside its forward fusion, and
    the softmax, the MLP's matmul output, tanh and GELU of all three layers are live at the
    peak). Under lax.scan the backward trip is its own loop body and nothing can move.

    A probe, compiled once per compiler and JAX: the program of :func:`holds_rereads_twice`
    ([4096, 1024] f32 activations, 16.8 MB each) fully rematerialized, with 2 and with 4
    layers. True when the two more layers add more than one activation besides their two
    layer inputs (JAX 0.10.2's XLA:CPU holds one tanh output and one layer input more per
    layer: True; JAX 0.12.0.1's XLA:CPU the layer inputs only: False). A probe that cannot
    compile answers False with a PlanWarning (the model then defers every recompute to the
    backward pass; verify measures what it misses)."""
    key = (compiler, jax.__version__)
    if key in _HOISTS:
        return _HOISTS[key]
    try:
        two = _probe_temp_bytes(_nothing_saveable, layers=2)
        four = _probe_temp_bytes(_nothing_saveable, layers=4)
        _HOISTS[key] = hoists_rule(two, four)
    except Exception as e:  # noqa: BLE001  (an optional refinement of the model)
        import warnings

        warnings.warn(
            PlanWarning(
                f"The compiler probe for recomputes run in the forward pass did not compile "
                f"({e!s:.200}).\n"
                "Why: it decides whether this compiler holds the recompute of a region "
                "outside lax.scan from the forward pass on (cost.py, E_r); without it the "
                "memory model assumes the recompute waits for the backward pass.\n"
                "Fix: nothing to do: the verify stage's compile measures what the model misses; "
                "report this with your JAX version if plans need several fit rounds."
            ),
            stacklevel=2,
        )
        _HOISTS[key] = False
    return _HOISTS[key]


def _shard_nbytes(x) -> int:
    """Bytes of one argument on one device: its sharding's shard shape when it has one
    (typed PRNG keys count their key data: their dtype carries its itemsize)."""
    sharding = getattr(x, "sharding", None)
    shape = tuple(getattr(x, "shape", ()))
    try:
        local = tuple(sharding.shard_shape(shape)) if sharding is not None else shape
    except Exception:  # noqa: BLE001  (no concrete shard shape, e.g. an abstract mesh)
        local = shape
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        return 0
    return adapter.nbytes(jax.ShapeDtypeStruct(local, dtype))


def _refuse_nested(bound) -> None:
    """Nested checkpoints: JAX applies the outer region's policy inside the inner one, so
    the two cannot be decided separately; say so instead of planning something else."""

    def inner(jx):
        for e in jx.eqns:
            if e.primitive is adapter.remat_p and isinstance(
                e.params.get("policy"), adapter.RegionPolicy
            ):
                return e
            for sub, _ in adapter.subjaxprs(e):
                found = inner(sub)
                if found is not None:
                    return found
        return None

    for br in bound:
        e = inner(br.jaxpr)
        if e is not None:
            raise UnsupportedError(
                f"The checkpoint region at {br.source} contains another jax.checkpoint (at "
                f"{adapter.eqn_source(e)}).\nWhy: when regions nest, JAX's partial evaluation "
                "applies the outer region's policy inside the inner one too, so the planner "
                "cannot decide them separately, and one emitted policy could not express two "
                "levels.\nFix: keep one level of jax.checkpoint per repeated block (remove the "
                "inner or the outer one; MaxText wraps each decoder layer once). Nested "
                "lax.scan loops around one checkpoint level are fine."
            )
