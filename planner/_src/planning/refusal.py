"""The refusal: when nothing fits, the teaching error that names the smallest figure any plan
or stock policy compiled to, as the budget that works; where an optimizer state was found in
the arguments and left in HBM, what placing it would free and the argument that asks for it.
Before it is raised, every applicable stock policy has been compiled."""

from __future__ import annotations

from planner._src.budget import headroom_why, io_bytes, requested_for
from planner._src.cost.baselines import evaluate_baselines
from planner._src.errors import InfeasibleBudgetError
from planner._src.planning.context import Context
from planner._src.planning.train_state import (
    offer_note,
    state_baseline_attempt,
    state_baselines,
)
from planner._src.planning.walk import Standing
from planner._src.policies import STOCK
from planner._src.units import GB, fmt_bytes, fmt_pair, gb_at_least


def fixed_why(fixed: int, io: int) -> str:
    """The refusal's account of the memory model's plan-independent bytes. That term is
    fitted: the full-remat anchor's compile less the model's residuals and working set.
    Where it comes out below the step's own arguments and outputs (a compiler that reuses
    their buffers for temporaries, or holds as much under every policy), it is not
    "parameters, optimizer state, ..." and is not called so."""
    if fixed >= io:
        return (
            f"{fmt_bytes(fixed)} do not depend on the plan (parameters, optimizer state, batch, "
            "outputs, activations outside checkpoint regions, compiler buffers)"
        )
    return (
        f"the step's arguments and outputs take {fmt_bytes(io)} (parameters, optimizer state, "
        f"batch); fitted to this compiler's programs, the memory model counts only "
        f"{fmt_bytes(fixed)} as independent of the plan (the compiler reuses their buffers, "
        "or holds memory no policy changes)"
    )


def remedies(ctx: Context, need_requested: float) -> str:
    """The refusal's fixes, the planner's own first: the larger budget that plans (a
    compiled figure where one was made), then what the user can shrink. The one place a
    refusal's remedies are listed: a remedy the planner gains (the optimizer state placed in
    host memory, with the bytes it frees) goes here, before the user's."""
    own = [f"pass hbm_gb >= {gb_at_least(need_requested)}"]
    users = (
        "shrink what is fixed (smaller batch per device, sharded parameters and optimizer "
        "state, donated state)"
    )
    return ", or ".join([*own, users])


def refusal(ctx: Context, s: Standing, base_trace, base_graph) -> InfeasibleBudgetError:
    """The error for a budget nothing fits (``s``: where planning stopped; ``base_trace``,
    ``base_graph``: the Planner's merged trace and graph, on which every applicable stock
    policy is compiled before the refusal)."""
    hw, opts, budget = ctx.hardware, ctx.options, ctx.usable
    requested, headroom = ctx.budget.requested, ctx.budget.headroom
    best, error, cost = s.best, s.infeasible, s.cost
    margin = ctx.budget.margin
    # Without verify_compile the model is the judge; with it, the compiler's figures.
    tried = dict(ctx.stock.compiled_bytes) if opts.verify_compile else {}
    if opts.verify_compile and opts.compare_stock:
        stock = evaluate_baselines(base_graph, cost, budget)
        for b in stock:
            if b.applicable and b.name in STOCK and b.name not in tried:
                got = ctx.stock.fit_bytes(b.name, ctx.timings, base_trace, base_graph, cost)
                if got is not None:
                    tried[b.name] = got
        # where the budget places train state: MaxText's all-or-nothing state offload too
        for b in state_baselines(ctx, s.graph, cost, stock):
            att = state_baseline_attempt(ctx, b.name, s.graph, cost)[0]
            got = att.verification.compiled_device_bytes
            if got is not None and att.verification.exact:
                tried[b.name] = got
    figures = dict(tried)
    # Only an exact figure can be named as the budget that works: an estimate (XLA:CPU with
    # host bytes subtracted, "unverified") is not accepted as fitting when planning there.
    if (
        best is not None
        and best.verification.compiled_device_bytes is not None
        and best.verification.exact
    ):
        figures["the planner's smallest plan"] = best.verification.compiled_device_bytes
    probed = s.probed_bytes
    if probed is not None and probed < figures.get("the planner's smallest plan", probed + 1):
        figures["the planner's smallest plan"] = probed
    if figures:
        name, need = min(figures.items(), key=lambda kv: kv[1])
        shown_budget, shown_need = fmt_pair(budget, need)
        what = f"the smallest of the plans tried compiles to {shown_need} ({name})"
    else:
        need = error.min_feasible_bytes if error is not None else float(budget)
        shown_budget, shown_need = fmt_pair(budget, need)
        what = f"the model's smallest plan needs {shown_need} (not compiled)"
    io = io_bytes(base_trace)
    need_req = requested_for(need, hw, io, margin)
    note = (
        f"\nNote: of hbm_gb={requested / GB:g} the planner plans to {budget / GB:.3f} GB, "
        f"leaving {headroom / GB:.3f} GB free: {headroom_why(hw, margin=margin)}."
        if headroom
        else ""
    )
    return InfeasibleBudgetError(
        f"No plan fits {shown_budget}: {what}"
        + (
            ""
            if error is None
            else f" (the model's lower bound for any plan: {fmt_bytes(error.min_feasible_bytes)})"
            if error.min_feasible_bytes <= need
            else f" (the memory model put every plan at {fmt_bytes(error.min_feasible_bytes)} "
            "or more; the compiled figures overrule it)"
        )
        + ".\n"
        f"Why: {fixed_why(cost.fixed_bytes, io)}, and the backward pass "
        "of a layer needs its working set.\n"
        f"Fix: {remedies(ctx, need_req)}." + offer_note(ctx) + note,
        budget_bytes=requested,
        min_feasible_bytes=need_req,
    )
