"""Where each region sits in the traced program: the scans around its backward remat
equation (trip counts, unroll, whether its forward and backward share a trip), where the
program keeps each of its residuals (loop constants, stacked per trip, forwarded), its user
source line, and what the compiled loops really stack (a residual JAX's backward jaxpr reads
but XLA drops is not counted)."""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from planner._src.xla import adapter, hlo


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


def compiled_loop_stacks(hlo_text: str | hlo.Module) -> Counter:
    """What the compiled loops stack (hlo.loop_stacks) of a program's text (or that text
    already parsed)."""
    module = hlo_text if isinstance(hlo_text, hlo.Module) else hlo.parse(hlo_text)
    return hlo.loop_stacks(module)


def stacks_of_trip_count(stacks: Counter, trips: int) -> Counter | None:
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
    per trip) -> count`` for the region's trip count (stacks_of_trip_count).
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
class Backward:
    """Where a region's backward remat equation sits in one traced program."""

    site: adapter.Site  # its first place, in walk order
    executions: int  # per step: the trip counts of the scans around it multiplied, summed


def backward_sites(jaxpr) -> dict[int, Backward]:
    """Per region id, its backward remat equation in ``jaxpr`` (one walk of the program; the
    stages below read a region's loop structure from its site)."""
    out: dict[int, Backward] = {}
    for site in adapter.walk(jaxpr):
        if adapter.is_differentiated_remat(site.eqn):
            pol = site.eqn.params["policy"]
            if isinstance(pol, adapter.RegionPolicy):
                rid = pol.region_id
                first = out[rid].site if rid in out else site
                before = out[rid].executions if rid in out else 0
                out[rid] = Backward(first, before + site.mult)
    return out


def in_trip(site: adapter.Site) -> tuple[int, bool]:
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


def loop_form(site: adapter.Site) -> tuple[bool, int, int]:
    """(in a layer scan, the largest ``unroll`` of the scans around it, Region.in_trip) for
    the region whose backward remat equation is at ``site``: a region whose forward and
    backward share a trip of its innermost scan is not in a layer scan (nothing is stacked
    across trips: its residuals live within it)."""
    unroll = max((int(e.params.get("unroll", 1) or 1) for e, _ in site.scans), default=1)
    trips, innermost = in_trip(site)
    return (bool(site.scans) and not innermost), unroll, trips


def region_source(site: adapter.Site | None, br) -> str:
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


def observe_residual_sources(site: adapter.Site | None, n_res: int | None = None) -> list[str]:
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
