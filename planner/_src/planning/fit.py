"""Fit rounds: solve, compile, and where the compiler needs more than the model said,
correct the model by the measured error and solve again (at most ``max_rounds``).

Also the record every later step reads and returns, :class:`Standing`: where one budget's
planning stands after each step.
"""

from __future__ import annotations

import dataclasses
import time

from planner._src.cost import evaluate
from planner._src.cost.baselines import evaluate_baselines
from planner._src.errors import InfeasibleBudgetError
from planner._src.graph import LivenessGraph
from planner._src.planning.attempt import CompileThreads, attempt, start_plan_compile
from planner._src.planning.context import (
    NOT_KEPT_WHY,
    Attempt,
    Attempts,
    Context,
    fits,
    limit_of,
    normalize,
    overrules_model,
    unsolved,
    with_forced,
)
from planner._src.planning.stock import offload_estimate
from planner._src.policies import STOCK
from planner._src.solve import check_solution, min_peak_plan
from planner._src.types import Assignment, CostModel, Solution
from planner._src.units import GB

# How much slower than the first solution a stock policy may be predicted and still have its
# verify compile started beside the plan's: a correction of the fit rounds makes the later
# plan slower (measured: benchmarks/results/planning-time-2026-12-05.md).
PREFETCH_MARGIN = 0.05


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Standing:
    """Where one budget's planning stands: the verified candidate kept so far (``best``),
    the solver's answer of the last round (``solution``; None where the model fit nothing),
    the model and graph of the last round, and what the steps learned."""

    best: Attempt | None
    solution: Solution | None
    cost: CostModel
    graph: LivenessGraph
    infeasible: InfeasibleBudgetError | None = None  # the model fit nothing
    model_overruled: bool = False  # ... and a compile proved it wrong
    correction: int = 0  # the fit rounds' model correction (cost.py)
    probed_bytes: int | None = None  # the smallest exact figure the probes compiled to
    fill_why: str = ""  # why the plan leaves what it leaves of the budget

    def plan_fits(self, budget: int) -> bool:
        """Whether the planner's own plan stands within ``budget`` (or was not compiled)."""
        b = self.best
        return (
            b is not None
            and self.solution is not None
            and (b.verification.compiled_device_bytes is None or fits(b.verification, budget))
        )


def fit_rounds(ctx: Context, log: Attempts, threads: CompileThreads) -> Standing:
    """The first solve and its correction rounds. Where the model fits nothing, the
    smallest plan (full remat where its anchor fits) is compiled instead: the model is
    conservative, and a compile may overrule it."""
    subject, opts, tr, graph = ctx.subject, ctx.options, ctx.trace, ctx.graph
    budget = ctx.usable
    correction = 0
    best: Attempt | None = None
    sol: Solution | None = None
    infeasible: InfeasibleBudgetError | None = None
    cost = None
    graph_used = graph
    model_overruled = False
    for round_no in range(opts.max_rounds):
        t = time.perf_counter()
        cost = ctx.cost_model(tr, graph, correction)
        ctx.timings.timed(f"cost (round {round_no + 1})", t)
        g = with_forced(graph, log.not_kept, NOT_KEPT_WHY)
        ctx.say(f"solving for {budget / GB:g} GB (round {round_no + 1})")
        t = time.perf_counter()
        try:
            sol = ctx.solves(g, cost, budget, opts.solver)
            check_solution(g, cost, sol)
            candidate, on_host = sol.assignment, sol.state_on_host
        except InfeasibleBudgetError as e:
            infeasible = e
            if not opts.verify_compile:
                break
            # The smallest-memory plan as it really compiles may fit after all. Where the
            # full-remat anchor, the program compiled first, fits, that is the plan to try:
            # a correction learned from an under-predicted plan can put every plan, full
            # remat too, above a budget full remat meets.
            if tr.anchor.device_bytes <= budget:
                candidate, on_host = Assignment.of({}), frozenset()
            else:
                candidate, on_host, _ = min_peak_plan(g, cost, opts.solver)
            sol = None
        ctx.timings.timed(f"solve (round {round_no + 1})", t)
        plan_pre = None
        if round_no == 0 and opts.compare_stock and opts.verify_compile:
            if not on_host:  # (a plan that moves state compiles the step as applied)
                plan_pre = start_plan_compile(threads, g, cost, candidate)
            # The stock policies predicted faster than this first plan (or within
            # PREFETCH_MARGIN of it) are compared with the answer at the end: their
            # compiles start now, beside the plan's.
            step = (1 + PREFETCH_MARGIN) * evaluate(cost, g, normalize(g, cost, candidate)).step_s
            ctx.stock.prefetch(
                [
                    b.name
                    for b in evaluate_baselines(g, cost, budget)
                    if b.applicable
                    and b.name in STOCK
                    and b.prediction.step_s < step
                    and not offload_estimate(b.name, ctx.hardware.platform)
                ],
                ctx.timings,
                g,
                cost,
            )
        att = attempt(
            subject,
            ctx.timings,
            tr,
            g,
            cost,
            candidate,
            budget,
            precompiled=plan_pre,
            state=ctx.state,
            state_on_host=on_host,
        )
        log.record(att, correction, budget, "fit")
        graph_used = g
        if log.learns(att):
            continue  # the plan rests on tensors JAX will not keep: solve without them
        best = att
        if sol is None:  # the smallest plan: fits or not, nothing smaller to try
            if overrules_model(att.verification, budget):
                sol = unsolved(att.assignment, "FEASIBLE", att.prediction.step_s, g, budget)
                sol = dataclasses.replace(sol, state_on_host=att.state_on_host)
                infeasible = None
                model_overruled = True
            break
        infeasible = None
        ver = att.verification
        if ver.compiled_device_bytes is None or fits(ver, budget):
            break
        # The compiler needs more than the model said: learn the error and solve again (and
        # where the program's own limit is below the budget the model is held to, the gap).
        gap = budget - limit_of(ver, budget)
        correction += max(1, ver.compiled_device_bytes - att.prediction.peak_bytes + gap)
    if cost is None:
        raise AssertionError("max_rounds >= 1 is validated")
    return Standing(
        best=best,
        solution=sol,
        cost=cost,
        graph=graph_used,
        infeasible=infeasible,
        model_overruled=model_overruled,
        correction=correction,
    )
