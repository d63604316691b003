"""Probe rounds: before a budget is refused, the model's plans for larger budgets, compiled.

Where a compiler holds some saved values in less memory than their recompute (JAX 0.10.2's
XLA:CPU), a plan that saves a little can compile under full remat, which the model, fitted
at full remat and save-everything, does not see (measured:
benchmarks/results/new-user-2026-12-06b.md, F3 and F4). At most ``len(PROBE_FRACTIONS) + 1``
compiles (the model's smallest plan first), only where the model fit nothing.
"""

from __future__ import annotations

import dataclasses

from planner._src.budget import io_bytes
from planner._src.cost import evaluate
from planner._src.errors import InfeasibleBudgetError, SolverError
from planner._src.planning.attempt import attempt
from planner._src.planning.context import (
    NOT_KEPT_WHY,
    Attempts,
    Context,
    normalize,
    overrules_model,
    unsolved,
    with_forced,
)
from planner._src.planning.walk import Standing
from planner._src.solve import min_peak_plan
from planner._src.types import Assignment
from planner._src.units import GB

# The model's plans at these fractions of the way from its smallest plan's predicted peak
# to save-everything's are compiled too.
PROBE_FRACTIONS = (0.25, 0.5, 0.75)
# No probes below this share of the smallest figure compiled so far: the largest undercut of
# full remat seen is 7% (benchmarks/results/new-user-2026-12-06b.md, F3).
PROBE_BELOW = 0.85


def probe_frontier(ctx: Context, log: Attempts, s: Standing) -> Standing:
    """``s`` with the fastest probe that compiles within the budget (an exact figure, every
    check passed) as its answer, where it beats what ``s`` holds (or ``s`` holds nothing that
    fits), and with the smallest exact figure the probes compiled to (``probed_bytes``)."""
    found, smallest = _probes(ctx, log, s)
    s = dataclasses.replace(s, probed_bytes=smallest)
    if found is not None and (
        s.infeasible is not None or found.prediction.step_s < s.best.prediction.step_s
    ):
        s = dataclasses.replace(
            s, best=found, solution=found.solution, graph=found.graph, infeasible=None
        )
    return s


def _probes(ctx: Context, log: Attempts, s: Standing):
    """(the fastest probe attempt that fits or None, the smallest exact figure or None)."""
    tr, budget, cost, tried = ctx.trace, ctx.usable, s.cost, s.best
    known = [tr.anchor.device_bytes] + [b for b in ctx.stock.compiled_bytes.values() if b]
    if tr.anchor_saved is not None:
        known.append(tr.anchor_saved.device_bytes)
    if tried is not None and tried.verification.compiled_device_bytes:
        known.append(tried.verification.compiled_device_bytes)
    if budget < io_bytes(tr) or budget < PROBE_BELOW * min(known):
        return None, None
    g = with_forced(ctx.graph, log.not_kept, NOT_KEPT_WHY)
    opts = ctx.options.solver
    try:
        smallest_plan, smallest_host, _ = min_peak_plan(g, cost, opts)
    except (InfeasibleBudgetError, SolverError):
        return None, None
    lo = evaluate(
        cost, g, normalize(g, cost, smallest_plan), state_on_host=smallest_host
    ).peak_bytes
    everything = Assignment.of({c.key: "save" for c in g.classes})
    hi = evaluate(cost, g, normalize(g, cost, everything)).peak_bytes

    def key(a, on_host):
        return normalize(g, cost, a).decisions, on_host

    seen: set = set() if tried is None else {key(tried.assignment, tried.state_on_host)}
    fitting = []
    smallest = None

    def solutions():
        step_s = evaluate(
            cost, g, normalize(g, cost, smallest_plan), state_on_host=smallest_host
        ).step_s
        first = unsolved(smallest_plan, "FEASIBLE", step_s, g, budget)
        yield lo, dataclasses.replace(first, state_on_host=smallest_host)
        for f in PROBE_FRACTIONS:
            at = int(lo + f * (hi - lo))
            if at <= lo:
                continue
            try:
                yield at, ctx.solves(g, cost, at, opts)
            except (InfeasibleBudgetError, SolverError):  # a probe that finds nothing
                continue

    for at, sol in solutions():
        if key(sol.assignment, sol.state_on_host) in seen:
            continue
        seen.add(key(sol.assignment, sol.state_on_host))
        ctx.say(f"probing the model's plan for {at / GB:g} GB: does it compile smaller?")
        att = attempt(
            ctx.subject,
            ctx.timings,
            tr,
            g,
            cost,
            sol.assignment,
            budget,
            state=ctx.state,
            state_on_host=sol.state_on_host,
        )
        log.record(att, s.correction, budget, "probe")
        v = att.verification
        if att.not_kept or v.compiled_device_bytes is None or not v.exact:
            continue
        smallest = min(smallest or v.compiled_device_bytes, v.compiled_device_bytes)
        if overrules_model(v, budget) and v.ok:  # every check passed, not only the bytes
            fitting.append((att.prediction.step_s, len(fitting), att, sol))
    if not fitting:
        return None, smallest
    _, _, att, sol = min(fitting)
    return att.solved(dataclasses.replace(sol, usable_bytes=budget), cost, g), smallest
