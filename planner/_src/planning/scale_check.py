"""The third compile: judging a small working-set scale before any budget is planned.

The memory model's working-set scale omega is measured from the two anchors (full remat,
save everything; cost.build_cost_model). A scale below ``SMALL_SCALE_BELOW`` fits those two
whether the compiler really holds almost none of the modelled working set (XLA:CPU on
scanned layers) or the model's structure is wrong (tests/test_target.py's counterfactual).
A plan between the anchors tells them apart: :func:`check_small_scale` solves the model's
fastest plan at the anchors' midpoint (a cap of the frontier walk's grid, so a walk that
meets the plan again finds its compile in the Planner's memo), compiles it, and keeps the
scale whose model predicted it closer (``Trace.scale_check``). The check depends on the step
alone, never on a budget, so the walk stays monotone in the budget.

Measured: benchmarks/results/memory-model-omega-2026-12-07.md.
"""

from __future__ import annotations

import dataclasses

from planner._src.cost import build_cost_model, evaluate
from planner._src.errors import InfeasibleBudgetError, PlannerError
from planner._src.graph import LivenessGraph
from planner._src.planning.attempt import attempt
from planner._src.planning.context import Solves, Subject, Timings, normalize
from planner._src.planning.walk import grid_cap, grid_index_at_most
from planner._src.types import ScaleCheck, Trace

__all__ = ["check_small_scale"]


def check_small_scale(
    subject: Subject, solves: Solves, timings: Timings, trace: Trace, graph: LivenessGraph
) -> ScaleCheck | None:
    """The scale check of ``trace`` (module docstring), or None where none is needed (the
    anchors' scale is not small), none can be made (verify compiles off, no save-everything
    anchor) or the compile gave no exact figure: the model then keeps scale 1."""
    if not subject.options.verify_compile or trace.anchor_saved is None:
        return None
    one = build_cost_model(trace, graph, subject.hardware, allow_offload=subject.offload)
    if one.unconfirmed_scale is None:
        return None
    small = build_cost_model(
        trace, graph, subject.hardware, allow_offload=subject.offload, small_scale=True
    )
    middle = (trace.anchor.device_bytes + trace.anchor_saved.device_bytes) / 2
    cap = grid_cap(grid_index_at_most(middle))
    subject.say(
        f"compiling a third plan to judge the working-set scale {one.unconfirmed_scale:.3g} "
        "the anchors measured"
    )
    try:
        sol = solves(graph, small, cap, subject.options.solver)
    except InfeasibleBudgetError:
        return None
    if sol.state_on_host:
        return None
    plan = normalize(graph, small, sol.assignment)
    try:
        # at XLA's default where the numerics check runs: the plan at the anchors' midpoint is
        # often a mid budget's answer, which the check then runs from the memo
        att = attempt(subject, timings, trace, graph, small, plan, cap, label="scale check")
    except PlannerError:
        return None
    ver = att.verification
    if ver.compiled_device_bytes is None or not ver.exact:
        return None
    return ScaleCheck(
        scale=one.unconfirmed_scale,
        cap_bytes=cap,
        compiled_bytes=ver.compiled_device_bytes,
        predicted_small=evaluate(small, graph, plan).peak_bytes,
        predicted_one=evaluate(one, graph, plan).peak_bytes,
        compiler=subject.compiler.description,
    )


def with_check(trace: Trace, check: ScaleCheck | None) -> Trace:
    """``trace`` carrying ``check`` (unchanged where there is none)."""
    return trace if check is None else dataclasses.replace(trace, scale_check=check)
