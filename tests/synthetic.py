"""Random region graphs with hand-set costs, for solver and simulator tests (no JAX tracing)."""

from __future__ import annotations

import dataclasses
import itertools
import math
import random

import cost_models as cm
from planner._src.cost import evaluate
from planner._src.cost.predict import fused_away
from planner._src.fingerprints import StepFingerprint
from planner._src.graph import LivenessGraph, build_graph
from planner._src.types import (
    DECISIONS,
    Assignment,
    Candidate,
    CompiledFigures,
    CostModel,
    Region,
    RegionCost,
    RegionInput,
    Trace,
)


def random_problem(
    seed: int,
    *,
    n_nodes: int = 7,
    n_regions: int = 1,
    n_classes: int = 4,
    eta: float | None = None,
    allow_offload: bool = True,
    groups: bool = False,
    fusion: bool = False,
    hiding: bool = False,
    parallel: bool = False,
    slices: bool = False,
):
    """A random DAG per region, candidates spread over ``n_classes`` shared signatures.

    ``parallel=True``: two branches (odd and even candidates, both may read candidate 0) joined
    by an ``add`` that nothing reads, the region's output (graph.parallel_branches).

    ``groups=True``: each region is one call site of its own layer group (classes per group).

    ``slices=True``: the backward trips copy a share of the saved residuals out of the stacks
    (docs/cost-model.md K_r; a share that keeps every term a whole number of KiB, as CP-SAT
    counts)."""
    rnd = random.Random(seed)
    # Draws added later come from their own stream, so the earlier draws stay the same.
    twice_rnd = random.Random(seed * 7919 + 1)
    hoist_rnd = random.Random(seed * 7919 + 2)
    sum_rnd = random.Random(seed * 7919 + 3)
    frees_rnd = random.Random(seed * 7919 + 4)
    regions = []
    for rid in range(n_regions):
        cands = []
        n_inputs = 2
        for i in range(n_nodes):
            k = rnd.randrange(n_classes)
            pool = [j for j in range(i) if not parallel or j == 0 or j % 2 == i % 2]
            inputs = tuple(sorted(rnd.sample(pool, k=min(len(pool), rnd.randint(0, 2)))))
            reads = tuple(sorted(rnd.sample(range(n_inputs), k=rnd.randint(0, 1)))) if i < 3 else ()
            cands.append(
                Candidate(
                    index=i,
                    signature=f"sig{k}",
                    primitive=_primitive(k, fusion),
                    name=f"t{k}" if k % 2 else None,
                    shape=(rnd.randint(1, 8),),
                    dtype="float32",
                    nbytes=rnd.choice([1, 2, 4, 8]) * 1024 * 64,
                    source="synthetic",
                    inputs=inputs,
                    needed=rnd.random() < 0.5,
                    effectful=False,
                    loop_invariant=rnd.random() < 0.1 and not inputs and not reads,
                    input_reads=reads,
                    # fusion: the backward reads some values with a kernel
                    read_by_kernel=rnd.random() < 0.5 if fusion else True,
                    # fusion: and some with a fusion (the twice-held term, docs/cost-model.md D_r)
                    read_by_fusion=twice_rnd.random() < 0.4 if fusion else False,
                    # fusion: and some with a reduction (a kernel for D_r)
                    read_by_reduction=sum_rnd.random() < 0.3 if fusion else False,
                )
            )
        if parallel:  # the join: x + branch_a + branch_b, read by nothing
            join = dataclasses.replace(
                cands[-1],
                index=n_nodes,
                signature=f"sig{n_classes - 1}",
                primitive="add",
                name=None,
                inputs=(n_nodes - 2, n_nodes - 1),
                input_reads=(),
                needed=False,
                loop_invariant=False,
            )
            cands.append(join)
        region_inputs = tuple(
            RegionInput(
                index=j,
                nbytes=1024 * 64 * rnd.choice([1, 4]),
                stacked=j == 0,
                needed=rnd.random() < 0.3,
            )
            for j in range(n_inputs)
        )
        regions.append(
            Region(
                id=rid,
                source="synthetic",
                multiplicity=rnd.randint(1, 4),
                call_sites=1 if groups else rnd.choice([1, 1, 2]),
                candidates=tuple(cands),
                user_policy="none",
                prevent_cse=False,
                in_scan=True,
                inputs=region_inputs,
                group=rid if groups else None,
            )
        )
    figs = CompiledFigures(
        argument_bytes=0,
        output_bytes=0,
        alias_bytes=0,
        temp_bytes=0,
        host_temp_bytes=0,
        host_buffers_in_hlo=0,
        async_host_copies_in_hlo=0,
        jaxpr_host_bytes=0,
        stacked_device_bytes=0,
        stacked_host_bytes=0,
        stacked_host_arrays=0,
        backend="cpu",
    )
    trace = Trace(
        regions=tuple(regions),
        anchor=figs,
        argument_bytes=0,
        backend="cpu",
        fingerprint=StepFingerprint(program="synthetic"),
        undifferentiated_regions=0,
    )
    graph = build_graph(trace)
    hw = cm.load_profile("cpu")
    rcs = []
    for r, rg in zip(regions, graph.regions):
        n = len(r.candidates)
        rec = [rnd.uniform(1e-4, 5e-3) for _ in range(n)]
        d2h = [c.nbytes / 1e9 * rnd.uniform(5, 20) for c in r.candidates]
        # Some candidates are "fusible": saving them costs a forward write.
        mat = [rnd.choice([0.0, rnd.uniform(1e-5, 1e-3)]) for _ in range(n)]
        # Some of the others are matmul outputs under lax.scan: saving them copies them into
        # the stack (RegionCost.stack_copy_s).
        stack = [0.0 if m else rnd.choice([0.0, rnd.uniform(1e-5, 1e-3)]) for m in mat]
        after = [sum(rec[i + 1 :]) for i in range(n)]
        bwd = 2 * sum(rec)
        rcs.append(
            RegionCost(
                region_id=r.id,
                multiplicity=r.multiplicity,
                recompute_s=tuple(rec),
                materialize_s=tuple(mat),
                stack_copy_s=tuple(stack),
                # fusion: outside lax.scan some kept values are held twice (docs/cost-model.md D_r)
                twice_held=tuple(twice_rnd.random() < 0.5 for _ in range(n)) if fusion else (),
                # fusion: some regions' compiler recomputes in the forward pass (docs/cost-model.md
                # E_r)
                hoists_recompute=hoist_rnd.random() < 0.5 if fusion else False,
                # fusion: values only fusions read back are recomputed inside them (W_r)
                fused_away=fused_away(rg),
                # fusion: some regions' trips free the residuals kept only for their own
                # recompute before their peak (outside lax.scan; docs/cost-model.md Q_r)
                frees_sources_in_trip=frees_rnd.random() < 0.5 if fusion else False,
                d2h_s=tuple(d2h),
                h2d_s=tuple(d2h),
                fwd_after_s=tuple(after),
                bwd_before_s=tuple(bwd * a / sum(rec) for a in after),
                fwd_s=sum(rec),
                bwd_s=bwd,
            )
        )
    cost = CostModel(
        hardware=hw,
        regions=tuple(rcs),
        base_step_s=0.1,
        fixed_bytes=1 << 20,
        correction_bytes=0,
        host_cap_bytes=rnd.choice([1e12, 2 * 1024 * 64 * 8]),
        overlap_efficiency=rnd.choice([0.0, 0.5, 1.0]) if eta is None else eta,
        allow_offload=allow_offload,
        unknown_primitives=(),
    )
    if slices:
        # K_r is for regions under lax.scan, Q_r for those outside it (docs/cost-model.md): never
        # both
        share = random.Random(seed * 7919 + 5).choice([0.25, 0.5, 1.0])
        cost = dataclasses.replace(
            cost,
            slice_copy_share=share,
            regions=tuple(
                dataclasses.replace(r, frees_sources_in_trip=False) for r in cost.regions
            ),
        )
    if hiding:  # calibrated per-direction hiding models (docs/cost-model.md X): eta, cap, floor
        d2h_m, h2d_m = (
            cm.HidingModel(
                eta=rnd.choice([0.0, 0.3, 1.0]),
                capacity_s=rnd.choice([math.inf, rnd.uniform(0.0, 3e-3)]),
                floor=rnd.choice([0.0, rnd.uniform(0.1, 0.6)]),
            )
            for _ in range(2)
        )
        cost = dataclasses.replace(cost, d2h_hiding=d2h_m, h2d_hiding=h2d_m)
    return graph, cost


def all_assignments(graph: LivenessGraph, cost: CostModel):
    keys = [c.key for c in graph.classes]
    choices = DECISIONS if cost.allow_offload else ("save", "remat")
    for combo in itertools.product(choices, repeat=len(keys)):
        yield Assignment.of(dict(zip(keys, combo)))


def brute_force(graph: LivenessGraph, cost: CostModel, budget: float):
    """The fastest predicted assignment within the budget, by enumeration (None if none)."""
    best = None
    for a in all_assignments(graph, cost):
        p = evaluate(cost, graph, a)
        if p.peak_bytes <= budget and p.host_bytes <= cost.host_cap_bytes:
            if best is None or p.step_s < best[1].step_s - 1e-12:
                best = (a, p)
    return best


def state_options(graph: LivenessGraph, cost: CostModel):
    """Every (activation assignment, host subset of the movable train-state leaves,
    prediction) of a model with state (``cost.state.with_state``), by enumeration: the brute
    force the state solver's answers are checked against."""
    keys = [c.leaf.key for c in cost.state]
    subsets = [frozenset(s) for k in range(len(keys) + 1) for s in itertools.combinations(keys, k)]
    return [
        (a, h, evaluate(cost, graph, a, state_on_host=h))
        for a in all_assignments(graph, cost)
        for h in subsets
    ]


def check_state_solve(graph: LivenessGraph, cost: CostModel, budget: float, options, opts):
    """Solve the state-and-activation model at ``budget`` and check it against the brute force
    ``options`` (:func:`state_options`): infeasible exactly where no option fits the budget
    and the host cap; otherwise within the budget and host cap, at the fastest option's step
    time. Returns the solution (None where infeasible)."""
    import pytest

    from planner._src.errors import InfeasibleBudgetError
    from planner._src.solve import solve_assignment

    fits = [
        p.step_s
        for _, _, p in options
        if p.peak_bytes <= budget and p.host_bytes <= cost.host_cap_bytes
    ]
    if not fits:
        with pytest.raises(InfeasibleBudgetError):
            solve_assignment(graph, cost, budget, opts)
        return None
    sol = solve_assignment(graph, cost, budget, opts)
    pred = evaluate(cost, graph, sol.assignment, state_on_host=sol.state_on_host)
    assert pred.peak_bytes <= budget
    assert pred.host_bytes <= cost.host_cap_bytes
    assert pred.step_s == pytest.approx(min(fits), rel=1e-6, abs=1e-8)
    return sol


def _primitive(k: int, fusion: bool) -> str:
    """Class ``k``'s primitive: a view for class 0, else a kernel ``p<k>``; with ``fusion``,
    classes 1, 2, 3 are an elementwise equation, a reduction and an expensive elementwise
    one (cost.reduction_operands; XLA's fusion, benchmarks/results/memory-model-2026-12-04.md)."""
    if k == 0:
        return "reshape"
    if fusion and k in (1, 2, 3):
        return ("mul", "reduce_sum", "exp")[k - 1]
    return f"p{k}"


_ITEMSIZE = {"float32": 4, "int32": 4, "bfloat16": 2, "float16": 2, "bool": 1}


def candidate(index: int, primitive: str, shape: tuple, dtype: str = "float32", **fields):
    """A hand-built Candidate with what most tests want: read by the backward pass, not
    effectful, not loop-invariant, no inputs, its bytes from ``shape`` and ``dtype``;
    ``fields`` override any of them (``source``, ``inputs``, ``work``, ``read_by_kernel``...)."""
    base = dict(
        index=index,
        signature=f"{primitive}#{index}",
        primitive=primitive,
        name=None,
        shape=shape,
        dtype=dtype,
        nbytes=_ITEMSIZE[dtype] * math.prod(shape),
        source="synthetic",
        inputs=(),
        needed=True,
        effectful=False,
        loop_invariant=False,
    )
    return Candidate(**{**base, **fields})


def one_tensor_layer(
    *, nbytes: int, recompute_s: float, copy_s: float, after_s: float, before_s: float, trips=8
):
    """A layer under a scan of ``trips`` with one tensor the backward pass reads (a matmul-like
    kernel: its recompute costs ``recompute_s``), copied in ``copy_s`` each way, with windows
    ``after_s`` (forward compute after it) and ``before_s`` (backward compute before its
    reader). The single overlap efficiency is 0 until a test sets it."""
    cand = Candidate(
        index=0,
        signature="attn",
        primitive="p1",
        name="attention_out",
        shape=(nbytes // 2,),
        dtype="bfloat16",
        nbytes=nbytes,
        source="synthetic",
        inputs=(),
        needed=True,
        effectful=False,
        loop_invariant=False,
        input_reads=(),
        read_by_kernel=True,
    )
    region = Region(
        id=0,
        source="synthetic",
        multiplicity=trips,
        call_sites=1,
        candidates=(cand,),
        user_policy="none",
        prevent_cse=False,
        in_scan=True,
        inputs=(),
        group=None,
    )
    trace = Trace(
        regions=(region,),
        anchor=graph_anchor(),
        argument_bytes=0,
        backend="cpu",
        fingerprint=StepFingerprint(program="synthetic"),
        undifferentiated_regions=0,
    )
    graph = build_graph(trace)
    rc = RegionCost(
        region_id=0,
        multiplicity=trips,
        recompute_s=(recompute_s,),
        materialize_s=(0.0,),
        d2h_s=(copy_s,),
        h2d_s=(copy_s,),
        fwd_after_s=(after_s,),
        bwd_before_s=(before_s,),
        fwd_s=recompute_s + after_s,
        bwd_s=2 * (recompute_s + after_s),
    )
    cost = CostModel(
        hardware=cm.load_profile("cpu"),
        regions=(rc,),
        base_step_s=0.1,
        fixed_bytes=1 << 20,
        correction_bytes=0,
        host_cap_bytes=1e12,
        overlap_efficiency=0.0,
        allow_offload=True,
        unknown_primitives=(),
    )
    return graph, cost


def graph_anchor() -> CompiledFigures:
    """Compiled figures of nothing (synthetic problems have no compile)."""
    return CompiledFigures(
        argument_bytes=0,
        output_bytes=0,
        alias_bytes=0,
        temp_bytes=0,
        host_temp_bytes=0,
        host_buffers_in_hlo=0,
        async_host_copies_in_hlo=0,
        jaxpr_host_bytes=0,
        stacked_device_bytes=0,
        stacked_host_bytes=0,
        stacked_host_arrays=0,
        backend="cpu",
    )
