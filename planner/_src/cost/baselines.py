"""The policies users run today, as assignments on the same graph and the same cost model.

JAX's stock policies and MaxText's named presets (planner._src.policies.STOCK) decide every
candidate exactly as JAX calls them (the trace stage recorded each decision while the
equation was at hand), and are then predicted with ``cost.evaluate``: the planner's answer
and the stock answers go through one model and one result type. Where the session has
compiled a stock policy, its ``fits`` is the compiler's verdict, not the model's.
"""

from __future__ import annotations

from collections.abc import Mapping

from planner._src.cost.predict import evaluate
from planner._src.graph import NAMES_ONLY_WHY, LivenessGraph, class_key
from planner._src.policies import DOTS, STOCK
from planner._src.types import Assignment, Baseline, CostModel
from planner._src.xla import adapter

__all__ = [
    "Baseline",
    "evaluate_baselines",
    "policy_assignment",
    "stock_assignment",
    "user_assignment",
]


def stock_assignment(graph: LivenessGraph, name: str) -> Assignment:
    """What stock policy ``name`` decides for each class (recorded by the trace stage)."""
    out: dict[str, str] = {}
    for rg in graph.regions:
        for c in rg.region.candidates:
            out.setdefault(class_key(rg.region, c), c.stock_decision(name))
    return Assignment.of(out)


def user_assignment(graph: LivenessGraph) -> Assignment:
    """What the policies the user's code passed decide for each class."""
    out: dict[str, str] = {}
    for rg in graph.regions:
        for c in rg.region.candidates:
            out.setdefault(class_key(rg.region, c), c.user_decision)
    return Assignment.of(out)


def policy_assignment(graph: LivenessGraph, step_fn, args, policy) -> Assignment:
    """What any checkpoint policy decides for each class, read by tracing the step with it
    (the calls JAX makes: xla.adapter.decisions_of)."""
    got = adapter.decisions_of(step_fn, args, policy)
    out: dict[str, str] = {}
    for rg in graph.regions:
        for c in rg.region.candidates:
            out.setdefault(class_key(rg.region, c), got.get(c.signature, "remat"))
    return Assignment.of(out)


def applicable(
    graph: LivenessGraph, cost: CostModel, name: str, prediction, assignment=None
) -> bool:
    """Whether stock policy ``name`` means something for this step on this hardware, and
    (given its ``assignment``) keeps no class the plan must recompute because it is outside
    ``PlanOptions.decide_names`` (a policy the user's framework cannot express)."""
    stock = STOCK[name]
    if assignment is not None:
        outside = {c.key for c in graph.classes if c.forced_why == NAMES_ONLY_WHY}
        if any(d != "remat" and k in outside for k, d in assignment.decisions):
            return False
    present = {c.name for c in graph.classes if c.name}
    # Offloading is not applicable where it is not allowed, nor where XLA cannot compile
    # it: a region under scan(unroll > 1) whose backward pass would read an offloaded tensor.
    blocked = any(
        rg.region.scan_unroll > 1 and rp.host_residual_bytes + rp.invariant_host_bytes
        for rg, rp in zip(graph.regions, prediction.regions)
    )
    return (
        (cost.allow_offload or not stock.offloads)
        and not blocked
        and (not stock.needs_names or bool(present & set(DOTS)))
    )


def evaluate_baselines(
    graph: LivenessGraph,
    cost: CostModel,
    usable_bytes: float,
    names: tuple[str, ...] | None = None,
    compiled: Mapping[str, int] | None = None,
) -> tuple[Baseline, ...]:
    """Every stock policy (or ``names``) through the cost model. ``compiled``: name -> the
    verifying compiler's device bytes for the stock policies the session compiled; those
    fit when the compiler says so."""
    compiled = compiled or {}
    out = []
    for name in names or tuple(STOCK):
        a = stock_assignment(graph, name)
        p = evaluate(cost, graph, a)
        ok = applicable(graph, cost, name, p, a)
        got = compiled.get(name)
        peak = p.peak_bytes if got is None else got
        fits = peak <= usable_bytes and p.host_bytes <= cost.host_cap_bytes
        out.append(
            Baseline(
                name=name,
                assignment=a,
                prediction=p,
                fits=fits and ok,
                applicable=ok,
                compiled_device_bytes=got,
            )
        )
    return tuple(out)
