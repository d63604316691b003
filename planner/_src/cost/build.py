"""Stage 3, cost: price every candidate of a trace on a hardware profile (build_cost_model).

Recompute, forced-write, stack-copy and copy times per candidate, the step's base time, and
the two unknowns of the memory model (fixed bytes F, working-set scale omega) measured from
the two anchor compiles. Formulas: docs/cost-model.md#the-memory-and-time-model-term-by-term.
"""

from __future__ import annotations

import dataclasses
import math

import cost_models as cm
from planner._src.cost.predict import NOT_DUPLICATED, evaluate, fused_away
from planner._src.graph import VIEWS as _VIEWS
from planner._src.graph import LivenessGraph, class_key
from planner._src.types import Assignment, CostModel, RegionCost, Trace

__all__ = [
    "SMALL_SCALE_BELOW",
    "WORKING_SET_SCALE_BOUNDS",
    "build_cost_model",
    "slice_copy_share",
]

# The working-set scale measured from the two anchors is trusted inside these bounds (a
# slightly negative one is measurement noise around 0: clamped to 0); outside them the
# model's structure does not match this compiler and the scale stays 1.
WORKING_SET_SCALE_BOUNDS = (-0.25, 2.0)
# A scale below this one needs a third compile to be trusted (Trace.scale_check): two
# anchors fit by a small scale cannot tell a compiler that holds almost none of the modelled
# working set (XLA:CPU on scanned layers: flax_nnx 0.025, equinox_scan -0.006,
# parallel_residual -0.09, moe_dense 0.08; under scale 1 every plan of theirs was predicted
# 3-16% under its compile) from a model of the wrong structure (every recomputed value given
# a buffer fits the Llama anchors on the H200's compiler with 0.21: tests/test_target.py).
# Results: benchmarks/results/memory-model-omega-2026-12-07.md.
SMALL_SCALE_BELOW = 0.25


def build_cost_model(
    trace: Trace,
    graph: LivenessGraph,
    hardware,
    *,
    allow_offload: bool,
    correction_bytes: int = 0,
    small_scale: bool | None = None,
) -> CostModel:
    """Cost every candidate on ``hardware`` and measure the memory model's two unknowns from
    the anchors (``small_scale``: whether a working-set scale below SMALL_SCALE_BELOW is
    used; None: as ``trace.scale_check`` judged it, not at all where nothing judged it)."""
    # A step sharded over n devices offloads on all n at once: each device's host link at
    # the profile's rate for n GPUs copying together (link.shared; one device: unchanged).
    hw = cm.load_profile(hardware).for_devices(trace.num_partitions)
    # The share of collective time that hides no host copy (link.collective_contention).
    contention = hw.link.collective_contention
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
        win = []  # per candidate: its forward seconds that can hide a host copy
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
            win.append(local + (1.0 - contention) * coll)
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
                # one write of its (per-device) bytes at HBM bandwidth (M_v, docs/cost-model.md).
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
            # dynamic-update-slice into the producing kernel (S_v, docs/cost-model.md).
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
        # when the backward pass reads it with a kernel and with a fusion (D_r,
        # docs/cost-model.md).
        twice = tuple(
            trace.holds_rereads_twice
            and not r.in_scan
            and (c.primitive not in cm.FUSIBLE or c.primitive in NOT_DUPLICATED)
            for c in r.candidates
        )
        # Outside lax.scan, on a compiler that does not hold the recompute back for the
        # backward pass, recomputed values are held from the forward pass (E_r,
        # docs/cost-model.md).
        hoists = bool(getattr(trace, "hoists_recompute", False)) and not r.in_scan
        fused = fused_away(rg)
        # Elsewhere outside lax.scan, a trip's recompute frees the residuals it alone reads
        # before the trip's working set peaks (Q_r, docs/cost-model.md).
        frees_sources = not r.in_scan and not hoists
        unknown.update(r.backward_work.total().unknown_primitives)
        bwd_s = ratio * r.backward_work.seconds(hw)
        fwd_s = sum(fwd)
        win_s = sum(win)
        after, acc = [], 0.0
        for t in reversed(win):
            after.append(acc)
            acc += t
        after.reverse()
        # The backward trip runs the layer in reverse: the compute that precedes the first
        # use of v is, in proportion, the forward compute that followed v (less, like the
        # forward's windows, the collective time that hides no copy).
        bwd_win = bwd_s * (win_s / fwd_s) if fwd_s > 0 else 0.0
        before = [bwd_win * (a / win_s) if win_s > 0 else 0.0 for a in after]
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
        + (trace.anchor.loop_copy_bytes / copy_rate if copy_rate else 0.0)
        + _step_collective_seconds(trace, hw, step_ratio),
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
    # When the two are not independent (B_n == B_e) or omega falls outside
    # WORKING_SET_SCALE_BOUNDS (the model's structure does not match this compiler), omega
    # stays 1 and F comes from the full-remat compile alone; verify corrects what remains.
    # An omega below SMALL_SCALE_BELOW is used only where a third compile judged it better
    # than 1 (trace.scale_check; ``small_scale`` True / False decides instead); until then
    # the model keeps 1 and names the small one (CostModel.unconfirmed_scale).
    model = _shift_for_hlo_prices(model, graph, library_rec, trace)
    everything = Assignment.of({c.key: "save" for c in graph.classes})
    model = dataclasses.replace(
        model, slice_copy_share=slice_copy_share(trace, graph, model, everything)
    )
    full = evaluate(model, graph, Assignment.of({}), _fixed=0)
    fixed = trace.anchor.device_bytes - full.peak_bytes
    ws_scale, unconfirmed = 1.0, None
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
            lo, hi = WORKING_SET_SCALE_BOUNDS
            judged = small_scale
            if judged is None and trace.scale_check is not None:
                judged = trace.scale_check.accepted
            if lo <= scale <= hi and (scale >= SMALL_SCALE_BELOW or judged):
                ws_scale = max(scale, 0.0)
                fixed = trace.anchor_saved.device_bytes - kept_all - ws_scale * ws_all
            elif lo <= scale <= hi and judged is None:
                unconfirmed = max(scale, 0.0)
    # The bytes no plan changes are never negative. F < 0 means the model's working set (or
    # a region that never runs) exceeds the whole compiled anchor; F = 0 keeps the model
    # conservative (its peaks too high, never below zero) and verify corrects the rest. (A
    # scan over 0 layers predicted -29,360,108 bytes before; the trace stage refuses it now.)
    fixed = max(fixed, 0)
    return dataclasses.replace(
        model,
        fixed_bytes=int(max(0, fixed + correction_bytes)),
        working_set_scale=ws_scale,
        unconfirmed_scale=unconfirmed,
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


def _step_collective_seconds(trace: Trace, hw, step_ratio: float) -> float:
    """T0's share of the collectives the SPMD partitioner put in the step (FSDP's all-gathers
    and reduce-scatters, data parallelism's all-reduces), read from the compiled
    save-everything program (``Trace.step_collective_bytes``, per device per step) at the
    profile's device-to-device bandwidth, on the compute stream (not overlapped), less what
    the jaxpr's own collectives (shard_map's psum...) already put in T0's roofline."""
    if trace.step_collective_bytes <= 0:
        return 0.0
    in_roofline = step_ratio * trace.step_work.total().collective_bytes
    return _collective_seconds(max(0.0, trace.step_collective_bytes - in_roofline), hw)


def _collective_seconds(nbytes: float, hw) -> float:
    """Time of ``nbytes`` sent per device over the device-to-device link (not overlapped,
    as cost_models counts explicit collectives)."""
    return nbytes / hw.ici_bytes_per_s if nbytes and hw.ici_bytes_per_s > 0 else 0.0
