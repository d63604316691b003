"""The frontier walk: one budget's plan, monotone in the budget by construction (issue 45).

The candidates are the model's plans at the caps of one fixed grid, ``GRID_RATIO`` apart and
the same for every budget and every Planner: the plan at cap ``g`` is the solver's fastest
plan whose predicted peak is at most ``g`` (ties broken by solve/phases.py's later phases).
For a budget whose usable bytes are ``U`` the walk starts at the largest grid cap at most
``U + reach(U)`` and walks the grid down, compiling each plan it has not compiled yet, until
one compiles within ``U``: that plan is the answer. The reach is there because the memory
model errs both ways: a plan predicted over the budget can compile within it (the Mamba
step of issue 45: predicted 43.56 MB, compiled 41.405 MB).

Why a larger budget never gets a slower answer: it starts at the same grid cap or a higher
one and walks the same caps, each with the same plan (the solve at a cap depends on the cap
alone) and the same compiled figure (the compiler's); the smaller budget's answer compiles
within the larger budget too, so the larger budget's walk stops there or earlier, at a plan
predicted no slower. Nothing depends on the budgets asked before: the grid is fixed, each
solve is deterministic (CP-SAT's deterministic time), and the caches (Solves, the stock
compiles) only skip repeated work.

Compiles are bounded: after ``1 + fill_rounds`` plans over the budget, or one over it by
more than the reach, the walk jumps by the last plan's measured error (as a correction round
would: few compiles where the frontier is dense or the model far off) and bisects the caps it
skipped with the compiles left; it stops after ``max_rounds + fill_rounds`` compiles. Where the guarantee does
not reach, :attr:`Standing.walk_note` says so (the report prints it): such a jump, a walk
cut by its compile limit, a solve
stopped before it proved its plan the fastest at its cap, classes JAX turned out not to
keep (the walk then solves its caps without them, which a walk started lower may not have
learned).

Also the record every later step reads and returns, :class:`Standing`: where one budget's
planning stands after each step.
"""

from __future__ import annotations

import dataclasses
import math
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
from planner._src.units import fmt_bytes

# The grid of caps: powers of GRID_RATIO in bytes. Between two budgets the answer can differ
# only where a cap lies between them, so a finer grid follows the budget more closely and
# costs more solves per walk (each cheap next to a compile; a plan met again is not compiled
# again).
GRID_RATIO = 1.01
# How far over the usable bytes the walk starts: REACH_FRACTION of them. Each plan in that
# band that compiles over costs a compile: a floor of 1 MB (the fill rounds' margin) spent
# 5 compiles over budget on budgets of 2-6 MB and made 9 of 58 plan-equality answers slower
# (benchmarks/results/monotone-2026-12-06.md), so the floor is one KiB.
REACH_FRACTION = 0.02
REACH_MIN_BYTES = 1024
# Solves of one walk at most: caps below the first fit are walked one grid step at a time.
MAX_SOLVES = 60
# How much slower than the first plan a stock policy may be predicted and still have its
# verify compile started beside the plan's (the walk's later plans are slower; measured:
# benchmarks/results/planning-time-2026-12-05.md).
PREFETCH_MARGIN = 0.05


def reach(usable: int, fill_rounds: int = 1) -> int:
    """Bytes over ``usable`` at which the walk starts (0 where ``fill_rounds=0`` asks for no
    plan predicted over the budget); non-decreasing in ``usable``."""
    if fill_rounds == 0:
        return 0
    return max(int(REACH_FRACTION * usable), REACH_MIN_BYTES)


def grid_cap(k: int) -> int:
    """The ``k``-th cap of the grid."""
    return int(GRID_RATIO**k)


def grid_index_at_most(x: float) -> int:
    """The index of the largest grid cap at most ``x`` (``x >= 1``)."""
    k = max(0, int(math.log(max(x, 1.0)) / math.log(GRID_RATIO)))
    while grid_cap(k + 1) <= x:
        k += 1
    while k > 0 and grid_cap(k) > x:
        k -= 1
    return k


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Standing:
    """Where one budget's planning stands: the verified candidate kept so far (``best``),
    the solver's answer it came from (``solution``; None where the model fit nothing),
    the model and graph it was solved on, and what the steps learned."""

    best: Attempt | None
    solution: Solution | None
    cost: CostModel
    graph: LivenessGraph
    infeasible: InfeasibleBudgetError | None = None  # the model fit nothing
    model_overruled: bool = False  # ... and a compile proved it wrong
    correction: int = 0  # usable bytes less the answer's grid cap (the report's rounds)
    probed_bytes: int | None = None  # the smallest exact figure the probes compiled to
    fill_why: str = ""  # why the plan leaves what it leaves of the budget
    walk_note: str = ""  # where the walk's monotone guarantee does not reach (module doc)

    def plan_fits(self, budget: int) -> bool:
        """Whether the planner's own plan stands within ``budget`` (or was not compiled)."""
        b = self.best
        return (
            b is not None
            and self.solution is not None
            and (b.verification.compiled_device_bytes is None or fits(b.verification, budget))
        )


def walk_frontier(ctx: Context, log: Attempts, threads: CompileThreads) -> Standing:
    """The answer of the walk (module docstring). Where the model fits nothing at any cap
    the walk reaches, the smallest plan (full remat where its anchor fits) is compiled
    instead: the model is conservative, and a compile may overrule it."""
    subject, opts, tr, graph = ctx.subject, ctx.options, ctx.trace, ctx.graph
    budget = ctx.usable
    cost = ctx.cost_model(tr, graph, 0)
    limit = opts.max_rounds + opts.fill_rounds if opts.verify_compile else 1
    walk_limit = 1 + opts.fill_rounds  # compiles walked one plan at a time (the guarantee)
    # Without a compile the model is the only judge: no plan predicted over the budget.
    k = grid_index_at_most(budget + reach(budget, opts.fill_rounds) * opts.verify_compile)
    compiled: dict[tuple, Attempt] = {}
    over: list[Attempt] = []  # faster plans that compiled over the budget, in walk order
    notes: list[str] = []
    best: Attempt | None = None
    best_sol: Solution | None = None  # the solve ``best`` came from
    sol: Solution | None = None
    infeasible: InfeasibleBudgetError | None = None
    graph_used, cap, model_overruled = graph, grid_cap(k), False
    jump_top = None  # after a jump: the highest cap index no compile has judged
    for n_solve in range(MAX_SOLVES):
        cap = grid_cap(k)
        g = with_forced(graph, log.not_kept, NOT_KEPT_WHY)
        ctx.say(
            f"solving for a predicted peak of at most {fmt_bytes(cap)} (walk step {n_solve + 1})"
        )
        t = time.perf_counter()
        try:
            sol = ctx.solves(g, cost, cap, opts.solver)
            check_solution(g, cost, sol)
            candidate, on_host = normalize(g, cost, sol.assignment), sol.state_on_host
        except InfeasibleBudgetError as e:
            infeasible = e
            sol = None
            if not opts.verify_compile:
                break
            # The smallest-memory plan as it really compiles may fit after all: full remat
            # where its anchor, the program compiled first, fits; else the model's smallest.
            if tr.anchor.device_bytes <= budget:
                candidate, on_host = Assignment.of({}), frozenset()
            else:
                candidate, on_host, _ = min_peak_plan(g, cost, opts.solver)
        ctx.timings.timed(f"solve (walk step {n_solve + 1})", t)
        if sol is not None and sol.status != "OPTIMAL":
            notes.append(
                f"the solve at {fmt_bytes(cap)} stopped before it proved its plan the fastest "
                "there (a larger budget may then get a slower plan)"
            )
        key = (candidate, on_host)
        if key in compiled and sol is not None:
            k = _below(k, compiled[key])  # a plan met again: it compiled over before
            if k < 0:
                break
            continue
        if key in compiled:  # the smallest plan, compiled already on the way down
            best, best_sol = compiled[key], None
            break
        if len(compiled) >= limit and sol is not None:  # (the smallest plan always compiles)
            notes.append(
                f"the walk stopped after {limit} compile{'s' * (limit != 1)} (max_rounds + "
                f"fill_rounds) at "
                f"{fmt_bytes(cap)} without a plan within the budget"
            )
            break
        att = attempt(
            subject,
            ctx.timings,
            tr,
            g,
            cost,
            candidate,
            budget,
            precompiled=_start(ctx, threads, g, cost, candidate, on_host, first=not compiled),
            state=ctx.state,
            state_on_host=on_host,
            label="" if not compiled else f"walk step {n_solve + 1}",
        )
        compiled[key] = att
        log.record(att, budget - cap, budget, "walk")
        graph_used = g
        if log.learns(att):
            notes.append(
                "JAX does not keep " + ", ".join(sorted(att.not_kept)[:3]) + ": the walk "
                "solves its caps without them from here"
            )
            continue  # the same cap, solved without the classes JAX does not keep
        best, best_sol = att, sol
        if sol is None:  # the smallest plan: fits or not, nothing smaller to try
            if overrules_model(att.verification, budget):
                best_sol = unsolved(att.assignment, "FEASIBLE", att.prediction.step_s, g, budget)
                best_sol = dataclasses.replace(best_sol, state_on_host=att.state_on_host)
                infeasible = None
                model_overruled = True
            break
        infeasible = None
        ver = att.verification
        if holds(att, budget):
            break
        over.append(att)
        k = _below(k, att)
        if ver.compiled_device_bytes is None or not ver.exact:
            # Without an exact figure the model judges: no plan predicted over the budget
            # holds (holds()), so the caps above it are skipped as the walk would reject them.
            k = min(k, grid_index_at_most(budget))
        overshoot = (ver.compiled_device_bytes or 0) - limit_of(ver, budget)
        if len(over) >= walk_limit or overshoot > reach(budget, opts.fill_rounds):
            # Past the walk's own compiles, or where a plan compiled over the budget by more
            # than the walk's reach (the model is off by more than the band it walks), the
            # model is corrected by this plan's measured error: the plans between, predicted
            # over by less than that error, are skipped (few compiles where the frontier is
            # dense or the model far off), and bisected afterwards with the compiles left
            # (_refine). Outside the guarantee: the report says so.
            err = (ver.compiled_device_bytes or 0) - att.prediction.peak_bytes
            jump_top = k
            k = min(k, grid_index_at_most(max(1, limit_of(ver, budget) - err)))
            notes.append("the walk jumped by the compiler's measured error")
        if k < 0:
            break
    else:
        notes.append(f"the walk stopped after {MAX_SOLVES} solves")
    if jump_top is not None and best_sol is not None and holds(best, budget) and jump_top > k:
        refined = _refine(ctx, log, compiled, limit - len(compiled), k, jump_top, cost, best)
        if refined is not None:
            best, best_sol = refined
    if best is not None and best_sol is not None:
        best = best.solved(best_sol, cost, graph_used)
    return Standing(
        best=best,
        solution=best_sol,
        cost=cost,
        graph=graph_used,
        infeasible=infeasible,
        model_overruled=model_overruled,
        correction=budget - cap,
        fill_why=_why(ctx, best, best_sol, over, budget, graph_used, cost),
        walk_note="; ".join(dict.fromkeys(notes)),
    )


def _refine(ctx: Context, log: Attempts, compiled: dict, left: int, lo: int, hi: int, cost, best):
    """After a jump landed on a plan that fits (at cap index ``lo``), the caps it skipped
    (up to ``hi``) bisected with the compiles ``left``: the fastest plan among them that
    holds, with its solve, or None. As the jump, outside the walk's guarantee."""
    budget, opts, found = ctx.usable, ctx.options, None
    g = with_forced(ctx.graph, log.not_kept, NOT_KEPT_WHY)
    while hi > lo and left > 0:
        mid = (lo + hi + 1) // 2
        t = time.perf_counter()
        try:
            sol = ctx.solves(g, cost, grid_cap(mid), opts.solver)
        except InfeasibleBudgetError:
            return found
        ctx.timings.timed("solve (walk, between the jump's caps)", t)
        key = (normalize(g, cost, sol.assignment), sol.state_on_host)
        att = compiled.get(key)
        if att is None:
            att = attempt(
                ctx.subject,
                ctx.timings,
                ctx.trace,
                g,
                cost,
                key[0],
                budget,
                state=ctx.state,
                state_on_host=key[1],
                label="walk, between the jump's caps",
            )
            compiled[key] = att
            log.record(att, budget - grid_cap(mid), budget, "walk")
            left -= 1
            if att.not_kept and not set(att.not_kept) <= log.not_kept:
                return found
        if holds(att, budget):
            lo = mid
            if att.prediction.step_s < best.prediction.step_s:
                best, found = att, (att, sol)
        else:
            hi = min(mid - 1, _below(mid, att))
    return found


def holds(att: Attempt, budget: int) -> bool:
    """Whether the walk stops at ``att``: its compiled figure fits, and where that figure is
    an estimate (XLA:CPU keeps host arrays in its one memory) the model's prediction fits
    too: an estimate does not overrule the model for a plan predicted over the budget; with
    no compiled figure, the prediction alone. Each widens with the budget, so the walk stays
    monotone."""
    ver = att.verification
    if ver.compiled_device_bytes is None:  # not compiled (the user's build=): the model judges
        return att.prediction.peak_bytes <= budget
    return fits(ver, budget) and (ver.exact or att.prediction.peak_bytes <= budget)


def _below(k: int, att: Attempt) -> int:
    """The next cap of the walk after cap ``k``'s plan ``att`` compiled over: the largest grid
    cap below its predicted peak. The caps skipped all give that same plan: it is the
    solver's lexicographic optimum (time, host bytes, peak, residuals) among the plans
    within the higher cap, so also among the fewer within any lower cap that still holds it."""
    return min(k - 1, grid_index_at_most(att.prediction.peak_bytes - 1))


def _start(ctx: Context, threads, g, cost, candidate, on_host, *, first: bool):
    """The first plan's verify compile, started beside the stock policies predicted faster
    than it (or within PREFETCH_MARGIN), whose compiles start now too: they are compared
    with the answer at the end."""
    opts = ctx.options
    if not (first and opts.compare_stock and opts.verify_compile):
        return None
    pre = None if on_host else start_plan_compile(threads, g, cost, candidate)
    step = (1 + PREFETCH_MARGIN) * evaluate(cost, g, candidate).step_s
    ctx.stock.prefetch(
        [
            b.name
            for b in evaluate_baselines(g, cost, ctx.usable)
            if b.applicable
            and b.name in STOCK
            and b.prediction.step_s < step
            and not offload_estimate(b.name, ctx.hardware.platform)
        ],
        ctx.timings,
        g,
        cost,
    )
    return pre


def _why(ctx: Context, best, sol, over, budget: int, g, cost) -> str:
    """Why the answer leaves what it leaves of the budget (the report's "budget use")."""
    if best is None or sol is None or best.verification.compiled_device_bytes is None:
        return ""
    if not holds(best, budget):
        return ""
    r = reach(budget, ctx.options.fill_rounds)
    if over:
        n = len(over)
        figures = [a.verification.compiled_device_bytes for a in over]
        figures = [b for b in figures if b is not None and b > budget]
        smallest = f" (the smallest compiled to {fmt_bytes(min(figures))})" if figures else ""
        return (
            f"the {n} faster plan{'s' if n != 1 else ''} the walk tried did not fit the "
            f"budget{smallest}"
        )
    if sol.objective_s <= _fastest_step(ctx, g, cost):
        return "the fastest plan the model has at any budget"
    if r == 0:
        return "fill_rounds=0: no plan predicted over the budget is tried"
    return (
        f"the fastest plan predicted within the budget's reach ({fmt_bytes(r)} over it: "
        "the model errs both ways); the faster ones are predicted over that"
    )


def _fastest_step(ctx: Context, g, cost) -> float:
    """The model's fastest step at any budget (the solver's plan for more bytes than any
    plan holds: full remat's peak plus every region input and three times every candidate
    of every trip: residuals once, a working set at most twice)."""
    full = evaluate(cost, g, Assignment.of({}))
    every = sum(
        rg.region.multiplicity
        * (
            sum(3 * c.nbytes for c in rg.region.candidates)
            + sum(i.nbytes for i in rg.region.inputs)
        )
        for rg in g.regions
    )
    try:
        sol = ctx.solves(g, cost, full.peak_bytes + every, ctx.options.solver)
    except InfeasibleBudgetError:
        return math.inf
    return sol.objective_s
