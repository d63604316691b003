"""Fill rounds: use the budget the verify compile shows unused.

A verified plan that compiles more than :func:`fill_slack` under its budget, where the model
has a faster plan with more memory, is followed by at most ``PlanOptions.fill_rounds``
rounds, each a real compile: the model is corrected by the last compile's measured error
(``correction += compiled - predicted``, negative where the model over-predicted; cost.py)
and solved again. A new plan replaces the verified one only if it verifies within the
budget and is predicted faster, so the answer never verified over the budget and is never
predicted slower than the first verified plan.
"""

from __future__ import annotations

import dataclasses
import math
import time

from planner._src.cost import evaluate
from planner._src.errors import InfeasibleBudgetError
from planner._src.graph import class_key
from planner._src.planning.attempt import attempt
from planner._src.planning.context import (
    NOT_KEPT_WHY,
    Attempts,
    Context,
    faster,
    normalize,
    round_of,
    with_forced,
)
from planner._src.planning.fit import Standing
from planner._src.solve import check_solution
from planner._src.types import Assignment, Status
from planner._src.units import GB, fmt_bytes

# A verified plan leaving more than this of the budget unused, where the model has a faster
# plan, starts fill rounds: 2% of the budget (the largest-budget plans should compile within
# 5% of it); 1 MB: a floor, so that small CPU models with budgets of tens of MB do not spend
# a solve and a compile on a fraction of a megabyte (a choice, not a measurement).
FILL_FRACTION = 0.02
FILL_MIN_BYTES = 1_000_000


def fill_slack(budget: int) -> int:
    """Bytes of ``budget`` a verified plan may leave unused before fill rounds try a faster
    plan: ``max(FILL_FRACTION * budget, FILL_MIN_BYTES)``."""
    return max(int(FILL_FRACTION * budget), FILL_MIN_BYTES)


def within_margin(slack: int) -> str:
    return (
        f"within the fill margin, max({FILL_FRACTION:.0%} of the budget, "
        f"{fmt_bytes(FILL_MIN_BYTES)}) = {fmt_bytes(slack)}"
    )


def fill_rounds(ctx: Context, log: Attempts, s: Standing) -> Standing:
    """``s`` with the fastest plan the fill rounds verified within the budget, and
    ``fill_why``: why the answer leaves what it leaves (the report's "budget use" line).
    Each compile is a round with purpose "fill"."""
    best, sol, cost, g_best = s.best, s.solution, s.cost, s.graph
    opts, budget = ctx.options, ctx.usable
    ver = best.verification

    def done(why: str) -> Standing:
        return dataclasses.replace(
            s, best=best, solution=sol, cost=cost, graph=g_best, fill_why=why
        )

    if ver.compiled_device_bytes is None:
        return done("")
    if not ver.ok:
        what = ver.status if ver.status != Status.OK else "a verification check failed"
        return done(f"no fill rounds: {what}")
    slack = fill_slack(budget)
    if budget - ver.compiled_device_bytes <= slack:
        return done(within_margin(slack))
    if opts.fill_rounds == 0:
        return done("fill_rounds=0: no rounds to use it")
    start = len(log.rounds)
    tried = {(best.assignment, best.state_on_host)}
    over: int | None = None  # the smallest compile of a faster plan over the budget
    last, last_cost = best, cost
    not_kept = set(log.not_kept)  # learned here for the fill rounds only
    why = ""
    n = 0
    while True:
        err = last.verification.compiled_device_bytes - last.prediction.peak_bytes
        correction = last_cost.correction_bytes + err
        t = time.perf_counter()
        cost_k = ctx.cost_model(ctx.trace, ctx.graph, correction)
        g = with_forced(ctx.graph, not_kept, NOT_KEPT_WHY)
        ctx.say(
            f"{(budget - best.verification.compiled_device_bytes) / GB:g} GB of "
            f"{budget / GB:g} GB unused: solving with the model corrected by "
            f"{correction / GB:+g} GB"
        )
        try:
            solved = ctx.solves(g, cost_k, budget, opts.solver)
            check_solution(g, cost_k, solved)
        except InfeasibleBudgetError:
            solved = None
        ctx.timings.timed(f"solve (fill round {n + 1})", t)
        a = None if solved is None else normalize(g, cost_k, solved.assignment)
        on_host = frozenset() if solved is None else solved.state_on_host
        step = math.inf if a is None else evaluate(cost_k, g, a, state_on_host=on_host).step_s
        if a is None or (a, on_host) in tried or not faster(step, best.prediction.step_s):
            why = _stop_why(ctx, g_best, cost, best, over, err)
            break
        if n >= opts.fill_rounds:
            why = (
                f"fill_rounds={opts.fill_rounds} rounds used "
                f"({len(log.rounds) - start} compiles), a faster plan left untried"
                + (
                    ""
                    if over is None
                    else f"; a faster plan compiled to {fmt_bytes(over)}, over the budget"
                )
            )
            break
        n += 1
        tried.add((a, on_host))
        att = attempt(
            ctx.subject,
            ctx.timings,
            ctx.trace,
            g,
            cost_k,
            solved.assignment,
            budget,
            label=f"a faster plan (fill round {n})",
            state=ctx.state,
            state_on_host=on_host,
        )
        log.rounds.append(round_of(att, correction, budget, "fill", not_kept))
        if att.not_kept and not set(att.not_kept) <= not_kept:
            not_kept |= set(att.not_kept)  # solve again without them, same correction
            continue
        v = att.verification
        if v.compiled_device_bytes is None:
            break
        if v.ok and faster(att.prediction.step_s, best.prediction.step_s):
            best, sol, cost, g_best = att.solved(solved, cost_k, g), solved, cost_k, g
            if budget - v.compiled_device_bytes <= slack:
                why = within_margin(slack)
                break
        elif v.compiled_device_bytes > budget:
            over = v.compiled_device_bytes if over is None else min(over, v.compiled_device_bytes)
        last, last_cost = att, cost_k
    return done(why)


def _stop_why(ctx: Context, g, cost, best, over, err) -> str:
    """Why no faster plan was tried (the corrected model's answer is not faster, or was
    compiled already): the model has none at any budget, or a faster one did not fit."""
    if over is not None:
        return f"the next faster plan compiled to {fmt_bytes(over)}, over the budget"
    if not faster(fastest_step(ctx, g, cost), best.prediction.step_s):
        needed = evaluate(cost, g, Assignment.of({c.key: "save" for c in g.classes})).regions
        kept = evaluate(cost, g, best.assignment).regions
        if all(
            best.assignment.get(class_key(rg.region, c)) == "save"
            for rg, rp, rk in zip(g.regions, needed, kept)
            for c in rg.region.candidates
            if rp.needed[c.index] or rk.needed[c.index]
        ):
            return "every tensor the backward pass reads is saved"
        return "the fastest plan the model has at any budget"
    if err < 0:
        return (
            f"no faster plan fits the model corrected by its {fmt_bytes(-err)} "
            "over-prediction of this plan"
        )
    return "no faster plan fits the model (it does not over-predict this plan)"


def fastest_step(ctx: Context, g, cost) -> float:
    """The model's fastest step at any budget (cost.evaluate of the solver's plan for more
    bytes than any plan holds: full remat's peak, which holds the fixed bytes, plus every
    region input and three times every candidate of every trip: residuals once, a working
    set at most twice, cost.WORKING_SET_SCALE_BOUNDS)."""
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
    return evaluate(cost, g, normalize(g, cost, sol.assignment)).step_s
