"""One budget, start to answer: the steps in order, each over the budget's :class:`Context`
and its log of attempts.

    the frontier walk (walk.py: the model's plans at a fixed grid of caps, from a little over
    the budget down, compiled until one fits) -> probes (where the model fit nothing) -> the
    stock comparison -> the answer (the plan or a stock policy) or the refusal -> the
    numerics check

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
from planner._src.errors import PlanWarning, user_stacklevel
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
from planner._src.planning.groups import baselines_of
from planner._src.planning.probes import probe_frontier
from planner._src.planning.refusal import refusal
from planner._src.planning.train_state import (
    check_flag_row,
    is_state_baseline,
    state_baseline_attempt,
    state_part,
)
from planner._src.planning.walk import Standing, walk_frontier
from planner._src.results.plan import Plan
from planner._src.types import Status
from planner._src.units import fmt_pair
from planner._src.verify.kept import CHECK_KEPT


def plan_budget(ctx: Context, threads: CompileThreads, base) -> Plan:
    """The answer for ``ctx``'s budget (``base``: the Planner's merged trace and graph, on
    which a refusal compiles the stock policies); raises InfeasibleBudgetError where
    neither a plan nor a stock policy fits."""
    opts = ctx.options
    log = Attempts()
    s = walk_frontier(ctx, log, threads)
    if (s.infeasible is not None or s.model_overruled) and opts.verify_compile:
        s = probe_frontier(ctx, log, s)
    baselines = baselines_of(ctx, s.graph, s.cost)
    choice = choose(ctx, s, baselines)
    # the stock policies compiled while choosing (or as the row compared) judge their fit
    baselines = baselines_of(ctx, s.graph, s.cost)
    answer = s.best if choice.stock is None and s.infeasible is None else None
    if answer is not None and check_flag_row(ctx, s.graph, s.cost, baselines, answer.state_on_host):
        baselines = baselines_of(ctx, s.graph, s.cost)
    if choice.stock is not None:
        return stock_plan(ctx, log, s, choice.stock, choice.why, baselines)
    if s.infeasible is not None or s.best is None or s.solution is None:
        refused = refusal(ctx, s, *base)
        if not_the_gpus_compiler(ctx) and opts.verify_compile:
            return estimate_plan(ctx, log, s, baselines, refused)
        raise refused
    return planner_plan(ctx, log, s, baselines, choice.plan_why)


def not_the_gpus_compiler(ctx: Context) -> bool:
    """Whether the figures come from a compiler that is not the profile's GPU's (XLA:CPU for
    ``hardware="h200"`` without the CUDA plugin): a figure that cannot refuse a budget."""
    c = ctx.subject.compiler
    return not c.exact and c.gpu_name is not None


def estimate_plan(ctx: Context, log: Attempts, s: Standing, baselines, refused) -> Plan:
    """Where nothing fits by the figures of a compiler that is not the GPU's, no refusal: the
    smallest program (full remat, nothing_saveable), its status "compiled, unverified", and
    what the other compiler said, that its figure is not the GPU's, and how to get the
    GPU's (XLA:CPU materializes what XLA:GPU fuses: the attention scores of the H200-sized
    Llama step took 101 GB on XLA:CPU, its full remat 15.1 GiB on the H200; issue 41)."""
    c = ctx.subject.compiler
    said = str(refused).split("\n", 1)[0]
    why = (
        f"not verified for the GPU: the figures are {c.description}'s, not the GPU's own "
        f"compiler's, so they cannot refuse this budget (by them: {said}). Returned: full "
        f"remat (nothing_saveable), the smallest program. To get the GPU's figures: "
        f"{c.how_to_get_exact}"
    )
    plan = stock_plan(ctx, log, s, "nothing_saveable", why, baselines)
    ver = dataclasses.replace(plan.verification, status=Status.UNVERIFIED, note=why)
    return dataclasses.replace(plan, verification=ver)  # warn_unfit warns: not verified


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
        **{**ctx.subject.plan_fields(), "compiler_margin": ctx.budget.margin},
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
        walk_note=s.walk_note,
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
    att = dataclasses.replace(att, verification=judged_by_jax(att.verification, name))
    sol = unsolved(att.assignment, "STOCK", att.prediction.step_s, graph, budget)
    sol = dataclasses.replace(sol, state_on_host=att.state_on_host)
    log.rounds.append(round_of(att, cost.correction_bytes, budget, "stock"))
    plan = _plan(ctx, log, s, att, sol, baselines=baselines, choice=name, choice_why=why)
    return ctx.numerics.check(plan, att.compiled, ctx.timings)  # warn_unfit warns


def judged_by_jax(ver, name: str):
    """A stock answer's verification with its kept check judged by what JAX keeps under
    that policy: the answer is JAX's own policy object, so what JAX keeps is the answer;
    a class count that differs is the memory model's reading of the policy (the Mamba case
    of issue 45: everything_saveable, compiled within budget and numerics ok, "failed" a
    16,384 B/layer count check). The difference stays in the check's words."""
    checks = tuple(
        c
        if c.ok or c.name != CHECK_KEPT
        else dataclasses.replace(
            c,
            ok=True,
            detail=(
                f"{c.detail} (the answer is JAX's own {name}: what JAX keeps under it is the "
                "answer; the memory model's count of that policy differs, and the compiled "
                "figure, not the count, is the judge)"
            ),
        )
        for c in ver.checks
    )
    return dataclasses.replace(ver, checks=checks)


UNVERIFIED_FIX = (
    "Fix: verify it on the GPU's own compiler before training at this budget: plan with the "
    'GPU\'s profile (hardware="h200") where JAX has the CUDA plugin (pip install -e '
    '".[cuda]"; it compiles for the GPU without one, JAX_PLATFORMS=cpu), or on the GPU.'
)


def warn_unfit(plan: Plan, budget: int) -> None:
    """A PlanWarning where the returned plan compiled over its budget, failed a check, or
    is not verified (status "compiled, unverified": a check the compiler cannot make);
    each points at the user's call of the planner (errors.user_stacklevel)."""
    ver = plan.verification
    if ver.compiled_device_bytes is not None and ver.compiled_device_bytes > budget:
        need, have = fmt_pair(ver.compiled_device_bytes, budget)
        warnings.warn(
            f"After {len(plan.rounds)} rounds the compiled step still needs "
            f"{need} against a budget of {have}, and no stock policy fits either. The plan is returned for inspection; do "
            "not run it at this budget. Raise hbm_gb or max_rounds.",
            PlanWarning,
            stacklevel=user_stacklevel(),
        )
    failed = [c for c in ver.checks if not c.ok]
    if failed:
        warnings.warn(
            "Verification checks failed: "
            + "; ".join(c.detail for c in failed)
            + ".\nWhy: a failed check means the plan may not do what its figures say (the "
            "status line of plan.report() names the check).\nFix: read plan.report(); do not "
            "train with this plan until the check passes (plan again, e.g. with "
            "allow_offload=False, or report the step).",
            PlanWarning,
            stacklevel=user_stacklevel(),
        )
    if ver.status == Status.UNVERIFIED:
        said = [f"{c.name}: {c.detail}" for c in ver.checks if getattr(c, "unverified", False)]
        warnings.warn(
            'The plan is compiled but not verified within its budget (status "compiled, '
            f'unverified"): {"; ".join(said) or ver.note}\nWhy: a plan is within budget only '
            f"when the verifying compiler's figure says so, and {ver.compiler or ver.backend} "
            "cannot say it for this plan; its figures are not the GPU's.\n" + UNVERIFIED_FIX,
            PlanWarning,
            stacklevel=user_stacklevel(),
        )
