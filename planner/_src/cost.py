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
  inside the backward fusion that reads it. On an XLA:GPU target (one device), a region under
  ``lax.scan`` whose recompute the trace stage priced from the full-remat anchor's compiled
  HLO (``Region.hlo_recompute_s``: recompute_shares.region_recompute_seconds on the anchor compiled
  with Triton GEMMs on, the device's kernels) takes ``t_v`` from there: the share of the
  backward loop's kernels that recomputes ``v`` (a recomputed row reduction costs the passes
  over its rows it adds to the fusion it runs in: the dense attention's row max, 6 ms a
  trip of the MoE example where the roofline had 0.07), plus ``v``'s collectives; a fusible
  ``v`` no share went to costs 0 (it is recomputed inside another candidate's kernel,
  priced there), a non-fusible one keeps the roofline (its own kernel, not matched: never
  free). ``T0`` then moves by ``C_lib - C_hlo`` under full remat, so full remat predicts
  what the roofline's prices predict and only the differences between policies take the
  HLO's prices (the whole step from HLO kernels alone falls short of the device's walls:
  scatters and the gaps between kernels are missing; measured:
  benchmarks/results/hlo-kernel-time-2026-12-05.md, hlo-recompute-prices-2026-12-05.md). Saving or
  offloading a fusible value instead forces the forward pass to write it, ``M_r = sum w_v / HBM
  bandwidth [need_v and a(v) in {save, offload}]`` over fusible, per-trip ``v``, where ``w_v``
  is what the forward writes only because ``v`` is kept: the fused forward's bytes with ``v``
  kept less its bytes with nothing kept (trace.py, ``Candidate.residual_write_bytes``; 0 for a
  value a matmul reads, which is written in any case, such as the softmax probabilities; other
  values are materialized in any case;
  an offloaded value is written to HBM and copied from there, so this term keeps the
  solver from treating a host copy of a fusible value as cheaper than keeping it; saving
  such a value runs no faster than recomputing it, whatever the roofline of its standalone
  kernel says; measured: benchmarks/results/h200-2026-12-01.md);
  and, on XLA:GPU, saving a per-trip value that is in HBM anyway (a matmul's output, a view
  of one, a fusible value a matmul reads: ``w_v = 0``) inside ``lax.scan`` costs ``S_v = bytes_v / loop_copy_rate`` (the profile's
  ``loop_copy_bytes_per_s``): XLA writes it into the scan's stacked residual with a
  device-to-device copy it cannot fuse into the producing kernel (an offloaded value is
  copied to the host instead); ``S_v`` is part of ``M_r`` for ``a(v) = save`` (measured:
  benchmarks/results/h200-2026-12-04-idle/);
  working set of one backward trip
  ``W_r = sum bytes_v [v read by the backward, not fused away, and a(v) in {remat, offload}]
  + sum bytes_v [v recomputed only to recompute others, and read by a recomputed reduction]
  + max bytes_v [v recomputed only to recompute others, or fused away, and read by no
  recomputed reduction]``,
  where a recomputed value is *fused away* (``fused_away``) when it is a fusible equation
  that no kernel and no reduction of the backward pass reads (``read_by_kernel``,
  ``read_by_reduction``; a view when its sources are fused away): XLA recomputes it inside
  each backward fusion that reads it and it gets no buffer, so it counts in the transient
  term, one at a time, not in the first sum (an offloaded value is reloaded into a buffer
  whatever reads it; regions under lax.scan only: in a Python loop of layers it
  under-predicts on JAX 0.12.0.1's XLA:CPU). Counting every recomputed value instead fits
  ``omega`` out of bounds on the H200's compiler (measured:
  benchmarks/results/memory-model-2026-12-05-fused.md);
  where, in a region whose output is a sum of parallel branches (graph.parallel_branches:
  ``x + attn(h) + mlp(h)``), the first two sums are taken over the shared values plus the
  largest branch's, not over every branch: the backward pass of one branch reads nothing of
  another, and XLA recomputes and back-propagates one branch, frees it, then the next
  (measured: benchmarks/results/memory-model-2026-12-05.md, memory-model-2026-12-05b.md). A sequential layer
  has one branch (its MLP's input is recomputed through the attention): its W is the sum;
  where a *reduction* is ``REDUCTIONS`` (reduce_max, reduce_sum, ...): its operand must exist
  whole before the reduced value does, and the values computed from the reduced value read
  the operand again (softmax: ``exp(s - max(s))``), so XLA materializes it alongside the
  working set instead of one transient at a time; saving the reduced value lets the chain
  fuse, which a max-of-transients model cannot see (measured:
  benchmarks/results/memory-model-2026-12-03.md). Leaving out the *held* values: a
  recomputed view (checkpoint_name, reshape: ``graph.VIEWS``) of a saved or reloaded value or
  of a region input is that buffer, not a new one (``held_values``); the recomputed and
  reloaded tensors the gradient reads are assumed live together, intermediates of the
  recompute one at a time, times a scale ``omega`` measured by compiling the step twice (full remat, save
  everything; see ``build_cost_model``), so the model matches the compiler at both ends;
  what remains between them is what the verify stage measures and corrects.
* twice-held residuals ``D_r = sum bytes_v [a(v) = save, need_v, t_v, K_v, U_v]``, added to
  ``R_r``: outside lax.scan, on a compiler whose probe says so
  (``trace.holds_rereads_twice``: JAX 0.10.2's XLA:CPU; not the H200's deviceless XLA of
  jaxlib 0.11.2 nor JAX 0.12.0.1's XLA:CPU), a kept value whose producer XLA does not
  duplicate into its readers (``t_v``: a kernel, or an expensive elementwise operation or
  reduction, ``NOT_DUPLICATED``) is held twice when the backward pass reads it with a kernel
  (``K_v``: ``read_by_kernel``; ``read_by_reduction``, a backward reduction reading it through
  fusible equations, which that XLA:CPU runs as one library kernel reading the kept copy;
  or a needed recomputed non-fusible reader) and with a fusion
  (``U_v``: ``read_by_fusion``, or a needed recomputed fusible reader that is not a view).
  JAX keeps the residual as ``reduce_precision(v)``; XLA duplicates that copy into the
  backward fusion, which then reads ``v``'s own buffer, while the copy stays for the kernel.
  Without ``D_r`` the model under-predicts such a step and the verify loop's correction
  refuses every plan but full remat (tests/test_apply.py).
* hoisted recomputes ``E_r = sum bytes_v [need_v, a(v) = remat, v read by the backward, not
  held] - sum bytes_v [need_v, a(v) = save, v not read by the backward, per trip]``, added to
  ``R_r`` (loop-invariant recomputed ones to ``I_r``) and left out of ``W_r`` with the
  recompute's intermediates: outside lax.scan, on a compiler whose probe says so
  (``trace.hoists_recompute``: JAX 0.10.2's XLA:CPU; not JAX 0.12.0.1's XLA:CPU nor the
  H200's deviceless XLA of jaxlib 0.11.2), the recompute does not wait for the backward pass.
  JAX ties it to the incoming cotangent with an ``optimization_barrier``; that XLA drops the
  barrier before scheduling and computes each layer's recomputed values beside their forward
  twins, then holds them until that layer's backward pass: a recomputed value costs the
  memory of a saved one (and its recompute still costs time), and a value kept only to
  recompute others from (a matmul output under ``dots_saveable``) is read by that recompute
  in the forward pass and freed there. Every policy then holds the values the backward pass
  reads, once (twice where ``D_r`` says so; measured:
  benchmarks/results/memory-model-2026-12-04c.md).
* slice copies ``K_r = kappa * R_r`` (per-trip device residuals) for a region under
  ``lax.scan``, added to its backward trip's working set, not scaled by ``omega``: XLA:GPU
  copies a scan's saved residuals out of the stacked buffers at the top of each backward
  trip (asynchronous slice fusions, live together until their readers ran). ``kappa`` is
  measured from the two anchors (``slice_copy_share``): the bytes of those copies in the
  save-everything program's loop bodies less the full-remat one's (``hlo.loop_slice_bytes``:
  the weight slices are in both) over the model's per-trip residual bytes of the scanned
  regions, in [0, 1]. Which residuals a compiler copies depends on their readers, so this
  is one share per step, exact at both anchors; without it ``omega`` cannot fit some
  scanned steps on the H200's compiler (measured: benchmarks/results/memory-model-2026-12-05-slices.md).
  XLA:CPU copies slices synchronously: none counted, kappa 0.
* ``peak = F + max_k (sum_{r <= k} (L_r (R_r + S_r) + I_r) + W_k + K_k)`` over the regions in
* trip-freed sources ``Q_r = sum bytes_v [need_v, a(v) = save, v not read by the backward,
  per trip, no view of v read by the backward]``, subtracted from the peak while region ``r``
  runs backward (once: only the trip running frees its own): outside lax.scan, where the
  recompute waits for the backward pass (the compiler does not hoist it, ``E_r`` is off), a
  value kept only to recompute others from (a matmul output under ``dots_saveable``) is read
  by that recompute at the top of its backward trip and freed there, before the recomputed
  values the trip reads are all live (``W_r``'s premise); the earlier layers' copies are
  still held. Under lax.scan the stacked residual is one buffer, freed after the loop
  (measured: benchmarks/results/memory-model-2026-12-05c.md).
* ``peak = F + max(sum_r (L_r (R_r + S_r) + I_r), max_k (sum_{r <= k} (L_r (R_r + S_r) + I_r)
  + W_k + K_k - Q_k))`` (the first term, the end of the forward pass, binds only where ``Q_k``
  exceeds ``W_k``; ``K_k`` and ``Q_k`` are never both nonzero: one is for regions under
  lax.scan, the other outside) over the regions in
  forward order (while region ``k`` runs backward, later regions have freed their
  residuals), where the fixed bytes ``F`` (parameters,
  optimizer state, batch, outputs, activations outside regions, the compiler's own buffers)
  are measured: the step compiled with every region fully rematerialized (the trace stage's
  anchor) minus the model's working set of that program, plus any correction ``c`` the verify
  stage measured (session.py). ``c`` has either sign: after a plan ``P`` compiled to
  ``compiled(P)``, the next solve uses ``c' = c + compiled(P) - peak_c(P)``, so the corrected
  model reproduces ``P``'s compiled figure exactly (``F + c' >= 0``, clamped at 0). Over the
  budget (``c' > c``) this is the verify loop's correction; well under it (``c' < c``) it
  is the same as solving the uncorrected model against ``budget - c'``: the budget raised
  by the model's measured over-prediction (``Planner._fill``). Each corrected plan is
  compiled again; the correction is a constant, exact for ``P`` only.
* ``host = sum_r L_r H_r`` must fit the hardware's pinned host memory.
* ``time = T0 + sum_r L_r (C_r + M_r + X^fwd_r + X^bwd_r)`` where ``T0`` is the roofline time of
  the whole step with nothing recomputed less the forward's writes of values kept only as
  residuals (``sum_r L_r sum_v w_v / HBM bandwidth`` over per-trip ``v`` the backward reads:
  the traced step keeps every residual, and a policy that does not keep ``v`` does not write
  it; ``M_r`` adds back the writes of the values kept) plus, on XLA:GPU, the loop-slice
  copies of the full-remat anchor's compiled program (``hlo.loop_slice_copy_bytes`` /
  loop_copy_rate: the layer's weights sliced out of the stacked parameters forward and
  backward, the weight gradients written back, the stacked layer inputs; 0 where the anchor
  was compiled deviceless: with Triton GEMMs off, target.DEVICELESS_COMPILE_OPTIONS, XLA
  folds those slices into its cuBLAS calls as address offsets, where the H200's own compile
  copied them: 2.7-3.2 ms a step of the 4-layer Llama example, 36.6 GB a step in the MoE
  plan's program, not in a deviceless T0), and ``X`` is the copy time one trip cannot hide.
  ``T0`` leaves out the residual-only writes: counting them would price each f32 [batch,
  heads, seq, seq] intermediate of XLA attention's softmax (scaled, masked, shifted scores)
  in the full-remat step as a write of its own, which XLA fuses away (measured:
  benchmarks/results/cost-model-other-2026-12-04.md).
  Under ``lax.scan`` XLA starts a device->host copy once its tensor exists and finishes it
  by the end of the same trip; it reads offloaded tensors back at the start of the backward
  trip and waits for each before its first use (measured: benchmarks/results/h200-2026-11-30-shared-probe/).
  Per direction the copies queue on one link, and each tensor ``u`` has a *window*: for a
  store (d2h) ``after_u``, the forward compute after ``u`` is made; for a reload (h2d)
  ``before_u``, the backward compute ahead of ``u``'s first use. With the direction's
  calibrated hiding model ``(eta, cap, floor)`` (the profile's ``link.d2h_hiding`` /
  ``link.h2d_hiding``, cost_models._hiding, fitted to a copy-heavy sweep on the device), the
  trip's copy time ``D = sum_v d2h_v [v offloaded]`` and the queue's tails
  ``D_u = sum_{v >= u} d2h_v [v offloaded]`` (production order):
  ``X^fwd_r = max(0, floor * D, D - cap, max_u (D_u - eta * after_u))``: the link moves data
  at ``eta`` of its speed while compute runs and at full speed when compute waits (the worst
  tail is exposed), one trip hides at most ``cap`` of copy time however long its compute,
  and a share ``floor`` of every copy is exposed (XLA's scheduler puts some copies' done
  next to their start). Likewise, since the backward trip uses tensors in the reverse order,
  ``X^bwd_r = max(0, floor' * H, H - cap', max_u (H_u - eta' * before_u))`` with the h2d
  times. A profile without calibrated models uses its single ``overlap_efficiency`` as
  ``eta`` in both directions, ``cap = inf``, ``floor = 0``, which fits a copy-heavy sweep
  less well than the calibrated models (measured: benchmarks/results/offload-windows-2026-12-04.md).

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

import cost_models as cm
from planner._src.errors import PlannerError
from planner._src.graph import VIEWS as _VIEWS
from planner._src.graph import LivenessGraph, class_key
from planner._src.state import evaluate_state
from planner._src.types import (
    DECISIONS,
    Assignment,
    CostModel,
    Prediction,
    RegionCost,
    RegionPrediction,
    Trace,
)

__all__ = [
    "DECISIONS",
    "Assignment",
    "CostModel",
    "Prediction",
    "RegionCost",
    "RegionPrediction",
    "build_cost_model",
    "decisions_per_candidate",
    "evaluate",
    "regions_in_order",
]

# The working-set scale measured from the two anchors is trusted inside these bounds; outside
# them the model's structure does not match this compiler and the scale stays 1.
WORKING_SET_SCALE_BOUNDS = (0.25, 2.0)


def build_cost_model(
    trace: Trace, graph: LivenessGraph, hardware, *, allow_offload: bool, correction_bytes: int = 0
) -> CostModel:
    """Cost every candidate on ``hardware`` and measure the fixed bytes from the anchor."""
    hw = cm.load_profile(hardware)
    # XLA:GPU's loop-slice copies (S_v below and the step's own in T0); other platforms: none.
    copy_rate = hw.loop_copy_rate() if hw.platform == "gpu" else 0.0
    unknown: set[str] = set()
    regions = []
    ratios: list[tuple[float, float]] = []  # (global, per-device) forward compute per region
    base_writes: list[float] = []  # per region: T0's residual-only writes, all trips
    # Per region: the library's recompute prices where HLO prices replace them (the T0 shift).
    library_rec: dict[int, tuple[float, ...]] = {}
    priced = trace.hlo_priced_with == hw.name  # the profile the trace priced with
    for rg in graph.regions:
        r = rg.region
        fwd, rec, mat, stack = [], [], [], []
        hlo_s = r.hlo_recompute_s if priced else None
        glob = compute_local = 0.0
        kept_writes = 0.0  # seconds T0's forward spends writing values only as residuals
        in_hbm = {}  # candidate index -> its value is in HBM whatever the policy
        for c in r.candidates:
            # Fusion-aware roofline recorded by the trace stage (cost_models._fusion): values
            # the backward pass reads are materialized; the rest of a fusible chain stays in
            # registers. Matmuls at their dtype's rate; global avals.
            unknown.update(c.work.total().unknown_primitives)
            t = c.work.seconds(hw)
            glob += t
            local = t / _time_divisor(c)
            compute_local += local
            # Per device: this device's share of the work, plus the collectives the
            # partitioner added for this equation (paid again when it is recomputed).
            coll = _collective_seconds(c.collective_bytes, hw)
            fwd.append(local + coll)
            prim = c.primitive
            reads = rg.reads(c.index)
            # What the forward writes only because the backward reads v as a residual
            # (trace.py: its fused forward with and without v kept); None: v's bytes. A value
            # the backward does not read (kept only to recompute others from it) is in neither
            # of those two forwards: keeping it writes its bytes.
            if c.residual_write_bytes is None or not c.needed:
                write_s = c.nbytes / hw.hbm_bytes_per_s
            else:
                write_s = c.residual_write_bytes / _time_divisor(c) / hw.hbm_bytes_per_s
                if c.needed and not c.loop_invariant:
                    kept_writes += write_s
            # Views (checkpoint_name, reshapes) of a value in HBM are in HBM: a matmul's
            # output, a region input (the layer's input activation).
            in_hbm[c.index] = prim not in cm.FUSIBLE or (
                prim in _VIEWS
                and (
                    bool(rg.reads_inputs(c.index))
                    and not reads
                    or any(in_hbm.get(u, False) for u in reads)
                )
            )
            if in_hbm[c.index]:
                rec.append(fwd[-1] if prim not in cm.FUSIBLE else 0.0)
                mat.append(0.0)
            elif prim in cm.FUSIBLE:
                # A fusible equation recomputed for the backward pass runs inside the
                # backward fusion that reads its value: its arithmetic, no HBM traffic of
                # its own (that fusion reads its inputs instead of the saved value). Saving
                # it instead forces the forward to write a value it would keep in registers:
                # one write of its (per-device) bytes at HBM bandwidth (M_v in the docstring).
                arith = cm.Work(
                    kernels=tuple(
                        (k, dataclasses.replace(cost, hbm_bytes=0.0)) for k, cost in c.work.kernels
                    )
                ).seconds(hw)
                rec.append(arith / _time_divisor(c) + coll)
                mat.append(write_s)
            else:  # matmuls, custom calls (attention), gathers...: materialized anyway
                rec.append(fwd[-1])
                mat.append(0.0)
            if hlo_s is not None:
                rec[-1] = (rec[-1], _hlo_recompute(hlo_s[c.index], rec[-1], prim, coll))
            # Saving a value that is in HBM anyway (a matmul's output, a view of one, a fusible
            # value a matmul reads: nothing written only for the residual) inside lax.scan
            # copies it into the scan's stacked residual every trip: XLA cannot fuse that
            # dynamic-update-slice into the producing kernel (S_v in the docstring).
            anyway = in_hbm[c.index] or (
                prim in cm.FUSIBLE and c.needed and c.residual_write_bytes == 0
            )
            stack.append(
                c.nbytes / copy_rate
                if copy_rate and r.in_scan and anyway and not c.loop_invariant
                else 0.0
            )
        ratio = compute_local / glob if glob > 0 else 1.0
        ratios.append((glob, compute_local))
        # Outside lax.scan, a kept value whose producer XLA does not duplicate is held twice
        # when the backward pass reads it with a kernel and with a fusion (D_r, docstring).
        twice = tuple(
            trace.holds_rereads_twice
            and not r.in_scan
            and (c.primitive not in cm.FUSIBLE or c.primitive in NOT_DUPLICATED)
            for c in r.candidates
        )
        # Outside lax.scan, on a compiler that does not hold the recompute back for the
        # backward pass, recomputed values are held from the forward pass (E_r, docstring).
        hoists = bool(getattr(trace, "hoists_recompute", False)) and not r.in_scan
        fused = fused_away(rg)
        # Elsewhere outside lax.scan, a trip's recompute frees the residuals it alone reads
        # before the trip's working set peaks (Q_r, docstring).
        frees_sources = not r.in_scan and not hoists
        unknown.update(r.backward_work.total().unknown_primitives)
        bwd_s = ratio * r.backward_work.seconds(hw)
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
        d2h = [
            cm.transfer_seconds(c.nbytes, hw, "d2h") if c.nbytes and can_copy else 0.0
            for c in r.candidates
        ]
        h2d = [
            cm.transfer_seconds(c.nbytes, hw, "h2d") if c.nbytes and can_copy else 0.0
            for c in r.candidates
        ]
        base_writes.append(r.multiplicity * kept_writes)
        if hlo_s is not None:
            library_rec[r.id] = tuple(lib for lib, _ in rec)
            rec = [h for _, h in rec]
        regions.append(
            RegionCost(
                region_id=r.id,
                multiplicity=r.multiplicity,
                live_multiplicity=r.live,
                recompute_s=tuple(rec),
                materialize_s=tuple(mat),
                stack_copy_s=tuple(stack),
                twice_held=twice,
                hoists_recompute=hoists,
                fused_away=fused,
                frees_sources_in_trip=frees_sources,
                d2h_s=tuple(d2h),
                h2d_s=tuple(h2d),
                fwd_after_s=tuple(after),
                bwd_before_s=tuple(before),
                fwd_s=fwd_s,
                bwd_s=bwd_s,
            )
        )
    unknown.update(trace.step_work.total().unknown_primitives)
    link = hw.link
    # T0 is costed on the global avals: per device, scale it like the regions' forward work.
    g_all = sum(g for g, _ in ratios)
    step_ratio = sum(local for _, local in ratios) / g_all if g_all > 0 else 1.0
    model = CostModel(
        hardware=hw,
        regions=tuple(regions),
        # T0: the roofline of the step with every residual kept, less its forward's writes of
        # values kept only as residuals (a fusible value is written only when kept: M_v adds
        # it back), plus the loop-slice copies the anchor compile makes (weights sliced out of
        # the stacked parameters, gradients written back, the stacked layer inputs): per
        # device already, as compiled.
        base_step_s=max(0.0, step_ratio * trace.step_work.seconds(hw) - sum(base_writes))
        + (trace.anchor.loop_copy_bytes / copy_rate if copy_rate else 0.0),
        fixed_bytes=0,
        correction_bytes=correction_bytes,
        host_cap_bytes=float(link.host_pinned_bytes),
        overlap_efficiency=float(hw.overlap_efficiency),
        d2h_hiding=link.d2h_hiding,
        h2d_hiding=link.h2d_hiding,
        allow_offload=bool(allow_offload and link.kind != "none"),
        unknown_primitives=tuple(sorted(unknown)),
        no_offload_classes=frozenset(
            class_key(rg.region, c)
            for rg in graph.regions
            if rg.region.scan_unroll > 1
            for c in rg.region.candidates
        ),
    )
    # Two compiles measure the two unknowns of the memory model: the fixed bytes F and the
    # working-set scale omega (how much of the modelled backward working set the compiler
    # really holds at its peak). With A = residual part (and the slice copies K, measured
    # first from the same two compiles) and B = working set of a program's model peak (at
    # omega = 1, F = 0):
    #   compiled(full remat)  = F + A_n + omega * B_n
    #   compiled(save all)    = F + A_e + omega * B_e
    # When the two are not independent (B_n == B_e) or omega falls outside [0.25, 2] (the
    # model's structure does not match this compiler), omega stays 1 and F comes from the
    # full-remat compile alone; verify corrects what remains.
    model = _shift_for_hlo_prices(model, graph, library_rec, trace)
    everything = Assignment.of({c.key: "save" for c in graph.classes})
    model = dataclasses.replace(
        model, slice_copy_share=slice_copy_share(trace, graph, model, everything)
    )
    full = evaluate(model, graph, Assignment.of({}), _fixed=0)
    fixed = trace.anchor.device_bytes - full.peak_bytes
    ws_scale = 1.0
    if trace.anchor_saved is not None:
        every = evaluate(model, graph, everything, _fixed=0)
        # the working set omega scales: the peak trip's, less its slice copies (K_r)
        ws_remat = full.working_set_bytes - full.slice_copy_bytes
        ws_all = every.working_set_bytes - every.slice_copy_bytes
        kept_remat, kept_all = full.peak_bytes - ws_remat, every.peak_bytes - ws_all
        if ws_remat > ws_all:
            scale = (
                (trace.anchor.device_bytes - kept_remat)
                - (trace.anchor_saved.device_bytes - kept_all)
            ) / (ws_remat - ws_all)
            if WORKING_SET_SCALE_BOUNDS[0] <= scale <= WORKING_SET_SCALE_BOUNDS[1]:
                ws_scale = scale
                fixed = trace.anchor_saved.device_bytes - kept_all - ws_scale * ws_all
    # The bytes no plan changes are never negative. F < 0 means the model's working set (or
    # a region that never runs) exceeds the whole compiled anchor; F = 0 keeps the model
    # conservative (its peaks too high, never below zero) and verify corrects the rest. (A
    # scan over 0 layers predicted -29,360,108 bytes before; the trace stage refuses it now.)
    fixed = max(fixed, 0)
    return dataclasses.replace(
        model, fixed_bytes=int(max(0, fixed + correction_bytes)), working_set_scale=ws_scale
    )


def slice_copy_share(
    trace: Trace, graph: LivenessGraph, model: CostModel, everything: Assignment
) -> float:
    """K: the share of a scanned region's saved per-trip residuals that its backward trip
    copies out of the scan's stacked buffers, measured from the two anchor compiles:
    the copies of slices their loop bodies make (``hlo.loop_slice_bytes``: the same weight
    slices in both, the trip's residuals only in the save-everything one) over the model's
    per-trip residual bytes of the scanned regions (each call site has its own loops).
    0 without a save-everything anchor or a scanned region; clamped to [0, 1]."""
    if trace.anchor_saved is None:
        return 0.0
    copied = trace.anchor_saved.loop_slice_bytes - trace.anchor.loop_slice_bytes
    full = evaluate(model, graph, Assignment.of({}), _fixed=0)
    every = evaluate(model, graph, everything, _fixed=0)
    kept = sum(
        rg.region.call_sites * (e.device_residual_bytes - f.device_residual_bytes)
        for rg, f, e in zip(graph.regions, full.regions, every.regions)
        if rg.region.in_scan
    )
    if kept <= 0 or copied <= 0:
        return 0.0
    return min(1.0, copied / kept)


def _hlo_recompute(hlo_s: float | None, library_s: float, primitive: str, coll: float) -> float:
    """A candidate's recompute seconds per trip in a region priced from the anchor's HLO.

    ``hlo_s``: its share of the backward loop's kernels (per device already: the HLO is the
    partitioned program), plus the collectives the partitioner adds for it, as the library's
    price has them. None (no kernel share went to it): a fusible equation is recomputed
    inside a kernel that recomputes another candidate, whose share holds that time (the
    reduction pass that reads it, or a kernel split over its recomputed outputs), so it costs
    0 here. A non-fusible one (a matmul, a gather, a custom call) is a kernel of its own: no
    share means the HLO's kernel was not matched to it (another primitive or size in the
    HLO), not that it is free, so it keeps the library's price. Were it 0, the solver would
    recompute that matmul as if free and predict the step short by its time.
    """
    if hlo_s is not None:
        return hlo_s + coll
    return library_s if primitive not in cm.FUSIBLE else coll


def _shift_for_hlo_prices(
    model: CostModel, graph: LivenessGraph, library_rec: dict, trace: Trace
) -> CostModel:
    """``T0`` moved so that full remat predicts what the library's recompute prices predict.

    The HLO prices the recompute's *differences* between policies right (the MoE example's
    score chain: +80.0 / +100.1 ms saved where the H200 saved 74.5 / 97.8 ms, the library
    16.5 / 24.6), but the whole step from HLO kernels is 5-9% short of the measured walls
    (scatters and the gaps between kernels missing), while the library's full-remat step is
    within 3% (measured: benchmarks/results/hlo-kernel-time-2026-12-05.md, section 2). So the level
    stays the library's: ``T0 += C_lib(full remat) - C_hlo(full remat)``.
    Also says where the recompute prices came from (``recompute_priced_from``, the report).
    """
    library = "the cost library's roofline per equation (cost_models)"
    if not library_rec:
        return dataclasses.replace(model, recompute_priced_from=library)
    lib_model = dataclasses.replace(
        model,
        regions=tuple(
            dataclasses.replace(rc, recompute_s=library_rec[rc.region_id])
            if rc.region_id in library_rec
            else rc
            for rc in model.regions
        ),
    )
    remat = Assignment.of({})
    shift = (
        evaluate(lib_model, graph, remat, _fixed=0).recompute_s
        - evaluate(model, graph, remat, _fixed=0).recompute_s
    )
    n = len(library_rec)
    rest = "" if n == len(model.regions) else "; the other regions from the cost library"
    return dataclasses.replace(
        model,
        base_step_s=max(0.0, model.base_step_s + shift),
        recompute_priced_from=(
            f"the compiled HLO ({trace.hlo_priced_from}, {n} region{'s' if n != 1 else ''}): "
            f"the full-remat anchor's recompute kernels, per candidate{rest}; the step's "
            f"level (T0) kept where the library's prices put full remat ({1e3 * shift:+.1f} ms)"
        ),
    )


def _time_divisor(c) -> float:
    """What to divide the cost_models time of candidate ``c`` by to get its per-device time.

    cost_models already divides avals sharded over Explicit mesh axes (sharding in types,
    ``cost_models._cost.local_shape``); only the rest of ``c.flop_divisor`` remains."""
    already = 1.0
    if c.local_elements and c.shape:
        already = max(1.0, math.prod(c.shape) / max(1, c.local_elements))
    return max(1.0, c.flop_divisor / already)


def _collective_seconds(nbytes: float, hw) -> float:
    """Time of ``nbytes`` sent per device over the device-to-device link (not overlapped,
    as cost_models counts explicit collectives)."""
    return nbytes / hw.ici_bytes_per_s if nbytes and hw.ici_bytes_per_s > 0 else 0.0


def hiding_models(model: CostModel) -> tuple[cm.HidingModel, cm.HidingModel]:
    """(d2h, h2d) hiding models of ``model``: the profile's calibrated ones, or its single
    overlap efficiency as eta (no capacity, no floor) where it has none."""
    eta = model.overlap_efficiency
    return tuple(
        h if h is not None else cm.HidingModel(eta=eta, form="eta")
        for h in (model.d2h_hiding, model.h2d_hiding)
    )


def regions_in_order(graph: LivenessGraph) -> bool:
    """Whether the regions' program order is known: each region runs at one place.

    Identical regions bound at several places are merged (an unrolled loop of layers); their
    places may interleave with other regions (A, B, A), so the peak then counts every
    region's residuals at every backward position (conservative).
    """
    return len(graph.regions) <= 1 or all(rg.region.call_sites == 1 for rg in graph.regions)


def decisions_per_candidate(graph: LivenessGraph, assignment: Assignment):
    """Per region, the decision of each candidate as JAX applies it: effectful equations
    always run forward (kept); a higher-order equation (not ``decidable``) is recomputed
    whatever the policy says, since the policy decides the equations inside it."""
    d = assignment.as_dict()
    out = []
    for rg in graph.regions:
        out.append(
            tuple(
                "save"
                if c.effectful
                else "remat"
                if not c.decidable
                else d.get(class_key(rg.region, c), "remat")
                for c in rg.region.candidates
            )
        )
    return out


def held_values(rg, dec, need) -> list[bool]:
    """Per candidate: its buffer is held in the backward pass without a new allocation: it is
    kept (saved or reloaded), or it is a recomputed view (graph.VIEWS) of a held value or of a
    region input (RegionGraph.view_of)."""
    held = [False] * len(dec)
    for c in rg.region.candidates:
        i = c.index
        if not need[i]:
            continue
        if dec[i] in ("save", "offload"):
            held[i] = True
        elif dec[i] == "remat" and (src := rg.view_of(i)) is not None:
            held[i] = src[0] == "input" or held[src[1]]
    return held


# Reductions whose recompute needs their operand whole (the ``reduced`` term of W_r).
REDUCTIONS = frozenset(
    ("reduce_max", "reduce_min", "reduce_sum", "reduce_prod", "argmax", "argmin")
)


# What XLA's fusion passes never duplicate into several consumers (InstructionFusion::
# IsExpensive: transcendental and float-division elementwise operations; reductions), by JAX
# primitive name; other fusible producers are recomputed inside each fusion that reads them.
NOT_DUPLICATED = REDUCTIONS | frozenset(
    """tanh exp exp2 expm1 log log1p logistic sin cos tan atan2 asin acos atan sinh cosh asinh
    acosh atanh pow sqrt rsqrt cbrt erf erfc erf_inv div rem lgamma digamma""".split()
)


def twice_held(rg, rc, dec, need) -> list[bool]:
    """Per candidate: kept on the device, its buffer is held twice (the ``D_r`` term): the
    region is outside lax.scan, its producer is not duplicated (``RegionCost.twice_held``),
    and the backward pass reads it with a kernel and with a fusion, either as the traced
    backward does (``read_by_kernel``, ``read_by_fusion``) or through a needed recomputed
    reader (a non-fusible one, a fusible one that is not a view)."""
    out = [False] * len(dec)
    if not rc.twice_held:
        return out
    prim = {c.index: c.primitive for c in rg.region.candidates}
    for c in rg.region.candidates:
        i = c.index
        if not (rc.twice_held[i] and need[i] and dec[i] == "save") or c.loop_invariant:
            continue
        prims = [prim[w] for w in rg.readers(i) if need[w] and dec[w] == "remat"]
        kernel = c.read_by_kernel or c.read_by_reduction or any(p not in cm.FUSIBLE for p in prims)
        fusion = c.read_by_fusion or any(p in cm.FUSIBLE and p not in _VIEWS for p in prims)
        out[i] = kernel and fusion
    return out


def fused_away(rg) -> tuple[bool, ...]:
    """Per candidate: recomputed for the backward pass, it takes no buffer of its own, since
    XLA recomputes it inside the backward fusions that read it (the ``W_r`` rule): a fusible
    equation (``cm.FUSIBLE``) that no kernel and no reduction of the backward pass reads
    (``read_by_kernel``, ``read_by_reduction``); a view (graph.VIEWS) is fused away when its
    sources are candidates that are (a view of a matmul's output is that output's buffer).

    Regions under lax.scan only: in a Python loop of layers (every layer's backward in one
    program) the rule under-predicts on JAX 0.12.0.1's XLA:CPU, and no measurement shows
    what XLA holds there (measured: benchmarks/results/memory-model-2026-12-05-fused.md)."""
    cands = rg.region.candidates
    if not rg.region.in_scan:
        return (False,) * len(cands)
    out: list[bool] = []
    for c in cands:
        fusible = c.primitive in cm.FUSIBLE and not (c.read_by_kernel or c.read_by_reduction)
        if fusible and c.primitive in _VIEWS:
            src = rg.reads(c.index)
            fusible = bool(src) and not rg.reads_inputs(c.index) and all(out[u] for u in src)
        out.append(fusible)
    return tuple(out)


def has_view(rg, i: int) -> bool:
    """Whether a view (graph.VIEWS) of candidate ``i`` reads it: a kept ``i`` then stays for
    the backward pass through the view, hoisted recompute or not (E_r)."""
    return any(rg.view_of(w) == ("candidate", i) for w in rg.readers(i))


def reduction_operands(rg, dec, need) -> list[bool]:
    """Per candidate: a recomputed reduction (``REDUCTIONS``) reads it, so the backward pass
    materializes it whole, alongside the working set (the ``reduced`` term of ``W_r``)."""
    out = [False] * len(dec)
    for c in rg.region.candidates:
        if need[c.index] and dec[c.index] == "remat" and c.primitive in REDUCTIONS:
            for u in rg.reads(c.index):
                out[u] = True
    return out


def evaluate(
    model: CostModel,
    graph: LivenessGraph,
    assignment: Assignment,
    *,
    _fixed: int | None = None,
    state_on_host: frozenset = frozenset(),
) -> Prediction:
    """The model's prediction for ``assignment`` (the formulas in this module's docstring),
    with the train-state leaves ``state_on_host`` in pinned host memory (state.py)."""
    hide_d2h, hide_h2d = hiding_models(model)  # per direction: eta, capacity, floor
    per_cand = decisions_per_candidate(graph, assignment)
    preds = []
    for rg, rc, dec in zip(graph.regions, model.regions, per_cand):
        cands = rg.region.candidates
        need = [c.needed for c in cands]
        for c in reversed(cands):  # inputs come earlier in the forward order
            if need[c.index] and dec[c.index] == "remat":
                for u in rg.reads(c.index):
                    need[u] = True
        saved = saved_invariant = offloaded = offloaded_invariant = twice_bytes = 0  # one trip
        hoisted = hoisted_invariant = released = 0  # E_r: recomputed in the forward pass
        trip_freed = 0  # Q_r: freed by the trip's own recompute, before its peak
        working = transient = 0  # backward working set
        branches: dict[int, int] = {}  # the same, per parallel branch
        recompute_s = materialize_s = d2h_s = h2d_s = 0.0
        off = [c.index for c in cands if need[c.index] and dec[c.index] == "offload"]
        need_in = {i.index for i in rg.region.inputs if i.needed}
        for c in cands:
            if need[c.index] and dec[c.index] == "remat":
                need_in.update(rg.reads_inputs(c.index))
        stacked_inputs = sum(i.nbytes for i in rg.region.inputs if i.stacked and i.index in need_in)
        held = held_values(rg, dec, need)
        reduced = reduction_operands(rg, dec, need)
        twice = twice_held(rg, rc, dec, need)
        fused = rc.fused_away or (False,) * len(cands)
        for c in cands:
            i = c.index
            if not need[i]:
                continue
            if dec[i] == "save":
                if c.loop_invariant:
                    saved_invariant += c.nbytes
                else:
                    saved += c.nbytes
                    twice_bytes += c.nbytes if twice[i] else 0
                    if not c.needed and not has_view(rg, i):
                        if rc.hoists_recompute:
                            released += c.nbytes  # read by the hoisted recompute only (E_r)
                        elif rc.frees_sources_in_trip:
                            trip_freed += c.nbytes  # read by the trip's recompute only (Q_r)
                    materialize_s += rc.materialize_s[i]
                    if rc.stack_copy_s:
                        materialize_s += rc.stack_copy_s[i]
            elif dec[i] == "offload":
                if c.loop_invariant:
                    offloaded_invariant += c.nbytes
                else:
                    offloaded += c.nbytes
                    materialize_s += rc.materialize_s[i]
                working += c.nbytes  # reloaded for the backward trip
                d2h_s += rc.d2h_s[i]
                h2d_s += rc.h2d_s[i]
            else:
                if held[i]:
                    pass  # the same buffer as a held value
                elif rc.hoists_recompute:
                    # Recomputed in the forward pass: what the backward reads is held from
                    # there on like a saved value, the intermediates are forward transients.
                    if c.needed and c.loop_invariant:
                        hoisted_invariant += c.nbytes
                    elif c.needed:
                        hoisted += c.nbytes
                elif (c.needed and not fused[i]) or reduced[i]:
                    # read by the backward pass (not only inside its fusions), or a
                    # recomputed reduction's operand (materialized whole): live with the
                    # rest of its branch
                    if rg.branch and rg.branch[i] >= 0:
                        branches[rg.branch[i]] = branches.get(rg.branch[i], 0) + c.nbytes
                    else:
                        working += c.nbytes
                else:  # an intermediate of a recompute, or a value recomputed inside the
                    # backward fusions that read it: at most one at a time
                    transient = max(transient, c.nbytes)
                recompute_s += rc.recompute_s[i]
        # Parallel branches run backward one after another (graph.parallel_branches).
        working += max(branches.values(), default=0)
        working = math.ceil(model.working_set_scale * (working + transient))
        # K_r: the backward trip of a scan copies a share of its saved residuals out of the
        # stacked buffers (measured from the anchors, build_cost_model); not scaled by omega.
        slices = math.ceil(model.slice_copy_share * saved) if rg.region.in_scan else 0
        # X^fwd, X^bwd: each direction's queue, in production order, with its windows.
        exposed_fwd = hide_d2h.exposed([(rc.d2h_s[i], rc.fwd_after_s[i]) for i in off])
        exposed_bwd = hide_h2d.exposed([(rc.h2d_s[i], rc.bwd_before_s[i]) for i in off])
        preds.append(
            RegionPrediction(
                region_id=rc.region_id,
                device_residual_bytes=saved,
                twice_held_bytes=twice_bytes,
                hoisted_bytes=hoisted,
                invariant_hoisted_bytes=hoisted_invariant,
                released_bytes=released,
                trip_freed_bytes=trip_freed,
                invariant_residual_bytes=saved_invariant,
                input_residual_bytes=stacked_inputs,
                host_residual_bytes=offloaded,
                invariant_host_bytes=offloaded_invariant,
                working_set_bytes=working + slices,
                slice_copy_bytes=slices,
                recompute_s=recompute_s,
                materialize_s=materialize_s,
                d2h_s=d2h_s,
                h2d_s=h2d_s,
                exposed_fwd_s=exposed_fwd,
                exposed_bwd_s=exposed_bwd,
                needed=tuple(need),
            )
        )
    fixed = model.fixed_bytes if _fixed is None else _fixed
    # Regions run forward in order and backward in reverse: while region k runs backward,
    # the residuals of regions 1..k are still held and those after k are already freed;
    # region k's trip has freed its own trip-freed sources (Q_k) by its peak.
    kept = [
        rc.live
        * (
            p.device_residual_bytes
            + p.input_residual_bytes
            + p.twice_held_bytes
            + p.hoisted_bytes
            - p.released_bytes
        )
        + p.invariant_residual_bytes
        + p.invariant_hoisted_bytes
        for rc, p in zip(model.regions, preds)
    ]
    residual = sum(kept)
    peak_var, ws, slices = 0, 0, 0
    prefix = 0
    ordered = regions_in_order(graph)
    for k, p in zip(kept, preds):
        prefix = prefix + k if ordered else residual
        if prefix + p.working_set_bytes - p.trip_freed_bytes >= peak_var:
            peak_var, ws = prefix + p.working_set_bytes - p.trip_freed_bytes, p.working_set_bytes
            slices = p.slice_copy_bytes
    if residual > peak_var:  # the end of the forward pass: every residual, no trip yet (Q_r)
        peak_var, ws, slices = residual, 0, 0
    host = sum(
        rc.live * p.host_residual_bytes + p.invariant_host_bytes
        for rc, p in zip(model.regions, preds)
    )
    recompute = sum(rc.multiplicity * p.recompute_s for rc, p in zip(model.regions, preds))
    materialize = sum(rc.multiplicity * p.materialize_s for rc, p in zip(model.regions, preds))
    transfer = sum(rc.multiplicity * (p.d2h_s + p.h2d_s) for rc, p in zip(model.regions, preds))
    exposed = sum(
        rc.multiplicity * (p.exposed_fwd_s + p.exposed_bwd_s) for rc, p in zip(model.regions, preds)
    )
    # ---- train state (issue 21; formulas in state.py): host leaves leave F (S), a host
    # parameter's slices in flight (V) join the layers' peak, the update buffer U peaks after
    # the backward pass, their bytes join the host, their copies the time.
    if state_on_host:
        st = evaluate_state(model.state, state_on_host)
        fixed -= st.saved_bytes
        peak_var = max(peak_var + st.inflight_bytes, st.update_buffer_bytes)
        host += st.host_bytes + st.host_temp_bytes  # resident + a host parameter's gradient
        transfer += st.exposed_s
        exposed += st.exposed_s
    # ---- end train state
    if fixed + peak_var < 0 or residual < 0 or ws < 0:
        raise PlannerError(
            f"The cost model predicted a negative peak ({int(fixed + peak_var):,} bytes: fixed "
            f"{int(fixed):,} + residuals {int(residual):,} + working set {int(ws):,}).\n"
            "Why: every term of the memory model is a size, so this is a planner bug, not a "
            "property of your step; no plan made from it could be trusted.\n"
            "Fix: report it with the step (planner.Planner(step, *args).trace.regions shows "
            "what was traced); meanwhile plan with verify_compile=True (the default) and "
            "trust only compiled figures."
        )
    return Prediction(
        peak_bytes=int(fixed + peak_var),
        host_bytes=int(host),
        step_s=model.base_step_s + recompute + materialize + exposed,
        base_step_s=model.base_step_s,
        recompute_s=recompute,
        materialize_s=materialize,
        transfer_s=transfer,
        exposed_transfer_s=exposed,
        fixed_bytes=int(fixed),
        residual_bytes=int(residual),
        working_set_bytes=int(ws),
        slice_copy_bytes=int(slices),
        regions=tuple(preds),
    )
