"""One budget, start to answer: the steps in order, each over the budget's :class:`Context`
and its log of attempts.

    fit rounds -> probes (where the model fit nothing) -> fill rounds (where the plan leaves
    budget unused) -> the stock comparison -> the answer (the plan or a stock policy) or the
    refusal -> the numerics check

Where the budget places train state (``Context.state``, train_state.py), every step runs on
the model with the state's leaves priced, a candidate that moves state is compiled as
applied (attempt.py), and the answer carries the state part (``plan.state``).

The Planner runs :func:`plan_budget` again where the numerics check isolated classes whose
saving changes the math (they are then recomputed).
"""

from __future__ import annotations

import dataclasses
import warnings

from planner._src.cost import evaluate
from planner._src.cost.baselines import stock_assignment
from planner._src.emit.emit import emit
from planner._src.errors import PlanWarning
from planner._src.planning.attempt import CompileThreads
from planner._src.planning.choose import choose
from planner._src.planning.context import (
    Attempt,
    Attempts,
    Context,
    restatus,
    round_of,
    unsolved,
)
from planner._src.planning.fill import fill_rounds
from planner._src.planning.fit import Standing, fit_rounds
from planner._src.planning.groups import baselines_of
from planner._src.planning.probes import probe_frontier
from planner._src.planning.refusal import refusal
from planner._src.planning.train_state import (
    is_state_baseline,
    state_baseline_attempt,
    state_part,
)
from planner._src.results.plan import Plan


def plan_budget(ctx: Context, threads: CompileThreads, base) -> Plan:
    """The answer for ``ctx``'s budget (``base``: the Planner's merged trace and graph, on
    which a refusal compiles the stock policies); raises InfeasibleBudgetError where
    neither a plan nor a stock policy fits."""
    opts = ctx.options
    log = Attempts()
    s = fit_rounds(ctx, log, threads)
    if (s.infeasible is not None or s.model_overruled) and opts.verify_compile:
        s = probe_frontier(ctx, log, s)
    if (
        s.best is not None
        and s.solution is not None
        and s.infeasible is None
        and opts.verify_compile
    ):
        s = fill_rounds(ctx, log, s)
    baselines = baselines_of(ctx, s.graph, s.cost)
    choice = choose(ctx, s, baselines)
    if choice.stock is not None:
        # the stock policies compiled while choosing judge their own fit
        baselines = baselines_of(ctx, s.graph, s.cost)
        return stock_plan(ctx, log, s, choice.stock, choice.why, baselines)
    if s.infeasible is not None or s.best is None or s.solution is None:
        raise refusal(ctx, s, *base)
    return planner_plan(ctx, log, s, baselines, choice.plan_why)


def _plan(ctx: Context, log: Attempts, s: Standing, att: Attempt, solution, **fields) -> Plan:
    if ctx.state is not None:
        fields["state"] = state_part(
            ctx, s.graph, s.cost, att.assignment, att.state_on_host, att.state_check
        )
    return Plan(
        budget_bytes=ctx.budget.requested,
        hardware=ctx.hardware,
        trace=ctx.trace,
        graph=s.graph,
        cost=s.cost,
        solution=solution,
        prediction=att.prediction,
        emitted=att.emitted,
        verification=att.verification,
        rounds=tuple(log.rounds),
        timings=tuple(ctx.timings),
        headroom_bytes=ctx.budget.headroom,
        **fields,
        **ctx.subject.plan_fields(),
    )


def planner_plan(ctx: Context, log: Attempts, s: Standing, baselines, plan_why: str) -> Plan:
    """The planner's own plan, numerics checked."""
    best = s.best
    plan = _plan(
        ctx,
        log,
        s,
        best,
        dataclasses.replace(
            s.solution, assignment=best.assignment, state_on_host=best.state_on_host
        ),
        baselines=baselines,
        choice="planner",
        choice_why=plan_why,
        fill_why=s.fill_why,
    )
    return ctx.numerics.check(plan, best.compiled, ctx.timings)


def stock_plan(ctx: Context, log: Attempts, s: Standing, name: str, why: str, baselines) -> Plan:
    """The plan that is stock policy ``name``: its own policy object, verified (the compile
    made while comparing is reused), numerics checked. A stock policy with the whole
    optimizer state on the host (MaxText's flag, train_state.py) carries that placement."""
    graph, cost, budget = s.graph, s.cost, ctx.usable
    ver = ctx.stock.verification(name)
    if is_state_baseline(name):
        att, whole = state_baseline_attempt(ctx, name, graph, cost)
        att = dataclasses.replace(att, verification=restatus(att.verification, budget))
        ctx = dataclasses.replace(ctx, state=whole)
        s = dataclasses.replace(s, cost=att.cost)
    elif ver is not None:
        a = stock_assignment(graph, name)
        emitted = emit(a, {c.key: c.name for c in graph.classes}, ctx.hardware, stock=name)
        att = Attempt(
            a,
            evaluate(cost, graph, a),
            emitted,
            restatus(ver, budget),
            (),
            ctx.stock.compiled(name),
        )
    else:
        att = ctx.stock.attempt(name, ctx.timings, ctx.trace, graph, cost, budget)
    sol = unsolved(att.assignment, "STOCK", att.prediction.step_s, graph, budget)
    sol = dataclasses.replace(sol, state_on_host=att.state_on_host)
    log.rounds.append(round_of(att, cost.correction_bytes, budget, "stock"))
    plan = _plan(ctx, log, s, att, sol, baselines=baselines, choice=name, choice_why=why)
    plan = ctx.numerics.check(plan, att.compiled, ctx.timings)
    if plan.numerics is not None and plan.numerics.checked and not plan.numerics.ok:
        warnings.warn(plan.numerics.detail, PlanWarning, stacklevel=6)
    return plan


def warn_unfit(plan: Plan, budget: int) -> None:
    """A PlanWarning where the returned plan compiled over its budget or failed a check."""
    ver = plan.verification
    if ver.compiled_device_bytes is not None and ver.compiled_device_bytes > budget:
        warnings.warn(
            f"After {len(plan.rounds)} rounds the compiled step still needs "
            f"{ver.compiled_device_bytes / 1e9:.3f} GB against a budget of {budget / 1e9:.3f} "
            "GB, and no stock policy fits either. The plan is returned for inspection; do "
            "not run it at this budget. Raise hbm_gb or max_rounds.",
            PlanWarning,
            stacklevel=5,
        )
    failed = [c for c in ver.checks if not c.ok]
    if failed:
        warnings.warn(
            "Verification checks failed: " + "; ".join(c.detail for c in failed),
            PlanWarning,
            stacklevel=5,
        )
