"""Layer groups: whether each checkpoint call site gets its own decisions (one policy per call
site, ``plan.policies``) or all share one. Only where the user's code can pass the call
sites different policies, unless asked for with ``layer_groups=True``; and only where it
pays: deciding per call site must predict a step faster by more than ``group_gain``."""

from __future__ import annotations

from planner._src.cost import build_cost_model, evaluate
from planner._src.cost.baselines import evaluate_baselines
from planner._src.errors import InfeasibleBudgetError
from planner._src.planning.context import Solves, Subject, normalize
from planner._src.planning.train_state import state_baselines
from planner._src.results.plan import UNIFORM
from planner._src.types import Baseline, Trace
from planner._src.units import GB


def groups_possible(sites: Trace, layer_groups: bool | None) -> bool:
    """Whether per-call-site decisions are candidates (``PlanOptions.layer_groups``): with
    None, only call sites the user's code can give different policies (trace.site_key)."""
    if layer_groups is False or len(sites.regions) <= 1:
        return False
    if layer_groups is True:
        return True
    keys_by_body: dict[str, set[str]] = {}
    for r in sites.regions:
        keys_by_body.setdefault(r.body, set()).add(r.site_key)
    return any(len(keys) > 1 for keys in keys_by_body.values())


def groups_pay(subject: Subject, solves: Solves, grouped, budget: int) -> bool:
    """Whether deciding each call site separately predicts a faster step than one decision
    for every call site, on the same per-call-site model (``grouped``: its trace and
    graph)."""
    tr, graph = grouped
    subject.say(f"solving per layer group and uniform for {budget / GB:g} GB")
    cost = build_cost_model(tr, graph, subject.hardware, allow_offload=subject.offload)
    opts = subject.options.solver
    try:
        per_group = solves(graph, cost, budget, opts)
    except InfeasibleBudgetError:
        return False
    try:
        uniform = solves(graph, cost, budget, opts, uniform=True)
    except InfeasibleBudgetError:
        return True  # only a per-group plan fits the model
    return per_group.objective_s < uniform.objective_s * (1 - subject.options.group_gain)


def uniform_baseline(subject: Subject, solves: Solves, graph, cost, budget) -> tuple[Baseline, ...]:
    """For a per-group plan: the best plan that gives every group the same decisions, on the
    same model, so the report shows what deciding per group bought."""
    if all(c.group is None for c in graph.classes):
        return ()
    try:
        sol = solves(graph, cost, budget, subject.options.solver, uniform=True)
    except InfeasibleBudgetError:
        return ()
    a = normalize(graph, cost, sol.assignment)
    p = evaluate(cost, graph, a)
    return (
        Baseline(
            name=UNIFORM,
            assignment=a,
            prediction=p,
            applicable=True,
            fits=p.peak_bytes <= budget and p.host_bytes <= cost.host_cap_bytes,
        ),
    )


def baselines_of(ctx, graph, cost) -> tuple[Baseline, ...]:
    """The stock policies on the model (the compiled ones judged by their figure), the
    uniform plan where the plan decides per group, and where the budget places train state,
    the stock policies with the whole optimizer state on the host (train_state.py)."""
    stock = evaluate_baselines(graph, cost, ctx.usable, compiled=dict(ctx.stock.compiled_bytes))
    return (
        stock
        + uniform_baseline(ctx.subject, ctx.solves, graph, cost, ctx.usable)
        + state_baselines(ctx, graph, cost, stock)
    )
