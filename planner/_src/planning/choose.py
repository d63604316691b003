"""Never worse than the stock policies: the answer for one budget is the planner's plan only
where no stock policy predicted faster compiles within the budget; and verified within
budget beats unverified (an answer that fits only by an estimate gives way to the fastest
answer whose compiled figure is exact, unless it is predicted faster by more than the
model's step-time error)."""

from __future__ import annotations

import dataclasses
import math

import cost_models as cm
from planner._src.planning.context import Attempt, Context
from planner._src.planning.stock import offload_estimate
from planner._src.planning.train_state import is_state_baseline, state_baseline_attempt
from planner._src.planning.walk import Standing
from planner._src.policies import STOCK
from planner._src.results.report.build import made_up_times
from planner._src.types import Baseline
from planner._src.units import fmt_bytes, fmt_pair

# The cost model's step-time error: predicted step time was -5.0% to +7.2% of measured over
# the 13 H200 budgets of benchmarks/results/h200-2026-12-02.md. An unverified answer must be
# predicted faster than a verified one by more than this to be preferred.
STEP_MODEL_ERROR = 0.072


@dataclasses.dataclass(frozen=True, slots=True)
class Choice:
    """The answer for one budget: ``stock`` names the stock policy returned instead of the
    planner's plan (None: the plan, where it fits); ``why`` is that choice's reason, and
    ``plan_why`` the reason the plan stands where the comparison could have replaced it."""

    stock: str | None = None
    why: str = ""
    plan_why: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class _Verified:
    name: str  # "planner" or a stock policy
    step_s: float
    compiled_bytes: int


def _not_a_claim(ctx: Context) -> str:
    """The qualifier of a "predicted faster" under a profile whose times are made up, or
    under this machine's CPU calibration (whose step times do not rank policies on XLA:CPU:
    build.CPU_TIMES_CAVEAT)."""
    if made_up_times(ctx.hardware):
        return f"; by the made-up {ctx.hardware.name} profile's times: not a measurement"
    if cm.calibration_note(ctx.hardware):
        return "; by this machine's CPU calibration: on XLA:CPU not a ranking to rely on"
    return ""


def choose(ctx: Context, s: Standing, baselines: tuple[Baseline, ...]) -> Choice:
    """The planner's plan or the fastest stock policy that compiles within the budget."""
    opts = ctx.options
    if not (opts.compare_stock and opts.verify_compile):
        return Choice()
    budget, best = ctx.usable, s.best
    plan_fits = s.plan_fits(budget)
    plan_step = best.prediction.step_s if plan_fits else math.inf
    faster = sorted(
        (
            b
            for b in baselines
            if b.applicable
            and (b.name in STOCK or is_state_baseline(b.name))
            and b.prediction.step_s < plan_step
        ),
        key=lambda b: b.prediction.step_s,
    )
    pick, why, plan_why = None, "", ""
    ctx.stock.prefetch([b.name for b in faster if b.name in STOCK], ctx.timings, s.graph, s.cost)
    for b in faster:
        got = fit_bytes(ctx, s, b.name)
        if got is not None and got <= budget:
            pick = b
            if plan_fits:
                why = (
                    f"{b.name} is predicted faster than the planner's own plan "
                    f"({b.prediction.step_s * 1e3:.2f} vs "
                    f"{best.prediction.step_s * 1e3:.2f} ms{_not_a_claim(ctx)}) and compiles "
                    f"within the budget ({_of(got, budget)} usable), "
                    "where the model had it "
                    f"at {fmt_bytes(b.prediction.peak_bytes)}"
                )
            else:
                why = (
                    f"the planner's own plan does not fit ({plan_miss(s)}"
                    f"), while {b.name} compiles within the budget ({_of(got, budget)} "
                    "usable)"
                )
            break
    if pick is not None:
        answer = (pick.name, pick.prediction.step_s, exact(ctx, s, pick.name))
    elif plan_fits:
        answer = ("the planner's plan", best.prediction.step_s, best.verification.exact)
    else:
        answer = None
    if answer is not None and not answer[2]:
        sure = fastest_verified(ctx, s, baselines, best if plan_fits else None)
        if sure is not None:
            gain = 1 - answer[1] / sure.step_s
            figures = (
                f"{answer[0]} fits only by an estimate (unverified: "
                f"{ctx.subject.compiler.description} keeps host memory in the same memory), "
                f"while {sure.name} compiled within the budget ({_of(sure.compiled_bytes, budget)} "
                "usable); the unverified one is predicted "
                f"{gain:.1%} faster ({answer[1] * 1e3:.2f} vs {sure.step_s * 1e3:.2f} ms)"
            )
            if gain <= STEP_MODEL_ERROR:
                why = (
                    "verified within budget beats unverified: "
                    + figures
                    + f", within the model's step-time error ({STEP_MODEL_ERROR:.1%})"
                )
                pick = None
                if sure.name != "planner":
                    pick = next(b for b in baselines if b.name == sure.name)
                else:
                    plan_why = why
            else:
                why = (
                    "kept although unverified: "
                    + figures
                    + f", more than the model's step-time error ({STEP_MODEL_ERROR:.1%})"
                )
                if pick is None:
                    plan_why = why
    return Choice(stock=None if pick is None else pick.name, why=why, plan_why=plan_why)


def fit_bytes(ctx: Context, s: Standing, name: str) -> int | None:
    """The compiled device bytes of a stock policy, or of one with the whole optimizer state
    on the host (train_state.py), compiled now if needed."""
    if is_state_baseline(name):
        return state_baseline_attempt(ctx, name, s.graph, s.cost)[
            0
        ].verification.compiled_device_bytes
    return ctx.stock.fit_bytes(name, ctx.timings, ctx.trace, s.graph, s.cost)


def exact(ctx: Context, s: Standing, name: str) -> bool:
    if is_state_baseline(name):
        return state_baseline_attempt(ctx, name, s.graph, s.cost)[0].verification.exact
    return ctx.stock.exact(name)


def fastest_verified(
    ctx: Context, s: Standing, baselines, plan_att: Attempt | None
) -> _Verified | None:
    """The fastest answer that compiles within the budget with an exact figure: the
    planner's plan (``plan_att``) or a stock policy, compiled fastest first until one fits;
    None where none does."""
    platform = ctx.hardware.platform
    found = None
    if plan_att is not None and plan_att.verification.exact:
        found = _Verified(
            "planner", plan_att.prediction.step_s, plan_att.verification.compiled_device_bytes
        )
    ranked = sorted(
        (b for b in baselines if b.applicable and b.name in STOCK),
        key=lambda b: b.prediction.step_s,
    )
    ctx.stock.prefetch(
        [
            b.name
            for b in ranked
            if (found is None or b.prediction.step_s < found.step_s)
            and not offload_estimate(b.name, platform)
        ],
        ctx.timings,
        s.graph,
        s.cost,
    )
    for b in ranked:
        if found is not None and b.prediction.step_s >= found.step_s:
            break
        if offload_estimate(b.name, platform):
            continue  # on a CPU an offloading policy's figure is an estimate
        got = ctx.stock.fit_bytes(b.name, ctx.timings, ctx.trace, s.graph, s.cost)
        if got is not None and got <= ctx.usable and ctx.stock.exact(b.name):
            return _Verified(b.name, b.prediction.step_s, got)
    return found


def _of(part: float, whole: float) -> str:
    """ "X of Y" in a unit that shows them (MB under 0.1 GB), in bytes where they would
    print alike (units.fmt_pair)."""
    a, b = fmt_pair(part, whole)
    return f"{a} of {b}"


def plan_miss(s: Standing) -> str:
    """Why the planner's own plan does not fit, in a few words."""
    if s.best is not None and s.best.verification.compiled_device_bytes is not None:
        return f"it compiles to {fmt_bytes(s.best.verification.compiled_device_bytes)}"
    if s.infeasible is not None:
        return f"the model's smallest plan needs {fmt_bytes(s.infeasible.min_feasible_bytes)}"
    return "not compiled"
