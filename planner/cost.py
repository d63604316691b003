"""Stage 3, cost: time and bytes of every decision, and the model that predicts a plan.

The prediction for an assignment ``a`` (class -> save / remat / offload) is, with ``L_r`` the
multiplicity of region ``r`` and sums over the region's candidates ``v``:

* ``need_v``: the backward pass reads ``v``, or ``v`` feeds the recompute of a needed
  rematerialized value (JAX's partial evaluation stages exactly that closure).
* region inputs: the backward pass keeps an input when it reads it or a needed recompute
  does; ``S_r`` is the bytes of such inputs that a scan stacks per trip (the layer's input
  activation; the anchor compile shows which), other inputs (weights) are there anyway.
* device residuals ``R_r = sum bytes_v [need_v and a(v) = save]`` over values made anew each
  trip, and ``I_r``, the same sum over loop-invariant values (JAX hoists those out of the
  scan and keeps one copy);
  host residuals ``H_r = sum bytes_v [need_v and a(v) = offload]``;
  recompute ``C_r = sum t_v [need_v and a(v) = remat]`` with ``t_v`` the roofline time of
  ``v``'s equation (cost_models), where a *fusible* equation (elementwise, casts, layout,
  reductions: ``cost_models.FUSIBLE``) costs only its arithmetic, because XLA recomputes it
  inside the backward fusion that reads it; saving or offloading such a value instead forces
  the forward pass to write it, ``M_r = sum bytes_v / HBM bandwidth [need_v and a(v) in
  {save, offload}]`` over fusible, per-trip ``v`` (other values are materialized in any case;
  an offloaded value is written to HBM and copied from there: without this term the H200
  plans of 2026-12-02 offloaded eight small fusible values at every budget, as if moving
  them to the host were cheaper than keeping them). Measured on the H200
  (benchmarks/results/h200-2026-12-01.md): plans that saved such values ran no faster than
  recomputing them, where the roofline of their standalone kernels had promised 3-5%;
  working set of one backward trip
  ``W_r = sum bytes_v [v read by the backward and a(v) in {remat, offload}]
  + max bytes_v [v recomputed only to recompute others]``: the recomputed and reloaded
  tensors the gradient reads are assumed live together, intermediates of the recompute one
  at a time, times a scale ``omega`` measured by compiling the step twice (full remat, save
  everything; see ``build_cost_model``), so the model matches the compiler at both ends;
  what remains between them is what the verify stage measures and corrects.
* ``peak = F + max_k (sum_{r <= k} (L_r (R_r + S_r) + I_r) + W_k)`` over the regions in
  forward order (while region ``k`` runs backward, later regions have freed their
  residuals), where the fixed bytes ``F`` (parameters,
  optimizer state, batch, outputs, activations outside regions, the compiler's own buffers)
  are measured: the step compiled with every region fully rematerialized (the trace stage's
  anchor) minus the model's working set of that program, plus any correction the verify
  stage measured.
* ``host = sum_r L_r H_r`` must fit the hardware's pinned host memory.
* ``time = T0 + sum_r L_r (C_r + M_r + X^fwd_r + X^bwd_r)`` where ``T0`` is the roofline time of
  the whole step with nothing recomputed, and ``X`` is the copy time one trip cannot hide.
  Under ``lax.scan`` XLA starts a device->host copy once its tensor exists and finishes it
  by the end of the same trip; it reads offloaded tensors back at the start of the backward
  trip and waits for each before its first use (../shared/measurements). The copies share
  one link, which moves data at a fraction ``eta`` (the profile's overlap efficiency) of its
  speed while compute runs and at full speed when compute waits. For such a queue the
  exposed time is the worst tail:
  ``X^fwd_r = max(0, max_u sum_{v >= u} d2h_v [v offloaded] - eta * after_u)`` with ``after_u``
  the forward compute after ``u`` is made, and, since the backward trip uses tensors in the
  reverse order, ``X^bwd_r = max(0, max_u sum_{v >= u} h2d_v [v offloaded] - eta * before_u)``
  with ``before_u`` the backward compute ahead of ``u``'s first use.

Sharded steps: every figure is per device. Candidate and region-input bytes are per device
(trace.py: shard divisors read from the partitioned HLO), and so is the anchors'
``memory_analysis()``, so ``F = anchor - model`` subtracts like from like. An equation's
roofline time is costed on its global avals (cost_models) and divided by its
``flop_divisor`` (matmuls: global over per-device multiply-adds, from the partitioned dot;
other equations: its output's shard divisor), then the collectives the partitioner inserted
for it (``Candidate.collective_bytes``: e.g. the all-gather of an FSDP weight before the
matmul) are added at the profile's device-link rate ``ici_bytes_per_s``: a rematerialized
tensor whose recompute needs a gathered weight pays the all-gather again. The backward trip
and the whole step ``T0`` (costed on global avals too) are divided by the regions' overall
ratio of per-device to global forward time: the step is assumed partitioned like its layers.

With layer groups (each checkpoint call site its own region, trace.py's ``group``) the
decision ``a(v)`` is looked up per (group, signature) (graph.class_key) and the regions are
the call sites in forward order, so the peak formula above says why an early group's
residuals cost more than a late group's: they are held while every later group runs backward.

The solver (solve.py) encodes these formulas as constraints; :func:`evaluate` computes them
directly for any assignment, which is how stock policies are compared on equal terms.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping

import cost_models as cm
from cost_models._cost import aval_size  # per-device elements, as cost_models counts them

from planner.graph import LivenessGraph, class_key
from planner.trace import Trace

DECISIONS = ("save", "remat", "offload")
# Primitives whose output is a view of their input (no arithmetic, no new buffer in XLA).
_VIEWS = frozenset({"name", "reshape", "squeeze", "expand_dims", "copy", "copy_p"})


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Assignment:
    """A decision per class key. Keys not present default to ``remat`` (JAX's default)."""

    decisions: tuple[tuple[str, str], ...]

    @staticmethod
    def of(mapping: Mapping[str, str]) -> "Assignment":
        for k, d in mapping.items():
            if d not in DECISIONS:
                raise ValueError(f"decision for {k!r} is {d!r}; expected one of {DECISIONS}")
        return Assignment(decisions=tuple(sorted(mapping.items())))

    def as_dict(self) -> dict[str, str]:
        return dict(self.decisions)

    def get(self, key: str) -> str:
        return self.as_dict().get(key, "remat")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RegionCost:
    region_id: int
    multiplicity: int
    recompute_s: tuple[float, ...]       # per candidate: its recompute in the backward pass
    materialize_s: tuple[float, ...]     # per candidate: the forward write saving it forces
    d2h_s: tuple[float, ...]             # per candidate: device->host copy of its outputs
    h2d_s: tuple[float, ...]             # per candidate: host->device copy back
    fwd_after_s: tuple[float, ...]       # forward compute after the candidate is made
    bwd_before_s: tuple[float, ...]      # backward compute before its first use
    fwd_s: float                         # one forward trip of the region
    bwd_s: float                         # one backward trip (without recompute)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CostModel:
    hardware: Any                        # cost_models.HardwareProfile
    regions: tuple[RegionCost, ...]
    base_step_s: float                   # T0: the step with nothing recomputed
    fixed_bytes: int                     # F
    correction_bytes: int                # added by verify after a compile exceeded the model
    working_set_scale: float = 1.0       # omega: measured, see build_cost_model
    host_cap_bytes: float
    overlap_efficiency: float
    allow_offload: bool
    unknown_primitives: tuple[str, ...]
    # Classes never offloaded although offloading is allowed: those of a region under
    # lax.scan(unroll > 1) (trace.Region.scan_unroll), whose offloads XLA cannot compile.
    no_offload_classes: frozenset = frozenset()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RegionPrediction:
    region_id: int
    device_residual_bytes: int           # R_r, one trip, stacked per trip
    invariant_residual_bytes: int        # I_r: loop-invariant residuals, stored once
    input_residual_bytes: int            # S_r: region inputs a scan stacks for the backward pass
    host_residual_bytes: int             # H_r, one trip, stacked per trip in pinned_host
    invariant_host_bytes: int = 0        # offloaded loop-invariant residuals, stored once
    working_set_bytes: int               # W_r
    recompute_s: float                   # C_r, one trip
    materialize_s: float                 # M_r, one trip
    d2h_s: float
    h2d_s: float
    exposed_fwd_s: float
    exposed_bwd_s: float
    needed: tuple[bool, ...]             # need_v per candidate


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Prediction:
    peak_bytes: int
    host_bytes: int
    step_s: float
    base_step_s: float
    recompute_s: float                   # whole step
    materialize_s: float                 # whole step
    transfer_s: float                    # whole step, both directions
    exposed_transfer_s: float            # whole step
    fixed_bytes: int
    residual_bytes: int                  # sum_r L_r R_r
    working_set_bytes: int               # W_k of the region where the peak falls
    regions: tuple[RegionPrediction, ...]


def build_cost_model(trace: Trace, graph: LivenessGraph, hardware, *, allow_offload: bool,
                     correction_bytes: int = 0) -> CostModel:
    """Cost every candidate on ``hardware`` and measure the fixed bytes from the anchor."""
    hw = cm.load_profile(hardware)
    unknown: set[str] = set()
    regions = []
    ratios: list[tuple[float, float]] = []  # (global, per-device) forward compute per region
    for rg in graph.regions:
        r = rg.region
        # Fusion-aware roofline (cost_models._fusion): values the backward pass reads are
        # materialized; the rest of a fusible chain stays in registers.
        escaping = [v for c in r.candidates if c.needed for v in c.eqn.outvars]
        fwd_costs = cm.fused_costs([c.eqn for c in r.candidates], escaping)
        fwd, rec, mat = [], [], []
        glob = compute_local = 0.0
        in_hbm = {}  # candidate index -> its value is in HBM whatever the policy
        for c, cost in zip(r.candidates, fwd_costs):
            unknown.update(cost.unknown_primitives)
            t = cm.eqn_seconds(c.eqn, cost, hw)  # matmuls at their dtype's rate; global avals
            glob += t
            local = t / _time_divisor(c)
            compute_local += local
            # Per device: this device's share of the work, plus the collectives the
            # partitioner added for this equation (paid again when it is recomputed).
            coll = _collective_seconds(c.collective_bytes, hw)
            fwd.append(local + coll)
            prim = c.eqn.primitive.name
            # Views (checkpoint_name, reshapes) of a value in HBM are in HBM: a matmul's
            # output, a region input (the layer's input activation).
            in_hbm[c.index] = prim not in cm.FUSIBLE or (
                prim in _VIEWS and (bool(c.input_reads) and not c.inputs
                                    or any(in_hbm.get(u, False) for u in c.inputs)))
            if in_hbm[c.index]:
                rec.append(fwd[-1] if prim not in cm.FUSIBLE else 0.0)
                mat.append(0.0)
            elif prim in cm.FUSIBLE:
                # A fusible equation recomputed for the backward pass runs inside the
                # backward fusion that reads its value: its arithmetic, no HBM traffic of
                # its own (that fusion reads its inputs instead of the saved value). Saving
                # it instead forces the forward to write a value it would keep in registers:
                # one write of its (per-device) bytes at HBM bandwidth (M_v in the docstring).
                arith = cm.eqn_seconds(c.eqn, dataclasses.replace(cost, hbm_bytes=0.0), hw)
                rec.append(arith / _time_divisor(c) + coll)
                mat.append(c.nbytes / hw.hbm_bytes_per_s)
            else:  # matmuls, custom calls (attention), gathers...: materialized anyway
                rec.append(fwd[-1])
                mat.append(0.0)
        ratio = compute_local / glob if glob > 0 else 1.0
        ratios.append((glob, compute_local))
        bwd_costs = cm.fused_costs(list(r.backward_eqns), [])
        for cost in bwd_costs:
            unknown.update(cost.unknown_primitives)
        bwd_s = ratio * sum(cm.eqn_seconds(e, cost, hw)
                            for e, cost in zip(r.backward_eqns, bwd_costs))
        fwd_s = sum(fwd)
        after, acc = [], 0.0
        for t in reversed(fwd):
            after.append(acc)
            acc += t
        after.reverse()
        # The backward trip runs the layer in reverse: the compute that precedes the first
        # use of v is, in proportion, the forward compute that followed v.
        before = [bwd_s * (a / fwd_s) if fwd_s > 0 else 0.0 for a in after]
        # Copy times only where a copy can happen (a host link, offloading allowed).
        can_copy = allow_offload and hw.link.kind != "none"
        d2h = [cm.transfer_seconds(c.nbytes, hw, "d2h") if c.nbytes and can_copy else 0.0
               for c in r.candidates]
        h2d = [cm.transfer_seconds(c.nbytes, hw, "h2d") if c.nbytes and can_copy else 0.0
               for c in r.candidates]
        regions.append(RegionCost(
            region_id=r.id, multiplicity=r.multiplicity, recompute_s=tuple(rec),
            materialize_s=tuple(mat),
            d2h_s=tuple(d2h), h2d_s=tuple(h2d), fwd_after_s=tuple(after),
            bwd_before_s=tuple(before), fwd_s=fwd_s, bwd_s=bwd_s,
        ))
    step_cost = cm.fused_jaxpr_cost(trace.step_jaxpr)
    unknown.update(step_cost.unknown_primitives)
    link = hw.link
    # T0 is costed on the global avals: per device, scale it like the regions' forward work.
    g_all = sum(g for g, _ in ratios)
    step_ratio = sum(l for _, l in ratios) / g_all if g_all > 0 else 1.0
    model = CostModel(
        hardware=hw, regions=tuple(regions),
        base_step_s=step_ratio * cm.fused_seconds(trace.step_jaxpr, hw),
        fixed_bytes=0,
        correction_bytes=correction_bytes,
        host_cap_bytes=float(link.host_pinned_bytes),
        overlap_efficiency=float(hw.overlap_efficiency),
        allow_offload=bool(allow_offload and link.kind != "none"),
        unknown_primitives=tuple(sorted(unknown)),
        no_offload_classes=frozenset(
            class_key(rg.region, c) for rg in graph.regions if rg.region.scan_unroll > 1
            for c in rg.region.candidates),
    )
    # Two compiles measure the two unknowns of the memory model: the fixed bytes F and the
    # working-set scale omega (how much of the modelled backward working set the compiler
    # really holds at its peak). With A = residual part and B = working set of a program's
    # model peak (at omega = 1, F = 0):
    #   compiled(full remat)  = F + A_n + omega * B_n
    #   compiled(save all)    = F + A_e + omega * B_e
    # When the two are not independent (B_n == B_e) or omega falls outside [0.25, 2] (the
    # model's structure does not match this compiler), omega stays 1 and F comes from the
    # full-remat compile alone; verify corrects what remains.
    full = evaluate(model, graph, Assignment.of({}), _fixed=0)
    fixed = trace.anchor.device_bytes - full.peak_bytes
    omega = 1.0
    if trace.anchor_saved is not None:
        every = evaluate(model, graph, Assignment.of({c.key: "save" for c in graph.classes}),
                         _fixed=0)
        a_n, b_n = full.peak_bytes - full.working_set_bytes, full.working_set_bytes
        a_e, b_e = every.peak_bytes - every.working_set_bytes, every.working_set_bytes
        if b_n > b_e:
            w = ((trace.anchor.device_bytes - a_n) - (trace.anchor_saved.device_bytes - a_e)) / (
                b_n - b_e)
            if 0.25 <= w <= 2.0:
                omega = w
                fixed = trace.anchor_saved.device_bytes - a_e - omega * b_e
    return dataclasses.replace(model, fixed_bytes=int(fixed + correction_bytes),
                               working_set_scale=omega)


def _time_divisor(c) -> float:
    """What to divide the cost_models time of candidate ``c`` by to get its per-device time.

    cost_models already divides avals sharded over Explicit mesh axes (sharding in types,
    ``cost_models._cost.local_shape``); only the rest of ``c.flop_divisor`` remains."""
    outs = c.eqn.outvars
    already = 1.0
    if outs and c.shape:
        already = max(1.0, math.prod(c.shape) / max(1, aval_size(outs[0].aval)))
    return max(1.0, c.flop_divisor / already)


def _collective_seconds(nbytes: float, hw) -> float:
    """Time of ``nbytes`` sent per device over the device-to-device link (not overlapped,
    as cost_models counts explicit collectives)."""
    return nbytes / hw.ici_bytes_per_s if nbytes and hw.ici_bytes_per_s > 0 else 0.0


def regions_in_order(graph: LivenessGraph) -> bool:
    """Whether the regions' program order is known: each region runs at one place.

    Identical regions bound at several places are merged (an unrolled loop of layers); their
    places may interleave with other regions (A, B, A), so the peak then counts every
    region's residuals at every backward position (conservative).
    """
    return len(graph.regions) <= 1 or all(rg.region.call_sites == 1 for rg in graph.regions)


def decisions_per_candidate(graph: LivenessGraph, assignment: Assignment):
    """Per region, the decision of each candidate (effectful equations always run forward)."""
    d = assignment.as_dict()
    out = []
    for rg in graph.regions:
        out.append(tuple("save" if c.effectful else d.get(class_key(rg.region, c), "remat")
                         for c in rg.region.candidates))
    return out


def evaluate(model: CostModel, graph: LivenessGraph, assignment: Assignment,
             *, _fixed: int | None = None) -> Prediction:
    """The model's prediction for ``assignment`` (the formulas in this module's docstring)."""
    eta = model.overlap_efficiency
    per_cand = decisions_per_candidate(graph, assignment)
    preds = []
    for rg, rc, dec in zip(graph.regions, model.regions, per_cand):
        cands = rg.region.candidates
        need = [c.needed for c in cands]
        for c in reversed(cands):  # inputs come earlier in the forward order
            if need[c.index] and dec[c.index] == "remat":
                for u in c.inputs:
                    need[u] = True
        R = I = H = HI = W = T = 0
        C = M = d2h = h2d = 0.0
        off = [c.index for c in cands if need[c.index] and dec[c.index] == "offload"]
        need_in = {i.index for i in rg.region.inputs if i.needed}
        for c in cands:
            if need[c.index] and dec[c.index] == "remat":
                need_in.update(c.input_reads)
        S = sum(i.nbytes for i in rg.region.inputs if i.stacked and i.index in need_in)
        for c in cands:
            i = c.index
            if not need[i]:
                continue
            if dec[i] == "save":
                if c.loop_invariant:
                    I += c.nbytes
                else:
                    R += c.nbytes
                    M += rc.materialize_s[i]
            elif dec[i] == "offload":
                if c.loop_invariant:
                    HI += c.nbytes
                else:
                    H += c.nbytes
                    M += rc.materialize_s[i]
                W += c.nbytes
                d2h += rc.d2h_s[i]
                h2d += rc.h2d_s[i]
            else:
                if c.needed:
                    W += c.nbytes
                else:  # an intermediate of a recompute: freed once its readers ran
                    T = max(T, c.nbytes)
                C += rc.recompute_s[i]
        W = math.ceil(model.working_set_scale * (W + T))
        xf = xb = 0.0
        tail_d = tail_h = 0.0
        for i in reversed(off):  # tails of the copy queues, in production order
            tail_d += rc.d2h_s[i]
            tail_h += rc.h2d_s[i]
            xf = max(xf, tail_d - eta * rc.fwd_after_s[i])
            xb = max(xb, tail_h - eta * rc.bwd_before_s[i])
        preds.append(RegionPrediction(
            region_id=rc.region_id, device_residual_bytes=R, invariant_residual_bytes=I,
            input_residual_bytes=S,
            host_residual_bytes=H, invariant_host_bytes=HI,
            working_set_bytes=W, recompute_s=C, materialize_s=M, d2h_s=d2h, h2d_s=h2d,
            exposed_fwd_s=xf, exposed_bwd_s=xb, needed=tuple(need),
        ))
    fixed = model.fixed_bytes if _fixed is None else _fixed
    # Regions run forward in order and backward in reverse: while region k runs backward,
    # the residuals of regions 1..k are still held and those after k are already freed.
    kept = [rc.multiplicity * (p.device_residual_bytes + p.input_residual_bytes)
            + p.invariant_residual_bytes for rc, p in zip(model.regions, preds)]
    residual = sum(kept)
    peak_var, ws = 0, 0
    prefix = 0
    ordered = regions_in_order(graph)
    for k, p in zip(kept, preds):
        prefix = prefix + k if ordered else residual
        if prefix + p.working_set_bytes >= peak_var:
            peak_var, ws = prefix + p.working_set_bytes, p.working_set_bytes
    host = sum(rc.multiplicity * p.host_residual_bytes + p.invariant_host_bytes
               for rc, p in zip(model.regions, preds))
    recompute = sum(rc.multiplicity * p.recompute_s for rc, p in zip(model.regions, preds))
    materialize = sum(rc.multiplicity * p.materialize_s for rc, p in zip(model.regions, preds))
    transfer = sum(rc.multiplicity * (p.d2h_s + p.h2d_s) for rc, p in zip(model.regions, preds))
    exposed = sum(rc.multiplicity * (p.exposed_fwd_s + p.exposed_bwd_s)
                  for rc, p in zip(model.regions, preds))
    return Prediction(
        peak_bytes=int(fixed + peak_var), host_bytes=int(host),
        step_s=model.base_step_s + recompute + materialize + exposed,
        base_step_s=model.base_step_s,
        recompute_s=recompute, materialize_s=materialize, transfer_s=transfer, exposed_transfer_s=exposed,
        fixed_bytes=int(fixed), residual_bytes=int(residual), working_set_bytes=int(ws),
        regions=tuple(preds),
    )


def assignment_from_policy(graph: LivenessGraph, policy: Callable[..., Any]) -> Assignment:
    """What a JAX checkpoint policy decides for each class (stock policies, user policies)."""
    from planner import _jax_adapter as adapter

    out: dict[str, str] = {}
    for rg in graph.regions:
        for c in rg.region.candidates:
            key = class_key(rg.region, c)
            if key in out:
                continue
            e = c.eqn
            r = policy(e.primitive, *[v.aval for v in e.invars], **e.params)
            out[key] = adapter.decision_text(r)
    return Assignment.of(out)
