"""Stage 3, cost: the model's prediction for an assignment (evaluate), and the rules of which
buffers the backward pass holds (held, twice-held, fused away, reduction operands).

Formulas: docs/cost-model.md#the-memory-and-time-model-term-by-term.
"""

from __future__ import annotations

import math

import cost_models as cm
from planner._src.cost.state import evaluate_state
from planner._src.errors import PlannerError
from planner._src.graph import VIEWS as _VIEWS
from planner._src.graph import LivenessGraph, class_key
from planner._src.types import Assignment, CostModel, Prediction, RegionPrediction

__all__ = [
    "NOT_DUPLICATED",
    "REDUCTIONS",
    "decisions_per_candidate",
    "evaluate",
    "fused_away",
    "has_view",
    "held_values",
    "hiding_models",
    "reduction_operands",
    "regions_in_order",
    "twice_held",
]


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
    """The model's prediction for ``assignment`` (the formulas of docs/cost-model.md), with
    the train-state leaves ``state_on_host`` in pinned host memory (cost/state.py)."""
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
    # ---- train state (issue 21; formulas: docs/cost-model.md#the-train-state): host leaves
    # leave F (S), a host parameter's slices in flight (V) join the layers' peak, the update
    # buffer U peaks after the backward pass, their bytes join the host, their copies the time.
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
