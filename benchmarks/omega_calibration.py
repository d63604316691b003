"""The memory model's working-set scale omega against the compiles, per zoo model.

    JAX_PLATFORMS=cpu PLANNER_CPU_PROFILE=made-up python benchmarks/omega_calibration.py MODEL...

For each named zoo model: the omega the planner uses (``cost.build_cost_model``) and the raw
one the two anchors give, then every plan the planner answers at 5 budgets (10-70% of the way
from full remat to save-everything) and every stock policy compiled on the way, each with
its compiled device bytes and the model's error under the planner's rule and under omega
clamped to [0, 2] with F from the save-everything anchor
(benchmarks/results/memory-model-omega-2026-12-07.md).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import warnings

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("PLANNER_CPU_PROFILE", "made-up")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

FRACTIONS = (0.1, 0.25, 0.4, 0.55, 0.7)


def raw_omega(model, graph, trace) -> tuple[float, int, int]:
    """(raw omega, kept bytes of the save-everything program, its working set), at omega 1."""
    from planner._src.cost.predict import evaluate
    from planner._src.types import Assignment

    one = dataclasses.replace(model, working_set_scale=1.0, fixed_bytes=0)
    full = evaluate(one, graph, Assignment.of({}))
    every = evaluate(one, graph, Assignment.of({c.key: "save" for c in graph.classes}))
    ws_n = full.working_set_bytes - full.slice_copy_bytes
    ws_e = every.working_set_bytes - every.slice_copy_bytes
    kept_n, kept_e = full.peak_bytes - ws_n, every.peak_bytes - ws_e
    if ws_n <= ws_e:
        return float("nan"), kept_e, ws_e
    c_n, c_e = trace.anchor.device_bytes, trace.anchor_saved.device_bytes
    return ((c_n - kept_n) - (c_e - kept_e)) / (ws_n - ws_e), kept_e, ws_e


def one_model(name: str) -> None:
    import planner
    from planner._src.budget import io_bytes, requested_for
    from planner._src.cost.baselines import stock_assignment
    from planner._src.cost.build import build_cost_model
    from planner._src.cost.predict import evaluate
    from planner._src.policies import STOCK
    from tests.zoo import MODELS

    step, args = MODELS[name].make()
    s = planner.Planner(step, *args, hardware="cpu", check_numerics=False)
    g, tr = s.graph, s.trace
    used = build_cost_model(tr, g, s.subject.hardware, allow_offload=False)
    raw, kept_e, ws_e = raw_omega(used, g, tr)
    omega = min(max(raw, 0.0), 2.0)
    fixed = max(0, tr.anchor_saved.device_bytes - kept_e - omega * ws_e)
    clamped = dataclasses.replace(used, working_set_scale=omega, fixed_bytes=int(fixed))
    lo, hi = tr.anchor.device_bytes, tr.anchor_saved.device_bytes
    print(
        f"{name}: omega used {used.working_set_scale:.3f} (raw {raw:.4f}), clamped {omega:.4f}; "
        f"F {used.fixed_bytes:,} -> {int(fixed):,}; anchors {lo:,} / {hi:,}",
        flush=True,
    )
    seen = set()
    for f in FRACTIONS:
        requested = requested_for(lo + f * (hi - lo), s.hardware, io_bytes(tr), s.margin)
        try:
            plan = s.plan(requested / 1e9)
        except planner.PlannerError as e:
            print(f"   budget at {f}: {type(e).__name__}")
            continue
        points = []
        if plan.choice == "planner":
            points.append(
                (f"plan at {f}", plan.assignment, plan.verification.compiled_device_bytes)
            )
        points += [
            (b.name, stock_assignment(g, b.name), b.compiled_device_bytes)
            for b in plan.baselines
            if b.name in STOCK and b.compiled_device_bytes and not STOCK[b.name].offloads
        ]
        for label, assignment, compiled in points:
            key = tuple(sorted(assignment.as_dict().items()))
            if key in seen or not compiled:
                continue
            seen.add(key)
            now = evaluate(used, g, assignment).peak_bytes
            then = evaluate(clamped, g, assignment).peak_bytes
            print(
                f"   {label:34} compiled {compiled:>11,}  used {(now - compiled) / compiled:+6.1%}"
                f"  clamped {(then - compiled) / compiled:+6.1%}",
                flush=True,
            )


def main() -> int:
    warnings.simplefilter("ignore")
    for name in sys.argv[1:]:
        one_model(name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
