"""Stage 4, solve: the solver's answers from the CP-SAT model (solve/model.py): the fastest
predicted assignment under a budget (solve_assignment), the smallest peak any assignment
reaches (min_peak_assignment, min_feasible_bytes), and the check of an answer against the
direct formulas (check_solution).

Four lexicographic phases: first the fastest predicted step under the budget; then, at that
step time, the fewest bytes sent to the host; then, at both, the smallest peak; then the
fewest residual bytes (ties between saving and recomputing free tensors). Deterministic: one
search worker and a fixed seed, so the same inputs give the same plan.
"""

from __future__ import annotations

import dataclasses
import time

from ortools.sat.python import cp_model

from planner._src.cost.predict import evaluate
from planner._src.errors import InfeasibleBudgetError, SolverError
from planner._src.graph import LivenessGraph
from planner._src.solve.model import Model
from planner._src.solve.regions import KIB, NS
from planner._src.types import Assignment, CostModel, Solution, SolverOptions
from planner._src.units import gb_at_least

__all__ = [
    "check_solution",
    "min_feasible_bytes",
    "min_peak_assignment",
    "min_peak_plan",
    "solve_assignment",
]


def min_peak_assignment(
    graph: LivenessGraph, cost: CostModel, opts: SolverOptions
) -> tuple[Assignment, float]:
    """The assignment with the smallest predicted peak, and the proved lower bound on any peak."""
    a, _, bound = min_peak_plan(graph, cost, opts)
    return a, bound


def min_peak_plan(
    graph: LivenessGraph, cost: CostModel, opts: SolverOptions
) -> tuple[Assignment, frozenset, float]:
    """:func:`min_peak_assignment` with the train-state leaves its plan puts on the host."""
    mod = Model(graph, cost, None)
    mod.hint_all_remat()
    s, status = mod.run(mod.peak_kib, opts, opts.time_limit_s)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise SolverError(
            "CP-SAT found no assignment at all, even without a budget: "
            f"status {s.StatusName(status)}. This is a planner bug; please report it."
        )
    # The proved lower bound is the honest "no plan goes below this" figure.
    return mod.assignment(s), mod.state_host(s), float(s.BestObjectiveBound() * KIB)


def min_feasible_bytes(graph: LivenessGraph, cost: CostModel, opts: SolverOptions) -> float:
    """The smallest peak any assignment reaches under the model (host cap respected)."""
    return min_peak_assignment(graph, cost, opts)[1]


def solve_assignment(
    graph: LivenessGraph,
    cost: CostModel,
    usable_bytes: float,
    opts: SolverOptions = SolverOptions(),
    *,
    uniform: bool = False,
) -> Solution:
    """Fastest predicted assignment within ``usable_bytes``; raises if none fits.

    ``uniform=True`` ties the layer groups' decisions together (one policy for every group).
    """
    t0 = time.perf_counter()
    mod = Model(graph, cost, usable_bytes, uniform)
    mod.hint_all_remat()
    s, status = mod.run(mod.extra_ns, opts, opts.time_limit_s)
    if status == cp_model.UNKNOWN and opts.linearization_level > 1:
        # The stronger relaxation can spend a short limit before any solution on a large
        # model (2,000 candidates at 0.5 deterministic s); the default one finds a first plan
        # sooner. Still deterministic: the same inputs take the same path.
        s, status = mod.run(
            mod.extra_ns, dataclasses.replace(opts, linearization_level=1), opts.time_limit_s
        )
    if status == cp_model.INFEASIBLE:
        need = min_feasible_bytes(graph, cost, opts)
        raise InfeasibleBudgetError(
            f"No plan fits {usable_bytes / 1e9:.3f} GB: no combination of save / remat / "
            f"offload peaks below {need / 1e9:.3f} GB (a bound CP-SAT proved).\n"
            f"Why: {cost.fixed_bytes / 1e9:.3f} GB do not depend on the plan (parameters, "
            "optimizer state, batch, outputs, activations outside checkpoint regions, "
            "compiler buffers), and the backward pass of one layer needs its working set.\n"
            f"Fix: pass hbm_gb >= {gb_at_least(need)}, or shrink what is fixed "
            "(smaller batch per device, shard parameters and optimizer state, donate the "
            "train state with donate_argnums).",
            budget_bytes=usable_bytes,
            min_feasible_bytes=need,
        )
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise SolverError(
            f"CP-SAT stopped with status {s.StatusName(status)} before finding any plan in "
            f"{opts.time_limit_s:g} deterministic s.\nFix: raise solver_time_limit_s, or give fewer "
            "classes (name the tensors that matter with checkpoint_name)."
        )
    first = s.ObjectiveValue()
    bound = s.BestObjectiveBound()
    phase1_status = status
    # Phase 2: at that step time, the fewest bytes copied to the host. A copy the model
    # predicts hidden still competes for HBM bandwidth and can be exposed by the schedule
    # XLA picks (measured: benchmarks/results/h200-2026-12-01.md), so the planner offloads only what
    # buys predicted time, never merely to lower a peak that already fits.
    # Phase 3: at both, the smallest peak (keeps spare memory for the user). Phase 4: at all
    # three, the fewest residual bytes: a tensor whose saving and recompute cost the same
    # (a view, an elementwise op) is not kept where keeping it does not set the peak, so
    # ties break the same way in every region and layer group. Each phase has its own
    # deterministic time budget, so the answer does not depend on the machine's load.
    final = s
    # CP-SAT reports an integer objective as a double (e.g. 14652404.999999998): rounded, not
    # truncated, or the next phase is infeasible and every tie-breaking phase is skipped.
    mod.cp.Add(mod.extra_ns <= round(first))
    for objective, keep in ((mod.host_kib, True), (mod.peak_kib, True), (mod.residual_kib, False)):
        if isinstance(objective, int):  # nothing can be offloaded
            continue
        if objective is mod.host_kib and final.Value(objective) == 0:
            # Phase 2 cannot go below 0 host bytes (each term is a 0/1 variable with a
            # nonnegative weight) and the plan so far sends none: the solve would return that
            # plan, its hint, at once. Its bound is added as the solve adds it, so phase 3
            # solves the same model with the same hints (benchmarks/solver_speed.py on 180
            # solves: the same answers and the same search in phases 3 and 4).
            mod.cp.Add(objective <= 0)
            continue
        mod.cp.ClearHints()
        for v in (*mod.choose.values(), *mod.state_on_host.values()):
            mod.cp.AddHint(v, final.Value(v))
        s2, status2 = mod.run(objective, opts, opts.time_limit_s)
        if status2 not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            break
        final = s2
        if keep:
            mod.cp.Add(objective <= round(s2.ObjectiveValue()))
    assignment = mod.assignment(final)
    obj_s = (mod.base_ns + first) / NS
    bound_s = (mod.base_ns + bound) / NS
    return Solution(
        assignment=assignment,
        status="OPTIMAL" if phase1_status == cp_model.OPTIMAL else "FEASIBLE",
        objective_s=obj_s,
        bound_s=bound_s,
        gap=0.0 if obj_s <= 0 else max(0.0, (obj_s - bound_s) / obj_s),
        wall_s=time.perf_counter() - t0,
        num_classes=len(graph.classes),
        num_variables=mod.num_variables,
        usable_bytes=int(usable_bytes),
        reproducible=not mod.wall_stopped,
        state_on_host=mod.state_host(final),
    )


def check_solution(graph: LivenessGraph, cost: CostModel, sol: Solution) -> None:
    """The solver is never its own judge: re-evaluate its answer with the direct formulas."""
    p = evaluate(cost, graph, sol.assignment, state_on_host=sol.state_on_host)
    slack = KIB * (1 + sum(len(r.region.candidates) for r in graph.regions) + len(cost.state))
    # slack: the solver rounds each term up to whole KiB, at most one KiB per candidate.
    if p.peak_bytes > sol.usable_bytes + slack:
        raise SolverError(
            f"internal check failed: solver plan peaks at {p.peak_bytes} bytes "
            f"over its budget {sol.usable_bytes}; please report this bug"
        )
    if p.host_bytes > cost.host_cap_bytes + slack:
        raise SolverError(
            f"internal check failed: solver plan puts {p.host_bytes} bytes in host "
            f"memory over the cap {cost.host_cap_bytes}; please report this bug"
        )
